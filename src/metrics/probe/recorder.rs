//! [`ProbeRecorder`]: the one task that writes the probe families, applying events one at a
//! time, and the series budget's bookkeeping of which series each path has.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::event::label;
use super::families::{
    counter_labels, kind_labels, reason_labels, result_labels, traffic_labels, DeviceLabels,
    SkippedLabels,
};
use super::judged::JudgedPaths;
use super::{
    BurstFigures, DeferReason, DeviceScheduleFigures, Direction, InfoLabels, PathLabels,
    PathSnapshot, PathStatus, ProbeEvent, ProbeFamilies, ProbeRecord, ProbeResult, Side,
};
use crate::metrics::budget::{PathSeries, SeriesBudget, DEFAULT_SERIES_BUDGET, DEFAULT_SERIES_TTL};
use crate::metrics::ping::PingSeries;
use crate::metrics::port::PortSeries;
use crate::ping::PingReports;
use crate::port::CounterKind;
use crate::prober::BurstKind;
use crate::reason::ErrorReason;

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

/// Whether `path` is in `selection` (device, peer) now.
fn selected(selection: &BTreeMap<(String, String), bool>, path: &PathLabels) -> bool {
    selection.contains_key(&(path.device.clone(), path.peer.clone()))
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
    ping_series: PingSeries,
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
    judged: JudgedPaths,
}

impl ProbeRecorder {
    pub fn new(families: ProbeFamilies) -> Self {
        families
            .path_series_budget
            .set(i64::try_from(DEFAULT_SERIES_BUDGET).unwrap_or(i64::MAX));
        let judged = JudgedPaths::new(families.judged.clone());
        ProbeRecorder {
            families,
            series: BTreeMap::new(),
            port_series: PortSeries::default(),
            ping_series: PingSeries::default(),
            snapshot: PathSnapshot::default(),
            budget: SeriesBudget::new(DEFAULT_SERIES_BUDGET, DEFAULT_SERIES_TTL),
            selection: BTreeMap::new(),
            planned: BTreeMap::new(),
            peer_labels: BTreeMap::new(),
            shown_peers: BTreeSet::new(),
            warned: false,
            judged,
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
                self.judged.on_probe(&path, &record);
                self.on_completed(path.clone(), *record);
                self.account(&path, now);
                self.show_judged(now);
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
                self.judged.retain_peers(&peers);
                self.peer_labels.retain(|p, _| peers.contains(p));
                self.refresh_peer_info();
                self.show_judged(now);
            }
            ProbeEvent::ForgetPath(path) => {
                self.judged.forget(&path);
                self.remove_path(&path);
                self.refresh_peer_info();
                self.show_judged(now);
            }
            ProbeEvent::Selection(selection) => {
                self.planned.retain(|device, peers| {
                    peers.retain(|peer, _| selection.contains_key(&(device.clone(), peer.clone())));
                    !peers.is_empty()
                });
                self.selection = selection;
                self.refresh_peer_info();
            }
            ProbeEvent::Intervals(intervals) => {
                self.on_intervals(intervals);
                self.show_judged(now);
            }
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
            ProbeEvent::Info(info) => {
                self.judged.set_labels(&info.node, &info.peers);
                self.on_info(info);
                self.show_judged(now);
            }
            ProbeEvent::PeerLabels { peer, labels } => {
                self.judged.set_peer_labels(&peer, &labels);
                self.on_peer_labels(peer, labels);
                self.show_judged(now);
            }
            ProbeEvent::Judge(criteria) => {
                self.judged.set_criteria(criteria);
                self.show_judged(now);
            }
            ProbeEvent::SkippedPaths { per_device, paths } => {
                for (device, reason, n) in per_device {
                    self.families
                        .schedule_skipped
                        .get_or_create(&SkippedLabels { device, reason })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                self.families.path_skipped.clear();
                for (path, reason) in paths {
                    self.families
                        .path_skipped
                        .get_or_create(&reason_labels(&path, reason))
                        .set(1);
                }
            }
            ProbeEvent::Schedule(figures) => self.on_schedule(figures),
            ProbeEvent::Ports(report) => self.port_series.apply(&self.families.ports, &report),
            ProbeEvent::Pings(reports) => {
                self.judged.on_pings(&reports, now.as_secs_f64());
                self.on_pings(&reports);
                self.show_judged(now);
            }
        }
    }

    /// A ping engine's report, shown in the room the bursts' series and `peer_info` leave in
    /// the budget.
    fn on_pings(&mut self, reports: &PingReports<PathLabels>) {
        let used = self.budget.series() + self.shown_peers.len() + self.judged.series();
        let room = self.budget.limit().saturating_sub(used);
        let budget = &self.budget;
        self.ping_series
            .apply(&self.families.pings, reports, room, |p| budget.contains(p));
        self.show_series_count();
    }

    /// The judged families at `now`, stale paths judged by their planned intervals.
    /// They count in the series budget: the paths get the rest.
    fn show_judged(&mut self, now: Duration) {
        let planned = &self.planned;
        self.judged.show(now.as_secs_f64(), |p| {
            planned.get(&p.device)?.get(&p.peer).copied()
        });
        self.budget.reserve(self.judged.series());
        self.show_series_count();
    }

    /// `rdma_probe_path_series`: the bursts' per-path series, the pings' and the judged
    /// families'.
    fn show_series_count(&self) {
        let series = self.budget.series() + self.ping_series.series() + self.judged.series();
        self.families
            .path_series
            .set(i64::try_from(series).unwrap_or(i64::MAX));
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
                let name = label(&labels, "peer")?.to_owned();
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
        let early_before = self.budget.expired_early();
        let selection = &self.selection;
        let admission = self
            .budget
            .record(path.clone(), now, preferred, series, |p| {
                selected(selection, p)
            });
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
        (self.families.budget_expired_early).inc_by(self.budget.expired_early() - early_before);
        let dropped = self.budget.dropped() - dropped_before;
        if dropped > 0 {
            self.families.budget_dropped.inc_by(dropped);
            if !self.warned {
                self.warned = true;
                tracing::warn!(
                    budget = self.budget.limit(),
                    path = ?path,
                    "series budget full: paths of the selection leave /metrics, sampled ones \
                     probed longest ago first (rdma_probe_series_budget_dropped_paths_total; \
                     logged once)"
                );
            }
        }
        if !admission.evicted.is_empty() || !admission.admitted {
            self.refresh_peer_info();
        }
        self.show_series_count();
    }

    /// Takes off `/metrics` the paths out of the selection not probed for the TTL.
    pub fn expire(&mut self, now: Duration) {
        let selection = &self.selection;
        let stale = self.budget.expire(now, |p| selected(selection, p));
        self.judged
            .expire(now.as_secs_f64(), self.budget.ttl(), |p| {
                selected(selection, p)
            });
        self.show_judged(now);
        if stale.is_empty() {
            return;
        }
        for path in &stale {
            self.remove_path(path);
        }
        self.refresh_peer_info();
        self.show_series_count();
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
            .or_insert_with(|| PathStatus::new(path));
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
        if let Some(status) = self.table().get_mut(&path) {
            status.record(record);
        }
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
        self.show_series_count();
    }

    fn table(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<PathLabels, PathStatus>> {
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
