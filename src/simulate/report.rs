//! The simulation's figures, per node (summarised: min / median / max) and for the cluster, and
//! their text form.

use std::fmt::Write as _;
use std::time::Duration;

use crate::schedule::{Coverage, Layout};

use super::stats::Wait;
use super::SimulationConfig;

/// What one node measured.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFigures {
    /// Most paths in its selection at once (sampled round boundaries).
    pub paths_max: usize,
    /// Most series on its `/metrics` (sampled at round boundaries).
    pub series_max: usize,
    /// Burst time / simulated time of its busiest device.
    pub duty_mean: f64,
    /// Highest duty cycle of a device over the scheduler's 10-minute window (sampled).
    pub duty_peak: f64,
    /// Longest time between two probes of one same-group path (from the start and to the end
    /// included); `None` without peers in its group.
    pub same_group_gap: Option<Duration>,
    /// Longest interval planned for a same-group path.
    pub planned_interval: Duration,
    /// Paths the series budget kept off `/metrics`, or took off while in the selection and
    /// less than half the TTL after their probe.
    pub dropped: u64,
    /// Paths the series budget took off a little before their TTL (out of the selection, or
    /// on `/metrics` for half the TTL already).
    pub expired_early: u64,
}

/// Gaps measured across the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct GapFigures {
    /// Per ordered (group pair, rail): (median, longest gap, pairs); `None` with one group.
    pub pair: Option<(Duration, Duration, usize)>,
    /// Every path: (longest gap, paths probed at least once, all paths); the longest gap is the
    /// whole run while some path was never probed. `None` when not tracked.
    pub all: Option<(Duration, u64, u64)>,
}

/// Min, median and max of a figure over the nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary<T> {
    pub min: T,
    pub median: T,
    pub max: T,
}

impl<T: Copy + PartialOrd> Summary<T> {
    fn of(mut values: Vec<T>) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        Some(Summary {
            min: values[0],
            median: values[values.len() / 2],
            max: values[values.len() - 1],
        })
    }
}

