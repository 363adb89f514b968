//! The [`Scheduler`]: per-path due times, one burst per local device, busy backoff, budget.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::budget::{nanos, secs_to_duration, stretch, BurstWindow, Gate, MAX_GAP};
use super::path::{
    Attempt, Dispatch, Outcome, OutcomeKind, PathKey, PathPlan, PathStats, ScheduleError,
    ScheduleKey,
};
use super::rng::{device_rng, SplitMix64};

/// Default share of a device's wall time that bursts may take.
pub const DEFAULT_DUTY_CYCLE: f64 = 0.05;
/// Default idle time a device banks for later bursts (3 s of bursting at 5%).
pub const DEFAULT_CREDIT_WINDOW: Duration = Duration::from_secs(60);
/// Default window of the measured duty cycle ([`DeviceStats::duty_cycle_used`]).
pub const DEFAULT_MEASURE_WINDOW: Duration = Duration::from_secs(600);
/// Default first wait after a `busy` answer; it doubles on each further one.
pub const DEFAULT_BUSY_BACKOFF: Duration = Duration::from_secs(1);
/// Default cap of the busy backoff.
pub const DEFAULT_BUSY_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Weight of the newest burst in a path's moving-average cost.
const COST_EWMA_WEIGHT: f64 = 0.25;

/// Scheduler settings (per node; the duty cycle applies to each local device separately).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleConfig {
    /// Share of wall time a device may spend bursting, `0 < duty_cycle ≤ 1`.
    pub duty_cycle: f64,
    /// Longest idle time banked as credit: after a quiet spell up to
    /// `duty_cycle × credit_window` of bursts may run back to back.
    pub credit_window: Duration,
    /// Window over which [`DeviceStats::duty_cycle_used`] is measured.
    pub measure_window: Duration,
    /// First wait after a `busy` answer.
    pub busy_backoff: Duration,
    /// Cap of the doubling busy backoff.
    pub busy_backoff_max: Duration,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            duty_cycle: DEFAULT_DUTY_CYCLE,
            credit_window: DEFAULT_CREDIT_WINDOW,
            measure_window: DEFAULT_MEASURE_WINDOW,
            busy_backoff: DEFAULT_BUSY_BACKOFF,
            busy_backoff_max: DEFAULT_BUSY_BACKOFF_MAX,
        }
    }
}

impl ScheduleConfig {
    /// The defaults with another duty cycle.
    pub fn with_duty_cycle(duty_cycle: f64) -> Self {
        ScheduleConfig {
            duty_cycle,
            ..ScheduleConfig::default()
        }
    }

    fn validate<K: ScheduleKey>(&self) -> Result<(), ScheduleError<K>> {
        if !(self.duty_cycle > 0.0 && self.duty_cycle <= 1.0) {
            return Err(ScheduleError::DutyCycle(self.duty_cycle));
        }
        for (name, value) in [
            ("measure_window", self.measure_window),
            ("busy_backoff", self.busy_backoff),
        ] {
            if value.is_zero() {
                return Err(ScheduleError::ZeroDuration { name, value });
            }
        }
        if self.busy_backoff_max < self.busy_backoff {
            return Err(ScheduleError::Backoff {
                initial: self.busy_backoff,
                max: self.busy_backoff_max,
            });
        }
        Ok(())
    }
}

/// What a device's budget looks like now, for the metrics and the status page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceStats {
    /// Paths of this device in the current set.
    pub paths: usize,
    /// A burst is running.
    pub running: bool,
    /// The configured duty cycle.
    pub duty_cycle_budget: f64,
    /// Share of the last measure window spent bursting (completed bursts; reads low during the
    /// first window). `rdma_probe_schedule_duty_cycle_ratio`.
    pub duty_cycle_used: f64,
    /// Share of wall time the paths want at their configured intervals: Σ cost / interval.
    pub demand: f64,
    /// Factor (≥ 1) applied to every interval of the device so the demand fits the budget.
    /// `rdma_probe_schedule_interval_stretch_ratio`.
    pub stretch_factor: f64,
    /// Bursts completed on this device (also of paths since removed).
    pub bursts: u64,
    /// Burst time charged to this device.
    pub burst_time: Duration,
    /// Dispatches held back by the budget.
    pub deferred_budget: u64,
    /// `busy` answers.
    pub deferred_busy: u64,
}

