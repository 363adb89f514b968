//! One rail of every node: the schedulers of the rail's devices, their bursts, the responder
//! devices of the rail, and its own event queue.
//!
//! A rail is a world of its own between two rounds. A burst on rail `r` goes from a node's
//! device on `r` to a peer's device on `r`, so only probers of the same rail meet at a
//! responder; each device of a node has its own scheduler state and random generator
//! ([`ScheduleKey::device_seed`](crate::schedule::ScheduleKey::device_seed)); and what the
//! rails of a node share (its selection of peers, whose sampled part rotates) changes only at
//! rounds, which every node starts at the same virtual time. So each rail runs its own events,
//! in time order, up to a round or a chunk's end, on whichever thread holds it, and gives the
//! same figures as one queue for the whole cluster would.
//!
//! What a node's rails share besides (the series budget, its gap statistics) only counts what
//! the rails did and never changes it: each rail logs its probes ([`Probe`]) for the node's
//! accounts, which replay them in time order (module `accounts`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::schedule::{Dispatch, Outcome, PathPlan, Rotation, Scheduler};

use super::stats::{RailGaps, SameGroupWaits, Wait};
use super::{
    fitted_plans, longest_fixed_plan, nanos, plan_same_group, RailSelection, SimContext, SimKey,
    SimulateError, BUSY_ANSWER,
};

/// A probe (or `busy` answer) started by a node on this rail, for its accounts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Probe {
    /// Its start, in nanoseconds of virtual time.
    pub at: u64,
    pub node: u32,
    pub peer: u32,
    pub busy: bool,
}

/// The burst (or `busy` answer) a node's device on this rail runs, while `running` is set, and
/// its bursts so far. Times in nanoseconds of virtual time.
#[derive(Debug, Clone, Copy, Default)]
struct Burst {
    /// When the burst in progress ends.
    end: u64,
    /// Bursts (not `busy` answers) so far.
    bursts: u64,
    peer: u32,
    running: bool,
    busy: bool,
    /// A probe of this round's other-group sample (the rotation waits for it).
    sampled: bool,
}

/// A node's device on this rail: its scheduler, the sampled paths of the rail in this round,
/// its burst, and what it showed at the last round (for the node's sample).
struct Device {
    sched: Scheduler<SimKey>,
    rotation: Rotation<SimKey>,
    burst: Burst,
    /// Its next wake-up (ns): its entry in [`RailSim::queue`].
    wake: u64,
    /// Paths in its set, and its measured duty cycle, at the last round (or the end).
    paths: usize,
    duty: f64,
    /// Its same-group paths' waits past their planned times.
    waits: SameGroupWaits,
}

/// A responder device: the end of the burst it serves (ns), and how many probers aimed at it
/// meanwhile.
#[derive(Debug, Clone, Copy, Default)]
struct Responder {
    busy_until: u64,
    aimed: u32,
}

/// Rail `rail` of every node.
pub(super) struct RailSim {
    rail: u16,
    /// Per node, its device on this rail.
    devices: Vec<Device>,
    /// Per node, its responder device on this rail.
    responders: Vec<Responder>,
    /// Each device's next wake-up `(ns, node)`, one entry per node, the first on top (ties:
    /// node order).
    queue: BinaryHeap<Reverse<(u64, u32)>>,
    pub gaps: RailGaps,
    /// The buffer of each step's dispatches (one allocation for the whole run).
    dispatches: Vec<Dispatch<SimKey>>,
    /// This chunk's probes in the order they started (time, then node).
    log: Vec<Probe>,
    /// The last chunk's probes by node, each node's in time order ([`RailSim::sort_log`]).
    sorted: Vec<Probe>,
    pub peak_aimed: u32,
    pub attempts: u64,
    pub busy: u64,
}

/// When a device must wake for a burst that ends at `end`: at the end of a `busy` answer; else
/// when its next path may start, but not before the end.
fn wake_for(sched: &Scheduler<SimKey>, rail: u16, end: u64, busy: bool) -> u64 {
    if busy {
        return end;
    }
    sched
        .next_due(&rail)
        .map_or(end, |(_, due)| nanos(due).max(end))
}

impl RailSim {
    pub fn new(rail: u16, ctx: &SimContext) -> Result<Self, SimulateError> {
        let nodes = ctx.config.nodes;
        let mut devices = Vec::with_capacity(nodes);
        for seed in &ctx.seeds {
            devices.push(Device {
                sched: Scheduler::new(*seed, ctx.schedule.clone())
                    .map_err(|e| SimulateError::Schedule(e.to_string()))?,
                rotation: Rotation::new(),
                burst: Burst::default(),
                wake: u64::MAX,
                paths: 0,
                duty: 0.0,
                waits: SameGroupWaits::new(ctx.config.nodes_per_group),
            });
        }
        Ok(RailSim {
            rail,
            devices,
            responders: vec![Responder::default(); nodes],
            queue: BinaryHeap::new(),
            gaps: RailGaps::new(ctx.config, rail, ctx.groups, ctx.track_all),
            dispatches: Vec::with_capacity(1),
            log: Vec::new(),
            sorted: Vec::new(),
            peak_aimed: 0,
            attempts: 0,
            busy: 0,
        })
    }

