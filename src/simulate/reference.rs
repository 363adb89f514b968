//! A naive reference of the simulation, for the tests: one event queue for every device of the
//! cluster, on one thread, and each probe counted in its node's series budget as it starts.
//!
//! It runs the same scheduler, selection and series budget as [`run`](super::run) under the
//! same rules (module docs), without what lets that one scale: rails apart on their own queues
//! and threads, and the nodes' accounts replayed by chunks of virtual time. The two must give
//! the same report.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::metrics::budget::{PathSeries, SeriesBudget};
use crate::schedule::{Outcome, PathPlan, Rotation, Scheduler};

use super::stats::{gap_figures, path_id, path_of, NodeStats, RailGaps, SameGroupWaits};
use super::{
    fitted_plans, longest_fixed_plan, nanos, node_selection, plan_same_group, setup, times, Report,
    SimContext, SimKey, SimulationConfig, BUSY_ANSWER,
};

/// A burst (or `busy` answer) a device runs. Times in nanoseconds of virtual time.
#[derive(Debug, Clone, Copy)]
struct Burst {
    end: u64,
    peer: u32,
    busy: bool,
    /// A probe of this round's other-group sample.
    sampled: bool,
}

/// A node's device on one rail.
struct Device {
    sched: Scheduler<SimKey>,
    rotation: Rotation<SimKey>,
    burst: Option<Burst>,
    /// Bursts so far (not `busy` answers).
    bursts: u64,
    /// Its paths and measured duty cycle at the last round (or the end).
    paths: usize,
    duty: f64,
    /// Its same-group paths' waits past their planned times.
    waits: SameGroupWaits,
}

/// A node's `/metrics` and figures.
struct Node {
    budget: SeriesBudget<u64>,
    stats: NodeStats,
}

/// A probe (or `busy` answer) a node started on a rail, at a time.
#[derive(Debug, Clone, Copy)]
struct Probe {
    at: u64,
    node: usize,
    rail: u16,
    peer: usize,
    busy: bool,
}

struct Cluster<'a> {
    ctx: SimContext<'a>,
    /// `[rail][node]`.
    devices: Vec<Vec<Device>>,
    /// `[rail][node]`: when the responder device is free again (ns), and how many probers
    /// aimed at it meanwhile.
    responders: Vec<Vec<(u64, u32)>>,
    gaps: Vec<RailGaps>,
    nodes: Vec<Node>,
    /// Every device's next wake-up: `(ns, node, rail)`.
    queue: BinaryHeap<Reverse<(u64, usize, u16)>>,
    peak_aimed: u32,
    attempts: u64,
    busy: u64,
}