/// One path's schedule and counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathStatus {
    /// Earliest dispatch time (the device and budget permitting).
    pub next_due: Duration,
    /// A burst of this path is running.
    pub running: bool,
    /// Retrying after `busy` answers, until the regular probe at this time.
    pub retry_until: Option<Duration>,
    /// The interval now in force: the plan's, times the device's stretch.
    pub effective_interval: Duration,
    /// Moving average of the path's burst time (starts at the plan's expected burst).
    pub cost: Duration,
    pub stats: PathStats,
}

/// What [`Scheduler::completed`] did with a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The path's next due time was updated.
    Recorded,
    /// The path left the set while its burst ran: the device is free again and the burst time
    /// was charged, nothing else.
    PathGone,
    /// No burst of this path was running (a duplicate or stray report): ignored.
    NotRunning,
}

/// A path's plan, schedule and counters.
#[derive(Debug, Clone)]
struct PathState<K> {
    plan: PathPlan<K>,
    next_due: Duration,
    /// While retrying after `busy`: the time of the regular probe where retries give up.
    retry_until: Option<Duration>,
    /// Busy retries dispatched in the current interval: the next `busy` answer waits the initial
    /// backoff doubled this many times.
    retries: u32,
    /// Start of the path's running burst, if one runs.
    running: Option<Duration>,
    /// Moving average of burst time, seconds.
    cost: f64,
    stats: PathStats,
}

impl<K> PathState<K> {
    fn new(plan: PathPlan<K>) -> Self {
        PathState {
            cost: plan.expected_burst.as_secs_f64(),
            plan,
            next_due: Duration::ZERO,
            retry_until: None,
            retries: 0,
            running: None,
            stats: PathStats::default(),
        }
    }

    /// A new plan for the path (same key): its interval and jitter from now on; a new expected
    /// burst resets the cost estimate.
    fn set_plan(&mut self, plan: PathPlan<K>) {
        if plan.expected_burst != self.plan.expected_burst {
            self.cost = plan.expected_burst.as_secs_f64();
        }
        self.plan = plan;
    }

    fn interval_secs(&self) -> f64 {
        self.plan.interval.as_secs_f64()
    }

    /// `interval × stretch`.
    fn effective_interval(&self, stretch: f64) -> Duration {
        secs_to_duration(self.interval_secs() * stretch)
    }

    /// What the next `busy` answer waits: the initial backoff, doubled for each retry of this
    /// interval, up to the cap.
    fn backoff(&self, config: &ScheduleConfig) -> Duration {
        let doubled = 1u64.checked_shl(self.retries).unwrap_or(u64::MAX);
        Duration::from_nanos(
            nanos(config.busy_backoff)
                .saturating_mul(doubled)
                .min(nanos(config.busy_backoff_max)),
        )
    }

    /// Back to regular probes: no retry pending.
    fn end_retries(&mut self) {
        self.retry_until = None;
        self.retries = 0;
    }
}

#[derive(Debug, Clone)]
struct DeviceState<K> {
    paths: BTreeMap<K, PathState<K>>,
    /// `(next_due, key)` of every path without a running burst: the next path is the first.
    /// Kept in step with `paths` by every change of a due time or a running burst, so that a
    /// poll costs a lookup, not a scan.
    idle: BTreeSet<(Duration, K)>,
    /// Σ cost / interval over `paths` (see [`DeviceState::demand`]).
    demand: f64,
    /// The key of the running burst, possibly of a path that has since left the set.
    running: Option<K>,
    /// When the device last became idle (start, or the last completion).
    idle_since: Duration,
    /// Its phases and jitter: each device draws from its own generator.
    rng: SplitMix64,
    gate: Gate,
    window: BurstWindow,
    bursts: u64,
    burst_time: Duration,
    deferred_budget: u64,
    deferred_busy: u64,
}

impl<K: ScheduleKey> DeviceState<K> {
    fn new(now: Duration, config: &ScheduleConfig, rng: SplitMix64) -> Self {
        DeviceState {
            paths: BTreeMap::new(),
            idle: BTreeSet::new(),
            demand: 0.0,
            running: None,
            idle_since: now,
            rng,
            gate: Gate::new(now, config.credit_window),
            window: BurstWindow::new(config.measure_window),
            bursts: 0,
            burst_time: Duration::ZERO,
            deferred_budget: 0,
            deferred_busy: 0,
        }
    }

