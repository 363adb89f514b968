//! `simulate`: the real scheduler and selection of every node of a synthetic cluster, run in
//! virtual time (docs/scale.md, "Simulation").
//!
//! Each node has its own [`Scheduler`] (seeded by its name, as on a real node), [`Selector`] and
//! [`Rotation`]; all share one [`Layout`] of the cluster. One event queue holds each node's next
//! wake-up (its next due path, the end of a burst that frees a device for a busy retry, or the
//! next round), so the cost is per burst, not per node and tick. What is modelled and what is
//! not:
//! - a burst takes exactly `burst` of device time and succeeds; setup and control round trips
//!   take no time, except a `busy` answer, which takes [`BUSY_ANSWER`];
//! - a **responder serves one burst per device at a time**: a prober that arrives while the
//!   peer's device on that rail serves another burst gets `busy` and retries as the scheduler
//!   says; that attempt counts as aimed at the device at once with the burst being served;
//! - every node starts at time 0 (a DaemonSet rollout, the worst case for phases) and rounds
//!   follow the shared virtual clock (NTP on a real cluster);
//! - series: every path probed at least once and not expired has `series_per_path` series (its
//!   probe families), every node `series_per_node` plus `series_per_device` per rail, and one
//!   `peer_info` per peer with a path on `/metrics`; a path leaves `/metrics` when it is out of
//!   the selection and has not been probed for `series_ttl`, or when the series budget needs
//!   the room ([`SeriesBudget`]).

mod report;
mod stats;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::metrics::budget::{PathSeries, SeriesBudget};
use crate::schedule::{
    fit_plans, seed_from_name, Dispatch, Layout, LocalDevice, Outcome, PathIndex, PathPlan, Role,
    Rotation, ScheduleConfig, ScheduleKey, Scheduler, Selected, SelectionConfig, Selector,
};
pub use report::{GapFigures, NodeFigures, Report, Summary};
use stats::{GapTracker, NodeStats};

/// Device time of a `busy` answer: the control round trip that asked for the burst.
pub const BUSY_ANSWER: Duration = Duration::from_millis(1);

/// Series of a node besides its paths' and its devices': build, process (7), config (2),
/// node_info, the burst histogram (16 buckets, sum, count), responder sessions and
/// verification, the series budget's own.
pub const SERIES_PER_NODE: usize = 40;
/// Series per local device: port facts (6) and schedule figures (4).
pub const SERIES_PER_DEVICE: usize = 10;

/// Largest cluster `simulate` accepts.
pub const MAX_NODES: usize = 100_000;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationConfig {
    pub nodes: usize,
    pub rails: u16,
    /// Nodes per group (ToR); the last group may be smaller.
    pub nodes_per_group: usize,
    /// The configured probe interval (`defaults.interval`).
    pub interval: Duration,
    pub jitter: f64,
    /// Device time of a burst (`burst: {duration}`).
    pub burst: Duration,
    pub duty_cycle: f64,
    /// Virtual time simulated.
    pub duration: Duration,
    pub selection: SelectionConfig,
    pub series: SeriesModel,
    /// Track every path's gaps (memory grows with the paths probed); `None`: when the cluster
    /// has at most [`TRACK_ALL_PATHS_UP_TO`] paths.
    pub track_all_paths: Option<bool>,
}

/// Candidate paths up to which every path's gaps are tracked by default.
pub const TRACK_ALL_PATHS_UP_TO: u64 = 20_000_000;

/// How series are counted (docs/metrics.md; the figures a scrape of a healthy path shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesModel {
    /// Series of one path on `/metrics` besides its port traffic, before its first capacity
    /// burst.
    pub per_path: usize,
    /// Series its first capacity burst adds (the `kind="capacity"` gauges).
    pub capacity_per_path: usize,
    /// A path's every this-many-th regular probe is a capacity burst (`unpaced_every`).
    pub unpaced_every: u32,
    /// Its port traffic (the bytes and packets counters of both sides, the other traffic): the
    /// detail the budget sheds first.
    pub detail_per_path: usize,
    /// Its derived series (message rate, setup time, byte and message totals; one more message
    /// rate once it has had a capacity burst): shed second.
    pub derived_per_path: usize,
    /// Series of a node that do not depend on its paths or devices.
    pub per_node: usize,
    /// Series per local device (port facts, schedule figures).
    pub per_device: usize,
    /// A path out of the selection leaves `/metrics` this long after its last probe.
    pub ttl: Duration,
    /// Most per-path series (the paths' own and `peer_info`) a node keeps.
    pub budget: usize,
}

