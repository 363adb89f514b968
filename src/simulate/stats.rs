//! What the simulation measures: gaps between probes (per same-group path, per ordered pair of
//! groups and rail, per path), and each node's series, paths and duty cycle.

use std::collections::HashMap;
use std::time::Duration;

use super::report::{GapFigures, NodeFigures};
use super::SimulationConfig;

/// A path of a node as one number: (peer, rail).
pub(super) fn path_id(peer: usize, rail: u16, nodes: usize) -> u64 {
    u64::from(rail) * nodes as u64 + peer as u64
}

/// (peer, rail) of a [`path_id`].
pub(super) fn path_of(id: u64, nodes: usize) -> (usize, usize) {
    ((id % nodes as u64) as usize, (id / nodes as u64) as usize)
}

/// Milliseconds of virtual time (6 hours fit in a `u32` 200 times over).
fn ms(t: Duration) -> u32 {
    u32::try_from(t.as_millis()).unwrap_or(u32::MAX)
}

/// One node's own figures.
#[derive(Debug, Clone)]
pub(super) struct NodeStats {
    /// Longest interval planned for a same-group (or full-mesh) path.
    pub planned_interval: Duration,
    nodes_per_group: usize,
    /// Per same-group path (rail × member): its last probe (ms; 0 = the start) and its probes so
    /// far.
    same: Vec<(u32, u32)>,
    same_max_gap: u32,
    series_max: usize,
    paths_max: usize,
    duty_peak: f64,
}

impl NodeStats {
    pub fn new(rails: usize, nodes_per_group: usize) -> Self {
        NodeStats {
            planned_interval: Duration::ZERO,
            nodes_per_group,
            same: vec![(0, 0); rails * nodes_per_group],
            same_max_gap: 0,
            series_max: 0,
            paths_max: 0,
            duty_peak: 0.0,
        }
    }

    /// A probe (not a `busy` answer) of `peer` on `rail` started at `t`; returns how many
    /// probes the path has had (same-group paths; other paths count 1).
    pub fn record_probe(&mut self, rail: u16, peer: usize, same_group: bool, t: Duration) -> u32 {
        if !same_group {
            return 1;
        }
        let path = usize::from(rail) * self.nodes_per_group + peer % self.nodes_per_group;
        let now = ms(t);
        let (last, probes) = &mut self.same[path];
        self.same_max_gap = self.same_max_gap.max(now - *last);
        *last = now;
        *probes += 1;
        *probes
    }

    pub fn sample(&mut self, series: usize, paths: usize, duty: f64) {
        self.series_max = self.series_max.max(series);
        self.paths_max = self.paths_max.max(paths);
        self.duty_peak = self.duty_peak.max(duty);
    }

    /// The figures of node `n` at the end (`end`), open gaps included; `burst_time` per rail.
    pub fn figures(
        &self,
        n: usize,
        end: Duration,
        config: &SimulationConfig,
        burst_time: &[Duration],
        dropped: u64,
        expired_early: u64,
    ) -> NodeFigures {
        let npg = self.nodes_per_group;
        let group_start = n / npg * npg;
        let members = npg.min(config.nodes - group_start);
        let mut gap = self.same_max_gap;
        for rail in 0..config.rails as usize {
            for m in (0..members).filter(|m| group_start + m != n) {
                gap = gap.max(ms(end) - self.same[rail * npg + m].0);
            }
        }
        let duty_mean = burst_time
            .iter()
            .map(|b| b.as_secs_f64() / end.as_secs_f64())
            .fold(0.0, f64::max);
        NodeFigures {
            paths_max: self.paths_max,
            series_max: self.series_max,
            duty_mean,
            duty_peak: self.duty_peak,
            same_group_gap: (members > 1).then(|| Duration::from_millis(u64::from(gap))),
            planned_interval: self.planned_interval,
            dropped,
            expired_early,
        }
    }
}

/// How long a same-group probe waited past the time its plan gave it (ns): before its first
/// try (its device busy with its other bursts, or its budget gate closed), then after `busy`
/// answers until a responder served it. The plan bounds a path's interval; this comes on top.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Wait {
    pub total: u64,
    pub before_first_try: u64,
    pub after_busy: u64,
    pub busy_answers: u32,
}

/// The paths of one device to the members of its node's group: when each one's next probe is
/// planned, and its tries since; the longest wait so far.
#[derive(Debug, Clone)]
pub(super) struct SameGroupWaits {
    /// Per member (`peer % nodes_per_group`): (planned, first try, busy answers since), times
    /// in ns, [`UNKNOWN`] for none.
    paths: Vec<(u64, u64, u32)>,
    pub longest: Wait,
}

/// No planned time (the path is not in the set, or its burst runs) or no try yet.
const UNKNOWN: u64 = u64::MAX;

impl SameGroupWaits {
    pub fn new(nodes_per_group: usize) -> Self {
        SameGroupWaits {
            paths: vec![(UNKNOWN, UNKNOWN, 0); nodes_per_group],
            longest: Wait::default(),
        }
    }

    /// The path to `member` is next planned at `due` (ns; `None`: it left the set).
    pub fn planned(&mut self, member: usize, due: Option<u64>) {
        self.paths[member] = (due.unwrap_or(UNKNOWN), UNKNOWN, 0);
    }