    /// Share of wall time the paths want: Σ cost / interval. Updated as costs change, and
    /// summed afresh whenever the path set changes.
    fn demand(&self) -> f64 {
        self.demand
    }

    fn sum_demand(&mut self) {
        self.demand = self
            .paths
            .values()
            .map(|p| p.cost / p.interval_secs())
            .sum();
    }

    /// Builds the index of idle paths afresh (the check of the one kept in step).
    #[cfg(test)]
    fn index_idle(&mut self) {
        self.idle = self
            .paths
            .iter()
            .filter(|(_, p)| p.running.is_none())
            .map(|(k, p)| (p.next_due, k.clone()))
            .collect();
    }

    /// The path that goes next: the most overdue idle one (ties: key order).
    fn next_path(&self) -> Option<(&K, Duration)> {
        self.idle.first().map(|(due, k)| (k, *due))
    }

    /// The earliest time this device may start its next burst, [`NEVER`] while one runs.
    fn ready_at(&self) -> Duration {
        if self.running.is_some() {
            return NEVER;
        }
        self.next_path()
            .map_or(NEVER, |(_, due)| due.max(self.gate.open_at()))
    }

    /// Starts the most overdue due path, if the gate is open and nothing runs.
    fn dispatch(&mut self, now: Duration) -> Option<Dispatch<K>> {
        if self.running.is_some() || !self.gate.is_open(now) {
            return None;
        }
        let (due, key) = self.idle.first().filter(|(due, _)| *due <= now).cloned()?;
        // Held back by the budget: the gate opened after the path was due and the device was
        // idle.
        let budget_deferred = self.gate.open_at() > due.max(self.idle_since);
        let p = self.paths.get_mut(&key)?;
        let attempt = match p.retry_until {
            Some(until) if now < until => {
                p.retries += 1;
                Attempt::BusyRetry(p.retries)
            }
            _ => {
                // Its regular probe came while it waited (if it was retrying): retries are over.
                p.end_retries();
                Attempt::Regular
            }
        };
        p.running = Some(now);
        p.stats.dispatched += 1;
        p.stats.last_start = Some(now);
        if budget_deferred {
            p.stats.deferred_budget += 1;
            self.deferred_budget += 1;
        }
        self.idle.pop_first();
        self.running = Some(key.clone());
        Some(Dispatch {
            key,
            attempt,
            due,
            budget_deferred,
        })
    }

    /// Charges the running burst of `key`, which ended at `now`, and reschedules its path.
    fn complete(
        &mut self,
        key: &K,
        outcome: Outcome,
        now: Duration,
        config: &ScheduleConfig,
    ) -> Completion {
        if self.running.as_ref() != Some(key) {
            return Completion::NotRunning;
        }
        self.running = None;
        self.idle_since = now;
        self.gate.charge(
            now,
            outcome.burst_time,
            config.duty_cycle,
            config.credit_window,
        );
        self.window.record(now, outcome.burst_time);
        self.bursts += 1;
        self.burst_time = self.burst_time.saturating_add(outcome.burst_time);
        // The path may have left the set while its burst ran, or left and come back: then the
        // burst is not the path's.
        let Some(p) = self.paths.get_mut(key) else {
            return Completion::PathGone;
        };
        let Some(started) = p.running.take() else {
            return Completion::PathGone;
        };
        if outcome.kind != OutcomeKind::Busy {
            let change = COST_EWMA_WEIGHT * (outcome.burst_time.as_secs_f64() - p.cost);
            p.cost += change;
            self.demand += change / p.interval_secs();
        }
        let factor = stretch(self.demand, config.duty_cycle);
        let jitter = 1.0 + p.plan.jitter * (2.0 * self.rng.unit() - 1.0);
        let gap = secs_to_duration(p.interval_secs() * factor * jitter);
        match outcome.kind {
            OutcomeKind::Success | OutcomeKind::Failure => {
                if outcome.kind == OutcomeKind::Success {
                    p.stats.successes += 1;
                    p.stats.consecutive_failures = 0;
                    p.stats.last_success = Some(started);
                } else {
                    p.stats.failures += 1;
                    p.stats.consecutive_failures += 1;
                }
                p.next_due = started.saturating_add(gap);
                p.end_retries();
            }
            OutcomeKind::Busy => {
                p.stats.deferred_busy += 1;
                self.deferred_busy += 1;
                let regular = *p.retry_until.get_or_insert(started.saturating_add(gap));
                let retry = now.saturating_add(p.backoff(config));
                if retry < regular {
                    p.next_due = retry;
                } else {
                    // No room left in this interval: wait for the next regular probe.
                    p.next_due = regular;
                    p.end_retries();
                }
            }
        }
        self.idle.insert((p.next_due, key.clone()));
        Completion::Recorded
    }
}

