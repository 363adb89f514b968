//! `simulate`: the real scheduler and selection of every node of a synthetic cluster, run in
//! virtual time (docs/scale.md, "Simulation").
//!
//! Each node has its own [`Selector`] and, per device, the scheduler state and
//! [`Rotation`](crate::schedule::Rotation) of a real node (seeded by its name and the device's);
//! all share one [`Layout`] of the cluster.
//! Each rail of the cluster has its own event queue of its devices' next wake-ups (a due path,
//! the end of a burst or of a `busy` answer), so the cost is per burst, not per node and tick,
//! and the rails run side by side on every core between two rounds (module `rail` says why
//! that is the same as one queue for all). What is modelled and what is not:
//! - a burst takes exactly `burst` of device time and succeeds; setup and control round trips
//!   take no time, except a `busy` answer, which takes [`BUSY_ANSWER`];
//! - a **responder serves one burst per device at a time**: a prober that arrives while the
//!   peer's device on that rail serves another burst gets `busy` and retries as the scheduler
//!   says; that attempt counts as aimed at the device at once with the burst being served;
//! - every node starts at time 0 (a DaemonSet rollout, the worst case for phases) and rounds
//!   follow the shared virtual clock (NTP on a real cluster);
//! - series: every path probed at least once and not expired has `series_per_path` series (its
//!   probe families), every node `series_per_node` plus `series_per_device` per rail, the
//!   judged families of a healthy node (room for them kept in the series budget), and one
//!   `peer_info` per peer with a path on `/metrics`; a path leaves `/metrics` when it is out of
//!   the selection and has not been probed for `series_ttl`, or when the series budget needs
//!   the room ([`SeriesBudget`](crate::metrics::budget::SeriesBudget)).

mod accounts;
mod rail;
#[cfg(test)]
mod reference;
mod report;
mod stats;

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::schedule::{
    fit_plans, seed_from_name, Layout, LocalDevice, PathIndex, PathPlan, Role, ScheduleConfig,
    ScheduleKey, Scheduler, Selected, SelectionConfig, Selector,
};
use accounts::Accounts;
use rail::RailSim;
pub use report::{GapFigures, NodeFigures, Report, Summary};
use stats::SameGroupWaits;
pub use stats::Wait;

/// Device time of a `busy` answer: the control round trip that asked for the burst.
pub const BUSY_ANSWER: Duration = Duration::from_millis(1);

/// Series of a node besides its paths' and its devices': build, process (7), config (2),
/// node_info, responder sessions and verification, the series budget's own, pings shed.
pub const SERIES_PER_NODE: usize = 23;
/// Series per local device: port facts (6), schedule figures (4), pings answered, refused and
/// their clock (3).
pub const SERIES_PER_DEVICE: usize = 13;

/// Series of the judged families per device and crossing on a healthy node (paths, newest
/// success, newest good result; docs/metrics.md, "Judged paths").
pub const JUDGED_SERIES_PER_CROSSING: usize = 3;

/// The judged families' series of a healthy node of `config`: local paths only in a cluster of
/// one group, local and cross ones otherwise. The series budget keeps room for them.
pub(crate) fn judged_series(config: &SimulationConfig) -> usize {
    let crossings = if config.nodes_per_group < config.nodes {
        2
    } else {
        1
    };
    JUDGED_SERIES_PER_CROSSING * crossings * config.rails as usize
}

/// A node's series budget, room kept for its judged families.
pub(crate) fn node_budget<K: Clone + Ord>(
    config: &SimulationConfig,
) -> crate::metrics::budget::SeriesBudget<K> {
    let mut budget =
        crate::metrics::budget::SeriesBudget::new(config.series.budget, config.series.ttl);
    budget.reserve(judged_series(config));
    budget
}

/// Every series on node-budget `budget`'s node: the budgeted ones ([`path_series`]), with one
/// `peer_info` per peer it shows a path of, and the node's and its devices' own.
pub(crate) fn node_series(
    budget: &crate::metrics::budget::SeriesBudget<u64>,
    config: &SimulationConfig,
) -> usize {
    let peers = budget.peers(|id| stats::path_of(*id, config.nodes).0);
    let rails = config.rails as usize;
    path_series(budget, &config.series, peers, judged_series(config), rails)
        + config.series.per_node
        + config.series.per_device * rails
}

