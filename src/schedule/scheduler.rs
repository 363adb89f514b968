//! The [`Scheduler`]: per-path due times, one burst per local device, busy backoff, budget.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::num::NonZeroU64;
use std::time::Duration;

use smallvec::SmallVec;

use super::budget::{nanos, secs_to_duration, stretch, BurstWindow, Gate, MAX_GAP};
use super::path::{
    Attempt, Dispatch, Outcome, OutcomeKind, PathKey, PathPlan, PathStats, ScheduleError,
    ScheduleKey,
};
use super::prefetch::prefetch;
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
    /// Retrying after `busy` answers, until this regular slot.
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

/// No time: a path never dispatched, or not retrying after `busy`.
const UNSET: u64 = u64::MAX;

/// A path's schedule and counters, times in nanoseconds since the caller's epoch.
///
/// Two cache lines, aligned: a successful completion touches the first, a failure or `busy`
/// answer both, a regular dispatch neither (what it needs is in the idle index, what it
/// starts in the device's [`RunningBurst`]). A cluster simulation keeps millions of these,
/// each cold when its burst comes, so every line a burst touches counts (see `docs/scale.md`,
/// "Against the targets"). The key is not kept here: the device's index, its idle index and
/// its running burst each hold it.
///
/// Whether the path's burst runs is the device's to say ([`DeviceState::runs`]).
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct PathState {
    /// While retrying after `busy`: the regular slot where retries give up; [`UNSET`] if not,
    /// and then `retries` is 0.
    retry_until: u64,
    /// Start of the last finished dispatch; [`UNSET`] before the first.
    last_start: u64,
    next_due: u64,
    /// Moving average of burst time, seconds.
    cost: f64,
    /// The plan's interval, in seconds (as `Duration::as_secs_f64` gives it).
    interval_secs: f64,
    jitter: f64,
    successes: u64,
    /// Busy retries dispatched in the current slot: the next `busy` answer waits the initial
    /// backoff doubled this many times.
    retries: u32,
    /// The last finished dispatch succeeded: `last_success` is `last_start` (written back when
    /// another ends, so that a success touches only the first cache line).
    last_start_succeeded: bool,
    /// `consecutive_failures` is above zero (so that a success has it to reset only then).
    failing: bool,
    // The second cache line: what a failure, a `busy` answer or a change of plan needs.
    /// The plan's interval (never zero).
    interval: NonZeroU64,
    expected_burst: u64,
    failures: u64,
    deferred_busy: u64,
    deferred_budget: u64,
    consecutive_failures: u64,
    /// Start of the last successful burst but the one in `last_start`; [`UNSET`] before the
    /// first.
    last_success: u64,
}

impl PathState {
    fn new<K>(plan: &PathPlan<K>) -> Self {
        PathState {
            retry_until: UNSET,
            last_start: UNSET,
            next_due: 0,
            cost: plan.expected_burst.as_secs_f64(),
            interval_secs: plan.interval.as_secs_f64(),
            jitter: plan.jitter,
            successes: 0,
            retries: 0,
            last_start_succeeded: false,
            failing: false,
            interval: interval_nanos(plan.interval),
            expected_burst: nanos(plan.expected_burst),
            failures: 0,
            deferred_busy: 0,
            deferred_budget: 0,
            consecutive_failures: 0,
            last_success: UNSET,
        }
    }

    /// A new plan for the path (same key): its interval and jitter from now on; a new expected
    /// burst resets the cost estimate.
    fn set_plan<K>(&mut self, plan: &PathPlan<K>) {
        if nanos(plan.expected_burst) != self.expected_burst {
            self.cost = plan.expected_burst.as_secs_f64();
            self.expected_burst = nanos(plan.expected_burst);
        }
        self.interval = interval_nanos(plan.interval);
        self.interval_secs = plan.interval.as_secs_f64();
        self.jitter = plan.jitter;
    }

    /// `interval × stretch`.
    fn effective_interval(&self, stretch: f64) -> Duration {
        secs_to_duration(self.interval_secs * stretch)
    }

