//! The stand-in device worker: takes the service loop's `DeviceCommand`s as the real
//! `exporter::device::DeviceWorker` does, one probe at a time, and answers each from the fault
//! model instead of running an RDMA burst.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rdma_probe_exporter::burst::{BurstLength, BurstReport};
use rdma_probe_exporter::control::message::{Identity, IdentityDevice};
use rdma_probe_exporter::exporter::device::{DeviceCommand, ProbeFinished};
use rdma_probe_exporter::prober::ProbeOutcome;
use rdma_probe_exporter::reason::ErrorReason;
use rdma_probe_exporter::schedule::{PathKey, SplitMix64};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::fault::{Fate, FaultModel};
use crate::sysfs;

/// How long a probe that fails before its burst takes when the cause is local or answered at
/// once (a down local port; a busy responder's answer).
const QUICK_ANSWER: Duration = Duration::from_millis(2);
/// What a warm session's setup took.
const SETUP_SECONDS: f64 = 0.004;

/// The probe outcomes' knobs (the CLI's flags).
#[derive(Debug, Clone)]
pub struct Behaviour {
    pub probe_timeout: Duration,
    pub failure_rate: f64,
    pub busy_rate: f64,
    pub noise: f64,
    pub seed: u64,
}

/// Nodes running and probes run by every node, for the progress line.
#[derive(Debug, Default)]
pub struct Counts {
    pub nodes_up: AtomicUsize,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub busy: AtomicU64,
}

/// What every worker shares: the fleet, its faults and when the run started.
#[derive(Debug)]
pub struct Fleet {
    pub model: FaultModel,
    pub behaviour: Behaviour,
    pub started: Instant,
    pub counts: Counts,
    /// Node index by name (a path's `peer`).
    pub index: HashMap<String, usize>,
    /// What each node says about itself in a handshake.
    pub identities: Vec<Identity>,
}