/// The result of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub nodes: usize,
    pub rails: u16,
    pub groups: usize,
    pub nodes_per_group: usize,
    pub duration: Duration,
    pub round: Duration,
    pub jitter: f64,
    pub full_mesh: bool,
    pub coverage: Coverage,
    pub paths: Summary<usize>,
    pub series: Summary<usize>,
    pub duty_mean: Summary<f64>,
    pub duty_peak: Summary<f64>,
    pub same_group_gap: Option<Summary<Duration>>,
    pub planned_interval: Duration,
    pub dropped: u64,
    pub expired_early: u64,
    pub gaps: GapFigures,
    /// The longest a same-group probe waited past the time its plan gave it.
    pub longest_wait: Wait,
    /// Most probers aimed at one responder device at once (the one served included).
    pub peak_aimed: u32,
    pub attempts: u64,
    pub busy: u64,
    /// Wall time the simulation took.
    pub elapsed: Duration,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        config: &SimulationConfig,
        layout: &Layout,
        coverage: Coverage,
        nodes: Vec<NodeFigures>,
        gaps: GapFigures,
        longest_wait: Wait,
        peak_aimed: u32,
        attempts: u64,
        busy: u64,
        elapsed: Duration,
    ) -> Report {
        let pick = |f: &dyn Fn(&NodeFigures) -> usize| nodes.iter().map(f).collect::<Vec<_>>();
        let pick_f = |f: &dyn Fn(&NodeFigures) -> f64| nodes.iter().map(f).collect::<Vec<_>>();
        let zero = Summary {
            min: 0,
            median: 0,
            max: 0,
        };
        let zero_f = Summary {
            min: 0.0,
            median: 0.0,
            max: 0.0,
        };
        Report {
            nodes: config.nodes,
            rails: config.rails,
            groups: layout.groups(),
            nodes_per_group: config.nodes_per_group,
            duration: config.duration,
            round: config.selection.round,
            jitter: config.jitter,
            full_mesh: coverage.group_pair_rounds == 0 && coverage.sampled_per_device == 0,
            coverage,
            paths: Summary::of(pick(&|n| n.paths_max)).unwrap_or(zero),
            series: Summary::of(pick(&|n| n.series_max)).unwrap_or(zero),
            duty_mean: Summary::of(pick_f(&|n| n.duty_mean)).unwrap_or(zero_f),
            duty_peak: Summary::of(pick_f(&|n| n.duty_peak)).unwrap_or(zero_f),
            same_group_gap: Summary::of(nodes.iter().filter_map(|n| n.same_group_gap).collect()),
            planned_interval: nodes
                .iter()
                .map(|n| n.planned_interval)
                .max()
                .unwrap_or_default(),
            dropped: nodes.iter().map(|n| n.dropped).sum(),
            expired_early: nodes.iter().map(|n| n.expired_early).sum(),
            gaps,
            longest_wait,
            peak_aimed,
            attempts,
            busy,
            elapsed,
        }
    }

    /// The bound on a same-group (or full-mesh) path's gap the plan gives: the longest planned
    /// interval with the largest jitter. A probe's wait past its planned time comes on top:
    /// before its first try (its device's other bursts, its budget gate) and after `busy`
    /// answers (each retry is due after the paths that came due while it waited). Neither is
    /// bounded by the plan, so the run measures it ([`Report::longest_wait`]).
    pub fn same_group_bound(&self) -> Duration {
        self.planned_interval.mul_f64(1.0 + self.jitter)
    }

    /// The text `simulate` prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let c = &self.coverage;
        let _ = writeln!(
            out,
            "cluster: {} nodes, {} rails, {} groups of up to {} ({}), {} simulated",
            self.nodes,
            self.rails,
            self.groups,
            self.nodes_per_group,
            if self.full_mesh {
                "full mesh: every peer"
            } else {
                "same group + sample"
            },
            dur(self.duration)
        );
        let _ = writeln!(
            out,
            "bounds (from the plan and the selection; a probe's wait past its planned time comes on top):"
        );
        let _ = writeln!(
            out,
            "  same-group path        every {} (planned interval {} + {:.0}% jitter)",
            dur(self.same_group_bound()),
            dur(self.planned_interval),
            self.jitter * 100.0
        );
        if !self.full_mesh {
            let _ = writeln!(
                out,
                "  ToR pair per rail      within {} rounds = {}",
                c.group_pair_rounds,
                dur(self.round * c.group_pair_rounds as u32)
            );
            let _ = writeln!(
                out,
                "  every single path      within {} rounds = {}",
                c.path_rounds,
                dur(self
                    .round
                    .saturating_mul(u32::try_from(c.path_rounds).unwrap_or(u32::MAX)))
            );
            let _ = writeln!(
                out,
                "  sampled paths          {} per device and round ({} round)",
                c.sampled_per_device,
                dur(self.round)
            );
        }
        let _ = writeln!(out, "per node (min / median / max):");
        let _ = writeln!(
            out,
            "  paths in the selection {} / {} / {}",
            self.paths.min, self.paths.median, self.paths.max
        );
        let _ = writeln!(
            out,
            "  series on /metrics     {} / {} / {}",
            self.series.min, self.series.median, self.series.max
        );
        let _ = writeln!(
            out,
            "  duty cycle, whole run  {} / {} / {}   (busiest device)",
            pct(self.duty_mean.min),
            pct(self.duty_mean.median),
            pct(self.duty_mean.max)
        );
        let _ = writeln!(
            out,
            "  duty cycle, 10 min     {} / {} / {}   (highest sampled window, busiest device)",
            pct(self.duty_peak.min),
            pct(self.duty_peak.median),
            pct(self.duty_peak.max)
        );
        if let Some(g) = &self.same_group_gap {
            let _ = writeln!(
                out,
                "  longest same-group gap {} / {} / {}",
                dur(g.min),
                dur(g.median),
                dur(g.max)
            );
        }
        let _ = writeln!(out, "overall:");
        if let Some(g) = &self.same_group_gap {
            let _ = writeln!(out, "  longest gap, same-group path    {}", dur(g.max));
            let w = &self.longest_wait;
            let nanos = Duration::from_nanos;
            let _ = writeln!(
                out,
                "  longest wait, same-group probe  {} past its planned time: {} before its first try, {} after {} busy answer{}",
                dur(nanos(w.total)),
                dur(nanos(w.before_first_try)),
                dur(nanos(w.after_busy)),
                w.busy_answers,
                if w.busy_answers == 1 { "" } else { "s" }
            );
        }
        match self.gaps.all {
            Some((gap, probed, total)) if probed == total => {
                let _ = writeln!(out, "  longest gap, any path           {}", dur(gap));
            }
            Some((_, probed, total)) => {
                let _ = writeln!(
                    out,
                    "  longest gap, any path           more than the run: {probed} of {total} paths probed ({})",
                    pct(probed as f64 / total as f64)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  longest gap, any path           not tracked (bound above)"
                );
            }
        }
        if let Some((median, max, pairs)) = self.gaps.pair {
            let _ = writeln!(
                out,
                "  longest gap, ToR pair per rail  {} (median over the {pairs} ordered pairs × rails: {})",
                dur(max),
                dur(median)
            );
        }
        let _ = writeln!(
            out,
            "  most bursts aimed at one responder device at once: {}",
            self.peak_aimed
        );
        let _ = writeln!(
            out,
            "  busy deferrals                  {} of {} attempts ({})",
            self.busy,
            self.attempts,
            pct(self.busy as f64 / self.attempts.max(1) as f64)
        );
        let _ = writeln!(
            out,
            "  paths dropped by the series budget: {}",
            self.dropped
        );
        let _ = writeln!(
            out,
            "  paths it took off a little before their TTL: {}",
            self.expired_early
        );
        let _ = writeln!(out, "simulated in {:.1} s", self.elapsed.as_secs_f64());
        out
    }
}

fn pct(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// A duration rounded to the second (or to the minute beyond a day), as humantime prints it.
fn dur(d: Duration) -> String {
    let secs = if d >= Duration::from_secs(86_400) {
        d.as_secs() / 60 * 60
    } else {
        d.as_secs()
    };
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}
