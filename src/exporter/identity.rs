//! What the peers said about themselves in the handshake (node name, labels, devices with their
//! rails), and what the exporter makes of it: pure, tested without RDMA.
//!
//! Two uses (docs/metrics.md, "Peer identity"):
//!
//! * **Labels.** A peer keeps the `peer` label it has in the config (its name, or its address
//!   when it has none) for good; what it says goes to `rdma_probe_peer_info` only, as
//!   `peer_node` and its labels, so the path series never move and dashboards join the rest.
//! * **Paths not probed.** A path on a rail the peer has no device on would be refused at every
//!   probe, and a peer that says it is this node (its address in the shared `peers` list) would
//!   be probed over loopback: both leave the schedule ([`Unmatched`]) until the peer says
//!   otherwise. Either is believed for [`RECHECK`], then the path is tried once more (what a peer
//!   said can be wrong: a connection redirected back to this node would say "this node", and the
//!   path must not stay out for good; docs/security.md, "Redirected connections").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::{Labels, Peer};
use crate::control::message::Identity;
use crate::discovery::address_name;
use crate::schedule::PathKey;

/// How long what a peer said keeps a path out of the schedule: then the path is probed once
/// more, which asks the peer again (a peer whose every path is out is never asked otherwise).
pub const RECHECK: Duration = Duration::from_secs(30 * 60);

/// Why a path is not probed, from what its peer said about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unmatched {
    /// The peer has no device on the path's rail: the session would be refused (`no_device`).
    NoRail,
    /// The peer is this node (it reports this node's name).
    Itself,
}

impl Unmatched {
    pub const ALL: [Unmatched; 2] = [Unmatched::NoRail, Unmatched::Itself];

    /// The `reason` label of `rdma_probe_schedule_skipped_paths`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unmatched::NoRail => "no_rail",
            Unmatched::Itself => "itself",
        }
    }
}

/// What one peer said, and when (service time).
#[derive(Debug, Clone)]
struct Heard {
    identity: Identity,
    at: Duration,
}

/// The last identity each peer told.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentities {
    heard: BTreeMap<String, Heard>,
}

impl PeerIdentities {
    /// Records what `peer` said at `now`; `true` when it differs from what it said before (or it
    /// said nothing before).
    pub fn learn(&mut self, peer: &str, identity: Identity, now: Duration) -> bool {
        let changed = self.heard.get(peer).is_none_or(|h| h.identity != identity);
        self.heard
            .insert(peer.to_owned(), Heard { identity, at: now });
        changed
    }

    /// What `peer` said last, however long ago.
    pub fn get(&self, peer: &str) -> Option<&Identity> {
        self.heard.get(peer).map(|h| &h.identity)
    }

    /// Why `key` is not probed, if it is not: less than [`RECHECK`] ago, its peer said it is
    /// `node` (this node), or listed its devices and none on the path's rail (a path without a
    /// rail takes the peer's first device, which every peer has).
    pub fn unmatched(&self, key: &PathKey, node: &str, now: Duration) -> Option<Unmatched> {
        let heard = self.fresh(&key.peer, now)?;
        if heard.identity.node == node {
            return Some(Unmatched::Itself);
        }
        let rail = key.rail?;
        let devices = &heard.identity.devices;
        (!devices.is_empty() && !heard.identity.serves_rail(rail)).then_some(Unmatched::NoRail)
    }

    /// Whether what `peer` said is recent enough to decide on its paths.
    pub fn is_fresh(&self, peer: &str, now: Duration) -> bool {
        self.fresh(peer, now).is_some()
    }

    fn fresh(&self, peer: &str, now: Duration) -> Option<&Heard> {
        self.heard
            .get(peer)
            .filter(|h| now.saturating_sub(h.at) < RECHECK)
    }

