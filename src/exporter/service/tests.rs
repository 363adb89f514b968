//! The service loop with a stand-in device worker that answers probes from a script (no RDMA:
//! these tests are about what the loop dispatches and what it tells the recorder), on tokio's
//! paused clock, so intervals of seconds take no time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::*;
use crate::burst::BurstReport;
use crate::metrics::probe::ProbeResult;
use crate::prober::ProbeOutcome;
use crate::reason::ErrorReason;

const CONFIG: &str = "
node: node1
auth: none
devices:
  - {name: rxe0, port: 1, rail: 0}
schedule: {duty_cycle: 50%}
defaults:
  interval: 10s
  burst: {duration: 100ms}
  rate_limit: 1Gbps
peers:
  - {name: node1, address: 192.0.2.11}
  - {name: node2, address: 192.0.2.12, labels: {rack: r2}}
  - {name: node3, address: 192.0.2.13}
";

/// The stand-in answers every probe of node2 with a success on its device `mlx5_7`, the peers
/// known by address as [`told`] says, and every probe of another peer with a `connect` failure
/// (that peer is down).
async fn scripted_worker(
    mut commands: mpsc::Receiver<DeviceCommand>,
    finished: mpsc::Sender<ProbeFinished>,
    kept_warm: Arc<Mutex<Vec<bool>>>,
) {
    // Result times on the paused clock.
    let base = tokio::time::Instant::now();
    while let Some(command) = commands.recv().await {
        let DeviceCommand::Probe {
            spec, keep_warm, ..
        } = command
        else {
            continue;
        };
        kept_warm.lock().unwrap().push(keep_warm);
        let outcome = if let Some(outcome) = told(&spec.key.peer) {
            outcome
        } else if spec.key.peer == "node2" {
            ProbeOutcome {
                report: Some(report()),
                target_bandwidth_bytes_per_second: Some(125e6),
                peer_device: Some("mlx5_7".into()),
                validated: true,
                ..ProbeOutcome::default()
            }
        } else {
            ProbeOutcome {
                error: Some(ErrorReason::Connect),
                message: Some("connection refused".into()),
                ..ProbeOutcome::default()
            }
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let done = ProbeFinished {
            key: spec.key.clone(),
            outcome,
            at: UNIX_EPOCH + base.elapsed(),
        };
        if finished.send(done).await.is_err() {
            return;
        }
    }
}

/// Peers known by their address only, and what they say about themselves: 192.0.2.14 is node4
/// with a device on rail 0 (the test node's rail); 192.0.2.15 is node5 with its only device on
/// rail 5, so the prober asks it for no session (`no_device`, as `prober::check_rail` says);
/// 192.0.2.16 is the test node itself.
fn told(peer: &str) -> Option<ProbeOutcome> {
    use crate::control::message::{Identity, IdentityDevice};
    let identity = |node: &str, rail| Identity {
        node: node.into(),
        labels: [("tor".to_owned(), "t9".to_owned())].into(),
        devices: vec![IdentityDevice {
            name: "mlx5_3".into(),
            port: 1,
            rail: Some(rail),
        }],
    };
    let success = |identity| ProbeOutcome {
        report: Some(report()),
        target_bandwidth_bytes_per_second: Some(125e6),
        peer_device: Some("mlx5_3".into()),
        validated: true,
        peer_identity: Some(identity),
        ..ProbeOutcome::default()
    };
    match peer {
        "192.0.2.14" => Some(success(identity("node4", 0))),
        "192.0.2.15" => Some(ProbeOutcome {
            error: Some(ErrorReason::NoDevice),
            message: Some("peer node5 has no device on rail 0".into()),
            peer_identity: Some(identity("node5", 5)),
            ..ProbeOutcome::default()
        }),
        "192.0.2.16" => Some(success(identity("node1", 0))),
        _ => None,
    }
}

fn report() -> BurstReport {
    BurstReport {
        bytes: 12_500_000,
        messages: 190,
        completions: 190,
        elapsed: Duration::from_millis(100),
        bandwidth_bytes_per_second: 125e6,
        message_rate_per_second: 1900.0,
        min_window_bandwidth_bytes_per_second: 120e6,
        window: Duration::from_millis(10),
        completion_gap_max: Duration::from_millis(2),
        cpu_seconds: None,
        per_qp_bandwidth_min_bytes_per_second: None,
        per_qp_bandwidth_max_bytes_per_second: None,
        per_qp_bandwidth_bytes_per_second: Vec::new(),
    }
}

struct Harness {
    dir: PathBuf,
    /// `keep_warm` of every probe the worker was given.
    kept_warm: Arc<Mutex<Vec<bool>>>,
    events: mpsc::Receiver<ProbeEvent>,
    reloads: mpsc::Sender<ReloadRequest>,
    _stop: oneshot::Sender<()>,
}

impl Harness {
    async fn start(name: &str) -> Harness {
        Harness::start_with(name, None).await
    }

    /// A service that also takes discovered peers from `discovery`.
    async fn start_with(
        name: &str,
        discovery: Option<watch::Receiver<Vec<DiscoveredPeer>>>,
    ) -> Harness {
        let dir = std::env::temp_dir().join(format!("rpe-service-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, CONFIG).unwrap();
        let config = Config::load(&config_path).unwrap();
        let crate::config::Devices::Listed(devices) = config.devices().clone() else {
            panic!("the test config lists its device");
        };
        let (commands, commands_rx) = mpsc::channel(16);
        let (finished, finished_rx) = mpsc::channel(16);
        let kept_warm = Arc::default();
        tokio::spawn(scripted_worker(
            commands_rx,
            finished,
            Arc::clone(&kept_warm),
        ));
        let (events, events_rx) = mpsc::channel(1024);
        let scheduler = Scheduler::new(1, ScheduleConfig::with_duty_cycle(0.5)).unwrap();
        let service = Service::start(ServiceParts {
            config_path,
            config,
            devices,
            auth: AuthMode::None,
            scheduler,
            workers: BTreeMap::from([("rxe0".to_owned(), commands)]),
            events,
            responder_metrics: ResponderMetrics::default(),
        })
        .await;
        let service = match discovery {
            Some(peers) => service.with_discovery(peers),
            None => service,
        };
        let (reloads, reloads_rx) = mpsc::channel(4);
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(service.run(finished_rx, reloads_rx, async {
            let _ = stopped.await;
        }));
        Harness {
            dir,
            kept_warm,
            events: events_rx,
            reloads,
            _stop: stop,
        }
    }

    /// Events until `done` says so (at most 10 minutes of the paused clock).
    async fn events_until(
        &mut self,
        mut done: impl FnMut(&[ProbeEvent]) -> bool,
    ) -> Vec<ProbeEvent> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        while !done(&seen) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(e)) => seen.push(e),
                other => panic!("events stopped ({other:?}) after {seen:#?}"),
            }
        }
        seen
    }

    async fn reload(&self, text: &str) -> Result<(), String> {
        write_atomically(&self.dir.join("config.yaml"), text);
        let (reply, answer) = oneshot::channel();
        self.reloads
            .send(ReloadRequest { reply: Some(reply) })
            .await
            .unwrap();
        answer.await.unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write_atomically(path: &Path, text: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, text).unwrap();
    std::fs::rename(new, path).unwrap();
}

