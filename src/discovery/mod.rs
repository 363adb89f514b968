//! Peer discovery: candidates found besides the config's `peers`, from file_sd-style lists
//! ([`file_sd`]) and DNS names ([`dns`]) (docs/config.md, "Discovery").
//!
//! Each source runs as its own task and reports what it found to one discovery task, which owns
//! the [`DiscoveryState`] (the last good set of every source, and the peers that vanished and
//! wait out `forget_after`), writes the discovery metrics, and publishes the current discovered
//! peers on a watch channel: a single value the exporter's service loop reads, so a slow loop
//! only ever sees the newest set. The service merges them with the config's peers
//! ([`merge`]): the file's peers win over discovered ones with the same name or address, and
//! the node never probes itself.

pub mod dns;
pub mod file_sd;
pub mod state;

use std::collections::{BTreeSet, HashMap};
use std::net::UdpSocket;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{Config, Discovery, HostPort, Peer};
use crate::metrics::discovery::{DiscoveryMetrics, SourceLabels};
pub use state::{address_name, DiscoveredPeer, DiscoveryState, Health, SourceReport, Target};

/// Reports in flight from the sources to the discovery task.
const REPORT_QUEUE: usize = 16;

/// The running discovery tasks; dropping this stops them.
#[derive(Debug)]
pub struct DiscoveryTasks {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for DiscoveryTasks {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Starts a task per source of `discovery` and the discovery task; the receiver holds the
/// discovered peers, the node's own addresses on `control_port` left out.
pub fn spawn(
    discovery: &Discovery,
    control_port: u16,
    metrics: DiscoveryMetrics,
) -> (watch::Receiver<Vec<DiscoveredPeer>>, DiscoveryTasks) {
    let (reports, reports_rx) = mpsc::channel(REPORT_QUEUE);
    let mut tasks = Vec::new();
    for pattern in &discovery.files {
        tasks.push(tokio::spawn(file_sd::run(
            pattern.clone(),
            file_sd::POLL_INTERVAL,
            reports.clone(),
        )));
    }
    for name in &discovery.dns {
        tasks.push(tokio::spawn(dns::run(
            dns::SystemResolver,
            name.clone(),
            discovery.refresh_interval,
            reports.clone(),
        )));
    }
    drop(reports);
    let (peers, peers_rx) = watch::channel(Vec::new());
    let task = DiscoveryTask {
        state: DiscoveryState::new(discovery.forget_after),
        metrics,
        own: OwnAddresses::new(control_port),
        refused: BTreeSet::new(),
        epoch: Instant::now(),
    };
    tasks.push(tokio::spawn(task.run(reports_rx, peers)));
    (peers_rx, DiscoveryTasks { tasks })
}

/// Whether an address is this node's own control address: its port is the node's control port
/// and this host can bind its IP (a host name is never taken for the node's own: the node is
/// skipped by name then).
struct OwnAddresses {
    control_port: u16,
    known: HashMap<HostPort, bool>,
}

impl OwnAddresses {
    fn new(control_port: u16) -> OwnAddresses {
        OwnAddresses {
            control_port,
            known: HashMap::new(),
        }
    }

