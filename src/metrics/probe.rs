//! The probe families of the metric contract (docs/metrics.md), and the one task that writes
//! them.
//!
//! Device workers never touch a metric: they send [`ProbeEvent`]s over a bounded channel to
//! [`ProbeRecorder`], which owns the families and the table of known paths. A scrape encodes the
//! registry (atomics behind read locks) and never waits on a burst; the status page reads a
//! [`PathSnapshot`] copy of the table. One writer also makes the series bookkeeping simple: a
//! path removed by a reload loses every one of its series, reasons and results included.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;

use super::budget::{PathSeries, SeriesBudget, DEFAULT_SERIES_BUDGET, DEFAULT_SERIES_TTL};
use super::port::{PortFamilies, PortReport, PortSeries};
use super::PREFIX;
use crate::burst::BurstReport;
use crate::port::CounterKind;
use crate::prober::{BurstKind, ProbeOutcome};
use crate::reason::ErrorReason;

type FloatGauge = Gauge<f64, AtomicU64>;

/// A probed path: (local device, peer, peer device).
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet, Serialize)]
pub struct PathLabels {
    pub device: String,
    pub peer: String,
    pub peer_device: String,
}

/// A path and the kind of burst a per-burst gauge describes: paced and capacity bursts keep
/// their own last figures (docs/metrics.md, "Paced and capacity bursts").
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    device: String,
    peer: String,
    peer_device: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    device: String,
    peer: String,
    peer_device: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CounterLabels {
    device: String,
    peer: String,
    peer_device: String,
    side: &'static str,
    counter: &'static str,
    counter_kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrafficLabels {
    device: String,
    peer: String,
    peer_device: String,
    side: &'static str,
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    device: String,
    peer: String,
    peer_device: String,
    reason: &'static str,
}

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
    /// Paths left out of the schedule by what their peer said, per (local device, reason).
    SkippedPaths(Vec<(String, &'static str, u64)>),
    /// A local device's scheduling figures (docs/schedule.md, "Metrics").
    Schedule(DeviceScheduleFigures),
    /// What sysfs says about the probed ports now (docs/metrics.md, "Port facts").
    Ports(PortReport),
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

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkippedLabels {
    device: String,
    reason: &'static str,
}

/// The last state of one path, for the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathState {
    pub path: PathLabels,
    pub last: Option<ProbeRecord>,
    pub last_success_unix_seconds: Option<f64>,
    /// The last failure's reason and message, and when, kept after later successes.
    pub last_error: Option<(ErrorReason, String, f64)>,
    pub runs: u64,
    pub failures: u64,
}

/// A copy of the path table, read by the status page; written only by the recorder.
pub type PathSnapshot = Arc<RwLock<BTreeMap<PathLabels, PathState>>>;

/// The families, registered once.
#[derive(Debug, Clone)]
pub struct ProbeFamilies {
    success: Family<PathLabels, Gauge>,
    bandwidth: Family<KindLabels, FloatGauge>,
    min_window: Family<KindLabels, FloatGauge>,
    gap_max: Family<KindLabels, FloatGauge>,
    target: Family<KindLabels, FloatGauge>,
    message_rate: Family<KindLabels, FloatGauge>,
    qp_min: Family<KindLabels, FloatGauge>,
    qp_max: Family<KindLabels, FloatGauge>,
    bytes: Family<PathLabels, Counter>,
    messages: Family<PathLabels, Counter>,
    runs: Family<ResultLabels, Counter>,
    errors: Family<ReasonLabels, Counter>,
    deferred: Family<ReasonLabels, Counter>,
    port_counters: Family<CounterLabels, Counter>,
    other_traffic: Family<TrafficLabels, Counter>,
    setup: Family<PathLabels, FloatGauge>,
    last_success: Family<PathLabels, FloatGauge>,
    interval: Family<PathLabels, FloatGauge>,
    last_attempt: Family<PathLabels, FloatGauge>,
    consecutive_failures: Family<PathLabels, Gauge>,
    last_validation_failure: Family<PathLabels, FloatGauge>,
    reload_success: Gauge,
    last_reload: FloatGauge,
    node_info: Family<Vec<(String, String)>, Gauge>,
    peer_info: Family<Vec<(String, String)>, Gauge>,
    schedule_paths: Family<DeviceLabels, Gauge>,
    schedule_skipped: Family<SkippedLabels, Gauge>,
    duty_cycle: Family<DeviceLabels, FloatGauge>,
    duty_cycle_budget: FloatGauge,
    demand: Family<DeviceLabels, FloatGauge>,
    stretch: Family<DeviceLabels, FloatGauge>,
    path_series: Gauge,
    path_series_budget: Gauge,
    budget_dropped: Counter,
    shed_level: Gauge,
    ports: PortFamilies,
}

impl ProbeFamilies {
    pub fn register(registry: &mut Registry) -> Self {
        let families = ProbeFamilies {
            success: Family::default(),
            bandwidth: Family::default(),
            min_window: Family::default(),
            gap_max: Family::default(),
            target: Family::default(),
            message_rate: Family::default(),
            qp_min: Family::default(),
            qp_max: Family::default(),
            bytes: Family::default(),
            messages: Family::default(),
            runs: Family::default(),
            errors: Family::default(),
            deferred: Family::default(),
            port_counters: Family::default(),
            other_traffic: Family::default(),
            setup: Family::default(),
            last_success: Family::default(),
            last_validation_failure: Family::default(),
            interval: Family::default(),
            last_attempt: Family::default(),
            consecutive_failures: Family::default(),
            reload_success: Gauge::default(),
            last_reload: FloatGauge::default(),
            node_info: Family::default(),
            peer_info: Family::default(),
            schedule_paths: Family::default(),
            schedule_skipped: Family::default(),
            duty_cycle: Family::default(),
            duty_cycle_budget: FloatGauge::default(),
            demand: Family::default(),
            stretch: Family::default(),
            path_series: Gauge::default(),
            path_series_budget: Gauge::default(),
            budget_dropped: Counter::default(),
            shed_level: Gauge::default(),
            ports: PortFamilies::register(registry),
        };
        let f = &families;
        macro_rules! add {
            ($name:literal, $help:literal, $metric:expr) => {
                registry.register(format!("{PREFIX}_{}", $name), $help, $metric)
            };
        }
        add!(
            "success",
            "1 if the last probe of this path succeeded, else 0",
            f.success.clone()
        );
        add!(
            "bandwidth_bytes_per_second",
            "Achieved payload bandwidth of the path's last burst",
            f.bandwidth.clone()
        );
        add!(
            "bandwidth_min_window_bytes_per_second",
            "Lowest bandwidth over the short windows of the path's last burst",
            f.min_window.clone()
        );
        add!(
            "completion_gap_max_seconds",
            "Longest gap between completions in the path's last burst",
            f.gap_max.clone()
        );
        add!("target_bandwidth_bytes_per_second", "What the path's last burst aimed for: the rate limit, or the lower link rate of both ends when unpaced", f.target.clone());
        add!(
            "message_rate_per_second",
            "Completed RDMA WRITEs per second in the path's last burst",
            f.message_rate.clone()
        );
        add!(
            "qp_bandwidth_min_bytes_per_second",
            "Lowest per-QP bandwidth of the path's last burst over several QPs (each QP on its \
             own ECMP path)",
            f.qp_min.clone()
        );
        add!(
            "qp_bandwidth_max_bytes_per_second",
            "Highest per-QP bandwidth of the path's last burst over several QPs",
            f.qp_max.clone()
        );
        add!(
            "bytes",
            "Payload bytes completed on this path",
            f.bytes.clone()
        );
        add!(
            "messages",
            "RDMA WRITEs completed on this path",
            f.messages.clone()
        );
        add!("runs", "Bursts run on this path, by result", f.runs.clone());
        add!(
            "errors",
            "Failed probes of this path, by reason",
            f.errors.clone()
        );
        add!(
            "deferred",
            "Probes of this path not run, and not failures, by reason",
            f.deferred.clone()
        );
        add!(
            "port_increase",
            "Increase of an allowlisted port counter during bursts on this path, by side; \
             port-level: other traffic on the port counts too",
            f.port_counters.clone()
        );
        add!(
            "port_other_traffic_bytes",
            "Bytes a port carried during bursts on this path beyond the bursts' own, by side and \
             direction; never negative",
            f.other_traffic.clone()
        );
        add!(
            "setup_seconds",
            "Control and QP setup time of the path's last session (re)build",
            f.setup.clone()
        );
        add!(
            "last_success_timestamp_seconds",
            "Unix time of the path's last successful burst",
            f.last_success.clone()
        );
        add!(
            "last_validation_failure_timestamp_seconds",
            "Unix time of the path's last burst whose data did not verify on the responder \
             (absent until one)",
            f.last_validation_failure.clone()
        );
        add!(
            "path_interval_seconds",
            "How long between two probes of this path as the scheduler plans it now: its \
             interval with the selection, rounds and duty-cycle stretch",
            f.interval.clone()
        );
        add!(
            "last_attempt_timestamp_seconds",
            "Unix time of the path's last probe that ran, successful or failed",
            f.last_attempt.clone()
        );
        add!(
            "consecutive_failures",
            "Failed probes of this path since its last success",
            f.consecutive_failures.clone()
        );
        add!(
            "config_reload_success",
            "1 if the last config (re)load succeeded, else 0",
            f.reload_success.clone()
        );
        add!(
            "config_last_reload_timestamp_seconds",
            "Unix time of the last successful config (re)load",
            f.last_reload.clone()
        );
        add!(
            "node_info",
            "This node's static labels from the config; always 1",
            f.node_info.clone()
        );
        add!(
            "peer_info",
            "Each peer's static labels, and once it answered, the node name (peer_node) and \
             labels it reported; always 1",
            f.peer_info.clone()
        );
        add!(
            "schedule_paths",
            "Paths probed from this local device",
            f.schedule_paths.clone()
        );
        add!(
            "schedule_skipped_paths",
            "Paths of this local device not probed because of what the peer reported: no device \
             on the device's rail (no_rail), or the peer is this node (itself)",
            f.schedule_skipped.clone()
        );
        add!(
            "schedule_duty_cycle_ratio",
            "Share of the last 10 minutes this device spent bursting",
            f.duty_cycle.clone()
        );
        add!(
            "schedule_duty_cycle_budget_ratio",
            "Most share of wall time a device may spend bursting",
            f.duty_cycle_budget.clone()
        );
        add!(
            "schedule_demand_ratio",
            "Share of time this device's paths want at their configured intervals",
            f.demand.clone()
        );
        add!(
            "schedule_interval_stretch_ratio",
            "1 when the device's paths fit its budget, else how much longer every interval is",
            f.stretch.clone()
        );
        add!(
            "path_series",
            "Per-path series on /metrics now: what the series budget counts",
            f.path_series.clone()
        );
        add!(
            "path_series_budget",
            "Most per-path series this node keeps on /metrics",
            f.path_series_budget.clone()
        );
        add!(
            "series_budget_dropped_paths",
            "Paths taken off /metrics, or kept off it, because the series budget was full",
            f.budget_dropped.clone()
        );
        add!(
            "series_budget_shed_level",
            "What the series budget keeps off /metrics for every path: 0 nothing, 1 the port \
             traffic (bytes and packets counters, other traffic), 2 also the derived series \
             (message rates, setup time, byte and message totals)",
            f.shed_level.clone()
        );
        families
    }
}

/// Per path: which label values of the reason-labelled families exist, so that removing the
/// path removes them all (series are created on first use, never pre-created per reason).
#[derive(Debug, Default)]
struct SeriesOfPath {
    results: BTreeSet<&'static str>,
    errors: BTreeSet<&'static str>,
    deferred: BTreeSet<&'static str>,
    /// (side, counter, kind) of its port counter series.
    counters: BTreeSet<(&'static str, &'static str, CounterKind)>,
    other_traffic: BTreeSet<(Side, Direction)>,
    kinds: BTreeSet<BurstKind>,
}

/// A port counter of the traffic kinds (bytes, packets): with the other traffic, what the series
/// budget sheds first.
fn is_traffic(kind: CounterKind) -> bool {
    use CounterKind as K;
    matches!(
        kind,
        K::XmitBytes | K::RcvBytes | K::XmitPackets | K::RcvPackets
    )
}

/// Now, as the series budget counts time (and the validation-failure stamps).
pub(crate) fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// How often the recorder takes stale paths off `/metrics`.
const EXPIRE_EVERY: Duration = Duration::from_secs(30);

/// The owner of the probe families: applies events, one at a time.
#[derive(Debug)]
pub struct ProbeRecorder {
    families: ProbeFamilies,
    series: BTreeMap<PathLabels, SeriesOfPath>,
    port_series: PortSeries,
    snapshot: PathSnapshot,
    budget: SeriesBudget<PathLabels>,
    /// The selection: (device, peer) → preferred by the budget.
    selection: BTreeMap<(String, String), bool>,
    /// The interval each selected path is planned at now, seconds: device → peer → interval.
    planned: BTreeMap<String, BTreeMap<String, f64>>,
    /// Every candidate peer's static labels; `peer_info` shows those of the peers selected or
    /// with a path on `/metrics`.
    peer_labels: BTreeMap<String, Vec<(String, String)>>,
    shown_peers: BTreeSet<String>,
    /// The budget's first drop since its last reset has been logged.
    warned: bool,
}

impl ProbeRecorder {
    pub fn new(families: ProbeFamilies) -> Self {
        families
            .path_series_budget
            .set(i64::try_from(DEFAULT_SERIES_BUDGET).unwrap_or(i64::MAX));
        ProbeRecorder {
            families,
            series: BTreeMap::new(),
            port_series: PortSeries::default(),
            snapshot: PathSnapshot::default(),
            budget: SeriesBudget::new(DEFAULT_SERIES_BUDGET, DEFAULT_SERIES_TTL),
            selection: BTreeMap::new(),
            planned: BTreeMap::new(),
            peer_labels: BTreeMap::new(),
            shown_peers: BTreeSet::new(),
            warned: false,
        }
    }

    /// The table the status page reads.
    pub fn snapshot(&self) -> PathSnapshot {
        Arc::clone(&self.snapshot)
    }

    /// Applies events until every sender is gone; takes stale paths off `/metrics` meanwhile.
    pub async fn run(mut self, mut events: tokio::sync::mpsc::Receiver<ProbeEvent>) {
        let mut expiry = tokio::time::interval(EXPIRE_EVERY);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => self.apply(event),
                    None => return,
                },
                _ = expiry.tick() => self.expire(unix_now()),
            }
        }
    }

    pub fn apply(&mut self, event: ProbeEvent) {
        self.apply_at(event, unix_now());
    }

    /// Applies `event` at `now` (unix time; the series budget's clock).
    pub fn apply_at(&mut self, event: ProbeEvent, now: Duration) {
        match event {
            ProbeEvent::Attempt(path) => self.on_attempt(path),
            ProbeEvent::Completed(path, record) => {
                self.on_completed(path.clone(), *record);
                self.account(&path, now);
            }
            ProbeEvent::RetainPeers(peers) => {
                let gone: Vec<PathLabels> = self
                    .series
                    .keys()
                    .filter(|p| !peers.contains(&p.peer))
                    .cloned()
                    .collect();
                for path in gone {
                    self.remove_path(&path);
                }
                self.peer_labels.retain(|p, _| peers.contains(p));
                self.refresh_peer_info();
            }
            ProbeEvent::ForgetPath(path) => {
                self.remove_path(&path);
                self.refresh_peer_info();
            }
            ProbeEvent::Selection(selection) => {
                self.planned.retain(|device, peers| {
                    peers.retain(|peer, _| selection.contains_key(&(device.clone(), peer.clone())));
                    !peers.is_empty()
                });
                self.selection = selection;
                self.refresh_peer_info();
            }
            ProbeEvent::Intervals(intervals) => self.on_intervals(intervals),
            ProbeEvent::SeriesBudget { limit, ttl } => {
                self.budget.reset(limit, ttl);
                self.warned = false;
                self.families.shed_level.set(0);
                self.families
                    .path_series_budget
                    .set(i64::try_from(limit).unwrap_or(i64::MAX));
            }
            ProbeEvent::ConfigLoaded {
                ok,
                at_unix_seconds,
            } => {
                self.families.reload_success.set(i64::from(ok));
                if ok {
                    self.families.last_reload.set(at_unix_seconds);
                }
            }
            ProbeEvent::Deferred(path, reason) => {
                self.on_deferred(path.clone(), reason);
                self.account(&path, now);
            }
            ProbeEvent::Info(info) => self.on_info(info),
            ProbeEvent::PeerLabels { peer, labels } => self.on_peer_labels(peer, labels),
            ProbeEvent::SkippedPaths(counts) => {
                for (device, reason, n) in counts {
                    self.families
                        .schedule_skipped
                        .get_or_create(&SkippedLabels { device, reason })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
            ProbeEvent::Schedule(figures) => self.on_schedule(figures),
            ProbeEvent::Ports(report) => self.port_series.apply(&self.families.ports, &report),
        }
    }

    fn on_deferred(&mut self, path: PathLabels, reason: DeferReason) {
        self.on_attempt(path.clone());
        let reason = reason.as_str();
        self.families
            .deferred
            .get_or_create(&reason_labels(&path, reason))
            .inc();
        self.series.entry(path).or_default().deferred.insert(reason);
    }

    fn on_info(&mut self, info: InfoLabels) {
        let f = &self.families;
        f.node_info.clear();
        f.node_info.get_or_create(&info.node).set(1);
        f.peer_info.clear();
        self.shown_peers.clear();
        self.peer_labels = info
            .peers
            .into_iter()
            .filter_map(|labels| {
                let name = labels.iter().find(|(k, _)| k == "peer")?.1.clone();
                Some((name, labels))
            })
            .collect();
        self.refresh_peer_info();
    }

    /// A candidate's new `peer_info` labels replace its old ones (its series too, if shown).
    fn on_peer_labels(&mut self, peer: String, labels: Vec<(String, String)>) {
        let Some(old) = self.peer_labels.get_mut(&peer) else {
            return;
        };
        if self.shown_peers.contains(&peer) {
            self.families.peer_info.remove(old);
            self.families.peer_info.get_or_create(&labels).set(1);
        }
        *old = labels;
    }

    /// `peer_info` for the peers selected or with a path on `/metrics`, no other: a cluster's
    /// candidate list is every node, and one series per node on every node would be the
    /// cluster's size squared.
    fn refresh_peer_info(&mut self) {
        let wanted: BTreeSet<&String> = self
            .selection
            .keys()
            .map(|(_, peer)| peer)
            .chain(self.series.keys().map(|p| &p.peer))
            .filter(|p| self.peer_labels.contains_key(*p))
            .collect();
        let f = &self.families;
        for gone in self.shown_peers.iter().filter(|p| !wanted.contains(p)) {
            if let Some(labels) = self.peer_labels.get(gone) {
                f.peer_info.remove(labels);
            }
        }
        for peer in wanted.iter().filter(|p| !self.shown_peers.contains(**p)) {
            if let Some(labels) = self.peer_labels.get(*peer) {
                f.peer_info.get_or_create(labels).set(1);
            }
        }
        self.shown_peers = wanted.into_iter().cloned().collect();
    }

    /// How many series `path` has, split as the series budget counts them: the detail is its
    /// port traffic (the bytes and packets counters, and the other traffic).
    fn count(&self, path: &PathLabels) -> Option<PathSeries> {
        let series = self.series.get(path)?;
        let f = &self.families;
        let present = |yes: bool| usize::from(yes);
        let derived_of_path = present(f.setup.get(path).is_some())
            + present(f.bytes.get(path).is_some())
            + present(f.messages.get(path).is_some());
        let mut base = present(f.success.get(path).is_some())
            + present(f.last_success.get(path).is_some())
            + present(f.interval.get(path).is_some())
            + present(f.last_attempt.get(path).is_some())
            + present(f.consecutive_failures.get(path).is_some())
            + present(f.last_validation_failure.get(path).is_some())
            + series.results.len()
            + series.errors.len()
            + series.deferred.len();
        let mut derived = derived_of_path;
        for kind in &series.kinds {
            let labels = kind_labels(path, *kind);
            base += [
                &f.bandwidth,
                &f.min_window,
                &f.gap_max,
                &f.target,
                &f.qp_min,
                &f.qp_max,
            ]
            .iter()
            .filter(|family| family.get(&labels).is_some())
            .count();
            derived += present(f.message_rate.get(&labels).is_some());
        }
        let traffic = series
            .counters
            .iter()
            .filter(|(_, _, kind)| is_traffic(*kind))
            .count();
        base += series.counters.len() - traffic;
        Some(PathSeries {
            base,
            detail: traffic + series.other_traffic.len(),
            derived,
        })
    }

    /// The series budget's verdict on `path` after a result: make room, shed the port traffic,
    /// or keep the path off (docs/metrics.md, "Series budget").
    fn account(&mut self, path: &PathLabels, now: Duration) {
        let Some(series) = self.count(path) else {
            return;
        };
        let preferred = self
            .selection
            .get(&(path.device.clone(), path.peer.clone()))
            .copied()
            .unwrap_or(false);
        let dropped_before = self.budget.dropped();
        let admission = self.budget.record(path.clone(), now, preferred, series);
        if admission.shed_derived {
            self.shed_derived();
            tracing::warn!(
                budget = self.budget.limit(),
                "series budget reached: the per-path message rates, setup times and byte and \
                 message totals leave /metrics until the next reload (logged once)"
            );
        }
        if admission.shed_detail {
            self.shed_traffic();
            tracing::warn!(
                budget = self.budget.limit(),
                "series budget reached: the per-path port traffic increases (bytes, packets) \
                 leave /metrics until the next reload (logged once)"
            );
        }
        for evicted in &admission.evicted {
            self.remove_path(evicted);
        }
        if !admission.admitted {
            self.remove_path(path);
        }
        let dropped = self.budget.dropped() - dropped_before;
        if dropped > 0 {
            self.families.budget_dropped.inc_by(dropped);
            if !self.warned {
                self.warned = true;
                tracing::warn!(
                    budget = self.budget.limit(),
                    path = ?path,
                    "series budget full: paths leave /metrics, sampled ones probed longest ago \
                     first (rdma_probe_series_budget_dropped_paths_total; logged once)"
                );
            }
        }
        if !admission.evicted.is_empty() || !admission.admitted {
            self.refresh_peer_info();
        }
        self.families
            .path_series
            .set(i64::try_from(self.budget.series()).unwrap_or(i64::MAX));
    }

    /// Takes off `/metrics` the paths out of the selection not probed for the TTL.
    pub fn expire(&mut self, now: Duration) {
        let selection = &self.selection;
        let stale = self.budget.expire(now, |p| {
            selection.contains_key(&(p.device.clone(), p.peer.clone()))
        });
        if stale.is_empty() {
            return;
        }
        for path in &stale {
            self.remove_path(path);
        }
        self.refresh_peer_info();
        self.families
            .path_series
            .set(i64::try_from(self.budget.series()).unwrap_or(i64::MAX));
    }

    /// Removes the derived series of every path (message rates, setup times, byte and message
    /// totals), once the budget needs their room.
    fn shed_derived(&mut self) {
        let f = &self.families;
        for (path, series) in &self.series {
            for kind in &series.kinds {
                f.message_rate.remove(&kind_labels(path, *kind));
            }
            f.setup.remove(path);
            f.bytes.remove(path);
            f.messages.remove(path);
        }
        f.shed_level.set(2);
    }

    /// Removes the traffic port counters of every path, once the budget needs their room.
    fn shed_traffic(&mut self) {
        let f = &self.families;
        for (path, series) in &mut self.series {
            series.counters.retain(|&(side, counter, kind)| {
                if is_traffic(kind) {
                    f.port_counters
                        .remove(&counter_labels(path, side, counter, kind));
                    false
                } else {
                    true
                }
            });
            for (side, direction) in std::mem::take(&mut series.other_traffic) {
                f.other_traffic
                    .remove(&traffic_labels(path, side, direction));
            }
        }
        f.shed_level.set(f.shed_level.get().max(1));
    }

    fn on_schedule(&mut self, figures: DeviceScheduleFigures) {
        let f = &self.families;
        let device = DeviceLabels {
            device: figures.device,
        };
        f.schedule_paths
            .get_or_create(&device)
            .set(i64::try_from(figures.paths).unwrap_or(i64::MAX));
        f.duty_cycle
            .get_or_create(&device)
            .set(figures.duty_cycle_used);
        f.duty_cycle_budget.set(figures.duty_cycle_budget);
        f.demand.get_or_create(&device).set(figures.demand);
        f.stretch.get_or_create(&device).set(figures.stretch);
    }

    /// Keeps the planned intervals, and shows them on the paths on `/metrics`.
    fn on_intervals(&mut self, intervals: Vec<((String, String), Duration)>) {
        for ((device, peer), interval) in intervals {
            self.planned
                .entry(device)
                .or_default()
                .insert(peer, interval.as_secs_f64());
        }
        for path in self.series.keys() {
            if let Some(interval) = self.planned_interval(path) {
                self.families.interval.get_or_create(path).set(interval);
            }
        }
    }

    fn planned_interval(&self, path: &PathLabels) -> Option<f64> {
        self.planned.get(&path.device)?.get(&path.peer).copied()
    }

    fn on_attempt(&mut self, path: PathLabels) {
        if self.series.contains_key(&path) {
            return;
        }
        let f = &self.families;
        f.success.get_or_create(&path).set(0);
        f.consecutive_failures.get_or_create(&path).set(0);
        if let Some(interval) = self.planned_interval(&path) {
            f.interval.get_or_create(&path).set(interval);
        }
        self.series.insert(path.clone(), SeriesOfPath::default());
        self.table()
            .entry(path.clone())
            .or_insert_with(|| PathState {
                path,
                last: None,
                last_success_unix_seconds: None,
                last_error: None,
                runs: 0,
                failures: 0,
            });
    }

    fn on_completed(&mut self, path: PathLabels, record: ProbeRecord) {
        self.on_attempt(path.clone());
        let f = &self.families;
        let series = self.series.entry(path.clone()).or_default();
        if let Some(setup) = record.setup_seconds.filter(|_| !self.budget.derived_shed()) {
            f.setup.get_or_create(&path).set(setup);
        }
        let figures = match &record.result {
            ProbeResult::Deferred { reason } => {
                let reason = reason.as_str();
                f.deferred
                    .get_or_create(&reason_labels(&path, reason))
                    .inc();
                series.deferred.insert(reason);
                None
            }
            ProbeResult::Success { figures } => {
                f.success.get_or_create(&path).set(1);
                f.consecutive_failures.get_or_create(&path).set(0);
                f.last_attempt
                    .get_or_create(&path)
                    .set(record.at_unix_seconds);
                f.last_success
                    .get_or_create(&path)
                    .set(record.at_unix_seconds);
                count_run(f, series, &path, "success");
                Some(figures)
            }
            ProbeResult::Failure {
                reason, figures, ..
            } => {
                f.success.get_or_create(&path).set(0);
                f.consecutive_failures.get_or_create(&path).inc();
                f.last_attempt
                    .get_or_create(&path)
                    .set(record.at_unix_seconds);
                count_run(f, series, &path, "failure");
                if *reason == ErrorReason::Validation {
                    f.last_validation_failure
                        .get_or_create(&path)
                        .set(record.at_unix_seconds);
                }
                let reason = reason.as_str();
                f.errors.get_or_create(&reason_labels(&path, reason)).inc();
                series.errors.insert(reason);
                figures.as_ref()
            }
        };
        let shed = self.budget.detail_shed();
        for c in record
            .counters
            .iter()
            .filter(|c| !(shed && is_traffic(c.kind)))
        {
            let side = c.side.as_str();
            f.port_counters
                .get_or_create(&counter_labels(&path, side, c.counter, c.kind))
                .inc_by(c.increase);
            series.counters.insert((side, c.counter, c.kind));
        }
        // Created at the first burst that tells it, zero or not: 0 says "measured, none".
        for t in record.other_traffic.iter().filter(|_| !shed) {
            f.other_traffic
                .get_or_create(&traffic_labels(&path, t.side, t.direction))
                .inc_by(t.bytes);
            series.other_traffic.insert((t.side, t.direction));
        }
        if let Some(figures) = figures {
            series.kinds.insert(record.kind);
            self.record_figures(&path, record.kind, figures, record.target_bytes_per_second);
        }
        self.update_table(path, record);
    }

    /// Gauges describe the last burst of its kind that moved data; counters accumulate what
    /// completed, of both kinds.
    fn record_figures(
        &self,
        path: &PathLabels,
        kind: BurstKind,
        figures: &BurstFigures,
        target: Option<f64>,
    ) {
        let f = &self.families;
        let labels = kind_labels(path, kind);
        f.bandwidth
            .get_or_create(&labels)
            .set(figures.bandwidth_bytes_per_second);
        f.min_window
            .get_or_create(&labels)
            .set(figures.min_window_bandwidth_bytes_per_second);
        f.gap_max
            .get_or_create(&labels)
            .set(figures.completion_gap_max_seconds);
        let derived = !self.budget.derived_shed();
        if derived {
            f.message_rate
                .get_or_create(&labels)
                .set(figures.message_rate_per_second);
        }
        if let Some(target) = target {
            f.target.get_or_create(&labels).set(target);
        }
        // Per-QP figures exist only for bursts over several QPs; a path reloaded down to one
        // QP loses them.
        for (family, value) in [
            (&f.qp_min, figures.qp_bandwidth_min_bytes_per_second),
            (&f.qp_max, figures.qp_bandwidth_max_bytes_per_second),
        ] {
            match value {
                Some(v) => {
                    family.get_or_create(&labels).set(v);
                }
                None => {
                    family.remove(&labels);
                }
            }
        }
        if derived {
            f.bytes.get_or_create(path).inc_by(figures.bytes);
            f.messages.get_or_create(path).inc_by(figures.messages);
        }
    }

    fn update_table(&self, path: PathLabels, record: ProbeRecord) {
        let mut table = self.table();
        let Some(state) = table.get_mut(&path) else {
            return;
        };
        match &record.result {
            ProbeResult::Success { .. } => {
                state.runs += 1;
                state.last_success_unix_seconds = Some(record.at_unix_seconds);
            }
            ProbeResult::Failure {
                reason, message, ..
            } => {
                state.runs += 1;
                state.failures += 1;
                state.last_error = Some((*reason, message.clone(), record.at_unix_seconds));
            }
            ProbeResult::Deferred { .. } => {}
        }
        state.last = Some(record);
    }

    /// Removes every series of `path` (and its row of the status page).
    fn remove_path(&mut self, path: &PathLabels) {
        let Some(series) = self.series.remove(path) else {
            return;
        };
        self.budget.remove(path);
        let f = &self.families;
        for kind in &series.kinds {
            let labels = kind_labels(path, *kind);
            for family in [
                &f.bandwidth,
                &f.min_window,
                &f.gap_max,
                &f.target,
                &f.message_rate,
                &f.qp_min,
                &f.qp_max,
            ] {
                family.remove(&labels);
            }
        }
        f.setup.remove(path);
        f.last_success.remove(path);
        f.success.remove(path);
        f.interval.remove(path);
        f.last_attempt.remove(path);
        f.consecutive_failures.remove(path);
        f.last_validation_failure.remove(path);
        f.bytes.remove(path);
        f.messages.remove(path);
        for result in series.results {
            f.runs.remove(&result_labels(path, result));
        }
        for reason in series.errors {
            f.errors.remove(&reason_labels(path, reason));
        }
        for reason in series.deferred {
            f.deferred.remove(&reason_labels(path, reason));
        }
        for (side, counter, kind) in series.counters {
            f.port_counters
                .remove(&counter_labels(path, side, counter, kind));
        }
        for (side, direction) in series.other_traffic {
            f.other_traffic
                .remove(&traffic_labels(path, side, direction));
        }
        self.table().remove(path);
        f.path_series
            .set(i64::try_from(self.budget.series()).unwrap_or(i64::MAX));
    }

    fn table(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<PathLabels, PathState>> {
        // A panic while holding the lock cannot leave the table half-written in a way that
        // matters more than losing the status page: take it back.
        self.snapshot
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn count_run(
    f: &ProbeFamilies,
    series: &mut SeriesOfPath,
    path: &PathLabels,
    result: &'static str,
) {
    f.runs.get_or_create(&result_labels(path, result)).inc();
    series.results.insert(result);
}

fn kind_labels(path: &PathLabels, kind: BurstKind) -> KindLabels {
    KindLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        kind: kind.as_str(),
    }
}

fn result_labels(path: &PathLabels, result: &'static str) -> ResultLabels {
    ResultLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        result,
    }
}

fn counter_labels(
    path: &PathLabels,
    side: &'static str,
    counter: &'static str,
    kind: CounterKind,
) -> CounterLabels {
    CounterLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        side,
        counter,
        counter_kind: kind.as_str(),
    }
}

fn traffic_labels(path: &PathLabels, side: Side, direction: Direction) -> TrafficLabels {
    TrafficLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        side: side.as_str(),
        direction: direction.as_str(),
    }
}