    /// Round 0 of node `n`, with its paths on this rail. Returns the longest interval the
    /// scheduler gives one of its fixed paths.
    pub fn start_node(
        &mut self,
        n: usize,
        selection: RailSelection,
        ctx: &SimContext,
    ) -> Result<Duration, SimulateError> {
        let dev = &mut self.devices[n];
        let sampled = selection.sampled.iter().map(|s| s.key).collect();
        dev.rotation.advance(0, sampled);
        let mut selected = selection.fixed.unwrap_or_default();
        selected.extend(selection.sampled);
        let plans = fitted_plans(ctx.config, &selected, ctx.shares[n]);
        let longest = longest_fixed_plan(&plans, &selected);
        dev.sched
            .set_paths(plans, Duration::ZERO)
            .map_err(|e| SimulateError::Schedule(e.to_string()))?;
        plan_same_group(&dev.sched, &mut dev.waits, self.rail, n, ctx);
        let wake = self.next_wake(n, 0);
        self.devices[n].wake = wake;
        // The longest interval a fixed path gets, stretched by the scheduler if it must.
        Ok(longest
            .and_then(|k| self.devices[n].sched.path_status(&k))
            .map(|st| st.effective_interval)
            .unwrap_or_default())
    }

    pub fn rail(&self) -> u16 {
        self.rail
    }

    /// The queue of every node's wake-up on this rail, afresh (after the start, and after a
    /// round that moved them all).
    pub fn rebuild_queue(&mut self) {
        let entries = (self.devices.iter().enumerate()).map(|(n, d)| Reverse((d.wake, n as u32)));
        self.queue = entries.collect();
    }

    /// Runs every wake-up before `until` (ns), in time order (ties: node order).
    pub fn run_until(&mut self, until: u64, ctx: &SimContext) {
        while let Some(&Reverse((wake, n))) = self.queue.peek() {
            if wake >= until {
                break;
            }
            self.queue.pop();
            let next = self.step(n as usize, wake, ctx);
            self.queue.push(Reverse((next, n)));
        }
    }

    /// What a node's device does at `t`: its burst if it ended, then new bursts; returns its
    /// next wake-up.
    fn step(&mut self, n: usize, t: u64, ctx: &SimContext) -> u64 {
        self.complete(n, t, ctx);
        self.poll(n, t, ctx);
        let wake = self.next_wake(n, t);
        self.devices[n].wake = wake;
        wake
    }

    /// Reports node `n`'s burst if it ended by `now`, at its end time.
    fn complete(&mut self, n: usize, now: u64, ctx: &SimContext) {
        let dev = &mut self.devices[n];
        let done = dev.burst;
        if !done.running || done.end > now {
            return;
        }
        dev.burst.running = false;
        let key = SimKey {
            rail: self.rail,
            peer: done.peer,
        };
        let outcome = if done.busy {
            Outcome::busy(Duration::ZERO)
        } else {
            Outcome::success(ctx.config.burst)
        };
        dev.sched
            .completed(&key, outcome, Duration::from_nanos(done.end));
        if !done.busy && done.sampled {
            dev.rotation.probed(&key);
        }
        let peer = done.peer as usize;
        if !done.busy && ctx.same_group(n, peer) {
            let due = dev.sched.path_status(&key).map(|st| nanos(st.next_due));
            dev.waits.planned(peer % ctx.config.nodes_per_group, due);
        }
    }

    fn poll(&mut self, n: usize, t: u64, ctx: &SimContext) {
        let mut dispatches = std::mem::take(&mut self.dispatches);
        self.devices[n]
            .sched
            .poll_into(Duration::from_nanos(t), &mut dispatches);
        for d in &dispatches {
            self.attempt(n, d.key, t, ctx);
        }
        self.dispatches = dispatches;
    }

    /// Starts a burst of node `n` on `key` at `now`, or gets `busy` from the responder.
    fn attempt(&mut self, n: usize, key: SimKey, now: u64, ctx: &SimContext) {
        let config = ctx.config;
        let peer = key.peer as usize;
        let responder = &mut self.responders[peer];
        self.attempts += 1;
        let busy = responder.busy_until > now;
        let hold = if busy {
            responder.aimed += 1;
            self.busy += 1;
            nanos(BUSY_ANSWER)
        } else {
            responder.busy_until = now + nanos(config.burst);
            responder.aimed = 1;
            nanos(config.burst)
        };
        self.peak_aimed = self.peak_aimed.max(responder.aimed);
        if !busy {
            self.gaps.record(n, peer, now);
        }
        if ctx.same_group(n, peer) {
            (self.devices[n].waits).tried(peer % ctx.config.nodes_per_group, now, busy);
        }
        self.log.push(Probe {
            at: now,
            node: n as u32,
            peer: key.peer,
            busy,
        });
        let dev = &mut self.devices[n];
        dev.burst = Burst {
            end: now + hold,
            bursts: dev.burst.bursts + u64::from(!busy),
            peer: key.peer,
            running: true,
            busy,
            sampled: !ctx.preferred(n, peer),
        };
    }