fn completed<'a>(events: &'a [ProbeEvent], peer: &str) -> Vec<(&'a PathLabels, &'a ProbeRecord)> {
    events
        .iter()
        .filter_map(|e| match e {
            ProbeEvent::Completed(l, r) if l.peer == peer => Some((l, &**r)),
            _ => None,
        })
        .collect()
}

fn attempts<'a>(events: &'a [ProbeEvent], peer: &str) -> Vec<&'a PathLabels> {
    events
        .iter()
        .filter_map(|e| match e {
            ProbeEvent::Attempt(l) if l.peer == peer => Some(l),
            _ => None,
        })
        .collect()
}

fn labels(peer: &str, peer_device: &str) -> PathLabels {
    PathLabels {
        device: "rxe0".into(),
        peer: peer.into(),
        peer_device: peer_device.into(),
    }
}

#[tokio::test(start_paused = true)]
async fn paths_are_attempted_then_labelled_with_the_device_the_peer_answered_with() {
    let mut h = Harness::start("labels").await;
    let events = h
        .events_until(|e| completed(e, "node2").len() >= 3 && completed(e, "node3").len() >= 3)
        .await;

    assert!(
        matches!(events.first(), Some(ProbeEvent::Selection(s)) if s.len() == 2 && s.values().all(|preferred| *preferred)),
        "the selection first, every path of a full mesh preferred by the series budget: {:?}",
        events.first()
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, ProbeEvent::ConfigLoaded { ok: true, .. })));
    // A named peer's peer_info has its node name from the start: in the shared peers list a
    // peer's name is its node name (docs/metrics.md, "Peer identity").
    assert!(events.iter().any(|e| matches!(e, ProbeEvent::Info(i)
    if i.node == [("node".to_owned(), "node1".to_owned())]
        && i.peers.contains(&vec![
            ("peer".to_owned(), "node2".to_owned()),
            ("rack".to_owned(), "r2".to_owned()),
            ("peer_node".to_owned(), "node2".to_owned()),
        ]))));
    assert!(
        attempts(&events, "node1").is_empty() && completed(&events, "node1").is_empty(),
        "the node itself is never probed"
    );

    // node2: attempted as `unknown`, then every result under the device it answered with, and
    // the `unknown` series dropped.
    assert_eq!(
        attempts(&events, "node2")[0],
        &labels("node2", UNKNOWN_PEER_DEVICE)
    );
    for (l, r) in completed(&events, "node2") {
        assert_eq!(l, &labels("node2", "mlx5_7"));
        assert!(matches!(r.result, ProbeResult::Success { .. }), "{r:?}");
    }
    assert!(events.iter().any(
        |e| matches!(e, ProbeEvent::ForgetPath(gone) if *gone == labels("node2", UNKNOWN_PEER_DEVICE))
    ));

    // node3 never answered: its failures stay under `unknown`, each one counted.
    for (l, r) in completed(&events, "node3") {
        assert_eq!(l, &labels("node3", UNKNOWN_PEER_DEVICE));
        assert!(
            matches!(
                &r.result,
                ProbeResult::Failure {
                    reason: ErrorReason::Connect,
                    ..
                }
            ),
            "{r:?}"
        );
    }
    // Each device's schedule figures follow its bursts.
    assert!(events
        .iter()
        .any(|e| matches!(e, ProbeEvent::Schedule(f) if f.device == "rxe0" && f.paths == 2)));
}

