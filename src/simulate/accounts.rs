//! What a node's `/metrics` holds (its series budget) and its own figures, kept from the probes
//! its rails logged: one node at a time, each node's probes in the order the node started them,
//! so that the node's state is read once per chunk of virtual time, not once per probe.

use std::time::Duration;

use crate::metrics::budget::{PathSeries, SeriesBudget};

use super::rail::{Probe, RailSim};
use super::report::NodeFigures;
use super::stats::{path_id, path_of, NodeStats};
use super::{times, SimContext, SimKey};

/// One node's series budget and figures.
pub(super) struct Accounts {
    budget: SeriesBudget<u64>,
    pub stats: NodeStats,
    /// Probes and `busy` answers replayed so far.
    replayed: u64,
}

impl Accounts {
    pub fn new(ctx: &SimContext) -> Self {
        let config = ctx.config;
        Accounts {
            budget: super::node_budget(config),
            stats: NodeStats::new(config.rails as usize, config.nodes_per_group),
            replayed: 0,
        }
    }

    /// Node `n`'s probes of the chunk just run, from every rail, in the order the node started
    /// them: by time, then rail (a node's devices are polled in rail order).
    pub fn replay(&mut self, n: usize, rails: &[RailSim], ctx: &SimContext) {
        let mut logs: Vec<&[Probe]> = rails.iter().map(|r| r.probes_of(n)).collect();
        loop {
            let mut first: Option<(u64, usize)> = None;
            for (rail, log) in logs.iter().enumerate() {
                if let Some(p) = log.first() {
                    if first.is_none_or(|(at, _)| p.at < at) {
                        first = Some((p.at, rail));
                    }
                }
            }
            let Some((_, rail)) = first else {
                break;
            };
            let probe = logs[rail][0];
            logs[rail] = &logs[rail][1..];
            self.replayed += 1;
            self.record(n, rail as u16, probe, rails, ctx);
        }
    }

    /// A probe (or `busy` answer) of node `n` on `rail`: its series on `/metrics`.
    fn record(&mut self, n: usize, rail: u16, probe: Probe, rails: &[RailSim], ctx: &SimContext) {
        let config = ctx.config;
        let t = Duration::from_nanos(probe.at);
        let peer = probe.peer as usize;
        let same_group = ctx.same_group(n, peer);
        let probes = if probe.busy {
            0
        } else {
            self.stats.record_probe(rail, peer, same_group, t)
        };
        let m = &config.series;
        let capacity = m.unpaced_every > 0 && probes >= m.unpaced_every;
        let series = PathSeries {
            base: m.per_path + if capacity { m.capacity_per_path } else { 0 },
            detail: m.detail_per_path,
            derived: m.derived_per_path + usize::from(capacity),
        };
        self.budget.record(
            path_id(peer, rail, config.nodes),
            t,
            ctx.preferred(n, peer),
            series,
            |id| selected(n, *id, rails, ctx),
        );
        self.expire(n, t, rails, ctx);
    }

    /// Takes off `/metrics` the paths out of node `n`'s selection not probed for the TTL.
    fn expire(&mut self, n: usize, t: Duration, rails: &[RailSim], ctx: &SimContext) {
        self.budget.expire(t, |id| selected(n, *id, rails, ctx));
    }

    /// Samples node `n`'s figures at `t` (each round, and the end): series, paths, duty cycle
    /// (as its rails noted them at `t`).
    pub fn sample(&mut self, n: usize, t: Duration, rails: &[RailSim], ctx: &SimContext) {
        let config = ctx.config;
        self.expire(n, t, rails, ctx);
        let series = super::node_series(&self.budget, config);
        let (mut paths, mut duty) = (0, 0.0_f64);
        for rail in rails {
            let (p, d) = rail.figures(n);
            paths += p;
            duty = duty.max(d);
        }
        self.stats.sample(series, paths, duty);
    }

    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Node `n`'s figures at `end`.
    pub fn figures(
        &self,
        n: usize,
        end: Duration,
        rails: &[RailSim],
        ctx: &SimContext,
    ) -> NodeFigures {
        let burst_time: Vec<Duration> = rails
            .iter()
            .map(|r| times(ctx.config.burst, r.bursts(n)))
            .collect();
        let budget = &self.budget;
        self.stats.figures(
            n,
            end,
            ctx.config,
            &burst_time,
            budget.dropped(),
            budget.expired_early(),
        )
    }
}

/// Whether path `id` is in node `n`'s selection now.
fn selected(n: usize, id: u64, rails: &[RailSim], ctx: &SimContext) -> bool {
    let (peer, rail) = path_of(id, ctx.config.nodes);
    ctx.preferred(n, peer)
        || rails[rail].rotation(n).contains(&SimKey {
            rail: rail as u16,
            peer: peer as u32,
        })
}