    /// Its counters, with those of `running`, its burst that runs if any.
    fn stats<K>(&self, running: Option<&RunningBurst<K>>) -> PathStats {
        let time = |t: u64| (t != UNSET).then(|| Duration::from_nanos(t));
        PathStats {
            // Every dispatch ends in one of these, or still runs.
            dispatched: self.successes
                + self.failures
                + self.deferred_busy
                + u64::from(running.is_some()),
            successes: self.successes,
            failures: self.failures,
            deferred_busy: self.deferred_busy,
            deferred_budget: self.deferred_budget
                + u64::from(running.is_some_and(|r| r.budget_deferred)),
            consecutive_failures: self.consecutive_failures,
            last_start: time(running.map_or(self.last_start, |r| r.started)),
            last_success: time(if self.last_start_succeeded {
                self.last_start
            } else {
                self.last_success
            }),
        }
    }

    /// What the next `busy` answer waits: the initial backoff, doubled for each retry of this
    /// slot, up to the cap.
    fn backoff(&self, config: &ScheduleConfig) -> u64 {
        let doubled = 1u64.checked_shl(self.retries).unwrap_or(u64::MAX);
        nanos(config.busy_backoff)
            .saturating_mul(doubled)
            .min(nanos(config.busy_backoff_max))
    }
}

/// A plan's interval in nanoseconds; a valid plan's is never zero.
fn interval_nanos(interval: Duration) -> NonZeroU64 {
    NonZeroU64::new(nanos(interval)).unwrap_or(NonZeroU64::MIN)
}

/// Two cache lines, so that a dispatch touches one.
const _: () = assert!(std::mem::size_of::<PathState>() == 128);
const _: () = assert!(std::mem::size_of::<Option<PathState>>() == 128);
/// What a success touches is in the first.
const _: () = assert!(std::mem::offset_of!(PathState, failing) < 64);

/// Where a path's state lives in its device's [`DeviceState::slots`]. Slots are stable while
/// the path stays in the set, so the idle index and the running burst point at a path without
/// a search by key.
type Slot = u32;

/// A due time in the idle index: nanoseconds since the caller's epoch. Half the size of a
/// `Duration` and compared in one step; exact for 584 years of uptime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Due(u64);

impl Due {
    fn of(t: Duration) -> Due {
        Due(nanos(t))
    }