/// The budgeted series of a node whose bursts' are `budget`'s and which shows `peers`
/// `peer_info` series and `judged` judged series: those and its ping series in the room the
/// others leave in the budget (`model.ping_per_device` for each of its `devices`' histograms
/// first, if they all fit; then `model.ping_per_path` per path on `/metrics`).
pub(crate) fn path_series<K: Clone + Ord>(
    budget: &crate::metrics::budget::SeriesBudget<K>,
    model: &SeriesModel,
    peers: usize,
    judged: usize,
    devices: usize,
) -> usize {
    let room = budget
        .limit()
        .saturating_sub(budget.series() + peers + judged);
    let pings = match model.ping_per_path {
        0 => 0,
        per_path => match devices * model.ping_per_device {
            histograms if histograms <= room => {
                histograms + (budget.paths() * per_path).min(room - histograms)
            }
            _ => (budget.paths() * per_path).min(room),
        },
    };
    budget.series() + peers + judged + pings
}

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
    /// Threads to run the rails on; `None`: one per core. The figures do not depend on it.
    pub threads: Option<NonZeroUsize>,
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
    /// Series of one pinged path (0: pings off). Every path on `/metrics` is pinged (a ping
    /// target stays as long as a burst confirmed it within the TTL); the ping series take only
    /// the room the bursts' series leave in the budget (docs/metrics.md, "Pings").
    pub ping_per_path: usize,
    /// Series of one device's RTT histogram, with pings on; in the same room, first.
    pub ping_per_device: usize,
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
    /// As the exporter's device of the same name would.
    fn device_seed(rail: &u16) -> u64 {
        seed_from_name(&device_name(*rail))
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

/// `t` in nanoseconds (saturating: 584 years).
fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// `d` times `k`, exactly.
fn times(d: Duration, k: u64) -> Duration {
    let nanos = d.as_nanos() * u128::from(k);
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (nanos % 1_000_000_000) as u32)
}

/// Virtual time the rails run before the nodes' accounts catch up with them: long enough that
/// a node's accounts are read for dozens of its probes at once, short enough that the log of a
/// chunk stays small (about 500,000 probes at 10,000 nodes).
const CHUNK: Duration = Duration::from_secs(120);

/// The name of node `i`: fixed width, so that name order is index order.
fn node_name(i: usize) -> String {
    format!("node{i:05}")
}

fn device_name(rail: u16) -> String {
    format!("mlx5_{rail}")
}

/// A path's plan before fitting: the configured interval, jitter and burst.
fn base_plan(config: &SimulationConfig, key: SimKey) -> PathPlan<SimKey> {
    PathPlan::new(key, config.interval)
        .with_jitter(config.jitter)
        .with_expected_burst(config.burst)
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

/// A fixed path (same group or full mesh) of one device with the longest plan. The scheduler
/// stretches all the intervals of a device by one factor, so the longest interval it gives a
/// fixed path is that path's (any of them, on a tie).
fn longest_fixed_plan(plans: &[PathPlan<SimKey>], selected: &[Selected<SimKey>]) -> Option<SimKey> {
    plans
        .iter()
        .zip(selected)
        .filter(|(_, s)| s.role != Role::Sampled)
        .max_by_key(|(plan, _)| plan.interval)
        .map(|(plan, _)| plan.key)
}

/// Notes in `waits` when each same-group path of node `n`'s device on `rail` is next planned,
/// for those in `sched` that have no planned time noted and no burst running (at the start,
/// and where a group's paths rotate), and forgets those that left it.
fn plan_same_group(
    sched: &Scheduler<SimKey>,
    waits: &mut SameGroupWaits,
    rail: u16,
    n: usize,
    ctx: &SimContext,
) {
    let per_group = ctx.config.nodes_per_group;
    let first = n / per_group * per_group;
    let members = (first..ctx.config.nodes.min(first + per_group)).filter(|peer| *peer != n);
    for peer in members {
        let key = SimKey {
            rail,
            peer: peer as u32,
        };
        match sched.path_status(&key) {
            None => waits.planned(peer % per_group, None),
            Some(st) if !st.running && !waits.is_planned(peer % per_group) => {
                waits.planned(peer % per_group, Some(nanos(st.next_due)));
            }
            Some(_) => {}
        }
    }
}

/// A node's paths on one rail for a round.
#[derive(Debug, Clone, Default)]
struct RailSelection {
    /// Its fixed paths: at the start, and at every round where they rotate (a group larger
    /// than `max_peers`); `None`: they stay as they are.
    fixed: Option<Vec<Selected<SimKey>>>,
    /// Its sampled other-group paths.
    sampled: Vec<Selected<SimKey>>,
}

/// What every part of the simulation reads and none changes.
struct SimContext<'a> {
    config: &'a SimulationConfig,
    schedule: ScheduleConfig,
    /// Per node: its scheduler's seed (from its name, as on a real node).
    seeds: Vec<u64>,
    /// Per node: other-group paths per device and round ([`Coverage`](crate::schedule::Coverage)).
    shares: Vec<usize>,
    /// Every node probes every other (all nodes share the layout, so all alike).
    full_mesh: bool,
    groups: usize,
    /// Every path's gaps are tracked.
    track_all: bool,
}