    /// When the earliest of these peers' words lapses, after `now`: then their paths are tried
    /// again.
    pub fn next_recheck<'a>(
        &self,
        peers: impl IntoIterator<Item = &'a str>,
        now: Duration,
    ) -> Option<Duration> {
        peers
            .into_iter()
            .filter_map(|p| self.heard.get(p))
            .map(|h| h.at.saturating_add(RECHECK))
            .filter(|&at| at > now)
            .min()
    }

    /// Forgets the peers not in `peers` (removed from the config).
    pub fn retain(&mut self, peers: &BTreeSet<String>) {
        self.heard.retain(|p, _| peers.contains(p));
    }
}

/// The node name the config gives a peer: its `name` (in the shared `peers` list, or a file_sd
/// target group's `name` label, a peer's name is its node name); `None` for a peer known by its
/// address alone, whose name is its address.
pub fn configured_node(peer: &Peer) -> Option<&str> {
    (peer.name() != address_name(peer.address())).then_some(peer.name())
}

/// The labels of a peer's `rdma_probe_peer_info`: `peer` and the labels the config gives it,
/// then `peer_node`, the node name: what the peer said once it answered, else the name the
/// config gives it (`configured_node`), else none; then each label the peer said that the
/// config does not set. The config wins a label both set: it is what the operator wrote for
/// this peer.
pub fn peer_info_labels(
    peer: &str,
    configured_node: Option<&str>,
    configured: &Labels,
    heard: Option<&Identity>,
) -> Vec<(String, String)> {
    let mut labels = vec![("peer".to_owned(), peer.to_owned())];
    labels.extend(configured.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(node) = heard.map(|i| i.node.as_str()).or(configured_node) {
        labels.push(("peer_node".to_owned(), node.to_owned()));
    }
    if let Some(identity) = heard {
        labels.extend(
            identity
                .labels
                .iter()
                .filter(|(k, _)| !configured.contains_key(*k))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::message::IdentityDevice;

    fn said(node: &str, rails: &[Option<u16>]) -> Identity {
        Identity {
            node: node.into(),
            labels: [("tor".to_owned(), "t2".to_owned())].into(),
            devices: rails
                .iter()
                .enumerate()
                .map(|(i, &rail)| IdentityDevice {
                    name: format!("mlx5_{i}"),
                    port: 1,
                    rail,
                })
                .collect(),
        }
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn a_path_on_a_rail_the_peer_lacks_is_unmatched_until_the_verdict_lapses() {
        let mut ids = PeerIdentities::default();
        let rail = |r| PathKey::new("mlx5_0", "10.0.0.5", r);
        assert_eq!(
            ids.unmatched(&rail(Some(1)), "node1", MIN),
            None,
            "never heard"
        );
        assert!(ids.learn("10.0.0.5", said("node5", &[Some(0)]), MIN));
        assert_eq!(ids.unmatched(&rail(Some(0)), "node1", MIN), None);
        assert_eq!(
            ids.unmatched(&rail(Some(1)), "node1", MIN),
            Some(Unmatched::NoRail)
        );
        assert_eq!(
            ids.unmatched(&rail(None), "node1", MIN),
            None,
            "first device"
        );
        assert_eq!(
            ids.next_recheck(["10.0.0.5", "other"], MIN),
            Some(MIN + RECHECK)
        );
        let later = MIN + RECHECK;
        assert_eq!(
            ids.unmatched(&rail(Some(1)), "node1", later),
            None,
            "tried again"
        );
        assert_eq!(ids.next_recheck(["10.0.0.5"], later), None);
        // Told again, unchanged: not a change, but fresh again.
        assert!(!ids.learn("10.0.0.5", said("node5", &[Some(0)]), later));
        assert_eq!(
            ids.unmatched(&rail(Some(1)), "node1", later),
            Some(Unmatched::NoRail)
        );
        // The peer gained the rail.
        assert!(ids.learn("10.0.0.5", said("node5", &[Some(0), Some(1)]), later));
        assert_eq!(ids.unmatched(&rail(Some(1)), "node1", later), None);
    }

    #[test]
    fn a_peer_that_lists_no_devices_is_asked_on_every_rail() {
        let mut ids = PeerIdentities::default();
        ids.learn("p", said("node5", &[]), MIN);
        assert_eq!(
            ids.unmatched(&PathKey::new("d", "p", Some(3)), "node1", MIN),
            None
        );
        // Devices without rails: no rail is served.
        ids.learn("p", said("node5", &[None]), MIN);
        assert_eq!(
            ids.unmatched(&PathKey::new("d", "p", Some(3)), "node1", MIN),
            Some(Unmatched::NoRail)
        );
    }

    #[test]
    fn a_peer_that_is_this_node_is_unmatched_on_every_path_until_the_recheck() {
        let mut ids = PeerIdentities::default();
        ids.learn("10.0.0.1", said("node1", &[Some(0)]), MIN);
        for rail in [Some(0), Some(1), None] {
            let key = PathKey::new("d", "10.0.0.1", rail);
            assert_eq!(ids.unmatched(&key, "node1", MIN), Some(Unmatched::Itself));
            // Then tried once more, like a missing rail: never out for good on one word.
            assert_eq!(ids.unmatched(&key, "node1", MIN + RECHECK), None);
        }
        assert_eq!(ids.next_recheck(["10.0.0.1"], MIN), Some(MIN + RECHECK));
        ids.retain(&BTreeSet::new());
        assert!(ids.get("10.0.0.1").is_none());
    }

    #[test]
    fn peer_info_adds_what_the_peer_said_and_the_config_wins() {
        let configured: Labels = [("rack".to_owned(), "r1".to_owned())].into();
        let never = peer_info_labels("10.0.0.5", None, &configured, None);
        assert_eq!(
            never,
            [
                ("peer".to_owned(), "10.0.0.5".to_owned()),
                ("rack".to_owned(), "r1".to_owned())
            ]
        );
        let mut identity = said("node5", &[Some(0)]);
        identity.labels.insert("rack".into(), "r9".into());
        let told = peer_info_labels("10.0.0.5", None, &configured, Some(&identity));
        let pairs: Vec<(&str, &str)> = told.iter().map(|(k, v)| (&**k, &**v)).collect();
        assert_eq!(
            pairs,
            [
                ("peer", "10.0.0.5"),
                ("rack", "r1"),
                ("peer_node", "node5"),
                ("tor", "t2")
            ]
        );
    }

    #[test]
    fn a_named_peer_has_its_node_name_before_it_answers_and_what_it_says_after() {
        let configured: Labels = [("tor".to_owned(), "t1".to_owned())].into();
        let pairs = |labels: &[(String, String)]| -> Vec<(String, String)> { labels.to_vec() };
        let before = peer_info_labels("node5", Some("node5"), &configured, None);
        assert_eq!(
            pairs(&before),
            [
                ("peer".to_owned(), "node5".to_owned()),
                ("tor".to_owned(), "t1".to_owned()),
                ("peer_node".to_owned(), "node5".to_owned())
            ]
        );
        // What it reports wins over the config's name (a host renamed, a name the config got
        // wrong), and its label set changes only in the value.
        let after = peer_info_labels(
            "node5",
            Some("node5"),
            &configured,
            Some(&said("gpu-5", &[])),
        );
        let keys: Vec<&str> = after.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["peer", "tor", "peer_node"]);
        assert_eq!(after[2].1, "gpu-5");
    }

    #[test]
    fn only_a_peer_named_in_the_config_has_a_configured_node_name() {
        let config = crate::config::Config::from_str(
            "node: n1\nauth: none\ndevices: [{name: d0}]\npeers:\n  - {name: node5, address: 10.0.0.5}\n  - {address: 10.0.0.6}\n  - {address: 10.0.0.7:4791}\n",
            "test",
            |_| None,
        )
        .unwrap();
        let nodes: Vec<(&str, Option<&str>)> = config
            .peers()
            .iter()
            .map(|p| (p.name(), configured_node(p)))
            .collect();
        assert_eq!(
            nodes,
            [
                ("node5", Some("node5")),
                ("10.0.0.6", None),
                ("10.0.0.7:4791", None)
            ]
        );
    }
}
