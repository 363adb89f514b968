//! What discovery knows: the last good set of every source, the peers they add up to, and how
//! long a peer that vanished from every source stays a candidate. Pure: time is passed in, so
//! every rule is tested with explicit times.
//!
//! Rules (docs/config.md, "Discovery"):
//! - a peer is identified by its address; its name is fixed when it is first seen (the name a
//!   source gives it, else its address) and stays while it is known, so its series keep their
//!   `peer` label;
//! - its labels are those of its sources, the first source (in name order) winning a label both
//!   set;
//! - a report that failed keeps the source's last good set: an unreadable file or a DNS timeout
//!   never removes a peer;
//! - a peer no source reports any more stays a candidate for `forget_after` (so it keeps being
//!   probed, fails and alerts), then it is forgotten; reported again before that, it simply
//!   stays.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::{HostPort, Labels, DEFAULT_CONTROL_PORT};

/// The most targets one source may report: above the largest fleets the exporter is built for
/// (10,000 nodes), so only a broken or hostile source (a DNS answer or file listing the world)
/// goes past it. Such a report counts as failed: the source's last good set stays.
pub const MAX_SOURCE_TARGETS: usize = 16_384;

/// A peer as a source reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub address: HostPort,
    /// The name the source gives it (file_sd's `name` label), if any.
    pub name: Option<String>,
    pub labels: Labels,
}

impl Target {
    /// A target known by its address only (a DNS record).
    pub fn address(address: HostPort) -> Target {
        Target {
            address,
            name: None,
            labels: Labels::new(),
        }
    }
}

/// A discovered peer that is a candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredPeer {
    /// The `peer` label: fixed while the peer is known.
    pub name: String,
    pub address: HostPort,
    pub labels: Labels,
}

/// What one run of a source found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    /// The source, as named in the metrics (`dns:NAME:PORT`, `file:GLOB`).
    pub source: String,
    /// The source's set now; `None` when nothing could be read (the last good set stays).
    pub peers: Option<Vec<Target>>,
    /// What went wrong, if anything (a file source may report a set and an error: the set then
    /// holds the last good content of the file that failed).
    pub error: Option<String>,
}

/// How a report changed the source's health, for a log line per change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// The source failed, or failed differently than before.
    Failing(String),
    /// The source works again.
    Recovered,
}

/// What a report changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The source's health changed (logged once per change).
    pub health: Option<Health>,
    /// Targets refused: their name is another known peer's.
    pub refused: Vec<(HostPort, String)>,
}

/// One source's last good set and health.
#[derive(Debug, Clone, Default)]
struct SourceState {
    peers: BTreeMap<HostPort, Target>,
    error: Option<String>,
    /// When a report last brought a set (the caller's clock).
    last_success: Option<Duration>,
}

/// A peer some source reported.
#[derive(Debug, Clone)]
struct Known {
    name: String,
    labels: Labels,
    /// No source has reported it since then.
    vanished_at: Option<Duration>,
}

/// Every source's last good set and the peers they add up to.
#[derive(Debug, Clone)]
pub struct DiscoveryState {
    forget_after: Duration,
    sources: BTreeMap<String, SourceState>,
    known: BTreeMap<HostPort, Known>,
}

/// `report`, or a failed one in its place when it holds more than [`MAX_SOURCE_TARGETS`].
fn within_cap(report: SourceReport) -> SourceReport {
    match &report.peers {
        Some(peers) if peers.len() > MAX_SOURCE_TARGETS => SourceReport {
            error: Some(format!(
                "{} targets, more than the {MAX_SOURCE_TARGETS} one source may give: its last \
                 good set stays",
                peers.len()
            )),
            peers: None,
            source: report.source,
        },
        _ => report,
    }
}

/// The `peer` label of a peer known by its address only: the host alone on the default control
/// port (as `address: 10.0.0.2` is written in the config), else `HOST:PORT`.
pub fn address_name(address: &HostPort) -> String {
    if address.port() == DEFAULT_CONTROL_PORT {
        address.host()
    } else {
        address.to_string()
    }
}