/// Why a simulation cannot run.
#[derive(Debug, Error, PartialEq)]
pub enum SimulateError {
    #[error("{what} must be {range} (got {value})")]
    OutOfRange {
        what: &'static str,
        range: &'static str,
        value: String,
    },
    #[error("the scheduler refused the plan: {0}")]
    Schedule(String),
}

impl SimulationConfig {
    fn validate(&self) -> Result<(), SimulateError> {
        let refuse =
            |what, range, value: String| Err(SimulateError::OutOfRange { what, range, value });
        if !(2..=MAX_NODES).contains(&self.nodes) {
            return refuse("nodes", "from 2 to 100000", self.nodes.to_string());
        }
        if !(1..=64).contains(&self.rails) {
            return refuse("rails", "from 1 to 64", self.rails.to_string());
        }
        if self.nodes_per_group == 0 {
            return refuse("nodes per ToR", "at least 1", "0".into());
        }
        if self.burst.is_zero() || self.burst >= self.interval {
            return refuse(
                "the burst",
                "above zero and shorter than the interval",
                format!("{:?}", self.burst),
            );
        }
        if self.duration.is_zero() {
            return refuse("the duration", "above zero", "0".into());
        }
        Ok(())
    }
}

/// A path of a simulated node: the local device is the rail's. Small and `Copy`: the
/// scheduler's code is the exporter's, with numbers where the exporter has names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct SimKey {
    rail: u16,
    peer: u32,
}

impl fmt::Display for SimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} -> {} (rail {})",
            device_name(self.rail),
            node_name(self.peer as usize),
            self.rail
        )
    }
}

impl ScheduleKey for SimKey {
    type Device = u16;
    fn device(&self) -> &u16 {
        &self.rail
    }
}

impl From<PathIndex> for SimKey {
    /// A simulated node's devices are its rails in order, and the layout's node order is the
    /// nodes' index order.
    fn from(path: PathIndex) -> SimKey {
        SimKey {
            rail: path.device as u16,
            peer: path.peer as u32,
        }
    }
}

impl SimKey {
    /// As one number, for the series budget.
    fn id(self, nodes: usize) -> u64 {
        stats::path_id(self.peer as usize, self.rail, nodes)
    }
}

/// A rail of a node: its burst (or `busy` answer) in progress, while the rail's bit is set in
/// [`Node::running`], and its bursts so far. Times in nanoseconds of virtual time: 32 bytes, so
/// that the rails of a node sit in a few cache lines.
#[derive(Debug, Clone, Copy, Default)]
struct Rail {
    /// When the burst in progress ends.
    end: u64,
    /// When the node must wake for this rail: at the end of a `busy` answer (its retry comes
    /// soon after), else when the rail's next path is due but not before the end ([`wake_for`]).
    wake: u64,
    /// Bursts (not `busy` answers) so far.
    bursts: u64,
    peer: u32,
    busy: bool,
    /// A probe of this round's other-group sample (the rotation waits for it).
    sampled: bool,
}

/// One simulated node. Its selection, used at rounds only, is boxed out of the way of what every
/// burst touches.
struct Node {
    sched: Scheduler<SimKey>,
    budget: SeriesBudget<u64>,
    stats: NodeStats,
    rotation: Rotation<SimKey>,
    /// The rails with a burst in progress, one bit each: with a 5% duty cycle most are idle, and
    /// their [`Rail`]s are not read.
    running: u64,
    /// When the next round starts.
    next_round: Duration,
    /// Other-group paths per device and round ([`Coverage`](crate::schedule::Coverage)).
    share: usize,
    selector: Box<Selector>,
}

/// A responder device: the end of the burst it serves (ns), and how many probers aimed at it
/// meanwhile.
#[derive(Debug, Clone, Copy, Default)]
struct Responder {
    busy_until: u64,
    aimed: u32,
}

/// `t` in nanoseconds (saturating: 584 years).
fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// Where node `n`'s rails are in [`Sim::rails`].
fn span(n: usize, rails: u16) -> std::ops::Range<usize> {
    let rails = usize::from(rails);
    n * rails..(n + 1) * rails
}