    /// Node `n`'s next wake-up (ns) after `t`: its next due path, or its burst's wake-up.
    fn next_wake(&self, n: usize, t: u64) -> u64 {
        let dev = &self.devices[n];
        let mut wake = dev.sched.wait_until().map_or(u64::MAX, nanos);
        if dev.burst.running {
            let b = &dev.burst;
            wake = wake.min(wake_for(&dev.sched, self.rail, b.end, b.busy));
        }
        wake.max(t + 1)
    }

    /// Round `round` at `t` (ns) for every node, in node order: the bursts that ended, this
    /// round's paths on the rail (`wanted[n]`: the node's sampled paths, and its fixed ones
    /// where they rotate), what the node shows now, and its bursts at `t`.
    pub fn round(
        &mut self,
        round: u64,
        t: u64,
        wanted: &[RailSelection],
        ctx: &SimContext,
    ) -> Result<(), SimulateError> {
        let at = Duration::from_nanos(t);
        for (n, selection) in wanted.iter().enumerate() {
            self.complete(n, t, ctx);
            self.new_round(n, round, at, selection, ctx)?;
            self.note_figures(n, at);
            self.poll(n, t, ctx);
            self.devices[n].wake = self.next_wake(n, t);
        }
        self.rebuild_queue();
        Ok(())
    }

    /// This round's sampled paths replace the probed ones of the last.
    fn new_round(
        &mut self,
        n: usize,
        round: u64,
        t: Duration,
        selection: &RailSelection,
        ctx: &SimContext,
    ) -> Result<(), SimulateError> {
        let config = ctx.config;
        let dev = &mut self.devices[n];
        let sampled = selection.sampled.iter().map(|s| s.key);
        let change = dev.rotation.advance(round, sampled.collect());
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
        if let Some(fixed) = &selection.fixed {
            // A group larger than max_peers: its window moves too.
            let mut keep: Vec<SimKey> = fixed.iter().map(|s| s.key).collect();
            keep.sort_unstable();
            removed.extend(
                dev.sched
                    .paths()
                    .filter(|k| keep.binary_search(k).is_err() && !dev.rotation.contains(k))
                    .copied(),
            );
            upsert.extend(fitted_plans(config, fixed, ctx.shares[n]));
        }
        dev.sched
            .update_paths(&removed, upsert, t)
            .map_err(|e| SimulateError::Schedule(e.to_string()))?;
        if selection.fixed.is_some() {
            plan_same_group(&dev.sched, &mut dev.waits, self.rail, n, ctx);
        }
        Ok(())
    }

    /// Keeps what node `n`'s device shows at `t` for the node's sample: its paths and its
    /// measured duty cycle.
    fn note_figures(&mut self, n: usize, t: Duration) {
        let dev = &mut self.devices[n];
        dev.paths = dev.sched.len();
        dev.duty = dev
            .sched
            .device_stats(&self.rail, t)
            .map_or(0.0, |s| s.duty_cycle_used);
    }

    /// The end at `t` (ns): every burst that ended is reported, and the figures noted.
    pub fn finish(&mut self, t: u64, ctx: &SimContext) {
        for n in 0..self.devices.len() {
            self.complete(n, t, ctx);
            self.note_figures(n, Duration::from_nanos(t));
            self.devices[n].waits.finish(t);
        }
    }

    /// The longest wait of a same-group probe of this rail past its planned time.
    pub fn longest_wait(&self) -> Wait {
        (self.devices.iter())
            .map(|d| d.waits.longest)
            .max()
            .unwrap_or_default()
    }

    /// Sorts this chunk's probes by node (each node's in time order, as they were logged), for
    /// the accounts.
    pub fn sort_log(&mut self) {
        self.sorted = std::mem::take(&mut self.log);
        // Stable: each node's probes stay in time order.
        self.sorted.sort_by_key(|p| p.node);
    }

    /// Node `n`'s probes of this chunk, in time order (after [`RailSim::sort_log`]).
    pub fn probes_of(&self, n: usize) -> &[Probe] {
        let n = n as u32;
        let from = self.sorted.partition_point(|p| p.node < n);
        let to = self.sorted.partition_point(|p| p.node <= n);
        &self.sorted[from..to]
    }

    /// Node `n`'s device on this rail: its sampled paths now.
    pub fn rotation(&self, n: usize) -> &Rotation<SimKey> {
        &self.devices[n].rotation
    }

    /// Node `n`'s paths on this rail and its duty cycle at the last round (or the end).
    pub fn figures(&self, n: usize) -> (usize, f64) {
        let dev = &self.devices[n];
        (dev.paths, dev.duty)
    }

    /// Node `n`'s bursts on this rail so far (not `busy` answers).
    pub fn bursts(&self, n: usize) -> u64 {
        self.devices[n].burst.bursts
    }
}