/// The simulation of `config`, the naive way.
pub(super) fn run(config: &SimulationConfig) -> Report {
    let (ctx, layout, selectors) = setup(config);
    let rails = config.rails as usize;
    let devices = (0..rails)
        .map(|_| {
            (ctx.seeds.iter())
                .map(|seed| Device {
                    sched: Scheduler::new(*seed, ctx.schedule.clone()).expect("a valid config"),
                    rotation: Rotation::new(),
                    burst: None,
                    bursts: 0,
                    paths: 0,
                    duty: 0.0,
                    waits: SameGroupWaits::new(config.nodes_per_group),
                })
                .collect()
        })
        .collect();
    let nodes = (0..config.nodes)
        .map(|_| Node {
            budget: super::node_budget(config),
            stats: NodeStats::new(rails, config.nodes_per_group),
        })
        .collect();
    let mut c = Cluster {
        devices,
        responders: vec![vec![(0, 0); config.nodes]; rails],
        gaps: (0..config.rails)
            .map(|r| RailGaps::new(config, r, ctx.groups, ctx.track_all))
            .collect(),
        nodes,
        queue: BinaryHeap::new(),
        peak_aimed: 0,
        attempts: 0,
        busy: 0,
        ctx,
    };
    // Round 0: every node's paths at time 0.
    for (n, selector) in selectors.iter().enumerate() {
        for (r, selection) in node_selection(selector, 0, true, rails)
            .into_iter()
            .enumerate()
        {
            let dev = &mut c.devices[r][n];
            dev.rotation
                .advance(0, selection.sampled.iter().map(|s| s.key).collect());
            let mut selected = selection.fixed.unwrap_or_default();
            selected.extend(selection.sampled);
            let plans = fitted_plans(config, &selected, c.ctx.shares[n]);
            let longest = longest_fixed_plan(&plans, &selected);
            dev.sched
                .set_paths(plans, Duration::ZERO)
                .expect("valid plans");
            plan_same_group(&dev.sched, &mut dev.waits, r as u16, n, &c.ctx);
            let planned = longest
                .and_then(|k| dev.sched.path_status(&k))
                .map(|st| st.effective_interval)
                .unwrap_or_default();
            let stats = &mut c.nodes[n].stats;
            stats.planned_interval = stats.planned_interval.max(planned);
            let wake = c.next_wake(n, r as u16, 0);
            c.queue.push(Reverse((wake, n, r as u16)));
        }
    }
    let end = nanos(config.duration);
    let round_length = nanos(config.selection.round).max(1);
    let mut round = 1;
    loop {
        let at = round * round_length;
        // Everything before the round (or after the last round, up to the end).
        let until = if at <= end { at } else { end + 1 };
        while let Some(&Reverse((t, n, r))) = c.queue.peek() {
            if t >= until {
                break;
            }
            c.queue.pop();
            let mut probes = Vec::new();
            c.complete(n, r, t);
            c.poll(n, r, t, &mut probes);
            c.account(&probes);
            let wake = c.next_wake(n, r, t);
            c.queue.push(Reverse((wake, n, r)));
        }
        if at > end {
            break;
        }
        // The round, for every device; then each node's sample, before the round's probes.
        let mut probes = Vec::new();
        let wanted: Vec<_> = (selectors.iter())
            .map(|s| node_selection(s, round, false, rails))
            .collect();
        c.queue.clear();
        for r in 0..config.rails {
            for (n, selections) in wanted.iter().enumerate() {
                c.complete(n, r, at);
                c.new_round(n, r, round, at, &selections[usize::from(r)]);
                let dev = &mut c.devices[usize::from(r)][n];
                dev.paths = dev.sched.len();
                dev.duty = (dev.sched.device_stats(&r, Duration::from_nanos(at)))
                    .map_or(0.0, |s| s.duty_cycle_used);
                c.poll(n, r, at, &mut probes);
                let wake = c.next_wake(n, r, at);
                c.queue.push(Reverse((wake, n, r)));
            }
        }
        for n in 0..config.nodes {
            c.sample(n, Duration::from_nanos(at));
        }
        probes.sort_by_key(|p| (p.node, p.rail));
        c.account(&probes);
        round += 1;
    }
    // The end: the bursts that ended, the figures.
    let t = Duration::from_nanos(end);
    for r in 0..config.rails {
        for n in 0..config.nodes {
            c.complete(n, r, end);
            let dev = &mut c.devices[usize::from(r)][n];
            dev.paths = dev.sched.len();
            dev.duty = (dev.sched.device_stats(&r, t)).map_or(0.0, |s| s.duty_cycle_used);
            dev.waits.finish(end);
        }
    }
    let mut figures = Vec::new();
    for n in 0..config.nodes {
        c.sample(n, t);
        let burst_time: Vec<Duration> = (c.devices.iter())
            .map(|of_rail| times(config.burst, of_rail[n].bursts))
            .collect();
        let node = &c.nodes[n];
        figures.push(node.stats.figures(
            n,
            t,
            config,
            &burst_time,
            node.budget.dropped(),
            node.budget.expired_early(),
        ));
    }
    Report::new(
        config,
        &layout,
        selectors[0].coverage(),
        figures,
        gap_figures(&c.gaps, config, t),
        (c.devices.iter().flatten())
            .map(|d| d.waits.longest)
            .max()
            .unwrap_or_default(),
        c.peak_aimed,
        c.attempts,
        c.busy,
        Duration::ZERO,
    )
}