/// The rails whose bits are set in `mask`, lowest first.
fn running_rails(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let rail = (mask != 0).then(|| mask.trailing_zeros() as usize)?;
        mask &= mask - 1;
        Some(rail)
    })
}

/// The rail whose burst ended first by `now` (ties: the lower rail), among the `running` ones.
fn first_ended(running: u64, rails: &[Rail], now: u64) -> Option<usize> {
    running_rails(running)
        .filter(|&r| rails[r].end <= now)
        .min_by_key(|&r| rails[r].end)
}

/// When a node must wake for a burst on `rail` that ends at `end`: at the end of a `busy` answer;
/// else when the rail's next path may start, but not before the end. Only a completion on the
/// rail or a new path set changes that (the rail dispatches nothing meanwhile, and its budget gate
/// moves only at its completions), so it is asked of the scheduler once per burst and at rounds,
/// not at every wake-up.
fn wake_for(sched: &Scheduler<SimKey>, rail: usize, end: u64, busy: bool) -> u64 {
    if busy {
        return end;
    }
    sched
        .next_due(&(rail as u16))
        .map_or(end, |(_, due)| nanos(due).max(end))
}

/// `d` times `k`, exactly.
fn times(d: Duration, k: u64) -> Duration {
    let nanos = d.as_nanos() * u128::from(k);
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (nanos % 1_000_000_000) as u32)
}

/// Runs the simulation; `progress` is called about once per simulated hour with the virtual
/// time reached.
pub fn run(
    config: &SimulationConfig,
    mut progress: impl FnMut(Duration),
) -> Result<Report, SimulateError> {
    config.validate()?;
    let started = Instant::now();
    let mut sim = Sim::new(config)?;
    let end = nanos(config.duration);
    let mut next_report = Duration::from_secs(3600);
    while let Some(&Reverse((wake, n))) = sim.queue.peek() {
        if wake > end {
            break;
        }
        let t = Duration::from_nanos(wake);
        if t >= next_report {
            progress(t);
            next_report += Duration::from_secs(3600);
        }
        let next = sim.step(n as usize, t)?;
        // The node's entry is still the first: it moves to the node's next wake-up.
        if let Some(mut first) = sim.queue.peek_mut() {
            *first = Reverse((next, n));
        }
    }
    Ok(sim.finish(started.elapsed()))
}

struct Sim<'a> {
    config: &'a SimulationConfig,
    layout: Arc<Layout>,
    /// Every node probes every other (all nodes share the layout, so all alike).
    full_mesh: bool,
    nodes: Vec<Node>,
    /// Per node, its rails (`n × rails + rail`): one allocation for the cluster.
    rails: Vec<Rail>,
    responders: Vec<Responder>,
    /// Each node's next wake-up (ns), one entry per node: a step moves its node's entry.
    queue: BinaryHeap<Reverse<(u64, u32)>>,
    gaps: GapTracker,
    /// The buffer of each step's dispatches (one allocation for the whole run).
    dispatches: Vec<Dispatch<SimKey>>,
    peak_aimed: u32,
    attempts: u64,
    busy: u64,
}

/// The name of node `i`: fixed width, so that name order is index order.
fn node_name(i: usize) -> String {
    format!("node{i:05}")
}

/// A path's plan before fitting: the configured interval, jitter and burst.
fn base_plan(config: &SimulationConfig, key: SimKey) -> PathPlan<SimKey> {
    PathPlan::new(key, config.interval)
        .with_jitter(config.jitter)
        .with_expected_burst(config.burst)
}

/// A selection keyed for the simulation.
fn sim_keyed(selected: Vec<Selected<PathIndex>>) -> Vec<Selected<SimKey>> {
    selected
        .into_iter()
        .map(|s| Selected {
            key: s.key.into(),
            role: s.role,
        })
        .collect()
}

/// The plans of a selection: the configured ones, fitted to the duty cycle.
fn fitted_plans(
    config: &SimulationConfig,
    selected: &[Selected<SimKey>],
    share: usize,
) -> Vec<PathPlan<SimKey>> {
    fit_plans(
        selected,
        |k| base_plan(config, *k),
        config.duty_cycle,
        config.selection.round,
        share,
    )
}