/// Decides when each path is probed. Pure: time and randomness are injected, nothing blocks.
///
/// Time is a `Duration` since an epoch the caller picks (e.g. an `Instant` taken at start-up) and
/// must not go backwards; every method that depends on it takes `now`. The caller loop:
/// 1. [`poll`](Scheduler::poll) → start each [`Dispatch`] (each on a different local device);
/// 2. when a burst is over, [`completed`](Scheduler::completed);
/// 3. sleep until [`wait_until`](Scheduler::wait_until) or a completion, whichever is first;
/// 4. on a config reload or a change of the selected peers, [`set_paths`](Scheduler::set_paths).
#[derive(Debug, Clone)]
pub struct Scheduler<K: ScheduleKey = PathKey> {
    config: ScheduleConfig,
    /// Seeds each device's generator, with the device's own seed.
    node_seed: u64,
    devices: BTreeMap<K::Device, DeviceState<K>>,
}

/// A device that cannot start a burst until something changes.
const NEVER: Duration = Duration::MAX;

impl<K: ScheduleKey> Scheduler<K> {
    /// A scheduler with no paths. `node_seed` (see [`seed_from_name`](super::seed_from_name))
    /// drives phases and jitter, so each node spreads its bursts differently and reproducibly;
    /// each device draws from its own generator (the node seed and
    /// [`ScheduleKey::device_seed`]), so the devices of a node are scheduled independently.
    pub fn new(node_seed: u64, config: ScheduleConfig) -> Result<Self, ScheduleError<K>> {
        config.validate()?;
        Ok(Scheduler {
            config,
            node_seed,
            devices: BTreeMap::new(),
        })
    }

    pub fn config(&self) -> &ScheduleConfig {
        &self.config
    }

    /// Applies new settings (a config reload) without losing any state. A new duty cycle
    /// applies to the stretch at once and to the gate from the next burst; a new backoff from
    /// the next `busy` answer. On error nothing changes.
    pub fn set_config(&mut self, config: ScheduleConfig) -> Result<(), ScheduleError<K>> {
        config.validate()?;
        for dev in self.devices.values_mut() {
            dev.window.set_window(config.measure_window);
        }
        self.config = config;
        Ok(())
    }

    /// Replaces the path set. Paths whose key stays keep their state (next due time, busy
    /// backoff, cost estimate, counters); a changed plan takes effect from the path's next
    /// interval, except that a shorter interval pulls a later due time in (to a random point
    /// within the new interval, so a reload does not line paths up). New paths get a random
    /// phase within their first (stretched) interval. A removed path's running burst keeps its
    /// device busy until it is reported. On error nothing changes.
    pub fn set_paths(
        &mut self,
        plans: Vec<PathPlan<K>>,
        now: Duration,
    ) -> Result<(), ScheduleError<K>> {
        validate_plans(&plans)?;
        let wanted: BTreeSet<&K> = plans.iter().map(|p| &p.key).collect();
        let removed: Vec<K> = self
            .paths()
            .filter(|k| !wanted.contains(k))
            .cloned()
            .collect();
        self.apply_paths(&removed, plans, now);
        Ok(())
    }

    /// Changes part of the path set: removes the paths `remove` (keys not in the set are
    /// ignored), then adds or changes the paths of `upsert`, as [`set_paths`](Self::set_paths)
    /// would with the whole resulting set. For a selection that replaces a few paths each
    /// round, without touching the others. On error nothing changes.
    pub fn update_paths(
        &mut self,
        remove: &[K],
        upsert: Vec<PathPlan<K>>,
        now: Duration,
    ) -> Result<(), ScheduleError<K>> {
        validate_plans(&upsert)?;
        self.apply_paths(remove, upsert, now);
        Ok(())
    }