    fn is_own(&mut self, address: &HostPort) -> bool {
        if address.port() != self.control_port {
            return false;
        }
        *self.known.entry(address.clone()).or_insert_with(|| {
            address
                .socket_addr()
                .is_some_and(|a| UdpSocket::bind((a.ip(), 0)).is_ok())
        })
    }
}

/// The task that owns the state.
struct DiscoveryTask {
    state: DiscoveryState,
    metrics: DiscoveryMetrics,
    own: OwnAddresses,
    /// Refused targets already logged (a source reports them again at every run).
    refused: BTreeSet<(HostPort, String)>,
    /// The state's clock starts here.
    epoch: Instant,
}

impl DiscoveryTask {
    async fn run(
        mut self,
        mut reports: mpsc::Receiver<SourceReport>,
        peers: watch::Sender<Vec<DiscoveredPeer>>,
    ) {
        loop {
            let expiry = self.state.next_expiry().map(|t| self.epoch + t);
            let expired = async move {
                match expiry {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                report = reports.recv() => match report {
                    Some(report) => self.take(report),
                    None => return,
                },
                () = expired => self.state.expire(self.epoch.elapsed()),
            }
            self.publish(&peers);
        }
    }

    /// Applies a source's report, logs a change of its health, counts its error.
    fn take(&mut self, report: SourceReport) {
        let source = SourceLabels {
            source: report.source.clone(),
        };
        if report.error.is_some() {
            self.metrics.errors.get_or_create(&source).inc();
        }
        let brought_set = report.peers.is_some();
        let applied = self.state.apply(report, self.epoch.elapsed());
        match applied.health {
            Some(Health::Failing(error)) => tracing::warn!(
                source = source.source,
                %error,
                "discovery failed: keeping the source's last good peers (logged again when it changes)"
            ),
            Some(Health::Recovered) => {
                tracing::info!(source = source.source, "discovery works again")
            }
            None => {}
        }
        for (address, name) in applied.refused {
            if self.refused.insert((address.clone(), name.clone())) {
                tracing::warn!(
                    source = source.source,
                    %address,
                    name,
                    "discovered peer left out: its name is another discovered peer's"
                );
            }
        }
        self.metrics
            .peers
            .get_or_create(&source)
            .set(i64::try_from(self.state.source_peers(&source.source)).unwrap_or(i64::MAX));
        if brought_set {
            self.metrics
                .last_success
                .get_or_create(&source)
                .set(unix_seconds(SystemTime::now()));
        }
    }

    /// Sends the candidates (the node's own addresses left out) when they changed.
    fn publish(&mut self, peers: &watch::Sender<Vec<DiscoveredPeer>>) {
        let now = self.epoch.elapsed();
        let candidates = self.state.candidates(now);
        self.metrics
            .candidates
            .set(i64::try_from(candidates.len()).unwrap_or(i64::MAX));
        self.metrics
            .vanished
            .set(i64::try_from(self.state.vanished()).unwrap_or(i64::MAX));
        let current: Vec<DiscoveredPeer> = candidates
            .into_iter()
            .filter(|p| !self.own.is_own(&p.address))
            .collect();
        peers.send_if_modified(|old| {
            if *old == current {
                return false;
            }
            tracing::info!(
                peers = current.len(),
                vanished = self.state.vanished(),
                "discovered peers changed"
            );
            *old = current;
            true
        });
    }
}

/// The discovered peers `config` probes besides its own: not the node itself (by name), not a
/// peer the file lists (by name or address: the file wins), each probed with `defaults`.
pub fn merge(config: &Config, discovered: &[DiscoveredPeer]) -> Vec<Peer> {
    let names: BTreeSet<&str> = config.peers().iter().map(Peer::name).collect();
    let addresses: BTreeSet<&HostPort> = config.peers().iter().map(Peer::address).collect();
    discovered
        .iter()
        .filter(|d| d.name != config.node())
        .filter(|d| !names.contains(d.name.as_str()) && !addresses.contains(&d.address))
        .map(|d| {
            Peer::discovered(
                d.name.clone(),
                d.address.clone(),
                d.labels.clone(),
                config.defaults(),
            )
        })
        .collect()
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::config::{parse_host_port, DEFAULT_CONTROL_PORT};

    const CONFIG: &str = "
node: node1
auth: none
devices: [{name: rxe0}]
defaults: {interval: 20s}
discovery: {dns: ['peers.lab'], forget_after: 20s}
peers:
  - {name: node1, address: 10.0.0.1}
  - {name: node2, address: 10.0.0.2, interval: 5s}
";

    fn peer(name: &str, address: &str) -> DiscoveredPeer {
        DiscoveredPeer {
            name: name.to_owned(),
            address: parse_host_port(address, DEFAULT_CONTROL_PORT).unwrap(),
            labels: [("tor".to_owned(), "t9".to_owned())].into(),
        }
    }

    #[test]
    fn static_peers_win_and_the_node_skips_itself() {
        let config = Config::from_str(CONFIG, "t.yaml", |_| None).unwrap();
        let discovered = [
            peer("10.0.0.1", "10.0.0.1"),  // the node's own static address
            peer("node1", "10.0.0.7"),     // the node's name
            peer("10.0.0.2", "10.0.0.2"),  // node2's address
            peer("node2", "10.0.0.8"),     // node2's name
            peer("10.0.0.3", "10.0.0.3"),  // new
            peer("gpu-x", "10.0.0.4:999"), // new, named
        ];
        let merged = merge(&config, &discovered);
        let names: Vec<&str> = merged.iter().map(Peer::name).collect();
        assert_eq!(names, ["10.0.0.3", "gpu-x"]);
        assert_eq!(merged[0].probe().interval(), Duration::from_secs(20));
        assert_eq!(merged[1].labels()["tor"], "t9");
        let config = config.with_discovered(merged);
        let active: Vec<&str> = config.active_peers().map(Peer::name).collect();
        assert_eq!(active, ["node2", "10.0.0.3", "gpu-x"]);
        let static_node2 = config.active_peers().next().unwrap();
        assert_eq!(static_node2.probe().interval(), Duration::from_secs(5));
    }

    #[test]
    fn own_addresses_are_those_this_host_binds_on_the_control_port() {
        let mut own = OwnAddresses::new(DEFAULT_CONTROL_PORT);
        let a = |s: &str| parse_host_port(s, DEFAULT_CONTROL_PORT).unwrap();
        assert!(own.is_own(&a("127.0.0.1")));
        assert!(
            !own.is_own(&a("127.0.0.1:18600")),
            "another port: another exporter"
        );
        assert!(!own.is_own(&a("198.51.100.77")), "TEST-NET-2 is nobody's");
        assert!(
            !own.is_own(&a("localhost")),
            "a host name is never taken for the node"
        );
    }

    /// On the paused clock, so that "not forgotten yet" is checked at a known time: the clock
    /// moves only when every task waits, so both reports have been taken by then (the error
    /// count and the vanished gauge say so) and the 300 ms have not passed.
    #[tokio::test(start_paused = true)]
    async fn the_task_publishes_changes_keeps_failed_sources_and_forgets_late() {
        let (reports, reports_rx) = mpsc::channel(4);
        let (peers, mut peers_rx) = watch::channel(Vec::new());
        let metrics = DiscoveryMetrics::default();
        let task = DiscoveryTask {
            state: DiscoveryState::new(Duration::from_millis(300)),
            metrics: metrics.clone(),
            own: OwnAddresses::new(DEFAULT_CONTROL_PORT),
            refused: BTreeSet::new(),
            epoch: Instant::now(),
        };
        let handle = tokio::spawn(task.run(reports_rx, peers));
        let report = |peers: Option<Vec<&str>>, error: Option<&str>| SourceReport {
            source: "dns:peers.lab:18516".into(),
            peers: peers.map(|p| {
                p.into_iter()
                    .map(|a| Target::address(parse_host_port(a, DEFAULT_CONTROL_PORT).unwrap()))
                    .collect()
            }),
            error: error.map(str::to_owned),
        };
        let names = |rx: &watch::Receiver<Vec<DiscoveredPeer>>| -> Vec<String> {
            rx.borrow().iter().map(|p| p.name.clone()).collect()
        };
        // 127.0.0.1 on the control port is this node: left out.
        reports
            .send(report(
                Some(vec!["127.0.0.1", "198.51.100.2", "198.51.100.3"]),
                None,
            ))
            .await
            .unwrap();
        peers_rx.changed().await.unwrap();
        assert_eq!(names(&peers_rx), ["198.51.100.2", "198.51.100.3"]);
        let source = SourceLabels {
            source: "dns:peers.lab:18516".into(),
        };
        assert_eq!(metrics.peers.get_or_create(&source).get(), 3);
        assert_eq!(metrics.candidates.get(), 3);

        reports.send(report(None, Some("NXDOMAIN"))).await.unwrap();
        reports
            .send(report(Some(vec!["198.51.100.2"]), None))
            .await
            .unwrap();
        // 198.51.100.3 vanished: still a candidate for 300 ms, then forgotten.
        let sent = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(metrics.errors.get_or_create(&source).get(), 1);
        assert_eq!(
            metrics.vanished.get(),
            2,
            "the node's own address counts too"
        );
        assert_eq!(names(&peers_rx), ["198.51.100.2", "198.51.100.3"]);
        tokio::time::timeout(Duration::from_secs(5), peers_rx.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(names(&peers_rx), ["198.51.100.2"]);
        assert_eq!(metrics.vanished.get(), 0);
        assert!(
            sent.elapsed() >= Duration::from_millis(300),
            "forgotten early"
        );
        handle.abort();
    }
}