impl SimContext<'_> {
    fn same_group(&self, n: usize, peer: usize) -> bool {
        peer / self.config.nodes_per_group == n / self.config.nodes_per_group
    }

    /// A fixed path of node `n` (same group, or full mesh), kept on `/metrics` first.
    fn preferred(&self, n: usize, peer: usize) -> bool {
        self.full_mesh || self.same_group(n, peer)
    }
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
    let round_length = nanos(config.selection.round).max(1);
    let hour = nanos(Duration::from_secs(3600));
    let (mut from, mut round, mut starts_round) = (0u64, 0u64, false);
    let mut next_report = hour;
    loop {
        let next_round = (round + 1u64).saturating_mul(round_length);
        let until = next_round
            .min(from.saturating_add(nanos(CHUNK)))
            .min(end.saturating_add(1));
        sim.run_chunk(from, starts_round.then_some(round), until)?;
        if until > end {
            break;
        }
        while until >= next_report {
            progress(Duration::from_nanos(next_report));
            next_report = next_report.saturating_add(hour);
        }
        starts_round = until == next_round;
        if starts_round {
            round += 1;
        }
        from = until;
    }
    Ok(sim.finish(started.elapsed()))
}

struct Sim<'a> {
    ctx: SimContext<'a>,
    layout: Arc<Layout>,
    selectors: Vec<Selector>,
    /// Per rail (in rail order), that rail of every node.
    rails: Vec<RailSim>,
    /// Per node.
    accounts: Vec<Accounts>,
    threads: usize,
}

/// What the nodes share: the context, the cluster's layout, and every node's selector.
fn setup(config: &SimulationConfig) -> (SimContext<'_>, Arc<Layout>, Vec<Selector>) {
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
    let selectors: Vec<Selector> = names
        .iter()
        .map(|name| Selector::with_layout(name, layout.clone(), &devices, &config.selection))
        .collect();
    let ctx = SimContext {
        config,
        schedule: ScheduleConfig::with_duty_cycle(config.duty_cycle),
        seeds: names.iter().map(|name| seed_from_name(name)).collect(),
        shares: (selectors.iter())
            .map(|s| s.coverage().sampled_per_device)
            .collect(),
        // One layout for all: every node alike.
        full_mesh: selectors[0].is_full_mesh(),
        groups: config.nodes.div_ceil(config.nodes_per_group),
        track_all: config.track_all_paths.unwrap_or_else(|| {
            config.nodes as u64 * (config.nodes as u64 - 1) * u64::from(config.rails)
                <= TRACK_ALL_PATHS_UP_TO
        }),
    };
    (ctx, layout, selectors)
}

impl<'a> Sim<'a> {
    fn new(config: &'a SimulationConfig) -> Result<Self, SimulateError> {
        let (ctx, layout, selectors) = setup(config);
        let rails = (0..config.rails)
            .map(|r| RailSim::new(r, &ctx))
            .collect::<Result<Vec<_>, _>>()?;
        let accounts = (0..config.nodes).map(|_| Accounts::new(&ctx)).collect();
        let threads = config
            .threads
            .or_else(|| std::thread::available_parallelism().ok())
            .map_or(1, NonZeroUsize::get);
        let mut sim = Sim {
            ctx,
            layout,
            selectors,
            rails,
            accounts,
            threads,
        };
        sim.start()?;
        Ok(sim)
    }

    /// Round 0's paths, all at once.
    fn start(&mut self) -> Result<(), SimulateError> {
        let wanted = self.select(0, true);
        for (rail, selections) in self.rails.iter_mut().zip(wanted) {
            for (n, selection) in selections.into_iter().enumerate() {
                let planned = rail.start_node(n, selection, &self.ctx)?;
                let stats = &mut self.accounts[n].stats;
                stats.planned_interval = stats.planned_interval.max(planned);
            }
            rail.rebuild_queue();
        }
        Ok(())
    }