    fn time(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

/// The burst a device runs.
#[derive(Debug, Clone)]
struct RunningBurst<K> {
    key: K,
    /// The path's slot; `None` once the path has left the set (its burst still holds the
    /// device until it is reported).
    slot: Option<Slot>,
    /// Its start, in nanoseconds.
    started: u64,
    /// The budget held it back: counted in the path's counters when it is reported.
    budget_deferred: bool,
}

/// A path without a running burst, in the idle index.
#[derive(Debug, Clone, PartialEq)]
struct Idle<K> {
    due: Due,
    key: K,
    slot: Slot,
    /// Retrying after `busy` (the path's `retry_until` is set): only then does a dispatch need
    /// the path's state.
    retrying: bool,
}

impl<K> Idle<K> {
    fn of(p: &PathState, key: K, slot: Slot) -> Self {
        Idle {
            due: Due(p.next_due),
            key,
            slot,
            retrying: p.retry_until != UNSET,
        }
    }
}

#[derive(Debug, Clone)]
struct DeviceState<K> {
    /// Path states by slot; `None` for a free slot (listed in `free`).
    slots: Vec<Option<PathState>>,
    free: Vec<Slot>,
    /// Slot of every path, in key order: lookups by key (set changes, status) and iteration.
    index: BTreeMap<K, Slot>,
    /// `(next_due, key, slot)` of every path without a running burst, ascending: the next path
    /// is the front. Kept in step with the paths by every change of a due time or a running
    /// burst, so that a poll costs a look at the front, not a scan; a compact ring rather than a
    /// tree, because a simulated cluster polls ten thousand schedulers and every cache line
    /// touched counts. A new due time is usually among the latest, so an insert moves little.
    /// The ring has room for one entry a path and no more: all but the running path are in it,
    /// so its back (where a completed path goes) is right before its front (where the next
    /// dispatch comes from), and a burst touches one or two neighbouring cache lines of it.
    idle: VecDeque<Idle<K>>,
    /// Σ cost / interval over the paths (see [`DeviceState::demand`]).
    demand: f64,
    /// The running burst, possibly of a path that has since left the set.
    running: Option<RunningBurst<K>>,
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
            slots: Vec::new(),
            free: Vec::new(),
            index: BTreeMap::new(),
            idle: VecDeque::new(),
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

    fn len(&self) -> usize {
        self.index.len()
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn path(&self, slot: Slot) -> Option<&PathState> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn path_mut(&mut self, slot: Slot) -> Option<&mut PathState> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    fn slot_of(&self, key: &K) -> Option<Slot> {
        self.index.get(key).copied()
    }

    /// The states of the paths, in key order.
    fn paths(&self) -> impl Iterator<Item = (&K, &PathState)> {
        self.index
            .iter()
            .filter_map(|(k, &slot)| Some((k, self.path(slot)?)))
    }

    /// Adds a path (not in the set yet) in a free slot.
    fn insert_path(&mut self, key: K, state: PathState) -> Slot {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(state);
                slot
            }
            None => {
                self.slots.push(Some(state));
                Slot::try_from(self.slots.len() - 1).unwrap_or(Slot::MAX)
            }
        };
        self.index.insert(key, slot);
        slot
    }

    /// Room for `paths` more paths, beyond the free slots.
    fn reserve(&mut self, paths: usize) {
        self.slots
            .reserve_exact(paths.saturating_sub(self.free.len()));
    }

    /// Takes a path out of the set, and out of the idle index; a burst it runs is no longer its.
    fn remove_path(&mut self, key: &K) -> Option<PathState> {
        let slot = self.index.remove(key)?;
        let state = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        self.unindex_idle(Due(state.next_due), key);
        if let Some(run) = self.running.as_mut().filter(|r| r.slot == Some(slot)) {
            run.slot = None;
        }
        Some(state)
    }

    /// Share of wall time the paths want: Σ cost / interval. Updated as costs change, and
    /// summed afresh whenever the path set changes.
    fn demand(&self) -> f64 {
        self.demand
    }

    fn sum_demand(&mut self) {
        self.demand = self.paths().map(|(_, p)| p.cost / p.interval_secs).sum();
    }

    /// Rebuilds the index of idle paths (after the path set changed).
    fn index_idle(&mut self) {
        // Room for every path and no more: see `idle`.
        let mut idle: Vec<Idle<K>> = Vec::with_capacity(self.len());
        idle.extend(
            (self.index.iter())
                .filter(|(_, &slot)| !self.runs(slot))
                .filter_map(|(k, &slot)| Some(Idle::of(self.path(slot)?, k.clone(), slot))),
        );
        idle.sort_unstable_by(|a, b| (a.due, &a.key).cmp(&(b.due, &b.key)));
        self.idle = idle.into();
    }

    /// The idle index's room back to one entry a path, after paths left.
    fn fit_idle(&mut self) {
        self.idle.shrink_to(self.len());
    }

    /// Where `(due, key)` goes in (or is in) the idle index. A path's next due time is usually
    /// among the latest (about one interval ahead, give or take its jitter, as are the last
    /// few due times), so the last entries are looked at first, one by one: they share a few
    /// cache lines right before the front, which the next dispatch reads anyway, where a
    /// bisection would touch lines all over the ring.
    fn idle_position(&self, due: Due, key: &K) -> usize {
        const LOOK_FROM_THE_BACK: usize = 16;
        let before = |i: usize| {
            let entry = &self.idle[i];
            (entry.due, &entry.key) < (due, key)
        };
        let mut end = self.idle.len();
        for _ in 0..LOOK_FROM_THE_BACK {
            if end == 0 || before(end - 1) {
                return end;
            }
            end -= 1;
        }
        // Bisection over the entries not looked at: the first not before `(due, key)`.
        let mut start = 0;
        while start < end {
            let mid = start + (end - start) / 2;
            if before(mid) {
                start = mid + 1;
            } else {
                end = mid;
            }
        }
        start
    }

    fn index_idle_path(&mut self, entry: Idle<K>) {
        let at = self.idle_position(entry.due, &entry.key);
        self.idle.insert(at, entry);
    }

    fn unindex_idle(&mut self, due: Due, key: &K) {
        let at = self.idle_position(due, key);
        if self
            .idle
            .get(at)
            .is_some_and(|entry| entry.due == due && &entry.key == key)
        {
            self.idle.remove(at);
        }
    }

    /// The running burst, if it is the path's in `slot`.
    fn running_of(&self, slot: Slot) -> Option<&RunningBurst<K>> {
        self.running.as_ref().filter(|r| r.slot == Some(slot))
    }

    /// The path in `slot` has a running burst.
    fn runs(&self, slot: Slot) -> bool {
        self.running_of(slot).is_some()
    }

    /// The path that goes next: the most overdue idle one (ties: key order).
    fn next_path(&self) -> Option<(&K, Duration)> {
        self.idle
            .front()
            .map(|entry| (&entry.key, entry.due.time()))
    }

    /// The earliest time this device may start its next burst, [`NEVER`] while one runs.
    fn ready_at(&self) -> Duration {
        if self.running.is_some() {
            return NEVER;
        }
        self.next_path()
            .map_or(NEVER, |(_, due)| due.max(self.gate.open_at()))
    }
}

/// The devices of a node, in name order, at the same places as in [`Scheduler::ready`]: a device
/// is found by bisecting that compact summary (a cache line or two for a handful of devices),
/// then taken by its place, so the search never strides over the large device states; a
/// simulated cluster looks devices up several times per burst.
#[derive(Debug, Clone)]
struct Devices<D, V>(DeviceVec<(D, V)>);

/// Per device, in name order: inline while there is one, so that a scheduler of one device
/// (the cluster simulation has one per node and rail) reaches its device state without a
/// pointer to follow.
type DeviceVec<T> = SmallVec<[T; 1]>;

impl<D, V> Default for Devices<D, V> {
    fn default() -> Self {
        Devices(SmallVec::new())
    }
}

impl<D: Ord, V> Devices<D, V> {
    fn find<Q>(&self, device: &Q) -> Result<usize, usize>
    where
        D: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.binary_search_by(|(d, _)| d.borrow().cmp(device))
    }