fn reason_labels(path: &PathLabels, reason: &'static str) -> ReasonLabels {
    ReasonLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::{Format, Metrics};
    use crate::port::OtherTraffic;

    fn path(peer: &str) -> PathLabels {
        PathLabels {
            device: "mlx5_0".into(),
            peer: peer.into(),
            peer_device: "mlx5_0".into(),
        }
    }

    fn figures(bandwidth: f64) -> BurstFigures {
        BurstFigures {
            bytes: 65536 * 100,
            messages: 100,
            elapsed_seconds: 0.5,
            bandwidth_bytes_per_second: bandwidth,
            min_window_bandwidth_bytes_per_second: bandwidth * 0.9,
            completion_gap_max_seconds: 0.001,
            message_rate_per_second: 200.0,
            qp_bandwidth_min_bytes_per_second: None,
            qp_bandwidth_max_bytes_per_second: None,
        }
    }

    fn success(bandwidth: f64) -> ProbeRecord {
        ProbeRecord {
            result: ProbeResult::Success {
                figures: figures(bandwidth),
            },
            kind: BurstKind::Paced,
            target_bytes_per_second: Some(1.25e9),
            setup_seconds: Some(0.02),
            at_unix_seconds: 1_700_000_000.0,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        }
    }

    fn failure(reason: ErrorReason) -> ProbeRecord {
        ProbeRecord {
            result: ProbeResult::Failure {
                reason,
                message: "peer gone".into(),
                figures: None,
            },
            kind: BurstKind::Paced,
            target_bytes_per_second: None,
            setup_seconds: None,
            at_unix_seconds: 1_700_000_060.0,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        }
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    const B: &str = r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0"}"#;
    /// The per-burst gauges of a path's paced bursts.
    const PACED: &str = r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0",kind="paced"}"#;

    #[test]
    fn success_gauge_exists_from_the_first_attempt_and_stays_when_the_peer_is_down() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        recorder.apply(ProbeEvent::Attempt(path("node-b")));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
        assert!(
            !text.contains("rdma_probe_bandwidth_bytes_per_second{"),
            "{text}"
        );

        recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Connect),
        ));
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Connect),
        ));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
        let errors = r#"rdma_probe_errors_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",reason="connect"}"#;
        assert_eq!(sample(&text, errors), Some(2.0));
        let runs = r#"rdma_probe_runs_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",result="failure"}"#;
        assert_eq!(sample(&text, runs), Some(2.0));
        // The last burst that moved data still describes the link.
        assert_eq!(
            sample(
                &text,
                &format!("rdma_probe_bandwidth_bytes_per_second{PACED}")
            ),
            Some(1e9)
        );
        assert_eq!(
            sample(
                &text,
                &format!("rdma_probe_last_success_timestamp_seconds{B}")
            ),
            Some(1_700_000_000.0)
        );
        assert!(
            !text.contains("rdma_probe_burst_duration_seconds"),
            "the histogram that measured only the config is gone: {text}"
        );
        let state = recorder.snapshot().read().unwrap()[&path("node-b")].clone();
        assert_eq!(state.runs, 3);
        assert_eq!(state.failures, 2);
        assert_eq!(
            state.last_error.as_ref().map(|e| e.0),
            Some(ErrorReason::Connect)
        );
    }

    /// A burst whose data did not verify stamps the path's last validation failure, which the
    /// alerts read (a counter's increase would fire again after a scrape gap); other failures and
    /// later successes leave it; it goes with the path.
    #[test]
    fn a_validation_failure_stamps_the_path_until_the_path_goes() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
        let stamp = format!("rdma_probe_last_validation_failure_timestamp_seconds{B}");
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Timeout),
        ));
        assert_eq!(
            sample(&text(&metrics), &stamp),
            None,
            "not for other reasons"
        );
        let mut bad = failure(ErrorReason::Validation);
        bad.at_unix_seconds += 30.0;
        let at = bad.at_unix_seconds;
        recorder.apply(ProbeEvent::completed(path("node-b"), bad));
        let mut ok = success(1e9);
        ok.at_unix_seconds += 60.0;
        recorder.apply(ProbeEvent::completed(path("node-b"), ok));
        let t = text(&metrics);
        assert_eq!(sample(&t, &stamp), Some(at), "{t}");
        recorder.apply(ProbeEvent::ForgetPath(path("node-b")));
        assert_eq!(
            sample(&text(&metrics), &stamp),
            None,
            "it goes with the path"
        );
    }

    #[test]
    fn each_path_shows_its_planned_interval_last_attempt_and_failures_since_its_last_success() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
        let key = |peer: &str| ("mlx5_0".to_owned(), peer.to_owned());
        recorder.apply(ProbeEvent::Selection(
            [(key("node-b"), true), (key("node-c"), false)].into(),
        ));
        recorder.apply(ProbeEvent::Intervals(vec![
            (key("node-b"), Duration::from_secs_f64(423.5)),
            (key("node-c"), Duration::from_secs(600)),
        ]));
        let interval = format!("rdma_probe_path_interval_seconds{B}");
        let last_attempt = format!("rdma_probe_last_attempt_timestamp_seconds{B}");
        let failures = format!("rdma_probe_consecutive_failures{B}");
        assert_eq!(sample(&text(&metrics), &interval), None, "no path yet");

        // From the first attempt: the interval, and no failure; no attempt has ended yet.
        recorder.apply(ProbeEvent::Attempt(path("node-b")));
        let t = text(&metrics);
        assert_eq!(sample(&t, &interval), Some(423.5), "{t}");
        assert_eq!(sample(&t, &failures), Some(0.0));
        assert_eq!(sample(&t, &last_attempt), None);

        // Failures count up and stamp the attempt; deferrals are not attempts.
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Timeout),
        ));
        let mut second = failure(ErrorReason::Connect);
        second.at_unix_seconds += 60.0;
        recorder.apply(ProbeEvent::completed(path("node-b"), second));
        let mut busy = failure(ErrorReason::Connect);
        busy.result = ProbeResult::Deferred {
            reason: DeferReason::Busy,
        };
        busy.at_unix_seconds += 90.0;
        recorder.apply(ProbeEvent::completed(path("node-b"), busy));
        recorder.apply(ProbeEvent::Deferred(path("node-b"), DeferReason::Budget));
        let t = text(&metrics);
        assert_eq!(sample(&t, &failures), Some(2.0), "{t}");
        assert_eq!(sample(&t, &last_attempt), Some(1_700_000_120.0));
        // A success: back to 0, stamped.
        let mut ok = success(1e9);
        ok.at_unix_seconds = 1_700_000_200.0;
        recorder.apply(ProbeEvent::completed(path("node-b"), ok));
        let t = text(&metrics);
        assert_eq!(sample(&t, &failures), Some(0.0));
        assert_eq!(sample(&t, &last_attempt), Some(1_700_000_200.0));
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Timeout),
        ));
        assert_eq!(sample(&text(&metrics), &failures), Some(1.0));

        // The stretch moved: the new plan shows at once.
        recorder.apply(ProbeEvent::Intervals(vec![(
            key("node-b"),
            Duration::from_secs(500),
        )]));
        assert_eq!(sample(&text(&metrics), &interval), Some(500.0));

        // A path whose labels move (the peer answered with its device) has its interval under
        // the new labels from their first result.
        let unknown = PathLabels {
            peer_device: "unknown".into(),
            ..path("node-c")
        };
        recorder.apply(ProbeEvent::Attempt(unknown.clone()));
        recorder.apply(ProbeEvent::ForgetPath(unknown));
        recorder.apply(ProbeEvent::completed(path("node-c"), success(1e9)));
        let c = r#"{device="mlx5_0",peer="node-c",peer_device="mlx5_0"}"#;
        let t = text(&metrics);
        assert_eq!(
            sample(&t, &format!("rdma_probe_path_interval_seconds{c}")),
            Some(600.0),
            "{t}"
        );
        assert!(!t.contains(r#"peer_device="unknown""#), "{t}");

        // Rotated out of the selection but still on /metrics: node-c keeps what it was last
        // planned at, whatever the others are told.
        recorder.apply(ProbeEvent::Selection([(key("node-b"), true)].into()));
        recorder.apply(ProbeEvent::Intervals(vec![(
            key("node-b"),
            Duration::from_secs(450),
        )]));
        let t = text(&metrics);
        assert_eq!(
            sample(&t, &format!("rdma_probe_path_interval_seconds{c}")),
            Some(600.0),
            "{t}"
        );
        assert_eq!(sample(&t, &interval), Some(450.0));

        // All three go with the path.
        recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
        let t = text(&metrics);
        for family in [
            "rdma_probe_path_interval_seconds{",
            "rdma_probe_last_attempt_timestamp_seconds{",
            "rdma_probe_consecutive_failures{",
        ] {
            assert!(!t.contains(family), "{t}");
        }
    }

    #[test]
    fn prober_outcomes_map_to_records() {
        let report = BurstReport {
            bytes: 1000,
            messages: 10,
            completions: 10,
            elapsed: std::time::Duration::from_millis(500),
            bandwidth_bytes_per_second: 2000.0,
            message_rate_per_second: 20.0,
            min_window_bandwidth_bytes_per_second: 1500.0,
            window: std::time::Duration::from_millis(10),
            completion_gap_max: std::time::Duration::from_millis(30),
            cpu_seconds: None,
            per_qp_bandwidth_min_bytes_per_second: None,
            per_qp_bandwidth_max_bytes_per_second: None,
            per_qp_bandwidth_bytes_per_second: Vec::new(),
        };
        let ok = ProbeOutcome {
            report: Some(report.clone()),
            setup_seconds: Some(0.3),
            new_session: false,
            target_bandwidth_bytes_per_second: Some(4000.0),
            ..ProbeOutcome::default()
        };
        let record = ProbeRecord::from_outcome(&ok, 1.0);
        assert!(
            matches!(record.result, ProbeResult::Success { figures } if figures.bandwidth_bytes_per_second == 2000.0 && figures.completion_gap_max_seconds == 0.03)
        );
        assert_eq!(record.setup_seconds, None, "a warm burst paid no setup");
        let slow = ProbeOutcome {
            report: Some(report),
            error: Some(ErrorReason::Timeout),
            message: Some("deadline".into()),
            new_session: true,
            setup_seconds: Some(0.3),
            ..ProbeOutcome::default()
        };
        let record = ProbeRecord::from_outcome(&slow, 2.0);
        assert!(matches!(
            record.result,
            ProbeResult::Failure {
                reason: ErrorReason::Timeout,
                figures: Some(_),
                ..
            }
        ));
        assert_eq!(record.setup_seconds, Some(0.3));
        let busy = ProbeOutcome {
            deferred: Some("busy".into()),
            ..ProbeOutcome::default()
        };
        assert!(matches!(
            ProbeRecord::from_outcome(&busy, 3.0).result,
            ProbeResult::Deferred {
                reason: DeferReason::Busy
            }
        ));
    }

    #[test]
    fn a_responder_only_process_has_no_probe_families() {
        let text = Metrics::new().encode(Format::PrometheusText).unwrap();
        assert!(!text.contains("rdma_probe_config_reload_success"), "{text}");
        assert!(!text.contains("rdma_probe_consecutive_failures"), "{text}");
    }

    #[test]
    fn deferrals_are_counted_apart_from_failures() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let busy = ProbeRecord {
            result: ProbeResult::Deferred {
                reason: DeferReason::Busy,
            },
            kind: BurstKind::Paced,
            target_bytes_per_second: None,
            setup_seconds: None,
            at_unix_seconds: 1.0,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        };
        recorder.apply(ProbeEvent::completed(path("node-b"), busy));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let deferred = r#"rdma_probe_deferred_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",reason="busy"}"#;
        assert_eq!(sample(&text, deferred), Some(1.0));
        assert!(!text.contains("rdma_probe_runs_total{"), "{text}");
        assert!(!text.contains("rdma_probe_errors_total{"), "{text}");
    }

    #[test]
    fn a_failed_burst_with_figures_reports_what_completed() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let slow = ProbeRecord {
            result: ProbeResult::Failure {
                reason: ErrorReason::Timeout,
                message: "deadline".into(),
                figures: Some(figures(2.5e5)),
            },
            kind: BurstKind::Paced,
            target_bytes_per_second: Some(7.5e5),
            setup_seconds: None,
            at_unix_seconds: 5.0,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        };
        recorder.apply(ProbeEvent::completed(path("node-b"), slow));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(
            sample(
                &text,
                &format!("rdma_probe_bandwidth_bytes_per_second{PACED}")
            ),
            Some(2.5e5)
        );
        assert_eq!(
            sample(
                &text,
                &format!("rdma_probe_target_bandwidth_bytes_per_second{PACED}")
            ),
            Some(7.5e5)
        );
        assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
    }

    #[test]
    fn the_series_budget_sheds_traffic_then_derived_series_then_evicts_the_oldest_sampled_path() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let at = |s: u64| Duration::from_secs(1_700_000_000 + s);
        recorder.apply_at(
            ProbeEvent::SeriesBudget {
                limit: 45,
                ttl: Duration::from_secs(600),
            },
            at(0),
        );
        let selected = |peers: &[(&str, bool)]| {
            ProbeEvent::Selection(
                peers
                    .iter()
                    .map(|(p, preferred)| (("mlx5_0".to_owned(), (*p).to_owned()), *preferred))
                    .collect(),
            )
        };
        recorder.apply_at(
            selected(&[
                ("a", true),
                ("b", true),
                ("c", false),
                ("d", false),
                ("e", false),
            ]),
            at(0),
        );
        let peer = |name: &str| vec![("peer".to_owned(), name.to_owned())];
        recorder.apply_at(
            ProbeEvent::Info(InfoLabels {
                node: vec![("node".into(), "n".into())],
                peers: ["a", "b", "c", "d", "e", "f"]
                    .iter()
                    .map(|p| peer(p))
                    .collect(),
            }),
            at(0),
        );
        recorder.apply_at(
            ProbeEvent::Intervals(
                ["a", "b", "c", "d", "e"]
                    .iter()
                    .map(|p| {
                        (
                            ("mlx5_0".to_owned(), (*p).to_owned()),
                            Duration::from_secs(60),
                        )
                    })
                    .collect(),
            ),
            at(0),
        );
        // A healthy path: 10 series of its own (success, 4 paced gauges, runs, last success,
        // interval, last attempt, consecutive failures), 4 derived (message rate, setup, bytes,
        // messages) and 2 of port traffic.
        let healthy = || {
            let mut r = success(1e9);
            r.counters = vec![
                CounterRecord::new(Side::Local, "port_xmit_data", 100).unwrap(),
                CounterRecord::new(Side::Remote, "port_rcv_data", 100).unwrap(),
            ];
            r
        };
        let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
        for (i, p) in ["a", "b"].iter().enumerate() {
            recorder.apply_at(ProbeEvent::completed(path(p), healthy()), at(1 + i as u64));
        }
        let t = text(&metrics);
        assert_eq!(sample(&t, "rdma_probe_path_series"), Some(32.0));
        assert_eq!(sample(&t, "rdma_probe_path_series_budget"), Some(45.0));
        assert!(
            !t.contains(r#"peer_info{peer="f"}"#),
            "only selected peers: {t}"
        );
        assert!(t.contains(r#"peer_info{peer="d"}"#), "{t}");

        // c does not fit (48): the port traffic goes (28 + 14 = 42).
        recorder.apply_at(ProbeEvent::completed(path("c"), healthy()), at(3));
        let t = text(&metrics);
        assert!(!t.contains("rdma_probe_port_increase_total{"), "{t}");
        assert!(t.contains("rdma_probe_message_rate_per_second{"), "{t}");
        assert_eq!(sample(&t, "rdma_probe_path_series"), Some(42.0));
        assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(1.0));
        // d does not fit (56): the derived series go (4 × 10 = 40).
        recorder.apply_at(ProbeEvent::completed(path("d"), healthy()), at(4));
        let t = text(&metrics);
        assert!(!t.contains("rdma_probe_message_rate_per_second{"), "{t}");
        assert!(!t.contains("rdma_probe_bytes_total{"), "{t}");
        assert!(!t.contains("rdma_probe_setup_seconds{"), "{t}");
        assert_eq!(sample(&t, "rdma_probe_path_series"), Some(40.0));
        assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(2.0));
        assert_eq!(
            sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
            Some(0.0)
        );
        // e does not fit (50): the oldest sampled path, c, goes; not a or b.
        recorder.apply_at(ProbeEvent::completed(path("e"), healthy()), at(10));
        let t = text(&metrics);
        assert!(
            !t.contains(r#"rdma_probe_success{device="mlx5_0",peer="c""#),
            "c evicted: {t}"
        );
        assert!(t.contains(r#"peer_info{peer="c"}"#), "c is still selected");
        assert!(t.contains(r#"rdma_probe_success{device="mlx5_0",peer="a""#));
        assert!(t.contains(r#"rdma_probe_success{device="mlx5_0",peer="e""#));
        assert_eq!(sample(&t, "rdma_probe_path_series"), Some(40.0));
        assert_eq!(
            sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
            Some(1.0)
        );
        // Shed until a reload: a new result brings nothing shed back.
        recorder.apply_at(ProbeEvent::completed(path("a"), healthy()), at(20));
        let t = text(&metrics);
        assert!(!t.contains("rdma_probe_port_increase_total{"), "{t}");
        assert!(!t.contains("rdma_probe_message_rate_per_second{"), "{t}");

        // The next round selects only a and b: d and e stay until the TTL after their last
        // probe.
        recorder.apply_at(selected(&[("a", true), ("b", true)]), at(600));
        recorder.expire(at(600));
        let t = text(&metrics);
        assert!(t.contains(r#"peer="d""#), "{t}");
        recorder.expire(at(611));
        let t = text(&metrics);
        assert!(!t.contains(r#"peer="d""#), "expired, peer_info too: {t}");
        assert!(!t.contains(r#"peer="e""#), "{t}");
        assert!(
            t.contains(r#"rdma_probe_success{device="mlx5_0",peer="b""#),
            "{t}"
        );
        assert_eq!(sample(&t, "rdma_probe_path_series"), Some(20.0));
        assert_eq!(
            sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
            Some(1.0),
            "expiry is not a drop"
        );
        // A reload resets what was shed.
        recorder.apply_at(
            ProbeEvent::SeriesBudget {
                limit: 4500,
                ttl: Duration::from_secs(600),
            },
            at(700),
        );
        recorder.apply_at(ProbeEvent::completed(path("a"), healthy()), at(701));
        let t = text(&metrics);
        assert!(t.contains("rdma_probe_port_increase_total{"), "{t}");
        assert!(t.contains("rdma_probe_message_rate_per_second{"), "{t}");
        assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(0.0));
    }

    #[test]
    fn capacity_bursts_keep_their_own_gauges_beside_the_paced_ones() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        recorder.apply(ProbeEvent::completed(path("node-b"), success(2.5e6)));
        let mut capacity = success(9e8);
        capacity.kind = BurstKind::Capacity;
        capacity.target_bytes_per_second = Some(1.25e9);
        recorder.apply(ProbeEvent::completed(path("node-b"), capacity));
        // A paced burst after the capacity burst changes only the paced gauges.
        let mut paced = success(2.4e6);
        paced.target_bytes_per_second = Some(2.5e6);
        recorder.apply(ProbeEvent::completed(path("node-b"), paced));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        const CAPACITY: &str =
            r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0",kind="capacity"}"#;
        let value = |family: &str, labels: &str| sample(&text, &format!("{family}{labels}"));
        let bandwidth = "rdma_probe_bandwidth_bytes_per_second";
        let target = "rdma_probe_target_bandwidth_bytes_per_second";
        assert_eq!(value(bandwidth, PACED), Some(2.4e6), "{text}");
        assert_eq!(value(target, PACED), Some(2.5e6), "{text}");
        assert_eq!(value(bandwidth, CAPACITY), Some(9e8), "{text}");
        assert_eq!(value(target, CAPACITY), Some(1.25e9), "{text}");
        assert_eq!(
            value("rdma_probe_bandwidth_min_window_bytes_per_second", CAPACITY),
            Some(9e8 * 0.9)
        );
        // Counters add up both kinds; the path's success and run counts too.
        let runs = r#"rdma_probe_runs_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",result="success"}"#;
        assert_eq!(sample(&text, runs), Some(3.0));
        assert_eq!(
            sample(&text, &format!("rdma_probe_bytes_total{B}")),
            Some(3.0 * 65536.0 * 100.0)
        );
        // A removed path loses the series of both kinds.
        recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(!text.contains("peer=\"node-b\""), "{text}");
    }

    #[test]
    fn bursts_over_several_qps_report_their_slowest_and_fastest_qp() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let mut four_qps = success(4e6);
        if let ProbeResult::Success { figures } = &mut four_qps.result {
            figures.qp_bandwidth_min_bytes_per_second = Some(1e5);
            figures.qp_bandwidth_max_bytes_per_second = Some(1.3e6);
        }
        recorder.apply(ProbeEvent::completed(path("node-b"), four_qps));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let min = format!("rdma_probe_qp_bandwidth_min_bytes_per_second{PACED}");
        let max = format!("rdma_probe_qp_bandwidth_max_bytes_per_second{PACED}");
        assert_eq!(sample(&text, &min), Some(1e5), "{text}");
        assert_eq!(sample(&text, &max), Some(1.3e6), "{text}");
        // A reload down to one QP: its bursts have no per-QP figures, and the old ones go.
        recorder.apply(ProbeEvent::completed(path("node-b"), success(4e6)));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(sample(&text, &min), None, "{text}");
        assert_eq!(sample(&text, &max), None, "{text}");
    }

    #[test]
    fn paths_removed_by_a_reload_lose_every_series() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
        recorder.apply(ProbeEvent::completed(
            path("node-b"),
            failure(ErrorReason::Timeout),
        ));
        recorder.apply(ProbeEvent::completed(path("node-c"), success(2e9)));
        recorder.apply(ProbeEvent::RetainPeers(["node-c".to_owned()].into()));
        recorder.apply(ProbeEvent::ConfigLoaded {
            ok: true,
            at_unix_seconds: 9.0,
        });
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(!text.contains(r#"peer="node-b""#), "{text}");
        assert!(text.contains(r#"peer="node-c""#), "{text}");
        assert_eq!(sample(&text, "rdma_probe_config_reload_success"), Some(1.0));
        assert!(!recorder
            .snapshot()
            .read()
            .unwrap()
            .contains_key(&path("node-b")));
    }

    #[test]
    fn port_counter_increases_add_up_per_side_and_go_with_the_path() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let outcome = ProbeOutcome {
            report: None,
            error: Some(ErrorReason::WcRetryExceeded),
            local_counters: vec![
                ("completer_retry_err".into(), 3),
                ("retry_exceeded_err".into(), 1),
            ],
            remote_counters: vec![
                ("duplicate_request".into(), 2),
                ("not_on_the_allowlist".into(), 7),
                ("out_of_seq_request".into(), 0),
            ],
            ..ProbeOutcome::default()
        };
        let record = ProbeRecord::from_outcome(&outcome, 1.0);
        assert_eq!(record.counters.len(), 3, "{:?}", record.counters);
        recorder.apply(ProbeEvent::completed(path("node-b"), record.clone()));
        recorder.apply(ProbeEvent::completed(path("node-b"), record));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        // Each series names the allowlist's kind of its counter: one name whatever the driver.
        let series = |side: &str, counter: &str, kind: &str| {
            format!(
                r#"rdma_probe_port_increase_total{{device="mlx5_0",peer="node-b",peer_device="mlx5_0",side="{side}",counter="{counter}",counter_kind="{kind}"}}"#
            )
        };
        assert_eq!(
            sample(&text, &series("local", "completer_retry_err", "retransmit")),
            Some(6.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                &series("local", "retry_exceeded_err", "retry_exceeded")
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, &series("remote", "duplicate_request", "duplicate")),
            Some(4.0)
        );
        assert!(!text.contains("not_on_the_allowlist"), "{text}");
        assert!(
            !text.contains("out_of_seq_request"),
            "a zero creates no series: {text}"
        );
        recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(!text.contains("rdma_probe_port_increase_total{"), "{text}");
    }

    #[test]
    fn other_traffic_adds_up_per_side_and_direction_zero_included() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let outcome = ProbeOutcome {
            report: Some(crate::burst::BurstStats::new(1, Duration::from_millis(10)).finish()),
            local_other_traffic: Some(OtherTraffic {
                transmit_bytes: Some(0),
                receive_bytes: Some(1_500_000),
            }),
            // The responder's port told only what it received.
            remote_other_traffic: Some(OtherTraffic {
                transmit_bytes: None,
                receive_bytes: Some(0),
            }),
            ..ProbeOutcome::default()
        };
        let record = ProbeRecord::from_outcome(&outcome, 1.0);
        assert_eq!(record.other_traffic.len(), 3, "{:?}", record.other_traffic);
        recorder.apply(ProbeEvent::completed(path("node-b"), record.clone()));
        recorder.apply(ProbeEvent::completed(path("node-b"), record));
        // A burst whose ports gave no byte counters adds nothing.
        recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let series = |side: &str, direction: &str| {
            format!(
                r#"rdma_probe_port_other_traffic_bytes_total{{device="mlx5_0",peer="node-b",peer_device="mlx5_0",side="{side}",direction="{direction}"}}"#
            )
        };
        assert_eq!(
            sample(&text, &series("local", "receive")),
            Some(3e6),
            "{text}"
        );
        assert_eq!(
            sample(&text, &series("local", "transmit")),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            sample(&text, &series("remote", "receive")),
            Some(0.0),
            "{text}"
        );
        assert_eq!(sample(&text, &series("remote", "transmit")), None, "{text}");
        recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(
            !text.contains("rdma_probe_port_other_traffic_bytes_total{"),
            "{text}"
        );
    }

    #[test]
    fn peer_info_gains_what_the_peer_said_and_never_the_path_labels() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let peer = "10.0.0.5";
        recorder.apply(ProbeEvent::Info(InfoLabels {
            node: vec![("node".into(), "n".into())],
            peers: vec![vec![("peer".into(), peer.into())]],
        }));
        recorder.apply(ProbeEvent::Selection(
            [(("mlx5_0".to_owned(), peer.to_owned()), true)].into(),
        ));
        let path = PathLabels {
            device: "mlx5_0".into(),
            peer: peer.into(),
            peer_device: "mlx5_0".into(),
        };
        recorder.apply(ProbeEvent::completed(path.clone(), success(1e9)));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        // Never reached (or before its first answer): the peer label alone.
        assert!(
            text.contains(r#"rdma_probe_peer_info{peer="10.0.0.5"} 1"#),
            "{text}"
        );
        let told = vec![
            ("peer".to_owned(), peer.to_owned()),
            ("peer_node".to_owned(), "node5".to_owned()),
            ("tor".to_owned(), "t2".to_owned()),
        ];
        recorder.apply(ProbeEvent::PeerLabels {
            peer: peer.into(),
            labels: told,
        });
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(
            text.contains(r#"rdma_probe_peer_info{peer="10.0.0.5",peer_node="node5",tor="t2"} 1"#),
            "{text}"
        );
        assert_eq!(
            text.matches("rdma_probe_peer_info{").count(),
            1,
            "the old series went: {text}"
        );
        // The path keeps its labels: the address, not the name.
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_success{device="mlx5_0",peer="10.0.0.5",peer_device="mlx5_0"}"#
            ),
            Some(1.0)
        );
        assert!(!text.contains(r#"peer="node5""#), "{text}");
        // A peer that is not a candidate (removed by a reload) gets no peer_info from a late word.
        recorder.apply(ProbeEvent::PeerLabels {
            peer: "gone".into(),
            labels: vec![("peer".into(), "gone".into())],
        });
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(!text.contains(r#"peer="gone""#), "{text}");
    }

    #[test]
    fn skipped_paths_are_counted_per_device_and_reason() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        recorder.apply(ProbeEvent::SkippedPaths(vec![
            ("mlx5_0".into(), "no_rail", 3),
            ("mlx5_0".into(), "itself", 0),
        ]));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_schedule_skipped_paths{device="mlx5_0",reason="no_rail"}"#
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_schedule_skipped_paths{device="mlx5_0",reason="itself"}"#
            ),
            Some(0.0)
        );
    }
}