    /// Whether the path to `member` has a planned time.
    pub fn is_planned(&self, member: usize) -> bool {
        self.paths[member].0 != UNKNOWN
    }

    /// The path to `member` was tried at `t` (ns): answered `busy`, or served (its wait ends;
    /// its next planned time comes when the burst is over).
    pub fn tried(&mut self, member: usize, t: u64, busy: bool) {
        let (planned, first_try, busy_answers) = &mut self.paths[member];
        if *first_try == UNKNOWN {
            *first_try = t;
        }
        if busy {
            *busy_answers += 1;
            return;
        }
        if *planned != UNKNOWN {
            self.longest = self
                .longest
                .max(wait(*planned, *first_try, *busy_answers, t));
        }
        self.paths[member] = (UNKNOWN, UNKNOWN, 0);
    }

    /// At the end `end` (ns): the waits still running count up to it.
    pub fn finish(&mut self, end: u64) {
        for &(planned, first_try, busy_answers) in &self.paths {
            if planned < end {
                let first_try = first_try.min(end);
                self.longest = self
                    .longest
                    .max(wait(planned, first_try, busy_answers, end));
            }
        }
    }
}

fn wait(planned: u64, first_try: u64, busy_answers: u32, until: u64) -> Wait {
    Wait {
        total: until.saturating_sub(planned),
        before_first_try: first_try.saturating_sub(planned),
        after_busy: until.saturating_sub(first_try),
        busy_answers,
    }
}

/// Gaps of one rail across the cluster: per ordered group pair, and per path when tracked.
pub(super) struct RailGaps {
    rail: u16,
    groups: usize,
    nodes: usize,
    rails: usize,
    nodes_per_group: usize,
    /// Per (source group, target group): last probe (ms) and longest gap.
    pairs: Vec<(u32, u32)>,
    /// Per path (prober, peer): last probe (ms) and the longest gap so far.
    paths: Option<HashMap<u64, u32>>,
    path_gap: u32,
}

impl RailGaps {
    pub fn new(config: &SimulationConfig, rail: u16, groups: usize, track_all: bool) -> Self {
        let pairs = if groups > 1 { groups * groups } else { 0 };
        RailGaps {
            rail,
            groups,
            nodes: config.nodes,
            rails: config.rails as usize,
            nodes_per_group: config.nodes_per_group,
            pairs: vec![(0, 0); pairs],
            paths: track_all.then(HashMap::new),
            path_gap: 0,
        }
    }

    /// The cell in `pairs` of `n` probing `peer`: none within a group.
    fn pair_of(&self, n: usize, peer: usize) -> Option<usize> {
        let (g, h) = (n / self.nodes_per_group, peer / self.nodes_per_group);
        (g != h).then_some(g * self.groups + h)
    }

    /// Node `n` probed `peer` on this rail at `t` (ns).
    pub fn record(&mut self, n: usize, peer: usize, t: u64) {
        let now = ms(Duration::from_nanos(t));
        if let Some(pair) = self.pair_of(n, peer) {
            let (last, gap) = &mut self.pairs[pair];
            *gap = (*gap).max(now - *last);
            *last = now;
        }
        if let Some(paths) = &mut self.paths {
            let id = (n as u64 * self.nodes as u64 + peer as u64) * self.rails as u64
                + u64::from(self.rail);
            let last = paths.entry(id).or_insert(0);
            self.path_gap = self.path_gap.max(now - *last);
            *last = now;
        }
    }
}

/// The figures of every rail's gaps at `end`, open gaps included.
pub(super) fn gap_figures<'a>(
    rails: impl IntoIterator<Item = &'a RailGaps>,
    config: &SimulationConfig,
    end: Duration,
) -> GapFigures {
    let end_ms = ms(end);
    let mut pair_gaps: Vec<u32> = Vec::new();
    // Every path tracked: (paths probed, longest gap between probes, longest since the last).
    let mut tracked: Option<(u64, u32, u32)> = None;
    for gaps in rails {
        for g in 0..gaps.groups {
            for h in (0..gaps.groups).filter(|h| *h != g) {
                let (last, gap) = gaps.pairs[g * gaps.groups + h];
                pair_gaps.push(gap.max(end_ms - last));
            }
        }
        if let Some(paths) = &gaps.paths {
            let tail = paths.values().map(|last| end_ms - last).max().unwrap_or(0);
            let (probed, gap, open) = tracked.get_or_insert((0, 0, 0));
            *probed += paths.len() as u64;
            *gap = (*gap).max(gaps.path_gap);
            *open = (*open).max(tail);
        }
    }
    pair_gaps.sort_unstable();
    let to_duration = |ms: u32| Duration::from_millis(u64::from(ms));
    let pair = (!pair_gaps.is_empty()).then(|| {
        (
            to_duration(pair_gaps[pair_gaps.len() / 2]),
            to_duration(pair_gaps[pair_gaps.len() - 1]),
            pair_gaps.len(),
        )
    });
    let all = tracked.map(|(probed, gap, open)| {
        let total = config.nodes as u64 * (config.nodes as u64 - 1) * u64::from(config.rails);
        let gap = if probed < total {
            end_ms
        } else {
            gap.max(open)
        };
        (to_duration(gap), probed, total)
    });
    GapFigures { pair, all }
}