    fn get_mut<Q>(&mut self, device: &Q) -> Option<&mut V>
    where
        D: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(device).ok().map(|i| &mut self.0[i].1)
    }

    fn get_or_insert_with(&mut self, device: D, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&device) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (device, make()));
                i
            }
        };
        &mut self.0[i].1
    }

    fn remove<Q>(&mut self, device: &Q) -> Option<V>
    where
        D: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(device).ok().map(|i| self.0.remove(i).1)
    }

    fn at(&self, i: usize) -> Option<&V> {
        self.0.get(i).map(|(_, v)| v)
    }

    fn at_mut(&mut self, i: usize) -> Option<&mut V> {
        self.0.get_mut(i).map(|(_, v)| v)
    }

    fn remove_at(&mut self, i: usize) {
        self.0.remove(i);
    }

    fn iter(&self) -> impl Iterator<Item = (&D, &V)> {
        self.0.iter().map(|(d, v)| (d, v))
    }

    fn keys(&self) -> impl Iterator<Item = &D> {
        self.0.iter().map(|(d, _)| d)
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
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
    devices: Devices<K::Device, DeviceState<K>>,
    /// Per device, in name order: the earliest time it may start a burst (its next path's due
    /// time or its gate, whichever is later; [`NEVER`] while a burst runs or without paths).
    /// A compact copy of what each device says, so that a poll touches only the devices that
    /// can start now. Always the same devices in the same order as `devices`.
    ready: DeviceVec<(K::Device, Duration)>,
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
            devices: Devices::default(),
            ready: SmallVec::new(),
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
        let mut wanted: Vec<&K> = plans.iter().map(|p| &p.key).collect();
        wanted.sort_unstable();
        let removed: Vec<K> = self
            .paths()
            .filter(|k| wanted.binary_search(k).is_err())
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
            if dev.remove_path(key).is_some() {
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
            let dev = self.devices.get_or_insert_with(name.clone(), || {
                DeviceState::new(now, config, device_rng(node_seed, K::device_seed(&name)))
            });
            touched.remove(&name);
            // Room for the new paths, and no more: a cluster simulation holds millions.
            let fresh = plans
                .iter()
                .filter(|p| dev.slot_of(&p.key).is_none())
                .count();
            dev.reserve(fresh);
            // (slot, pulled in: the interval got shorter) for paths needing a new due time.
            let mut to_phase = Vec::new();
            for plan in plans {
                match dev.slot_of(&plan.key) {
                    Some(slot) => {
                        let Some(s) = dev.path_mut(slot) else {
                            continue;
                        };
                        if interval_nanos(plan.interval) < s.interval {
                            to_phase.push((slot, true));
                        }
                        s.set_plan(&plan);
                    }
                    None => {
                        let state = PathState::new(&plan);
                        let slot = dev.insert_path(plan.key, state);
                        to_phase.push((slot, false));
                    }
                }
            }
            dev.sum_demand();
            let factor = stretch(dev.demand(), self.config.duty_cycle);
            for (slot, pulled_in) in to_phase {
                let Some(interval) = dev.path(slot).map(|p| p.effective_interval(factor)) else {
                    continue;
                };
                let phase = interval.mul_f64(dev.rng.unit());
                let Some(p) = dev.path_mut(slot) else {
                    continue;
                };
                let due = nanos(now.saturating_add(phase));
                p.next_due = if pulled_in { p.next_due.min(due) } else { due };
            }
            dev.index_idle();
        }
        // Devices that only lost paths: their demand, and whether they go (no path left and no
        // burst running).
        for name in touched {
            if let Some(dev) = self.devices.get_mut(&name) {
                dev.sum_demand();
                dev.fit_idle();
                if dev.is_empty() && dev.running.is_none() {
                    self.devices.remove(&name);
                }
            }
        }
        self.ready = self
            .devices
            .iter()
            .map(|(name, dev)| (name.clone(), dev.ready_at()))
            .collect();
    }

    /// Where `device` is in [`Scheduler::ready`] and [`Scheduler::devices`] (the same order):
    /// a search over the compact summary, not over the device states.
    fn device_index<Q>(&self, device: &Q) -> Option<usize>
    where
        K::Device: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.ready
            .binary_search_by(|(d, _)| std::borrow::Borrow::<Q>::borrow(d).cmp(device))
            .ok()
    }

    /// Copies device `i`'s [`DeviceState::ready_at`] into the summary.
    fn refresh_ready(&mut self, i: usize) {
        if let (Some(r), Some(dev)) = (self.ready.get_mut(i), self.devices.at(i)) {
            r.1 = dev.ready_at();
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
        for i in 0..self.ready.len() {
            if self.ready[i].1 > now {
                continue;
            }
            let Some(dev) = self.devices.at_mut(i) else {
                continue;
            };
            if let Some(dispatch) = Self::dispatch(dev, now) {
                out.push(dispatch);
            }
            self.ready[i].1 = dev.ready_at();
        }
    }

    /// Starts `dev`'s most overdue due path, if its gate is open and nothing runs. Only a path
    /// retrying after `busy` has its state read: a regular dispatch is all in the idle index and
    /// the running burst.
    fn dispatch(dev: &mut DeviceState<K>, now: Duration) -> Option<Dispatch<K>> {
        if dev.running.is_some() || !dev.gate.is_open(now) {
            return None;
        }
        let first = dev.idle.front().filter(|entry| entry.due <= Due::of(now))?;
        let due = first.due.time();
        // Held back by the budget: the gate opened after the path was due and the device was
        // idle.
        let budget_deferred = dev.gate.open_at() > due.max(dev.idle_since);
        // The dispatched path is the first idle one.
        let Idle {
            key,
            slot,
            retrying,
            ..
        } = dev.idle.pop_front()?;
        let started = nanos(now);
        let mut attempt = Attempt::Regular;
        if retrying {
            if let Some(p) = dev.path_mut(slot) {
                if started < p.retry_until {
                    p.retries += 1;
                    attempt = Attempt::BusyRetry(p.retries);
                } else {
                    // Its slot came while it waited: retries are over.
                    p.retry_until = UNSET;
                    p.retries = 0;
                }
            }
        }
        if budget_deferred {
            dev.deferred_budget += 1;
        }
        dev.running = Some(RunningBurst {
            key: key.clone(),
            slot: Some(slot),
            started,
            budget_deferred,
        });
        Some(Dispatch {
            key,
            attempt,
            due,
            budget_deferred,
        })
    }

    /// Reports the end of a dispatched burst. Success and failure schedule the path's next
    /// regular probe one (stretched, jittered) interval after this burst started, never sooner;
    /// `busy` retries after a doubling backoff, but never past the path's next regular slot.
    pub fn completed(&mut self, key: &K, outcome: Outcome, now: Duration) -> Completion {
        let Some(i) = self.device_index(key.device()) else {
            return Completion::NotRunning;
        };
        let completion = self.complete_burst(i, key, outcome, now);
        match completion {
            Completion::NotRunning => {}
            _ if self
                .devices
                .at(i)
                .is_some_and(|d| d.is_empty() && d.running.is_none()) =>
            {
                // The last path left while this burst ran: the device goes with it.
                self.devices.remove_at(i);
                self.ready.remove(i);
            }
            _ => self.refresh_ready(i),
        }
        completion
    }

    fn complete_burst(&mut self, i: usize, key: &K, outcome: Outcome, now: Duration) -> Completion {
        let Some(dev) = self.devices.at_mut(i) else {
            return Completion::NotRunning;
        };
        let run = match dev.running.take() {
            Some(run) if &run.key == key => run,
            other => {
                dev.running = other;
                return Completion::NotRunning;
            }
        };
        dev.idle_since = now;
        dev.gate.charge(
            now,
            outcome.burst_time,
            self.config.duty_cycle,
            self.config.credit_window,
        );
        dev.window.record(now, outcome.burst_time);
        dev.bursts += 1;
        dev.burst_time = dev.burst_time.saturating_add(outcome.burst_time);
        let Some(slot) = run.slot else {
            return Completion::PathGone;
        };
        // The latest due time in the idle index, read before the path's state: both are cold,
        // and read one after the other they would be waited for one after the other.
        let latest = dev.idle.back().map(|last| last.due);
        let Some(entry) = self.reschedule_path(i, slot, &run, outcome, now) else {
            return Completion::PathGone;
        };
        let Some(dev) = self.devices.at_mut(i) else {
            return Completion::PathGone;
        };
        if latest.is_none_or(|latest| entry.due > latest) {
            // The usual case: it goes last.
            dev.idle.push_back(entry);
        } else {
            dev.index_idle_path(entry);
        }
        Completion::Recorded
    }

    /// The path in `slot` of device `i` finished its burst `run` with `outcome` at `now`: its
    /// cost, counters and next due time. Returns its entry in the idle index.
    fn reschedule_path(
        &mut self,
        i: usize,
        slot: Slot,
        run: &RunningBurst<K>,
        outcome: Outcome,
        now: Duration,
    ) -> Option<Idle<K>> {
        let config = &self.config;
        let dev = self.devices.at_mut(i)?;
        // One lookup of the path: its fields and the device's demand are borrowed apart.
        let DeviceState {
            slots,
            demand,
            deferred_busy,
            rng,
            ..
        } = dev;
        let p = slots.get_mut(slot as usize)?.as_mut()?;
        let started = run.started;
        if outcome.kind != OutcomeKind::Success && p.last_start_succeeded {
            // `last_start` is about to change: the success it was goes where it is kept.
            p.last_success = p.last_start;
            p.last_start_succeeded = false;
        }
        p.last_start = started;
        if run.budget_deferred {
            p.deferred_budget += 1;
        }
        if outcome.kind != OutcomeKind::Busy {
            let change = COST_EWMA_WEIGHT * (outcome.burst_time.as_secs_f64() - p.cost);
            p.cost += change;
            *demand += change / p.interval_secs;
        }
        let factor = stretch(*demand, config.duty_cycle);
        let jitter = 1.0 + p.jitter * (2.0 * rng.unit() - 1.0);
        let gap = nanos(secs_to_duration(p.interval_secs * factor * jitter));
        match outcome.kind {
            OutcomeKind::Success | OutcomeKind::Failure => {
                if outcome.kind == OutcomeKind::Success {
                    p.successes += 1;
                    p.last_start_succeeded = true;
                    if p.failing {
                        p.consecutive_failures = 0;
                        p.failing = false;
                    }
                } else {
                    p.failures += 1;
                    p.consecutive_failures += 1;
                    p.failing = true;
                }
                p.next_due = started.saturating_add(gap);
                p.retry_until = UNSET;
                p.retries = 0;
            }
            OutcomeKind::Busy => {
                p.deferred_busy += 1;
                *deferred_busy += 1;
                if p.retry_until == UNSET {
                    p.retry_until = started.saturating_add(gap);
                }
                let slot = p.retry_until;
                let retry = nanos(now).saturating_add(p.backoff(config));
                if retry < slot {
                    p.next_due = retry;
                } else {
                    // No room left in this interval: wait for the next regular slot.
                    p.next_due = slot;
                    p.retry_until = UNSET;
                    p.retries = 0;
                }
            }
        }
        Some(Idle::of(p, run.key.clone(), slot))
    }

    /// Starts loading this scheduler's own fields, which a poll or completion reads first: a
    /// hint (see [`prefetch`](super::prefetch)) for a caller that keeps many schedulers and
    /// knows which it will step next. Reads nothing itself; the other two hints, given later,
    /// read what this one loads.
    pub fn prefetch_summary(&self) {
        prefetch(&self.devices);
        prefetch(&self.ready);
        prefetch(&self.config);
        prefetch(&self.node_seed);
    }

    /// Starts loading the device states (after [`prefetch_summary`](Self::prefetch_summary)).
    pub fn prefetch_devices(&self) {
        for (_, dev) in self.devices.iter() {
            prefetch(&dev.idle);
            prefetch(&dev.window);
            prefetch(&dev.running);
            prefetch(&dev.gate);
            prefetch(&dev.index);
        }
    }

    /// Starts loading what a poll or completion reads through the device states (after
    /// [`prefetch_devices`](Self::prefetch_devices)): the ends of the idle index, the running
    /// path's state, the burst window's newest end.
    pub fn prefetch_paths(&self) {
        for (_, dev) in self.devices.iter() {
            if let Some(entry) = dev.idle.front() {
                prefetch(entry);
            }
            // The last entries, where a completed path's new due time is looked for from the
            // back (`idle_position`): the last and the one three before it, in the line before.
            for back in [1, 4] {
                if let Some(entry) = dev
                    .idle
                    .len()
                    .checked_sub(back)
                    .and_then(|i| dev.idle.get(i))
                {
                    prefetch(entry);
                }
            }
            // The slot, not the path in it: whether it holds one is read from the line to load.
            if let Some(slot) = (dev.running.as_ref())
                .and_then(|run| run.slot)
                .and_then(|slot| dev.slots.get(slot as usize))
            {
                prefetch(slot);
            }
            dev.window.prefetch();
        }
    }

    /// When [`poll`](Scheduler::poll) may next return something without a completion in
    /// between: the earliest time an idle device has a due path and an open gate. It may be
    /// `≤ now` (poll now). `None`: nothing will happen until a burst completes or the path set
    /// changes.
    pub fn wait_until(&self) -> Option<Duration> {
        self.ready
            .iter()
            .map(|(_, at)| *at)
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
        let d = self.devices.at(self.device_index(device)?)?;
        d.next_path().map(|(k, due)| (k, due.max(d.gate.open_at())))
    }

    /// Budget and counters of a local device (also of one whose last path left while a burst
    /// ran, until that burst is reported).
    pub fn device_stats<Q>(&self, device: &Q, now: Duration) -> Option<DeviceStats>
    where
        K::Device: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let d = self.devices.at(self.device_index(device)?)?;
        let demand = d.demand();
        Some(DeviceStats {
            paths: d.len(),
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
        let d = self.devices.at(self.device_index(key.device())?)?;
        let slot = d.slot_of(key)?;
        let p = d.path(slot)?;
        let running = d.running_of(slot);
        let factor = stretch(d.demand(), self.config.duty_cycle);
        Some(PathStatus {
            next_due: Duration::from_nanos(p.next_due),
            running: running.is_some(),
            retry_until: (p.retry_until != UNSET).then(|| Duration::from_nanos(p.retry_until)),
            effective_interval: p.effective_interval(factor),
            cost: secs_to_duration(p.cost),
            stats: p.stats(running),
        })
    }

    /// Local devices known to the scheduler, in name order.
    pub fn devices(&self) -> impl Iterator<Item = &K::Device> {
        self.devices.keys()
    }

    /// The current path set, in key order (device, peer, rail).
    pub fn paths(&self) -> impl Iterator<Item = &K> {
        self.devices.values().flat_map(|d| d.index.keys())
    }

    /// Number of paths in the current set.
    pub fn len(&self) -> usize {
        self.devices.values().map(DeviceState::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Panics unless the idle index and the cached demand of every device agree with its paths.
    #[cfg(test)]
    pub(crate) fn check_index(&self) {
        let ready: DeviceVec<(K::Device, Duration)> = self
            .devices
            .iter()
            .map(|(name, dev)| (name.clone(), dev.ready_at()))
            .collect();
        assert_eq!(ready, self.ready, "ready summary");
        for (name, dev) in self.devices.iter() {
            let mut copy = dev.clone();
            copy.index_idle();
            assert_eq!(copy.idle, dev.idle, "{name:?}: idle index");
            let slots: BTreeSet<Slot> = dev.index.values().copied().collect();
            assert_eq!(slots.len(), dev.index.len(), "{name:?}: a slot per path");
            for (key, &slot) in &dev.index {
                let p = dev.path(slot).expect("an indexed slot holds a path");
                if dev.runs(slot) {
                    assert_eq!(dev.running.as_ref().map(|r| &r.key), Some(key), "{name:?}");
                }
                if p.retry_until == UNSET {
                    assert_eq!(p.retries, 0, "{name:?}: {key:?} retries without a slot");
                }
                assert_eq!(p.failing, p.consecutive_failures > 0, "{name:?}: {key:?}");
            }
            let used = dev.slots.iter().filter(|s| s.is_some()).count();
            assert_eq!(used, dev.index.len(), "{name:?}: slots in use");
            assert_eq!(
                used + dev.free.len(),
                dev.slots.len(),
                "{name:?}: free slots"
            );
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

/// Every plan valid and no key twice. The errors come in the order of the plans, as a check of
/// one plan after the other would find them; the common case (no key twice) is a sort, not a
/// tree of every key.
fn validate_plans<K: ScheduleKey>(plans: &[PathPlan<K>]) -> Result<(), ScheduleError<K>> {
    let mut keys: Vec<&K> = plans.iter().map(|p| &p.key).collect();
    keys.sort_unstable();
    if keys.windows(2).all(|w| w[0] != w[1]) {
        return plans.iter().try_for_each(PathPlan::validate);
    }
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