    /// Every node's paths of `round`, per rail (`[rail][node]`): its sampled ones, and its
    /// fixed ones at the start (`all`) or where they rotate.
    fn select(&self, round: u64, all: bool) -> Vec<Vec<RailSelection>> {
        let rails = self.rails.len();
        let per_thread = self.selectors.len().div_ceil(self.threads);
        let parts: Vec<&[Selector]> = self.selectors.chunks(per_thread).collect();
        let per_node = parallel(parts, |selectors| {
            (selectors.iter())
                .map(|s| node_selection(s, round, all, rails))
                .collect::<Vec<_>>()
        });
        let mut wanted: Vec<Vec<RailSelection>> = (0..rails)
            .map(|_| Vec::with_capacity(self.selectors.len()))
            .collect();
        for of_node in per_node.into_iter().flatten() {
            for (of_rail, selection) in wanted.iter_mut().zip(of_node) {
                of_rail.push(selection);
            }
        }
        wanted
    }

    /// Runs the rails from `from` to before `until` (ns), starting with `round` at `from`,
    /// then the nodes' accounts of what they did.
    fn run_chunk(
        &mut self,
        from: u64,
        round: Option<u64>,
        until: u64,
    ) -> Result<(), SimulateError> {
        let wanted = round.map(|round| (round, self.select(round, false)));
        let round = wanted.as_ref().map(|(k, w)| (*k, w.as_slice()));
        self.run_rails(from, round, until)?;
        self.run_accounts(from, round.is_some());
        Ok(())
    }

    /// Each rail's events from `from` (a round's start, with its selections) to before
    /// `until`; the rails spread over the threads.
    fn run_rails(
        &mut self,
        from: u64,
        round: Option<(u64, &[Vec<RailSelection>])>,
        until: u64,
    ) -> Result<(), SimulateError> {
        let ctx = &self.ctx;
        let threads = self.threads.min(self.rails.len());
        let mut groups: Vec<Vec<&mut RailSim>> = (0..threads).map(|_| Vec::new()).collect();
        for (r, rail) in self.rails.iter_mut().enumerate() {
            groups[r % threads].push(rail);
        }
        let results = parallel(groups, |group| {
            group.into_iter().try_for_each(|rail| {
                if let Some((k, wanted)) = round {
                    rail.round(k, from, &wanted[usize::from(rail.rail())], ctx)?;
                }
                rail.run_until(until, ctx);
                rail.sort_log();
                Ok(())
            })
        });
        results.into_iter().collect()
    }

    /// Each node's accounts of the chunk just run (sampled first at a round's start `from`);
    /// the nodes spread over the threads.
    fn run_accounts(&mut self, from: u64, sample: bool) {
        let (rails, ctx) = (&self.rails, &self.ctx);
        let per_thread = self.accounts.len().div_ceil(self.threads);
        let parts: Vec<(usize, &mut [Accounts])> =
            self.accounts.chunks_mut(per_thread).enumerate().collect();
        parallel(parts, |(i, part)| {
            for (k, accounts) in part.iter_mut().enumerate() {
                let n = i * per_thread + k;
                if sample {
                    accounts.sample(n, Duration::from_nanos(from), rails, ctx);
                }
                accounts.replay(n, rails, ctx);
            }
        });
    }

    fn finish(mut self, elapsed: Duration) -> Report {
        let end = self.ctx.config.duration;
        for rail in &mut self.rails {
            rail.finish(nanos(end), &self.ctx);
        }
        let mut nodes = Vec::with_capacity(self.accounts.len());
        for (n, accounts) in self.accounts.iter_mut().enumerate() {
            accounts.sample(n, end, &self.rails, &self.ctx);
            nodes.push(accounts.figures(n, end, &self.rails, &self.ctx));
        }
        let rails = &self.rails;
        debug_assert_eq!(
            self.accounts.iter().map(Accounts::replayed).sum::<u64>(),
            rails.iter().map(|r| r.attempts).sum::<u64>(),
            "every probe the rails started is in the accounts"
        );
        let gaps = stats::gap_figures(rails.iter().map(|r| &r.gaps), self.ctx.config, end);
        let coverage = self.selectors[0].coverage();
        Report::new(
            self.ctx.config,
            &self.layout,
            coverage,
            nodes,
            gaps,
            rails
                .iter()
                .map(RailSim::longest_wait)
                .max()
                .unwrap_or_default(),
            rails.iter().map(|r| r.peak_aimed).max().unwrap_or(0),
            rails.iter().map(|r| r.attempts).sum(),
            rails.iter().map(|r| r.busy).sum(),
            elapsed,
        )
    }
}

/// A selection's path keyed for the simulation.
fn sim_keyed(s: Selected<PathIndex>) -> Selected<SimKey> {
    Selected {
        key: s.key.into(),
        role: s.role,
    }
}

