//! From a loaded config to the set of probed paths: pure, tested without RDMA.
//!
//! A path is (local device, peer, rail). The active peers (the node itself is skipped by the
//! config) are the selection's candidates; each round the selection picks the paths (every one
//! in a small cluster) and each local device asks the peer for its device on the same rail
//! (docs/schedule.md, "What is scheduled"; docs/scale.md, "Selection").

use std::collections::BTreeMap;
use std::time::Duration;

use crate::burst::BurstLength;
use crate::config::{Config, Device, HostPort, Labels, Limits, Peer, PeerMode, ProbeConfig};
use crate::control::AuthMode;
use crate::prober::{BurstRequest, ProbeSettings};
use crate::schedule::{
    Candidate, LocalDevice, PathKey, PathPlan, Role, Selected, Selector, Source,
};

/// Expected burst time of a path whose length is not a duration and whose rate needs the link
/// rate (a percentage, or unpaced): a first guess the scheduler corrects with the measured burst
/// times (docs/schedule.md, "Duty-cycle budget").
const UNKNOWN_BURST_GUESS: Duration = Duration::from_secs(1);

/// Everything the exporter knows about one path: where the peer is, how to probe it, and how
/// often.
#[derive(Debug, Clone)]
pub struct PathSpec {
    pub key: PathKey,
    /// Why the path is in this round's selection.
    pub role: Role,
    pub address: HostPort,
    /// What answers at the address: our responder (warm sessions) or a stock `ib_write_bw`
    /// server (a fresh session per probe; docs/perftest.md).
    pub mode: PeerMode,
    pub probe: ProbeConfig,
    pub settings: ProbeSettings,
}

impl PathSpec {
    /// What the scheduler needs: interval, jitter and the expected burst time.
    pub fn schedule_plan(&self) -> PathPlan {
        PathPlan::new(self.key.clone(), self.probe.interval())
            .with_jitter(self.probe.jitter())
            .with_expected_burst(expected_burst(&self.probe))
    }

    /// Whether a warm session built for `self` can serve `other` unchanged (same peer address
    /// and the same probe shape); otherwise a reload closes it and the next burst builds anew.
    pub fn same_session(&self, other: &PathSpec) -> bool {
        self.address == other.address
            && self.mode == other.mode
            && self.probe == other.probe
            && self.settings.local == other.settings.local
            && self.settings.node_name == other.settings.node_name
    }

    /// The burst of the path's `n`-th regular probe (1-based): paced at the configured rate,
    /// except every `unpaced_every`-th, which runs unpaced as a capacity check (0: never).
    pub fn burst_request(&self, n: u64) -> BurstRequest {
        let every = u64::from(self.probe.unpaced_every());
        let unpaced = every > 0 && n > 0 && n.is_multiple_of(every);
        BurstRequest {
            length: self.probe.length(),
            rate_limit: if unpaced {
                None
            } else {
                self.probe.rate_limit()
            },
        }
    }
}

/// The config's active peers, then the discovered ones, as the selection's candidates.
pub fn candidates(config: &Config) -> Vec<Candidate> {
    let listed = config
        .peers()
        .iter()
        .filter(|p| p.skipped().is_none())
        .map(|p| Candidate::new(p.name(), p.labels().clone(), Source::Config));
    let discovered = config
        .discovered_peers()
        .iter()
        .map(|p| Candidate::new(p.name(), p.labels().clone(), Source::Discovered));
    listed.chain(discovered).collect()
}

/// The selection of `config` from the local `devices`.
pub fn selector(config: &Config, devices: &[Device]) -> Selector {
    let local: Vec<LocalDevice> = devices
        .iter()
        .map(|d| LocalDevice::new(d.name.clone(), d.rail))
        .collect();
    Selector::new(
        config.node(),
        &own_labels(config),
        &local,
        &candidates(config),
        &config.selection().to_selection_config(),
    )
}