    /// Removes `remove`, then adds or changes `upsert` (already validated), device by device
    /// in name order (the order of the phase draws).
    fn apply_paths(&mut self, remove: &[K], upsert: Vec<PathPlan<K>>, now: Duration) {
        let mut touched: BTreeSet<K::Device> = BTreeSet::new();
        for key in remove {
            let Some(dev) = self.devices.get_mut(key.device()) else {
                continue;
            };
            if let Some(p) = dev.paths.remove(key) {
                dev.idle.remove(&(p.next_due, key.clone()));
                touched.insert(key.device().clone());
            }
        }
        let mut by_device: BTreeMap<K::Device, Vec<PathPlan<K>>> = BTreeMap::new();
        for plan in upsert {
            by_device
                .entry(plan.key.device().clone())
                .or_default()
                .push(plan);
        }
        for (name, plans) in by_device {
            let config = &self.config;
            let node_seed = self.node_seed;
            let dev = self.devices.entry(name.clone()).or_insert_with(|| {
                DeviceState::new(now, config, device_rng(node_seed, K::device_seed(&name)))
            });
            touched.remove(&name);
            // (key, pulled in: the interval got shorter) for paths needing a new due time.
            let mut to_phase = Vec::new();
            for plan in plans {
                let key = plan.key.clone();
                match dev.paths.get_mut(&key) {
                    Some(p) => {
                        if plan.interval < p.plan.interval {
                            to_phase.push((key, true));
                        }
                        p.set_plan(plan);
                    }
                    None => {
                        to_phase.push((key.clone(), false));
                        dev.paths.insert(key, PathState::new(plan));
                    }
                }
            }
            dev.sum_demand();
            let factor = stretch(dev.demand(), self.config.duty_cycle);
            for (key, pulled_in) in to_phase {
                let Some(p) = dev.paths.get_mut(&key) else {
                    continue;
                };
                let phase = p.effective_interval(factor).mul_f64(dev.rng.unit());
                let due = now.saturating_add(phase);
                let old = p.next_due;
                p.next_due = if pulled_in { old.min(due) } else { due };
                // Its entry in the idle index (a new path's is not there yet).
                if p.running.is_none() {
                    dev.idle.remove(&(old, key.clone()));
                    dev.idle.insert((p.next_due, key));
                }
            }
        }
        // Devices that only lost paths: their demand, and whether they go (no path left and no
        // burst running).
        for name in touched {
            if let Some(dev) = self.devices.get_mut(&name) {
                dev.sum_demand();
                if dev.paths.is_empty() && dev.running.is_none() {
                    self.devices.remove(&name);
                }
            }
        }
    }

    /// Bursts to start now: at most one per local device, on devices with no running burst and
    /// an open budget gate, each the most overdue due path of its device.
    pub fn poll(&mut self, now: Duration) -> Vec<Dispatch<K>> {
        let mut out = Vec::new();
        self.poll_into(now, &mut out);
        out
    }

    /// [`poll`](Self::poll) into `out` (cleared first), for a caller that polls often and keeps
    /// one buffer.
    pub fn poll_into(&mut self, now: Duration, out: &mut Vec<Dispatch<K>>) {
        out.clear();
        out.extend(
            self.devices
                .values_mut()
                .filter_map(|dev| dev.dispatch(now)),
        );
    }

    /// Reports the end of a dispatched burst. Success and failure schedule the path's next
    /// regular probe one (stretched, jittered) interval after this burst started, never sooner;
    /// `busy` retries after a doubling backoff, but never past the path's next regular probe.
    pub fn completed(&mut self, key: &K, outcome: Outcome, now: Duration) -> Completion {
        let Some(dev) = self.devices.get_mut(key.device()) else {
            return Completion::NotRunning;
        };
        let completion = dev.complete(key, outcome, now, &self.config);
        if dev.paths.is_empty() && dev.running.is_none() {
            // The last path left while this burst ran: the device goes with it.
            self.devices.remove(key.device());
        }
        completion
    }