impl Cluster<'_> {
    /// Node `n`'s device on rail `r` reports its burst if it ended by `now`, at its end.
    fn complete(&mut self, n: usize, r: u16, now: u64) {
        let dev = &mut self.devices[usize::from(r)][n];
        let Some(done) = dev.burst.filter(|b| b.end <= now) else {
            return;
        };
        dev.burst = None;
        let key = SimKey {
            rail: r,
            peer: done.peer,
        };
        let outcome = if done.busy {
            Outcome::busy(Duration::ZERO)
        } else {
            Outcome::success(self.ctx.config.burst)
        };
        dev.sched
            .completed(&key, outcome, Duration::from_nanos(done.end));
        if !done.busy && done.sampled {
            dev.rotation.probed(&key);
        }
        let peer = done.peer as usize;
        if !done.busy && self.ctx.same_group(n, peer) {
            let due = dev.sched.path_status(&key).map(|st| nanos(st.next_due));
            dev.waits
                .planned(peer % self.ctx.config.nodes_per_group, due);
        }
    }

    /// Node `n`'s device on rail `r` starts what is due at `now`; its probes go to `probes`.
    fn poll(&mut self, n: usize, r: u16, now: u64, probes: &mut Vec<Probe>) {
        let config = self.ctx.config;
        let dispatches = self.devices[usize::from(r)][n]
            .sched
            .poll(Duration::from_nanos(now));
        for d in dispatches {
            let peer = d.key.peer as usize;
            let (busy_until, aimed) = &mut self.responders[usize::from(r)][peer];
            self.attempts += 1;
            let busy = *busy_until > now;
            let hold = if busy {
                *aimed += 1;
                self.busy += 1;
                nanos(BUSY_ANSWER)
            } else {
                *busy_until = now + nanos(config.burst);
                *aimed = 1;
                nanos(config.burst)
            };
            self.peak_aimed = self.peak_aimed.max(*aimed);
            if !busy {
                self.gaps[usize::from(r)].record(n, peer, now);
            }
            probes.push(Probe {
                at: now,
                node: n,
                rail: r,
                peer,
                busy,
            });
            let dev = &mut self.devices[usize::from(r)][n];
            if self.ctx.same_group(n, peer) {
                dev.waits.tried(peer % config.nodes_per_group, now, busy);
            }
            dev.bursts += u64::from(!busy);
            dev.burst = Some(Burst {
                end: now + hold,
                peer: d.key.peer,
                busy,
                sampled: !self.ctx.preferred(n, peer),
            });
        }
    }

    /// When node `n`'s device on rail `r` must next wake, after `t`: when its next path may
    /// start, or its burst ends (for a burst, not before its next path may start).
    fn next_wake(&self, n: usize, r: u16, t: u64) -> u64 {
        let dev = &self.devices[usize::from(r)][n];
        let mut wake = dev.sched.wait_until().map_or(u64::MAX, nanos);
        if let Some(b) = dev.burst {
            let burst_wake = if b.busy {
                b.end
            } else {
                (dev.sched.next_due(&r)).map_or(b.end, |(_, due)| nanos(due).max(b.end))
            };
            wake = wake.min(burst_wake);
        }
        wake.max(t + 1)
    }

    /// Round `round` at `t` for node `n`'s device on rail `r`.
    fn new_round(
        &mut self,
        n: usize,
        r: u16,
        round: u64,
        t: u64,
        selection: &super::RailSelection,
    ) {
        let config = self.ctx.config;
        let dev = &mut self.devices[usize::from(r)][n];
        let change =
            (dev.rotation).advance(round, selection.sampled.iter().map(|s| s.key).collect());
        let mut removed = change.removed;
        let mut upsert: Vec<PathPlan<SimKey>> = (change.added.iter())
            .map(|k| {
                PathPlan::new(*k, config.selection.round)
                    .with_jitter(config.jitter)
                    .with_expected_burst(config.burst)
            })
            .collect();
        if let Some(fixed) = &selection.fixed {
            let keep: Vec<SimKey> = fixed.iter().map(|s| s.key).collect();
            removed.extend(
                (dev.sched.paths())
                    .filter(|k| !keep.contains(k) && !dev.rotation.contains(k))
                    .copied(),
            );
            upsert.extend(fitted_plans(config, fixed, self.ctx.shares[n]));
        }
        dev.sched
            .update_paths(&removed, upsert, Duration::from_nanos(t))
            .expect("valid plans");
        if selection.fixed.is_some() {
            plan_same_group(&dev.sched, &mut dev.waits, r, n, &self.ctx);
        }
    }

    /// The probes' series, node by node, each node's in the order given.
    fn account(&mut self, probes: &[Probe]) {
        let config = self.ctx.config;
        let m = &config.series;
        for p in probes {
            let t = Duration::from_nanos(p.at);
            let node = &mut self.nodes[p.node];
            let probes = if p.busy {
                0
            } else {
                (node.stats).record_probe(p.rail, p.peer, self.ctx.same_group(p.node, p.peer), t)
            };
            let capacity = m.unpaced_every > 0 && probes >= m.unpaced_every;
            let series = PathSeries {
                base: m.per_path + if capacity { m.capacity_per_path } else { 0 },
                detail: m.detail_per_path,
                derived: m.derived_per_path + usize::from(capacity),
            };
            let id = path_id(p.peer, p.rail, config.nodes);
            let preferred = self.ctx.preferred(p.node, p.peer);
            let (ctx, devices) = (&self.ctx, &self.devices);
            node.budget.record(id, t, preferred, series, |id| {
                selected(ctx, devices, p.node, *id)
            });
            self.expire(p.node, t);
        }
    }

    /// Takes off node `n`'s `/metrics` the paths out of its selection not probed for the TTL.
    fn expire(&mut self, n: usize, t: Duration) {
        let (ctx, devices) = (&self.ctx, &self.devices);
        (self.nodes[n].budget).expire(t, |id| selected(ctx, devices, n, *id));
    }

    /// Node `n`'s series, paths and duty cycle at `t`.
    fn sample(&mut self, n: usize, t: Duration) {
        let config = self.ctx.config;
        self.expire(n, t);
        let node = &mut self.nodes[n];
        let series = super::node_series(&node.budget, config);
        let paths = self.devices.iter().map(|of_rail| of_rail[n].paths).sum();
        let duty = (self.devices.iter()).fold(0.0_f64, |d, of_rail| d.max(of_rail[n].duty));
        node.stats.sample(series, paths, duty);
    }
}

/// Whether path `id` is in node `n`'s selection now.
fn selected(ctx: &SimContext, devices: &[Vec<Device>], n: usize, id: u64) -> bool {
    let (peer, rail) = path_of(id, ctx.config.nodes);
    let key = SimKey {
        rail: rail as u16,
        peer: peer as u32,
    };
    ctx.preferred(n, peer) || devices[rail][n].rotation.contains(&key)
}