/// Per device, the fixed path (same group or full mesh) with the longest plan. The scheduler
/// stretches all the intervals of a device by one factor, so the longest interval it gives a
/// fixed path is that path's: one lookup per device, not per path.
fn longest_fixed_plans(plans: &[PathPlan<SimKey>], selected: &[Selected<SimKey>]) -> Vec<SimKey> {
    let mut longest: Vec<Option<(Duration, SimKey)>> = Vec::new();
    for (plan, s) in plans.iter().zip(selected) {
        if s.role == Role::Sampled {
            continue;
        }
        let rail = usize::from(plan.key.rail);
        if longest.len() <= rail {
            longest.resize(rail + 1, None);
        }
        if longest[rail].is_none_or(|(interval, _)| plan.interval > interval) {
            longest[rail] = Some((plan.interval, plan.key));
        }
    }
    longest.into_iter().flatten().map(|(_, key)| key).collect()
}

fn device_name(rail: u16) -> String {
    format!("mlx5_{rail}")
}

impl<'a> Sim<'a> {
    fn new(config: &'a SimulationConfig) -> Result<Self, SimulateError> {
        let names: Vec<String> = (0..config.nodes).map(node_name).collect();
        let labels: Vec<std::collections::BTreeMap<String, String>> = (0..config.nodes)
            .map(|i| {
                [(
                    config.selection.group_by.clone(),
                    format!("tor{:05}", i / config.nodes_per_group),
                )]
                .into()
            })
            .collect();
        let layout = Arc::new(Layout::new(
            names.iter().map(String::as_str).zip(labels.iter()),
            &config.selection.group_by,
        ));
        let devices: Vec<LocalDevice> = (0..config.rails)
            .map(|r| LocalDevice::new(device_name(r), Some(r)))
            .collect();
        let schedule = ScheduleConfig::with_duty_cycle(config.duty_cycle);
        let groups = config.nodes.div_ceil(config.nodes_per_group);
        let track_all = config.track_all_paths.unwrap_or_else(|| {
            config.nodes as u64 * (config.nodes as u64 - 1) * u64::from(config.rails)
                <= TRACK_ALL_PATHS_UP_TO
        });
        let mut sim = Sim {
            config,
            layout: layout.clone(),
            full_mesh: false,
            nodes: Vec::with_capacity(config.nodes),
            rails: vec![Rail::default(); config.nodes * config.rails as usize],
            responders: vec![Responder::default(); config.nodes * config.rails as usize],
            queue: BinaryHeap::with_capacity(config.nodes),
            gaps: GapTracker::new(config, groups, track_all),
            dispatches: Vec::with_capacity(config.rails as usize),
            peak_aimed: 0,
            attempts: 0,
            busy: 0,
        };
        for name in &names {
            let selector = Selector::with_layout(name, layout.clone(), &devices, &config.selection);
            let node = Node {
                sched: Scheduler::new(seed_from_name(name), schedule.clone())
                    .map_err(|e| SimulateError::Schedule(e.to_string()))?,
                budget: SeriesBudget::new(config.series.budget, config.series.ttl),
                stats: NodeStats::new(config.rails as usize, config.nodes_per_group),
                rotation: Rotation::new(),
                running: 0,
                next_round: selector.round_start(1),
                share: selector.coverage().sampled_per_device,
                selector: Box::new(selector),
            };
            sim.nodes.push(node);
        }
        // One layout for all: every node alike.
        sim.full_mesh = sim.nodes[0].selector.is_full_mesh();
        for n in 0..config.nodes {
            let wake = sim.start_node(n)?;
            sim.queue.push(Reverse((wake, n as u32)));
        }
        Ok(sim)
    }

    /// Round 0's paths, all at once; returns the node's first wake-up.
    fn start_node(&mut self, n: usize) -> Result<u64, SimulateError> {
        let config = self.config;
        let node = &mut self.nodes[n];
        let mut selected = sim_keyed(node.selector.fixed_path_indices(0));
        let wanted = sim_keyed(node.selector.sampled_path_indices(0));
        node.rotation
            .advance(0, wanted.iter().map(|s| s.key).collect());
        selected.extend(wanted);
        let plans = fitted_plans(config, &selected, node.share);
        let longest = longest_fixed_plans(&plans, &selected);
        node.sched
            .set_paths(plans, Duration::ZERO)
            .map_err(|e| SimulateError::Schedule(e.to_string()))?;
        // The longest interval a fixed path gets, stretched by the scheduler if it must.
        node.stats.planned_interval = longest
            .iter()
            .filter_map(|k| node.sched.path_status(k))
            .map(|st| st.effective_interval)
            .max()
            .unwrap_or_default();
        Ok(self.next_wake(n, Duration::ZERO))
    }