/// The node's labels for the selection, and what its responder tells probers: its own entry in
/// `peers` (the list every node shares, so one file carries every node's ToR), overridden by
/// `labels`.
pub fn own_labels(config: &Config) -> Labels {
    let mut labels: Labels = config
        .peers()
        .iter()
        .find(|p| p.name() == config.node())
        .map(|p| p.labels().clone())
        .unwrap_or_default();
    labels.extend(config.labels().iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

/// The specs of the `selected` paths (each local device asks the peer for its device on the
/// device's rail), keyed for the scheduler. A path whose peer or device is not in the config is
/// left out. Their sessions ask for at most `limits.max_session_bytes`.
pub fn path_specs(
    config: &Config,
    devices: &[Device],
    auth: &AuthMode,
    limits: &Limits,
    selected: &[Selected],
) -> BTreeMap<PathKey, PathSpec> {
    let peers: BTreeMap<&str, &Peer> = config.active_peers().map(|p| (p.name(), p)).collect();
    selected
        .iter()
        .filter_map(|s| {
            let key = &s.key;
            let peer = peers.get(key.peer.as_str())?;
            let device = devices.iter().find(|d| d.name == key.device)?;
            let mut settings = peer.probe().prober_settings(
                peer.address(),
                config.node(),
                device.local_port(),
                auth.clone(),
            );
            settings.rail = key.rail;
            settings.max_session_bytes = limits.max_session_bytes;
            settings.rdma_networks = config.rdma_networks().to_vec();
            let spec = PathSpec {
                key: key.clone(),
                role: s.role,
                address: peer.address().clone(),
                mode: peer.mode(),
                probe: peer.probe().clone(),
                settings,
            };
            Some((key.clone(), spec))
        })
        .collect()
}

/// How long a burst of `probe` should take: its duration, or its bytes at an absolute rate.
fn expected_burst(probe: &ProbeConfig) -> Duration {
    let size = probe.message_size().bytes();
    match probe.length() {
        BurstLength::Duration(d) => d,
        length => {
            let rate = probe
                .rate_limit()
                .and_then(|limit| limit.resolve(size, None).ok());
            match (length.total_messages(size), rate) {
                (Some(messages), Some(rate)) if rate.bytes_per_second() > 0.0 => {
                    Duration::from_secs_f64(
                        (messages as f64 * size as f64 / rate.bytes_per_second()).min(3600.0),
                    )
                }
                _ => UNKNOWN_BURST_GUESS,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::RateLimit;

    fn config(text: &str) -> Config {
        Config::from_str(text, "test.yaml", |name| {
            (name == "NODE_NAME").then(|| "node1".to_owned())
        })
        .expect("valid config")
    }

    fn devices(config: &Config) -> Vec<Device> {
        match config.devices() {
            crate::config::Devices::Listed(d) => d.clone(),
            crate::config::Devices::AllActive => panic!("test configs list their devices"),
        }
    }

    /// The specs of the paths `config` selects in round 0.
    fn specs(config: &Config) -> BTreeMap<PathKey, PathSpec> {
        let devices = devices(config);
        let selected = selector(config, &devices).select(0);
        path_specs(
            config,
            &devices,
            &AuthMode::None,
            config.limits(),
            &selected,
        )
    }

    const TWO_RAILS: &str = "
node: ${NODE_NAME}
auth: none
devices:
  - {name: mlx5_0, port: 1, rail: 0}
  - {name: mlx5_1, port: 1, rail: 1}
defaults:
  interval: 30s
  burst: {duration: 200ms}
  rate_limit: 10Gbps
  unpaced_every: 3
peers:
  - {name: node1, address: 10.0.0.1:18516}
  - {name: node2, address: 10.0.0.2:18516}
  - {name: node3, address: 10.0.0.3:18516, rate_limit: 5Gbps, burst: {messages: 1000}}
";

    #[test]
    fn every_device_probes_every_other_peer_on_its_rail() {
        let config = config(TWO_RAILS);
        let specs = specs(&config);
        let keys: Vec<String> = specs.keys().map(|k| k.to_string()).collect();
        assert_eq!(specs.len(), 4, "{keys:?}");
        for (key, spec) in &specs {
            assert_ne!(key.peer, "node1", "the node itself is skipped");
            assert_eq!(spec.role, Role::FullMesh, "a small cluster is a full mesh");
            assert_eq!(spec.settings.rail, key.rail);
            assert_eq!(spec.settings.local.device.as_deref(), Some(&*key.device));
            assert_eq!(spec.settings.node_name, "node1");
        }
        let rail1 = &specs[&PathKey::new("mlx5_1", "node3", Some(1))];
        assert_eq!(rail1.settings.target, "10.0.0.3:18516");
        assert_eq!(rail1.settings.length, BurstLength::Messages(1000));
    }

    #[test]
    fn expected_burst_follows_length_and_rate() {
        let config = config(TWO_RAILS);
        let specs = specs(&config);
        let node2 = &specs[&PathKey::new("mlx5_0", "node2", Some(0))];
        assert_eq!(
            node2.schedule_plan().expected_burst,
            Duration::from_millis(200)
        );
        assert_eq!(node2.schedule_plan().interval, Duration::from_secs(30));
        // 1000 × 64 KiB at 5 Gb/s = 0.105 s.
        let node3 = &specs[&PathKey::new("mlx5_0", "node3", Some(0))];
        let expected = node3.schedule_plan().expected_burst.as_secs_f64();
        assert!(
            (expected - 1000.0 * 65536.0 * 8.0 / 5e9).abs() < 1e-6,
            "{expected}"
        );
    }

    #[test]
    fn every_nth_regular_burst_is_unpaced() {
        let config = config(TWO_RAILS);
        let specs = specs(&config);
        let spec = &specs[&PathKey::new("mlx5_0", "node2", Some(0))];
        let paced: Vec<bool> = (1..=7)
            .map(|n| spec.burst_request(n).rate_limit.is_some())
            .collect();
        assert_eq!(paced, [true, true, false, true, true, false, true]);
        assert_eq!(
            spec.burst_request(1).rate_limit,
            Some(RateLimit::BitsPerSecond(10e9))
        );
    }

    #[test]
    fn a_perftest_peer_keeps_its_mode_and_a_mode_change_rebuilds_the_session() {
        let text = TWO_RAILS.replace(
            "{name: node2, address: 10.0.0.2:18516}",
            "{name: node2, address: 10.0.0.2:18516, mode: perftest}",
        );
        let before = config(TWO_RAILS);
        let after = config(&text);
        let old = specs(&before);
        let new = specs(&after);
        let node2 = PathKey::new("mlx5_1", "node2", Some(1));
        let node3 = PathKey::new("mlx5_1", "node3", Some(1));
        assert_eq!(new[&node2].mode, PeerMode::Perftest);
        assert_eq!(new[&node3].mode, PeerMode::Exporter);
        assert!(!old[&node2].same_session(&new[&node2]));
        assert!(old[&node3].same_session(&new[&node3]));
    }

    #[test]
    fn a_session_survives_a_reload_only_when_its_shape_is_unchanged() {
        let before = config(TWO_RAILS);
        let after = config(&TWO_RAILS.replace("rate_limit: 5Gbps", "rate_limit: 4Gbps"));
        let old = specs(&before);
        let new = specs(&after);
        let node2 = PathKey::new("mlx5_0", "node2", Some(0));
        let node3 = PathKey::new("mlx5_0", "node3", Some(0));
        assert!(old[&node2].same_session(&new[&node2]));
        assert!(!old[&node3].same_session(&new[&node3]));
    }

    #[test]
    fn a_large_config_probes_its_tor_and_a_sample_of_the_others() {
        let mut text = String::from(
            "node: ${NODE_NAME}\nauth: none\n\
             devices: [{name: mlx5_0, port: 1, rail: 0}, {name: mlx5_1, port: 1, rail: 1}]\n\
             selection: {max_peers: 8, sample: 2}\npeers:\n",
        );
        for i in 0..40 {
            let tor = if i < 6 {
                "t1"
            } else {
                ["t2", "t3", "t4"][i % 3]
            };
            text.push_str(&format!(
                "  - {{name: node{i}, address: 10.0.0.{i}, labels: {{tor: {tor}}}}}\n"
            ));
        }
        let config = config(&text);
        let devices = devices(&config);
        let selector = selector(&config, &devices);
        assert!(!selector.is_full_mesh());
        let selected = selector.select(7);
        let specs = path_specs(
            &config,
            &devices,
            &AuthMode::None,
            config.limits(),
            &selected,
        );
        assert_eq!(specs.len(), selected.len());
        let same: Vec<&PathSpec> = specs
            .values()
            .filter(|s| s.role == Role::SameGroup)
            .collect();
        // node0..node5 share t1 with node1 itself (its own entry in `peers` says so): 5 peers
        // on each of 2 devices.
        assert_eq!(same.len(), 10);
        let sampled: Vec<&PathSpec> = specs.values().filter(|s| s.role == Role::Sampled).collect();
        assert!(!sampled.is_empty());
        for s in sampled {
            assert_ne!(
                config
                    .peers()
                    .iter()
                    .find(|p| p.name() == s.key.peer)
                    .unwrap()
                    .labels()["tor"],
                "t1"
            );
        }
    }
}