#[tokio::test(start_paused = true)]
async fn a_failing_path_is_probed_once_per_interval_not_faster() {
    let mut h = Harness::start("interval").await;
    let events = h.events_until(|e| completed(e, "node3").len() >= 6).await;
    let node3 = completed(&events, "node3");
    let times: Vec<f64> = node3.iter().map(|(_, r)| r.at_unix_seconds).collect();
    // Probes 2..6 (after the random first phase) come 10 s ± 10% jitter apart.
    for pair in times[1..].windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= 8.9,
            "a failing path retried after {gap} s: {times:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reload_removes_a_peers_paths_and_a_broken_file_changes_nothing() {
    let mut h = Harness::start("reload").await;
    h.events_until(|e| !completed(e, "node2").is_empty() && !completed(e, "node3").is_empty())
        .await;

    // Without node3: its path leaves the set the recorder keeps, and is not probed again.
    let without_node3 = CONFIG.replace("  - {name: node3, address: 192.0.2.13}\n", "");
    h.reload(&without_node3)
        .await
        .expect("a good file is taken");
    let events = h.events_until(|e| completed(e, "node2").len() >= 3).await;
    let retained = events
        .iter()
        .find_map(|e| match e {
            ProbeEvent::RetainPeers(keep) => Some(keep.clone()),
            _ => None,
        })
        .expect("the reload tells the recorder which peers stay");
    assert_eq!(retained.into_iter().collect::<Vec<_>>(), vec!["node2"]);
    assert!(attempts(&events, "node3").is_empty(), "{events:#?}");

    // A broken file: refused with its error, the old config keeps probing.
    let error = h.reload("peers: [ {name: broken").await.unwrap_err();
    assert!(error.contains("config.yaml"), "{error}");
    let events = h.events_until(|e| completed(e, "node2").len() >= 2).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ProbeEvent::ConfigLoaded { ok: false, .. })),
        "{events:#?}"
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, ProbeEvent::ConfigLoaded { ok: true, .. })));
    assert!(attempts(&events, "node3").is_empty());
}

#[tokio::test(start_paused = true)]
async fn sessions_stay_warm_only_when_the_next_probe_comes_before_the_responder_drops_them() {
    let mut h = Harness::start("warm").await;
    h.events_until(|e| completed(e, "node2").len() >= 2).await;
    assert!(
        h.kept_warm.lock().unwrap().iter().all(|k| *k),
        "10 s intervals"
    );
    // Every 6 minutes: longer than the responder keeps an idle session (the next probes are
    // still due at the old times; the longer interval applies after them).
    h.reload(&CONFIG.replace("interval: 10s", "interval: 6m"))
        .await
        .expect("a good file is taken");
    h.kept_warm.lock().unwrap().clear();
    h.events_until(|e| !completed(e, "node2").is_empty()).await;
    let kept = h.kept_warm.lock().unwrap().clone();
    assert!(!kept.is_empty() && kept.iter().all(|k| !*k), "{kept:?}");
}

