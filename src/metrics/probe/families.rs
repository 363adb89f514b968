//! The probe families of the metric contract (docs/metrics.md) and their label sets, registered
//! once; only the recorder writes them.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;

use super::judged::JudgedFamilies;
use super::{Direction, Side};
use crate::metrics::ping::PingFamilies;
use crate::metrics::port::PortFamilies;
use crate::metrics::PREFIX;
use crate::port::CounterKind;
use crate::prober::BurstKind;

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
pub(super) struct KindLabels {
    pub(super) device: String,
    pub(super) peer: String,
    pub(super) peer_device: String,
    pub(super) kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) device: String,
    pub(super) peer: String,
    pub(super) peer_device: String,
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CounterLabels {
    pub(super) device: String,
    pub(super) peer: String,
    pub(super) peer_device: String,
    pub(super) side: &'static str,
    pub(super) counter: &'static str,
    pub(super) counter_kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct TrafficLabels {
    pub(super) device: String,
    pub(super) peer: String,
    pub(super) peer_device: String,
    pub(super) side: &'static str,
    pub(super) direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) device: String,
    pub(super) peer: String,
    pub(super) peer_device: String,
    pub(super) reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DeviceLabels {
    pub(super) device: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SkippedLabels {
    pub(super) device: String,
    pub(super) reason: &'static str,
}

/// The families, registered once.
#[derive(Debug, Clone)]
pub struct ProbeFamilies {
    pub(super) success: Family<PathLabels, Gauge>,
    pub(super) bandwidth: Family<KindLabels, FloatGauge>,
    pub(super) min_window: Family<KindLabels, FloatGauge>,
    pub(super) gap_max: Family<KindLabels, FloatGauge>,
    pub(super) target: Family<KindLabels, FloatGauge>,
    pub(super) message_rate: Family<KindLabels, FloatGauge>,
    pub(super) qp_min: Family<KindLabels, FloatGauge>,
    pub(super) qp_max: Family<KindLabels, FloatGauge>,
    pub(super) bytes: Family<PathLabels, Counter>,
    pub(super) messages: Family<PathLabels, Counter>,
    pub(super) runs: Family<ResultLabels, Counter>,
    pub(super) errors: Family<ReasonLabels, Counter>,
    pub(super) deferred: Family<ReasonLabels, Counter>,
    pub(super) port_counters: Family<CounterLabels, Counter>,
    pub(super) other_traffic: Family<TrafficLabels, Counter>,
    pub(super) setup: Family<PathLabels, FloatGauge>,
    pub(super) last_success: Family<PathLabels, FloatGauge>,
    pub(super) interval: Family<PathLabels, FloatGauge>,
    pub(super) last_attempt: Family<PathLabels, FloatGauge>,
    pub(super) consecutive_failures: Family<PathLabels, Gauge>,
    pub(super) last_validation_failure: Family<PathLabels, FloatGauge>,
    pub(super) reload_success: Gauge,
    pub(super) last_reload: FloatGauge,
    pub(super) node_info: Family<Vec<(String, String)>, Gauge>,
    pub(super) peer_info: Family<Vec<(String, String)>, Gauge>,
    pub(super) schedule_paths: Family<DeviceLabels, Gauge>,
    pub(super) schedule_skipped: Family<SkippedLabels, Gauge>,
    pub(super) path_skipped: Family<ReasonLabels, Gauge>,
    pub(super) duty_cycle: Family<DeviceLabels, FloatGauge>,
    pub(super) duty_cycle_budget: FloatGauge,
    pub(super) demand: Family<DeviceLabels, FloatGauge>,
    pub(super) stretch: Family<DeviceLabels, FloatGauge>,
    pub(super) path_series: Gauge,
    pub(super) path_series_budget: Gauge,
    pub(super) budget_dropped: Counter,
    pub(super) budget_expired_early: Counter,
    pub(super) shed_level: Gauge,
    pub(super) ports: PortFamilies,
    pub(super) pings: PingFamilies,
    pub(super) judged: JudgedFamilies,
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
            path_skipped: Family::default(),
            duty_cycle: Family::default(),
            duty_cycle_budget: FloatGauge::default(),
            demand: Family::default(),
            stretch: Family::default(),
            path_series: Gauge::default(),
            path_series_budget: Gauge::default(),
            budget_dropped: Counter::default(),
            budget_expired_early: Counter::default(),
            shed_level: Gauge::default(),
            ports: PortFamilies::register(registry),
            pings: PingFamilies::register(registry),
            judged: JudgedFamilies::register(registry),
        };
        families.register_paths(registry);
        families.register_node(registry);
        families
    }

    /// The per-path families, in the order `/metrics` lists them.
    fn register_paths(&self, registry: &mut Registry) {
        let f = self;
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
    }

    /// The node's families: config reloads, static labels, the schedule and the series budget.
    fn register_node(&self, registry: &mut Registry) {
        let f = self;
        macro_rules! add {
            ($name:literal, $help:literal, $metric:expr) => {
                registry.register(format!("{PREFIX}_{}", $name), $help, $metric)
            };
        }
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
            "path_skipped",
            "1 while this path is not probed because of what its peer reported (reason as in \
             schedule_skipped_paths); its measurement series are off /metrics meanwhile",
            f.path_skipped.clone()
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
            "Per-path series on /metrics now, the pings' and the judged families' included: what \
             the series budget counts",
            f.path_series.clone()
        );
        add!(
            "path_series_budget",
            "Most per-path series this node keeps on /metrics",
            f.path_series_budget.clone()
        );
        add!(
            "series_budget_dropped_paths",
            "Paths kept off /metrics because the series budget was full, or taken off it while \
             in the selection and less than half the series TTL after their last probe",
            f.budget_dropped.clone()
        );
        add!(
            "series_budget_expired_early_paths",
            "Paths taken off /metrics a little before their TTL to make room under the series \
             budget (out of the selection, or on /metrics for half the TTL already): not a loss",
            f.budget_expired_early.clone()
        );
        add!(
            "series_budget_shed_level",
            "What the series budget keeps off /metrics for every path: 0 nothing, 1 the port \
             traffic (bytes and packets counters, other traffic), 2 also the derived series \
             (message rates, setup time, byte and message totals)",
            f.shed_level.clone()
        );
    }
}

pub(super) fn kind_labels(path: &PathLabels, kind: BurstKind) -> KindLabels {
    KindLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        kind: kind.as_str(),
    }
}

pub(super) fn result_labels(path: &PathLabels, result: &'static str) -> ResultLabels {
    ResultLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        result,
    }
}

pub(super) fn counter_labels(
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

pub(super) fn traffic_labels(path: &PathLabels, side: Side, direction: Direction) -> TrafficLabels {
    TrafficLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        side: side.as_str(),
        direction: direction.as_str(),
    }
}

pub(super) fn reason_labels(path: &PathLabels, reason: &'static str) -> ReasonLabels {
    ReasonLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        reason,
    }
}