    /// Everything node `n` does at `t`: bursts that ended, a new round, new bursts; returns
    /// its next wake-up.
    fn step(&mut self, n: usize, t: Duration) -> Result<u64, SimulateError> {
        self.complete(n, t);
        if t >= self.nodes[n].next_round {
            let round = self.nodes[n].selector.round_at(t);
            self.new_round(n, round, t)?;
        }
        let mut dispatches = std::mem::take(&mut self.dispatches);
        self.nodes[n].sched.poll_into(t, &mut dispatches);
        for d in &dispatches {
            self.attempt(n, d.key, t);
        }
        self.dispatches = dispatches;
        Ok(self.next_wake(n, t))
    }

    /// Reports every burst of node `n` that ended by `t`, at its end time, first ended first.
    fn complete(&mut self, n: usize, t: Duration) {
        let now = nanos(t);
        let burst = self.config.burst;
        let rails = &self.rails[span(n, self.config.rails)];
        let node = &mut self.nodes[n];
        while let Some(rail) = first_ended(node.running, rails, now) {
            node.running &= !(1 << rail);
            let done = rails[rail];
            let key = SimKey {
                rail: rail as u16,
                peer: done.peer,
            };
            let outcome = if done.busy {
                Outcome::busy(Duration::ZERO)
            } else {
                Outcome::success(burst)
            };
            node.sched
                .completed(&key, outcome, Duration::from_nanos(done.end));
            if !done.busy && done.sampled {
                node.rotation.probed(&key);
            }
        }
    }

    /// A new round: this round's sampled paths replace the probed ones of the last.
    fn new_round(&mut self, n: usize, round: u64, t: Duration) -> Result<(), SimulateError> {
        let config = self.config;
        let node = &mut self.nodes[n];
        node.next_round = node.selector.round_start(round + 1);
        let wanted = node.selector.sampled_path_indices(round);
        let change = node
            .rotation
            .advance(round, wanted.into_iter().map(|s| s.key.into()).collect());
        let mut removed = change.removed;
        let mut upsert: Vec<PathPlan<SimKey>> = change
            .added
            .iter()
            .map(|k| PathPlan {
                key: *k,
                interval: config.selection.round,
                jitter: config.jitter,
                expected_burst: config.burst,
            })
            .collect();
        if node.selector.fixed_paths_rotate() {
            // A group larger than max_peers: its window moves too.
            let fixed = sim_keyed(node.selector.fixed_path_indices(round));
            let mut keep: Vec<SimKey> = fixed.iter().map(|s| s.key).collect();
            keep.sort_unstable();
            removed.extend(
                node.sched
                    .paths()
                    .filter(|k| keep.binary_search(k).is_err() && !node.rotation.contains(k))
                    .copied(),
            );
            upsert.extend(fitted_plans(config, &fixed, node.share));
        }
        node.sched
            .update_paths(&removed, upsert, t)
            .map_err(|e| SimulateError::Schedule(e.to_string()))?;
        self.rewake_running(n);
        self.sample(n, t);
        Ok(())
    }

    /// The new path set may have changed what a running rail of node `n` does next.
    fn rewake_running(&mut self, n: usize) {
        let node = &self.nodes[n];
        let rails = &mut self.rails[span(n, self.config.rails)];
        for rail in running_rails(node.running) {
            let r = &mut rails[rail];
            r.wake = wake_for(&node.sched, rail, r.end, r.busy);
        }
    }

