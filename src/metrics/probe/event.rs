//! What the recorder is told: the events device workers and the service loop send it, and the
//! record of one finished probe (also what `probe --json` prints of it).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;

use super::PathLabels;
use crate::burst::BurstReport;
use crate::judge::Criteria;
use crate::metrics::port::PortReport;
use crate::ping::PingReports;
use crate::prober::{BurstKind, ProbeOutcome};
use crate::reason::ErrorReason;

/// Why a burst did not run, without being a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// The responder was serving another prober's burst.
    Busy,
    /// The device's duty-cycle budget was spent.
    Budget,
}

impl DeferReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DeferReason::Busy => "busy",
            DeferReason::Budget => "budget",
        }
    }
}

/// The figures of one burst (also of a failed one, for what completed before it failed).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BurstFigures {
    pub bytes: u64,
    pub messages: u64,
    /// Data phase of the burst, seconds.
    pub elapsed_seconds: f64,
    pub bandwidth_bytes_per_second: f64,
    pub min_window_bandwidth_bytes_per_second: f64,
    pub completion_gap_max_seconds: f64,
    pub message_rate_per_second: f64,
    /// Lowest and highest per-QP bandwidth, when the burst used several QPs.
    pub qp_bandwidth_min_bytes_per_second: Option<f64>,
    pub qp_bandwidth_max_bytes_per_second: Option<f64>,
}

/// How a probe of a path ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ProbeResult {
    Success {
        figures: BurstFigures,
    },
    Failure {
        reason: ErrorReason,
        message: String,
        /// What completed before the failure, if anything did.
        figures: Option<BurstFigures>,
    },
    Deferred {
        reason: DeferReason,
    },
}

/// One finished probe of a path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRecord {
    pub result: ProbeResult,
    /// Paced, or unpaced to measure capacity.
    pub kind: BurstKind,
    /// What the burst aimed for: the rate limit, or the lower link rate of both ends.
    pub target_bytes_per_second: Option<f64>,
    /// Set when the session was (re)built for this burst: control + QP setup time.
    pub setup_seconds: Option<f64>,
    /// Unix time the probe ended.
    pub at_unix_seconds: f64,
    /// Non-zero increases of allowlisted port counters during the burst, on both ends.
    pub counters: Vec<CounterRecord>,
    /// What each end's port carried beyond the burst, where its counters tell.
    pub other_traffic: Vec<OtherTrafficRecord>,
}

/// Which way bytes went through a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Transmit,
    Receive,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Transmit => "transmit",
            Direction::Receive => "receive",
        }
    }
}

/// Bytes one end's port carried in one direction during a burst beyond the burst's own
/// (docs/metrics.md, "Other traffic").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OtherTrafficRecord {
    pub side: Side,
    pub direction: Direction,
    pub bytes: u64,
}

/// Which end of a path a port counter was read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Local,
    /// The responder's port, as it reported it.
    Remote,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Local => "local",
            Side::Remote => "remote",
        }
    }
}

/// One allowlisted port counter's increase during a burst; `counter` is always an allowlist
/// label (docs/metrics.md, "Port counters").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CounterRecord {
    pub side: Side,
    pub counter: &'static str,
    /// The allowlist's kind of the counter (`counter_kind`: what it tells, whatever the driver
    /// calls it).
    pub kind: crate::port::CounterKind,
    pub increase: u64,
}

impl CounterRecord {
    /// `None` for a label not on the allowlist (a peer cannot add label values) and for a zero
    /// increase.
    pub fn new(side: Side, label: &str, increase: u64) -> Option<Self> {
        let spec = crate::port::by_label(label)?;
        (increase > 0).then_some(CounterRecord {
            side,
            counter: spec.label,
            kind: spec.kind,
            increase,
        })
    }
}

impl From<&BurstReport> for BurstFigures {
    fn from(r: &BurstReport) -> Self {
        BurstFigures {
            bytes: r.bytes,
            messages: r.messages,
            elapsed_seconds: r.elapsed.as_secs_f64(),
            bandwidth_bytes_per_second: r.bandwidth_bytes_per_second,
            min_window_bandwidth_bytes_per_second: r.min_window_bandwidth_bytes_per_second,
            completion_gap_max_seconds: r.completion_gap_max.as_secs_f64(),
            message_rate_per_second: r.message_rate_per_second,
            qp_bandwidth_min_bytes_per_second: r.per_qp_bandwidth_min_bytes_per_second,
            qp_bandwidth_max_bytes_per_second: r.per_qp_bandwidth_max_bytes_per_second,
        }
    }
}

impl ProbeRecord {
    /// What a prober's outcome means for the metrics: a deferral (busy) is not a run; setup time
    /// counts only when the session was (re)built for this burst.
    pub fn from_outcome(outcome: &ProbeOutcome, at_unix_seconds: f64) -> Self {
        let figures = outcome.report.as_ref().map(BurstFigures::from);
        let result = match (&outcome.deferred, outcome.error, figures) {
            (Some(_), _, _) => ProbeResult::Deferred {
                reason: DeferReason::Busy,
            },
            (None, Some(reason), figures) => ProbeResult::Failure {
                reason,
                message: outcome.message.clone().unwrap_or_default(),
                figures,
            },
            (None, None, Some(figures)) => ProbeResult::Success { figures },
            (None, None, None) => ProbeResult::Failure {
                reason: ErrorReason::WcOther,
                message: "the probe ended without figures or an error".into(),
                figures: None,
            },
        };
        ProbeRecord {
            result,
            kind: outcome.kind,
            target_bytes_per_second: outcome.target_bandwidth_bytes_per_second,
            setup_seconds: outcome
                .new_session
                .then_some(outcome.setup_seconds)
                .flatten(),
            at_unix_seconds,
            counters: counter_records(outcome),
            other_traffic: other_traffic_records(outcome),
        }
    }
}