/// A node's paths of `round`, per rail: its sampled ones, and its fixed ones at the start
/// (`all`) or where they rotate.
fn node_selection(selector: &Selector, round: u64, all: bool, rails: usize) -> Vec<RailSelection> {
    let mut out = vec![RailSelection::default(); rails];
    if all || selector.fixed_paths_rotate() {
        for of_rail in &mut out {
            of_rail.fixed = Some(Vec::new());
        }
        for s in selector.fixed_path_indices(round) {
            let s = sim_keyed(s);
            if let Some(fixed) = &mut out[usize::from(s.key.rail)].fixed {
                fixed.push(s);
            }
        }
    }
    for s in selector.sampled_path_indices(round) {
        let s = sim_keyed(s);
        out[usize::from(s.key.rail)].sampled.push(s);
    }
    out
}

/// Runs `work` on each of `parts`, each on a thread of its own (the first on this one), and
/// returns what each returned, in order.
fn parallel<P: Send, R: Send>(parts: Vec<P>, work: impl Fn(P) -> R + Sync) -> Vec<R> {
    if parts.len() <= 1 {
        return parts.into_iter().map(work).collect();
    }
    std::thread::scope(|scope| {
        let mut parts = parts.into_iter();
        let first = parts.next();
        let work = &work;
        let others: Vec<_> = parts.map(|p| scope.spawn(move || work(p))).collect();
        let mut results: Vec<R> = first.into_iter().map(work).collect();
        for handle in others {
            results.push(
                handle
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e)),
            );
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 60 nodes in ToRs of 16 with 3 rails: groups larger than `max_peers` (their fixed paths
    /// rotate), sampled paths, `busy` answers, and a series budget small enough to drop.
    fn small_cluster(threads: usize) -> SimulationConfig {
        SimulationConfig {
            nodes: 60,
            rails: 3,
            nodes_per_group: 16,
            interval: Duration::from_secs(20),
            jitter: 0.1,
            burst: Duration::from_millis(500),
            duty_cycle: 0.05,
            // Not a whole number of rounds or chunks.
            duration: Duration::from_secs(3 * 3600 + 7),
            selection: SelectionConfig {
                max_peers: 8,
                sample: 3,
                round: Duration::from_secs(300),
                ..SelectionConfig::default()
            },
            series: SeriesModel {
                per_path: 10,
                capacity_per_path: 4,
                unpaced_every: 10,
                detail_per_path: 12,
                derived_per_path: 5,
                ping_per_path: 6,
                ping_per_device: crate::metrics::ping::SERIES_PER_DEVICE_HISTOGRAM,
                per_node: SERIES_PER_NODE,
                per_device: SERIES_PER_DEVICE,
                ttl: Duration::from_secs(900),
                budget: 600,
            },
            track_all_paths: Some(true),
            threads: NonZeroUsize::new(threads),
        }
    }

    #[test]
    fn the_figures_do_not_depend_on_the_threads() {
        let run = |threads| {
            let mut report = super::run(&small_cluster(threads), |_| {}).unwrap();
            report.elapsed = Duration::ZERO;
            report
        };
        let one = run(1);
        assert!(one.busy > 0, "no busy answer: {one:?}");
        assert!(one.dropped > 0, "nothing dropped: {one:?}");
        assert!(one.gaps.pair.is_some() && one.gaps.all.is_some());
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
        assert_eq!(one, run(5));
    }

    /// The naive reference (one queue for the whole cluster, one thread, every probe counted
    /// as it starts) gives the same report: a small cluster with rotating groups, a full mesh,
    /// and ToRs of 8 with the default series model.
    #[test]
    fn the_same_report_as_the_naive_reference() {
        let full_mesh = SimulationConfig {
            nodes: 10,
            rails: 2,
            nodes_per_group: 32,
            duration: Duration::from_secs(3600),
            ..small_cluster(2)
        };
        let tors = SimulationConfig {
            nodes: 50,
            rails: 4,
            nodes_per_group: 8,
            interval: Duration::from_secs(60),
            duration: Duration::from_secs(2 * 3600),
            selection: SelectionConfig {
                round: Duration::from_secs(600),
                ..SelectionConfig::default()
            },
            series: SeriesModel {
                per_path: 11,
                unpaced_every: 24,
                detail_per_path: 12,
                derived_per_path: 4,
                ttl: Duration::from_secs(600),
                budget: 4500,
                ..small_cluster(2).series
            },
            track_all_paths: None,
            ..small_cluster(2)
        };
        for config in [small_cluster(2), full_mesh, tors] {
            let mut report = super::run(&config, |_| {}).unwrap();
            report.elapsed = Duration::ZERO;
            assert!(report.attempts > 0);
            assert_eq!(report, reference::run(&config), "{config:?}");
        }
    }
}