impl Fleet {
    pub fn new(model: FaultModel, behaviour: Behaviour, started: Instant) -> Fleet {
        let shape = model.shape;
        let identities = (0..shape.nodes)
            .map(|k| Identity {
                node: shape.node_name(k),
                labels: [("tor".to_owned(), format!("t{}", shape.tor_of(k)))].into(),
                devices: (0..shape.rails)
                    .map(|r| IdentityDevice {
                        name: format!("mlx5_{r}"),
                        port: 1,
                        rail: Some(r),
                    })
                    .collect(),
            })
            .collect();
        Fleet {
            index: (0..shape.nodes).map(|k| (shape.node_name(k), k)).collect(),
            identities,
            model,
            behaviour,
            started,
            counts: Counts::default(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The port's link rate and what its PCIe link lets through, in bit/s.
    fn port_bits(&self, node: usize, rail: u16, at: Duration) -> (f64, f64) {
        let link = self.model.link(node, rail, at).bits_per_second();
        let pcie = sysfs::pcie_bits_per_second(sysfs::pcie_width(
            self.model.pcie_degraded(node, rail, at),
        ));
        (link, pcie)
    }
}

/// Runs device `mlx5_{rail}` of `node` until `stop` turns true or the service drops its sender.
pub async fn run(
    fleet: Arc<Fleet>,
    node: usize,
    rail: u16,
    mut commands: mpsc::Receiver<DeviceCommand>,
    finished: mpsc::Sender<ProbeFinished>,
    mut stop: watch::Receiver<bool>,
) {
    let seed = fleet.behaviour.seed ^ ((node as u64) << 16 | u64::from(rail)).rotate_left(29);
    // A few uniform draws per probe, reproducible from `--seed`.
    let mut rng = SplitMix64::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
    // Paths with a warm session: the next burst on them needs no setup.
    let mut warm: BTreeSet<PathKey> = BTreeSet::new();
    loop {
        let command = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            command = commands.recv() => match command {
                Some(c) => c,
                None => return,
            },
        };
        let DeviceCommand::Probe {
            spec,
            request,
            keep_warm,
        } = command
        else {
            continue; // Retain: the stand-in keeps no sessions to close
        };
        let key = spec.key.clone();
        let new_session = !warm.contains(&key);
        let (mut outcome, takes) = probe(&fleet, node, rail, &spec, &request, &mut rng);
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(takes) => {}
        }
        let counter = if outcome.deferred.is_some() {
            &fleet.counts.busy
        } else if outcome.error.is_some() {
            &fleet.counts.failed
        } else {
            &fleet.counts.succeeded
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome.error.is_some() || !keep_warm {
            warm.remove(&key);
        } else if outcome.report.is_some() {
            outcome.new_session = new_session;
            outcome.setup_seconds = Some(SETUP_SECONDS);
            warm.insert(key.clone());
        }
        let done = ProbeFinished {
            key,
            outcome,
            at: SystemTime::now(),
        };
        if finished.send(done).await.is_err() {
            return;
        }
    }
}

/// The outcome of one probe and how long the device is busy with it.
fn probe(
    fleet: &Fleet,
    node: usize,
    rail: u16,
    spec: &rdma_probe_exporter::exporter::paths::PathSpec,
    request: &rdma_probe_exporter::prober::BurstRequest,
    rng: &mut SplitMix64,
) -> (ProbeOutcome, Duration) {
    let b = &fleet.behaviour;
    let at = fleet.elapsed();
    let device = format!("mlx5_{rail}");
    let mut outcome = ProbeOutcome {
        kind: request.kind(),
        device: Some(device.clone()),
        message_size: spec.settings.message_size,
        qps: spec.settings.qps,
        ..ProbeOutcome::default()
    };
    let fail = |mut outcome: ProbeOutcome, reason, message: &str, takes| {
        outcome.error = Some(reason);
        outcome.message = Some(message.to_owned());
        (outcome, takes)
    };
    let Some(&peer) = fleet.index.get(&spec.key.peer) else {
        return fail(
            outcome,
            ErrorReason::Connect,
            "not a node of the emulated fleet",
            QUICK_ANSWER,
        );
    };
    let fate = fleet.model.fate(node, rail, peer, at);
    match fate {
        Fate::PeerDown => {
            return fail(
                outcome,
                ErrorReason::Timeout,
                "control connection timed out (the peer is down)",
                b.probe_timeout,
            )
        }
        Fate::LocalPortDown => {
            return fail(
                outcome,
                ErrorReason::PortDown,
                "local port is DOWN",
                QUICK_ANSWER,
            )
        }
        Fate::Dropped | Fate::Runs(_) => {}
    }
    // The peer answered the handshake.
    let (local_link, local_pcie) = fleet.port_bits(node, rail, at);
    let (peer_link, peer_pcie) = fleet.port_bits(peer, rail, at);
    outcome.peer_device = Some(device);
    outcome.peer_identity = Some(fleet.identities[peer].clone());
    outcome.mtu = Some(4096);
    outcome.local_link_rate_bits_per_second = Some(local_link as u64);
    outcome.peer_link_rate_bits_per_second = Some(peer_link as u64);
    if rng.unit() < b.busy_rate {
        outcome.deferred = Some("busy".into());
        outcome.message = Some("the responder is serving another prober's burst".into());
        return (outcome, QUICK_ANSWER);
    }
    let fraction = match fate {
        Fate::Runs(f) if rng.unit() >= b.failure_rate => f,
        Fate::Runs(_) => {
            return fail(
                outcome,
                ErrorReason::Timeout,
                "burst timed out (a rare single failure)",
                b.probe_timeout,
            )
        }
        _ => {
            return fail(
                outcome,
                ErrorReason::WcRetryExceeded,
                "work completion: transport retry counter exceeded",
                b.probe_timeout,
            )
        }
    };
    let link_bytes = local_link.min(peer_link) / 8.0;
    let target = match &request.rate_limit {
        Some(limit) => match limit.resolve(spec.settings.message_size, Some(link_bytes)) {
            Ok(rate) => rate.bytes_per_second(),
            Err(e) => return fail(outcome, ErrorReason::QpSetup, &e.to_string(), QUICK_ANSWER),
        },
        None => link_bytes,
    };
    outcome.target_bandwidth_bytes_per_second = Some(target);
    // What the path carries: the pace, no more than either end's port or PCIe link.
    let ceiling = link_bytes.min(local_pcie.min(peer_pcie) / 8.0);
    let bandwidth = target.min(ceiling) * fraction * (1.0 - b.noise * rng.unit());
    let message = spec.settings.message_size.max(1) as f64;
    let elapsed = match request.length {
        BurstLength::Duration(d) => d,
        BurstLength::Messages(n) => Duration::from_secs_f64(n as f64 * message / target),
        BurstLength::Bytes(n) => Duration::from_secs_f64(n as f64 / target),
    };
    let bytes = (bandwidth * elapsed.as_secs_f64()) as u64;
    let messages = (bytes as f64 / message) as u64;
    let window = Duration::from_millis(10).min(elapsed);
    outcome.report = Some(BurstReport {
        bytes,
        messages,
        completions: messages,
        elapsed,
        bandwidth_bytes_per_second: bandwidth,
        message_rate_per_second: bandwidth / message,
        min_window_bandwidth_bytes_per_second: bandwidth * (1.0 - b.noise * rng.unit()),
        window,
        completion_gap_max: Duration::from_secs_f64(2.0 * message / bandwidth.max(1.0)),
        cpu_seconds: None,
        per_qp_bandwidth_min_bytes_per_second: None,
        per_qp_bandwidth_max_bytes_per_second: None,
        per_qp_bandwidth_bytes_per_second: Vec::new(),
    });
    outcome.validated = true;
    outcome.verified_messages = Some(messages);
    (outcome, elapsed)
}