    /// Starts a burst of node `n` on `key`, or gets `busy` from the responder.
    fn attempt(&mut self, n: usize, key: SimKey, t: Duration) {
        let config = self.config;
        let rail = key.rail;
        let peer = key.peer as usize;
        let now = nanos(t);
        let responder = &mut self.responders[peer * config.rails as usize + rail as usize];
        self.attempts += 1;
        let busy = responder.busy_until > now;
        let hold = if busy {
            responder.aimed += 1;
            self.busy += 1;
            BUSY_ANSWER
        } else {
            responder.busy_until = nanos(t + config.burst);
            responder.aimed = 1;
            config.burst
        };
        self.peak_aimed = self.peak_aimed.max(responder.aimed);
        let same_group = peer / config.nodes_per_group == n / config.nodes_per_group;
        let preferred = same_group || self.full_mesh;
        let node = &mut self.nodes[n];
        let mut probes = 0;
        if !busy {
            probes = node.stats.record_probe(rail, peer, same_group, t);
            self.gaps.record(n, peer, rail, t);
        }
        let m = &config.series;
        let capacity = m.unpaced_every > 0 && probes >= m.unpaced_every;
        let series = PathSeries {
            base: m.per_path + if capacity { m.capacity_per_path } else { 0 },
            detail: m.detail_per_path,
            derived: m.derived_per_path + usize::from(capacity),
        };
        node.budget
            .record(key.id(config.nodes), t, preferred, series);
        Self::expire(node, n, t, config, self.full_mesh);
        let end = nanos(t + hold);
        let wake = wake_for(&node.sched, rail.into(), end, busy);
        node.running |= 1 << rail;
        let r = &mut self.rails[span(n, config.rails)][usize::from(rail)];
        r.end = end;
        r.wake = wake;
        r.bursts += u64::from(!busy);
        r.peer = key.peer;
        r.busy = busy;
        r.sampled = !preferred;
    }

    /// Node `n`'s next wake-up (ns) after `t`: its next due path, a running rail's wake-up
    /// ([`Rail::wake`]), or the next round.
    fn next_wake(&self, n: usize, t: Duration) -> u64 {
        let node = &self.nodes[n];
        let rails = &self.rails[span(n, self.config.rails)];
        let mut wake = node.next_round;
        if let Some(w) = node.sched.wait_until() {
            wake = wake.min(w);
        }
        let mut wake = nanos(wake);
        for rail in running_rails(node.running) {
            let r = &rails[rail];
            debug_assert_eq!(r.wake, wake_for(&node.sched, rail, r.end, r.busy));
            wake = wake.min(r.wake);
        }
        wake.max(nanos(t) + 1)
    }

    /// Takes off node `n`'s `/metrics` the paths out of its selection not probed for the TTL.
    fn expire(node: &mut Node, n: usize, t: Duration, config: &SimulationConfig, full_mesh: bool) {
        let rotation = &node.rotation;
        let nodes_per_group = config.nodes_per_group;
        node.budget.expire(t, |id| {
            let (peer, rail) = stats::path_of(*id, config.nodes);
            full_mesh
                || peer / nodes_per_group == n / nodes_per_group
                || rotation.contains(&SimKey {
                    rail: rail as u16,
                    peer: peer as u32,
                })
        });
    }

    /// Samples node `n`'s figures (at each round): series, paths, duty cycle.
    fn sample(&mut self, n: usize, t: Duration) {
        let config = self.config;
        let node = &mut self.nodes[n];
        Self::expire(node, n, t, config, self.full_mesh);
        let peers = node.budget.peers(|id| stats::path_of(*id, config.nodes).0);
        let series = node.budget.series()
            + peers
            + config.series.per_node
            + config.series.per_device * config.rails as usize;
        let paths = node.sched.len();
        let duty = (0..config.rails)
            .filter_map(|r| node.sched.device_stats(&r, t))
            .map(|s| s.duty_cycle_used)
            .fold(0.0, f64::max);
        node.stats.sample(series, paths, duty);
    }

    fn finish(mut self, elapsed: Duration) -> Report {
        let end = self.config.duration;
        for n in 0..self.nodes.len() {
            self.sample(n, end);
        }
        let nodes: Vec<NodeFigures> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let burst_time: Vec<Duration> = self.rails[span(n, self.config.rails)]
                    .iter()
                    .map(|r| times(self.config.burst, r.bursts))
                    .collect();
                node.stats
                    .figures(n, end, self.config, &burst_time, node.budget.dropped())
            })
            .collect();
        let coverage = self.nodes[0].selector.coverage();
        Report::new(
            self.config,
            &self.layout,
            coverage,
            nodes,
            self.gaps.finish(end),
            self.peak_aimed,
            self.attempts,
            self.busy,
            elapsed,
        )
    }
}