/// Three peers with max_peers 1: the node's ToR (node2) and a sample of the other (node3 or
/// node4).
fn rotating() -> String {
    CONFIG
        .replace(
            "schedule: {duty_cycle: 50%}",
            "schedule: {duty_cycle: 50%}\nselection: {max_peers: 1, sample: 1}",
        )
        .replace(
            "{name: node1, address: 192.0.2.11}",
            "{name: node1, address: 192.0.2.11, labels: {tor: a}}",
        )
        .replace(
            "{name: node2, address: 192.0.2.12, labels: {rack: r2}}",
            "{name: node2, address: 192.0.2.12, labels: {rack: r2, tor: a}}",
        )
        .replace(
            "{name: node3, address: 192.0.2.13}",
            "{name: node3, address: 192.0.2.13, labels: {tor: b}}",
        )
        .replace(
            "peers:\n",
            "peers:\n  - {name: node4, address: 192.0.2.14, labels: {tor: b}}\n",
        )
}

#[tokio::test(start_paused = true)]
async fn a_reload_from_a_rotating_selection_to_the_full_mesh_keeps_probing() {
    let mut h = Harness::start("rotate").await;
    h.reload(&rotating()).await.expect("a good file is taken");
    let events = h.events_until(|e| !completed(e, "node2").is_empty()).await;
    let selection = events
        .iter()
        .rev()
        .find_map(|e| match e {
            ProbeEvent::Selection(s) => Some(s.clone()),
            _ => None,
        })
        .expect("a selection");
    assert_eq!(
        selection.get(&("rxe0".to_owned(), "node2".to_owned())),
        Some(&true),
        "the node's ToR, preferred: {selection:?}"
    );
    assert!(
        selection
            .iter()
            .any(|((_, p), preferred)| (p == "node3" || p == "node4") && !preferred),
        "one peer of the other ToR, sampled: {selection:?}"
    );
    assert_eq!(selection.len(), 2, "{selection:?}");
    // Back to the full mesh, whatever was waiting: every peer, and probing goes on.
    h.reload(CONFIG).await.expect("a good file is taken");
    let events = h
        .events_until(|e| completed(e, "node2").len() >= 2 && !completed(e, "node3").is_empty())
        .await;
    assert!(events
        .iter()
        .any(|e| matches!(e, ProbeEvent::Selection(s) if s.len() == 2 && s.values().all(|p| *p))));
}

/// The config's peers plus three known by their address only (see [`told`]).
fn with_address_only_peers() -> String {
    format!("{CONFIG}  - {{address: 192.0.2.14}}\n  - {{address: 192.0.2.15}}\n  - {{address: 192.0.2.16}}\n")
}

fn skipped(events: &[ProbeEvent]) -> Option<&Vec<(String, &'static str, u64)>> {
    events.iter().rev().find_map(|e| match e {
        ProbeEvent::SkippedPaths { per_device, .. } => Some(per_device),
        _ => None,
    })
}