impl DiscoveryState {
    pub fn new(forget_after: Duration) -> DiscoveryState {
        DiscoveryState {
            forget_after,
            sources: BTreeMap::new(),
            known: BTreeMap::new(),
        }
    }

    /// Takes `report` at `now`: a set replaces the source's last one; an error without a set
    /// keeps it.
    pub fn apply(&mut self, report: SourceReport, now: Duration) -> Applied {
        let report = within_cap(report);
        let source = self.sources.entry(report.source.clone()).or_default();
        let health = match (&source.error, &report.error) {
            (old, Some(new)) if old.as_ref() != Some(new) => Some(Health::Failing(new.clone())),
            (Some(_), None) => Some(Health::Recovered),
            _ => None,
        };
        source.error = report.error;
        let mut refused = Vec::new();
        if let Some(peers) = report.peers {
            source.last_success = Some(now);
            let mut set = BTreeMap::new();
            for target in peers {
                set.entry(target.address.clone()).or_insert(target);
            }
            source.peers = set;
            refused = self.recount(now);
        }
        self.expire(now);
        Applied { health, refused }
    }

    /// Recomputes the known peers from every source's set; returns the targets refused because
    /// their name is taken.
    fn recount(&mut self, now: Duration) -> Vec<(HostPort, String)> {
        let mut reported: BTreeMap<&HostPort, Vec<&Target>> = BTreeMap::new();
        for source in self.sources.values() {
            for (address, target) in &source.peers {
                reported.entry(address).or_default().push(target);
            }
        }
        let mut names: BTreeSet<String> = self.known.values().map(|k| k.name.clone()).collect();
        let mut refused = Vec::new();
        for (address, targets) in &reported {
            let mut labels = Labels::new();
            for target in targets {
                for (k, v) in &target.labels {
                    labels.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            if let Some(known) = self.known.get_mut(*address) {
                known.labels = labels;
                known.vanished_at = None;
                continue;
            }
            let name = targets
                .iter()
                .find_map(|t| t.name.clone())
                .unwrap_or_else(|| address_name(address));
            if !names.insert(name.clone()) {
                refused.push(((*address).clone(), name));
                continue;
            }
            self.known.insert(
                (*address).clone(),
                Known {
                    name,
                    labels,
                    vanished_at: None,
                },
            );
        }
        for (address, known) in &mut self.known {
            if !reported.contains_key(address) && known.vanished_at.is_none() {
                known.vanished_at = Some(now);
            }
        }
        refused
    }

    /// Forgets the peers that vanished `forget_after` ago or longer.
    pub fn expire(&mut self, now: Duration) {
        let forget_after = self.forget_after;
        self.known.retain(|_, k| {
            k.vanished_at
                .is_none_or(|t| now < t.saturating_add(forget_after))
        });
    }

    /// The candidates at `now`, in name order: every peer a source reports, and those that
    /// vanished less than `forget_after` ago.
    pub fn candidates(&self, now: Duration) -> Vec<DiscoveredPeer> {
        let mut out: Vec<DiscoveredPeer> = self
            .known
            .iter()
            .filter(|(_, k)| {
                k.vanished_at
                    .is_none_or(|t| now < t.saturating_add(self.forget_after))
            })
            .map(|(address, k)| DiscoveredPeer {
                name: k.name.clone(),
                address: address.clone(),
                labels: k.labels.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Candidates that no source reports any more (waiting out `forget_after`).
    pub fn vanished(&self) -> usize {
        self.known
            .values()
            .filter(|k| k.vanished_at.is_some())
            .count()
    }

    /// When the next vanished peer is forgotten, if any.
    pub fn next_expiry(&self) -> Option<Duration> {
        self.known
            .values()
            .filter_map(|k| k.vanished_at)
            .min()
            .map(|t| t.saturating_add(self.forget_after))
    }

    /// The peers in `source`'s last good set.
    pub fn source_peers(&self, source: &str) -> usize {
        self.sources.get(source).map_or(0, |s| s.peers.len())
    }

    /// When `source` last brought a set.
    pub fn last_success(&self, source: &str) -> Option<Duration> {
        self.sources.get(source).and_then(|s| s.last_success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_host_port;

    const FORGET: Duration = Duration::from_secs(3600);

    fn at(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn addr(s: &str) -> HostPort {
        parse_host_port(s, DEFAULT_CONTROL_PORT).unwrap()
    }

    fn target(a: &str) -> Target {
        Target::address(addr(a))
    }

    fn named(a: &str, name: &str, labels: &[(&str, &str)]) -> Target {
        Target {
            address: addr(a),
            name: Some(name.to_owned()),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn set(source: &str, peers: Vec<Target>) -> SourceReport {
        SourceReport {
            source: source.to_owned(),
            peers: Some(peers),
            error: None,
        }
    }

    fn failed(source: &str, error: &str) -> SourceReport {
        SourceReport {
            source: source.to_owned(),
            peers: None,
            error: Some(error.to_owned()),
        }
    }

    fn names(state: &DiscoveryState, now: Duration) -> Vec<String> {
        state.candidates(now).into_iter().map(|p| p.name).collect()
    }

    #[test]
    fn reported_peers_are_candidates_named_by_address_or_given_name() {
        let mut s = DiscoveryState::new(FORGET);
        s.apply(
            set(
                "dns:x",
                vec![
                    target("10.0.0.2"),
                    target("10.0.0.3:9999"),
                    target("[fd00::4]"),
                ],
            ),
            at(0),
        );
        s.apply(
            set(
                "file:a",
                vec![named("10.0.0.5", "gpu-a05", &[("tor", "t1")])],
            ),
            at(0),
        );
        assert_eq!(
            names(&s, at(0)),
            ["10.0.0.2", "10.0.0.3:9999", "fd00::4", "gpu-a05"]
        );
        let a05 = &s.candidates(at(0))[3];
        assert_eq!(a05.labels["tor"], "t1");
        assert_eq!(a05.address.to_string(), "10.0.0.5:18516");
        assert_eq!(s.source_peers("dns:x"), 3);
        assert_eq!(s.last_success("file:a"), Some(at(0)));
    }

    #[test]
    fn a_vanished_peer_stays_for_forget_after_then_goes() {
        let mut s = DiscoveryState::new(FORGET);
        s.apply(
            set("dns:x", vec![target("10.0.0.2"), target("10.0.0.3")]),
            at(0),
        );
        s.apply(set("dns:x", vec![target("10.0.0.2")]), at(100));
        assert_eq!(names(&s, at(100)), ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(s.vanished(), 1);
        assert_eq!(s.next_expiry(), Some(at(3700)));
        assert_eq!(names(&s, at(3699)), ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(names(&s, at(3700)), ["10.0.0.2"]);
        s.expire(at(3700));
        assert_eq!(s.vanished(), 0);
        assert_eq!(s.next_expiry(), None);
    }

    #[test]
    fn a_peer_back_before_forget_after_keeps_its_name_and_its_clock_restarts() {
        let mut s = DiscoveryState::new(FORGET);
        s.apply(set("file:a", vec![named("10.0.0.3", "node3", &[])]), at(0));
        s.apply(set("file:a", vec![]), at(10));
        // Back, now without a name (say, only DNS reports it): the name stays.
        s.apply(set("file:a", vec![target("10.0.0.3")]), at(20));
        assert_eq!(names(&s, at(20)), ["node3"]);
        assert_eq!(s.vanished(), 0);
        // Gone again: forget_after counts from the new vanishing.
        s.apply(set("file:a", vec![]), at(1000));
        assert_eq!(names(&s, at(4599)), ["node3"]);
        assert_eq!(names(&s, at(4600)), Vec::<String>::new());
    }

    #[test]
    fn a_peer_reported_by_another_source_has_not_vanished() {
        let mut s = DiscoveryState::new(FORGET);
        s.apply(set("dns:x", vec![target("10.0.0.3")]), at(0));
        s.apply(
            set("file:a", vec![named("10.0.0.3", "node3", &[("tor", "t2")])]),
            at(0),
        );
        // First seen by DNS: named by its address, for as long as it is known.
        assert_eq!(names(&s, at(0)), ["10.0.0.3"]);
        assert_eq!(s.candidates(at(0))[0].labels["tor"], "t2");
        s.apply(set("dns:x", vec![]), at(10));
        assert_eq!(s.vanished(), 0);
        assert_eq!(names(&s, at(10_000)), ["10.0.0.3"]);
        s.apply(set("file:a", vec![]), at(20));
        assert_eq!(s.vanished(), 1);
    }

    #[test]
    fn a_source_past_the_cap_keeps_its_last_good_set() {
        let many = |n: usize| -> Vec<Target> {
            (0..n)
                .map(|i| target(&format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)))
                .collect()
        };
        let mut state = DiscoveryState::new(FORGET);
        state.apply(set("dns:h", vec![target("192.0.2.1")]), at(0));
        let applied = state.apply(set("dns:h", many(MAX_SOURCE_TARGETS + 1)), at(1));
        match applied.health {
            Some(Health::Failing(e)) => assert!(e.contains("more than the 16384"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(names(&state, at(1)), ["192.0.2.1"]);
        // At the cap, the set is taken.
        state.apply(set("dns:h", many(MAX_SOURCE_TARGETS)), at(2));
        assert_eq!(state.source_peers("dns:h"), MAX_SOURCE_TARGETS);
    }

    #[test]
    fn errors_keep_the_last_good_set_and_are_reported_once_per_change() {
        let mut s = DiscoveryState::new(Duration::from_secs(20));
        s.apply(set("dns:x", vec![target("10.0.0.2")]), at(0));
        let first = s.apply(failed("dns:x", "NXDOMAIN"), at(5));
        assert_eq!(first.health, Some(Health::Failing("NXDOMAIN".into())));
        let again = s.apply(failed("dns:x", "NXDOMAIN"), at(10));
        assert_eq!(again.health, None, "the same error is not news");
        let other = s.apply(failed("dns:x", "timed out"), at(15));
        assert_eq!(other.health, Some(Health::Failing("timed out".into())));
        // Long past forget_after: the failing source still holds its peer.
        assert_eq!(names(&s, at(1000)), ["10.0.0.2"]);
        assert_eq!(s.source_peers("dns:x"), 1);
        assert_eq!(s.last_success("dns:x"), Some(at(0)));
        let back = s.apply(set("dns:x", vec![target("10.0.0.2")]), at(1000));
        assert_eq!(back.health, Some(Health::Recovered));
        assert_eq!(s.last_success("dns:x"), Some(at(1000)));
    }

    #[test]
    fn a_partial_report_takes_its_set_and_its_error() {
        let mut s = DiscoveryState::new(FORGET);
        let report = SourceReport {
            source: "file:a".into(),
            peers: Some(vec![target("10.0.0.2")]),
            error: Some("b.yaml: bad".into()),
        };
        let applied = s.apply(report, at(0));
        assert!(matches!(applied.health, Some(Health::Failing(_))));
        assert_eq!(names(&s, at(0)), ["10.0.0.2"]);
    }

    #[test]
    fn a_name_already_taken_is_refused_and_duplicates_in_a_source_count_once() {
        let mut s = DiscoveryState::new(FORGET);
        let applied = s.apply(
            set(
                "file:a",
                vec![
                    named("10.0.0.2", "node2", &[]),
                    named("10.0.0.9", "node2", &[]),
                    named("10.0.0.2", "other", &[]),
                ],
            ),
            at(0),
        );
        assert_eq!(names(&s, at(0)), ["node2"]);
        assert_eq!(applied.refused, [(addr("10.0.0.9"), "node2".to_owned())]);
    }

    #[test]
    fn huge_sets_are_cheap() {
        let mut s = DiscoveryState::new(FORGET);
        let peers: Vec<Target> = (0..20_000u32)
            .map(|i| target(&format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)))
            .collect();
        let start = std::time::Instant::now();
        // Two sources, each within the cap.
        s.apply(set("dns:x", peers[..10_000].to_vec()), at(0));
        s.apply(set("dns:y", peers[10_000..].to_vec()), at(0));
        s.apply(set("dns:x", peers[1..10_000].to_vec()), at(1));
        assert_eq!(s.candidates(at(2)).len(), 20_000);
        assert_eq!(s.vanished(), 1);
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