fn other_traffic_records(outcome: &ProbeOutcome) -> Vec<OtherTrafficRecord> {
    [
        (Side::Local, outcome.local_other_traffic),
        (Side::Remote, outcome.remote_other_traffic),
    ]
    .into_iter()
    .filter_map(|(side, traffic)| Some((side, traffic?)))
    .flat_map(|(side, t)| {
        [
            (Direction::Transmit, t.transmit_bytes),
            (Direction::Receive, t.receive_bytes),
        ]
        .into_iter()
        .filter_map(move |(direction, bytes)| {
            Some(OtherTrafficRecord {
                side,
                direction,
                bytes: bytes?,
            })
        })
    })
    .collect()
}

fn counter_records(outcome: &ProbeOutcome) -> Vec<CounterRecord> {
    let local = outcome
        .local_counters
        .iter()
        .map(|(label, n)| (Side::Local, label, *n));
    let remote = outcome
        .remote_counters
        .iter()
        .map(|(label, n)| (Side::Remote, label, *n));
    local
        .chain(remote)
        .filter_map(|(side, label, n)| CounterRecord::new(side, label, n))
        .collect()
}

/// What the recorder is told.
#[derive(Debug, Clone)]
pub enum ProbeEvent {
    /// A probe of this path starts: its success gauge exists from now on (0 until a success).
    Attempt(PathLabels),
    /// A probe of this path ended (boxed: the record is large next to the other events).
    Completed(PathLabels, Box<ProbeRecord>),
    /// After a (re)load: only these peers are candidates; every series of a path to any other
    /// peer goes.
    RetainPeers(BTreeSet<String>),
    /// The path's series go (its peer answered with another device: they move to new labels).
    ForgetPath(PathLabels),
    /// This round's selection: (device, peer) of each selected path, and whether the series
    /// budget prefers it (a same-group or full-mesh path). A path out of the selection leaves
    /// `/metrics` once it has not been probed for the TTL.
    Selection(BTreeMap<(String, String), bool>),
    /// The interval each of these selected paths, (device, peer), is planned at now: its
    /// configured interval with the selection, rounds and duty-cycle stretch (docs/metrics.md,
    /// `rdma_probe_path_interval_seconds`). Paths not listed keep what they were last told.
    Intervals(Vec<((String, String), Duration)>),
    /// The series budget's limits (docs/metrics.md, "Series budget").
    SeriesBudget { limit: usize, ttl: Duration },
    /// A config (re)load: whether it succeeded, and when.
    ConfigLoaded { ok: bool, at_unix_seconds: f64 },
    /// A probe of this path was held back (not a failure, not a run).
    Deferred(PathLabels, DeferReason),
    /// After a (re)load: the node's and the peers' static labels.
    Info(InfoLabels),
    /// A peer's `peer_info` labels now: what it said about itself changed (docs/metrics.md,
    /// "Peer identity"). Ignored for a peer that is not a candidate.
    PeerLabels {
        peer: String,
        labels: Vec<(String, String)>,
    },
    /// Paths left out of the schedule by what their peer said: how many per (local device,
    /// reason), and each path with its reason (every path left out now; the others are not).
    SkippedPaths {
        per_device: Vec<(String, &'static str, u64)>,
        paths: Vec<(PathLabels, &'static str)>,
    },
    /// A local device's scheduling figures (docs/schedule.md, "Metrics").
    Schedule(DeviceScheduleFigures),
    /// What sysfs says about the probed ports now (docs/metrics.md, "Port facts").
    Ports(PortReport),
    /// A device's ping engine's figures now (docs/metrics.md, "Pings").
    Pings(PingReports<PathLabels>),
    /// The thresholds and windows paths are judged by, at load and after each reload
    /// (docs/architecture.md, "Judging paths"); new ones start every judgement over.
    Judge(Criteria),
}

impl ProbeEvent {
    /// The event of a finished probe.
    pub fn completed(path: PathLabels, record: ProbeRecord) -> Self {
        ProbeEvent::Completed(path, Box::new(record))
    }
}

/// Label sets of the info metrics: `node` plus this node's static labels, and `peer` plus each
/// peer's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoLabels {
    pub node: Vec<(String, String)>,
    pub peers: Vec<Vec<(String, String)>>,
}

/// The value of label `name` in one of [`InfoLabels`]' label sets.
pub(super) fn label<'a>(labels: &'a [(String, String)], name: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// What the scheduler says about one local device.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceScheduleFigures {
    pub device: String,
    pub paths: u64,
    pub duty_cycle_used: f64,
    pub duty_cycle_budget: f64,
    pub demand: f64,
    pub stretch: f64,
}