#[tokio::test(start_paused = true)]
async fn a_peer_known_by_address_keeps_its_label_and_its_identity_goes_to_peer_info() {
    let mut h = Harness::start("identity").await;
    h.reload(&with_address_only_peers())
        .await
        .expect("a good file is taken");
    let events = h
        .events_until(|e| completed(e, "192.0.2.14").len() >= 3)
        .await;
    // Before its first answer its peer_info has the peer label alone.
    assert!(events.iter().any(|e| matches!(e, ProbeEvent::Info(i)
        if i.peers.contains(&vec![("peer".to_owned(), "192.0.2.14".to_owned())]))));
    // Every result stays under the address; the name it said goes to peer_info.
    for (l, r) in completed(&events, "192.0.2.14") {
        assert_eq!(l, &labels("192.0.2.14", "mlx5_3"));
        assert!(matches!(r.result, ProbeResult::Success { .. }), "{r:?}");
    }
    let told: Vec<&Vec<(String, String)>> = events
        .iter()
        .filter_map(|e| match e {
            ProbeEvent::PeerLabels { peer, labels } if peer == "192.0.2.14" => Some(labels),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 1, "told once, unchanged after: {told:?}");
    let pairs: Vec<(&str, &str)> = told[0].iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(
        pairs,
        [
            ("peer", "192.0.2.14"),
            ("peer_node", "node4"),
            ("tor", "t9")
        ]
    );
    // A reload keeps what peers said.
    h.reload(&with_address_only_peers())
        .await
        .expect("a good file is taken");
    let events = h
        .events_until(|e| e.iter().any(|e| matches!(e, ProbeEvent::Info(_))))
        .await;
    let Some(ProbeEvent::Info(info)) = events
        .iter()
        .rev()
        .find(|e| matches!(e, ProbeEvent::Info(_)))
    else {
        unreachable!()
    };
    assert!(
        info.peers
            .iter()
            .any(|p| p.contains(&("peer_node".to_owned(), "node4".to_owned()))),
        "{info:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn paths_the_peer_cannot_answer_or_to_this_node_leave_the_schedule_and_come_back_for_a_recheck(
) {
    let mut h = Harness::start("unmatched").await;
    h.reload(&with_address_only_peers())
        .await
        .expect("a good file is taken");
    let started = tokio::time::Instant::now();
    let mut events = h
        .events_until(|e| {
            !attempts(e, "192.0.2.15").is_empty()
                && !attempts(e, "192.0.2.16").is_empty()
                && skipped(e).is_some_and(|s| s.iter().all(|(_, _, n)| *n == 1))
        })
        .await;
    let counts = skipped(&events).unwrap();
    assert!(
        counts.contains(&("rxe0".to_owned(), "no_rail", 1)),
        "{counts:?}"
    );
    assert!(
        counts.contains(&("rxe0".to_owned(), "itself", 1)),
        "{counts:?}"
    );
    // Each skipped path is told by its labels, so it stays visible on /metrics.
    let paths = events.iter().rev().find_map(|e| match e {
        ProbeEvent::SkippedPaths { paths, .. } => Some(paths),
        _ => None,
    });
    let paths: Vec<(&str, &str)> = paths
        .unwrap()
        .iter()
        .map(|(l, why)| (l.peer.as_str(), *why))
        .collect();
    assert_eq!(paths, [("192.0.2.15", "no_rail"), ("192.0.2.16", "itself")]);
    // Neither counts as a result of its path: no failure, no success, and its series go.
    for peer in ["192.0.2.15", "192.0.2.16"] {
        assert!(completed(&events, peer).is_empty(), "{peer}: {events:#?}");
        assert!(
            events
                .iter()
                .any(|e| matches!(e, ProbeEvent::ForgetPath(l) if l.peer == peer)),
            "{peer}"
        );
    }
    // For the rest of the recheck period neither is probed again; then both are asked once
    // more (the rail is still missing, the peer is still this node): what a peer said never
    // keeps a path out for good (a redirected connection says "this node" too).
    while started.elapsed() < super::super::identity::RECHECK + Duration::from_secs(120) {
        events.extend(h.events_until(|e| !completed(e, "node2").is_empty()).await);
    }
    assert_eq!(
        attempts(&events, "192.0.2.15").len(),
        2,
        "{:?}",
        attempts(&events, "192.0.2.15")
    );
    assert_eq!(attempts(&events, "192.0.2.16").len(), 2);
    assert!(completed(&events, "192.0.2.15").is_empty());
    assert_eq!(
        skipped(&events).unwrap(),
        &vec![
            ("rxe0".to_owned(), "no_rail", 1),
            ("rxe0".to_owned(), "itself", 1)
        ]
    );
}

fn discovered(name: &str, address: &str) -> DiscoveredPeer {
    DiscoveredPeer {
        name: name.to_owned(),
        address: crate::config::parse_host_port(address, crate::config::DEFAULT_CONTROL_PORT)
            .unwrap(),
        labels: [("rack".to_owned(), "r9".to_owned())].into(),
    }
}

#[tokio::test(start_paused = true)]
async fn discovered_peers_are_probed_besides_the_configs_and_leave_with_their_series() {
    let (peers, peers_rx) = watch::channel(Vec::new());
    let mut h = Harness::start_with("discovery", Some(peers_rx)).await;
    peers.send_replace(vec![
        discovered("198.51.100.4", "198.51.100.4"),
        // The file's peers win: a discovered node2, or one at node3's address, is not a peer.
        discovered("node2", "198.51.100.5"),
        discovered("other-3", "192.0.2.13"),
        // The node itself, by name.
        discovered("node1", "198.51.100.6"),
    ]);
    let events = h
        .events_until(|e| {
            attempts(e, "198.51.100.4").len() >= 2 && completed(e, "node2").len() >= 2
        })
        .await;
    assert!(attempts(&events, "other-3").is_empty() && attempts(&events, "node1").is_empty());
    assert!(events.iter().any(|e| matches!(e, ProbeEvent::Info(i)
        if i.peers.contains(&vec![("peer".to_owned(), "198.51.100.4".to_owned()), ("rack".to_owned(), "r9".to_owned())]))));
    assert!(events.iter().any(|e| matches!(e, ProbeEvent::Selection(s)
        if s.contains_key(&("rxe0".to_owned(), "198.51.100.4".to_owned())) && s.len() == 3)));

    // Forgotten by discovery: its series go, the file's peers stay.
    peers.send_replace(Vec::new());
    let events = h
        .events_until(|e| {
            e.iter().any(|e| {
                matches!(e, ProbeEvent::RetainPeers(p)
                if !p.contains("198.51.100.4") && p.contains("node2") && p.contains("node3"))
            })
        })
        .await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ProbeEvent::ConfigLoaded { .. })),
        "not a reload"
    );
}