    /// When [`poll`](Scheduler::poll) may next return something without a completion in
    /// between: the earliest time an idle device has a due path and an open gate. It may be
    /// `≤ now` (poll now). `None`: nothing will happen until a burst completes or the path set
    /// changes.
    pub fn wait_until(&self) -> Option<Duration> {
        self.devices
            .values()
            .map(DeviceState::ready_at)
            .filter(|at| *at != NEVER)
            .min()
    }

    /// The path that `device` will probe next and the earliest time it may start (its due time,
    /// or later if the budget gate is closed), ignoring a running burst.
    pub fn next_due<Q>(&self, device: &Q) -> Option<(&K, Duration)>
    where
        K::Device: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let d = self.devices.get(device)?;
        d.next_path().map(|(k, due)| (k, due.max(d.gate.open_at())))
    }

    /// Budget and counters of a local device (also of one whose last path left while a burst
    /// ran, until that burst is reported).
    pub fn device_stats<Q>(&self, device: &Q, now: Duration) -> Option<DeviceStats>
    where
        K::Device: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let d = self.devices.get(device)?;
        let demand = d.demand();
        Some(DeviceStats {
            paths: d.paths.len(),
            running: d.running.is_some(),
            duty_cycle_budget: self.config.duty_cycle,
            duty_cycle_used: d.window.ratio(now),
            demand,
            stretch_factor: stretch(demand, self.config.duty_cycle),
            bursts: d.bursts,
            burst_time: d.burst_time,
            deferred_budget: d.deferred_budget,
            deferred_busy: d.deferred_busy,
        })
    }

    /// Schedule and counters of one path of the current set.
    pub fn path_status(&self, key: &K) -> Option<PathStatus> {
        let d = self.devices.get(key.device())?;
        let p = d.paths.get(key)?;
        let factor = stretch(d.demand(), self.config.duty_cycle);
        Some(PathStatus {
            next_due: p.next_due,
            running: p.running.is_some(),
            retry_until: p.retry_until,
            effective_interval: p.effective_interval(factor),
            cost: secs_to_duration(p.cost),
            stats: p.stats,
        })
    }

    /// The interval each path of `device` is planned at now, in key order: its plan's interval
    /// times the device's stretch ([`PathStatus::effective_interval`]), before jitter. What
    /// `rdma_probe_path_interval_seconds` shows (docs/metrics.md).
    pub fn planned_intervals<Q>(&self, device: &Q) -> Vec<(&K, Duration)>
    where
        K::Device: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let Some(d) = self.devices.get(device) else {
            return Vec::new();
        };
        let factor = stretch(d.demand(), self.config.duty_cycle);
        d.paths
            .iter()
            .map(|(k, p)| (k, p.effective_interval(factor)))
            .collect()
    }

    /// Local devices known to the scheduler, in name order.
    pub fn devices(&self) -> impl Iterator<Item = &K::Device> {
        self.devices.keys()
    }

    /// The current path set, in key order (device, peer, rail).
    pub fn paths(&self) -> impl Iterator<Item = &K> {
        self.devices.values().flat_map(|d| d.paths.keys())
    }

    /// Number of paths in the current set.
    pub fn len(&self) -> usize {
        self.devices.values().map(|d| d.paths.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Panics unless the idle index and the cached demand of every device agree with its paths.
    #[cfg(test)]
    pub(crate) fn check_index(&self) {
        for (name, dev) in &self.devices {
            let mut copy = dev.clone();
            copy.index_idle();
            assert_eq!(copy.idle, dev.idle, "{name:?}: idle index");
            copy.sum_demand();
            assert!(
                (copy.demand - dev.demand).abs() <= 1e-9 * copy.demand.max(1.0),
                "{name:?}: demand {} cached as {}",
                copy.demand,
                dev.demand
            );
        }
    }
}

/// Every plan valid and no key twice.
fn validate_plans<K: ScheduleKey>(plans: &[PathPlan<K>]) -> Result<(), ScheduleError<K>> {
    let mut seen = BTreeSet::new();
    for plan in plans {
        plan.validate()?;
        if !seen.insert(&plan.key) {
            return Err(ScheduleError::Duplicate(plan.key.clone()));
        }
    }
    Ok(())
}

/// Keeps gaps far from `Duration` overflow whatever the caller's `now`.
const _: () = assert!(MAX_GAP.as_secs() < u64::MAX / 4);