/// The last interval the recorder was told for each (device, peer).
fn intervals(events: &[ProbeEvent]) -> BTreeMap<(String, String), Duration> {
    let mut out = BTreeMap::new();
    for e in events {
        if let ProbeEvent::Intervals(told) = e {
            out.extend(told.iter().cloned());
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn the_recorder_is_told_each_paths_planned_interval_sampled_paths_their_round() {
    let mut h = Harness::start("intervals").await;
    let events = h.events_until(|e| completed(e, "node2").len() >= 2).await;
    let told = intervals(&events);
    let path = |peer: &str| ("rxe0".to_owned(), peer.to_owned());
    // The full mesh: the configured 10 s (two 100 ms bursts every 10 s fit 50%: no stretch).
    assert_eq!(told.get(&path("node2")), Some(&Duration::from_secs(10)));
    assert_eq!(told.get(&path("node3")), Some(&Duration::from_secs(10)));
    assert_eq!(told.len(), 2, "{told:?}");
    // Every result is followed by its device's intervals (the burst moved the stretch).
    let mut events = events;
    events.extend(
        h.events_until(|e| e.iter().any(|e| matches!(e, ProbeEvent::Intervals(_))))
            .await,
    );
    for (i, e) in events.iter().enumerate() {
        if matches!(e, ProbeEvent::Completed(..)) {
            let next = events[i + 1..]
                .iter()
                .find(|e| matches!(e, ProbeEvent::Completed(..) | ProbeEvent::Intervals(_)));
            assert!(
                matches!(next, Some(ProbeEvent::Intervals(_))),
                "{:?}",
                &events[i..]
            );
        }
    }

    // A rotating selection: the node's ToR keeps its interval, a sampled path is planned once a
    // round (10 minutes by default).
    h.reload(&rotating()).await.expect("a good file is taken");
    let events = h
        .events_until(|e| e.iter().any(|e| matches!(e, ProbeEvent::Intervals(_))))
        .await;
    let told = intervals(&events);
    assert_eq!(told.get(&path("node2")), Some(&Duration::from_secs(10)));
    let sampled: Vec<_> = told
        .iter()
        .filter(|((_, p), _)| p == "node3" || p == "node4")
        .collect();
    assert_eq!(sampled.len(), 1, "{told:?}");
    assert_eq!(*sampled[0].1, crate::config::DEFAULT_ROUND);
}

/// `node_info` carries the node's labels as the selection and the responder see them: its own
/// entry in the shared `peers` list (where the ToR of every node is written once), overridden
/// by `labels`.
#[test]
fn node_info_takes_the_nodes_own_entry_in_peers_under_its_labels() {
    let text = "
node: node1
auth: none
labels: {rack: r9}
devices:
  - {name: rxe0, port: 1, rail: 0}
peers:
  - {name: node1, address: 192.0.2.11, labels: {tor: t1, rack: r1}}
  - {name: node2, address: 192.0.2.12, labels: {tor: t2}}
";
    let config = Config::from_str(text, "test", |_| None).unwrap();
    let info = info_labels(&config, &PeerIdentities::default());
    let node: BTreeMap<String, String> = info.node.into_iter().collect();
    assert_eq!(node.get("node").map(String::as_str), Some("node1"));
    assert_eq!(node.get("tor").map(String::as_str), Some("t1"));
    assert_eq!(node.get("rack").map(String::as_str), Some("r9"));
}
