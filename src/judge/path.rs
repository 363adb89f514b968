//! One path judged from its own bursts: failed, slow, stalled, gapped, below its baseline,
//! stale, corrupt.
//!
//! As the rules read a path: its paced figures stay as its last paced success left them, so a
//! capacity (unpaced) success counts as the paced one before it did; a failure ends every
//! streak but the failed one (a failed burst has no bandwidth to judge).

use super::{BadState, Baseline, Criteria, Verdict};

/// What a paced burst that succeeded showed, as ratios of itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacedFigures {
    /// Achieved / target bandwidth.
    pub ratio: f64,
    /// Lowest short-window bandwidth / average bandwidth; `None` when nothing moved.
    pub min_window_ratio: Option<f64>,
    /// Longest completion gap, seconds.
    pub gap_seconds: f64,
}

impl PacedFigures {
    /// From a burst's bandwidth (bytes/s) against its target, its lowest short-window
    /// bandwidth and its longest gap; `None` without a target above zero (nothing to judge the
    /// bandwidth against) or with a figure that is not a number.
    pub fn of_burst(
        bandwidth: f64,
        target: Option<f64>,
        min_window_bandwidth: f64,
        gap_seconds: f64,
    ) -> Option<PacedFigures> {
        let target = target.filter(|t| *t > 0.0 && t.is_finite())?;
        let ratio = bandwidth / target;
        if !ratio.is_finite() || !gap_seconds.is_finite() {
            return None;
        }
        let min_window_ratio = (bandwidth > 0.0)
            .then(|| min_window_bandwidth / bandwidth)
            .filter(|r| r.is_finite());
        Some(PacedFigures {
            ratio,
            min_window_ratio,
            gap_seconds,
        })
    }
}

/// How one probe of a path ended, as the judge reads it (deferrals are not probes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probe {
    /// The burst completed and its data verified; `paced`: its figures, when it was a paced
    /// burst with a target (a capacity burst carries none).
    Success { paced: Option<PacedFigures> },
    /// It failed; `validation`: because its data arrived wrong.
    Failure { validation: bool },
}

/// What the last paced success said about each paced judgement.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct PacedJudgement {
    slow: bool,
    stalled: bool,
    gapped: bool,
    below_baseline: bool,
}

/// Probes in a row that were bad each way.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Streaks {
    failed: u32,
    slow: u32,
    stalled: u32,
    gapped: u32,
    below_baseline: u32,
}

/// The judge's memory of one path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathJudge {
    streaks: Streaks,
    last_attempt: Option<f64>,
    last_success: Option<f64>,
    last_good: Option<f64>,
    last_validation_failure: Option<f64>,
    paced: Option<(PacedFigures, PacedJudgement)>,
    ratios: Baseline,
    gaps: Baseline,
}

impl PathJudge {
    pub fn new(criteria: &Criteria) -> Self {
        PathJudge {
            streaks: Streaks::default(),
            last_attempt: None,
            last_success: None,
            last_good: None,
            last_validation_failure: None,
            paced: None,
            ratios: Baseline::new(criteria.baseline_seconds()),
            gaps: Baseline::new(criteria.baseline_seconds()),
        }
    }

    /// Counts a probe that ended at `at` (Unix seconds). `node_median_ratio`: the median of the
    /// last paced ratios of this node's paths, which a path below its own baseline must be
    /// below too.
    pub fn on_probe(
        &mut self,
        criteria: &Criteria,
        at: f64,
        probe: Probe,
        node_median_ratio: Option<f64>,
    ) {
        self.last_attempt = Some(at);
        match probe {
            Probe::Success { paced } => {
                self.last_success = Some(at);
                self.streaks.failed = 0;
                if let Some(figures) = paced {
                    let judgement = self.judge_paced(criteria, &figures, node_median_ratio);
                    self.ratios.push(at, figures.ratio);
                    self.gaps.push(at, figures.gap_seconds);
                    self.paced = Some((figures, judgement));
                }
                let judgement = self.paced.map(|(_, j)| j).unwrap_or_default();
                let bump =
                    |streak: &mut u32, bad: bool| *streak = if bad { *streak + 1 } else { 0 };
                bump(&mut self.streaks.slow, judgement.slow);
                bump(&mut self.streaks.stalled, judgement.stalled);
                bump(&mut self.streaks.gapped, judgement.gapped);
                bump(&mut self.streaks.below_baseline, judgement.below_baseline);
                if self.paced.is_some() && !judgement.slow {
                    self.last_good = Some(at);
                }
            }
            Probe::Failure { validation } => {
                self.streaks = Streaks {
                    failed: self.streaks.failed.saturating_add(1),
                    ..Streaks::default()
                };
                if validation {
                    self.last_validation_failure = Some(at);
                }
            }
        }
    }

    fn judge_paced(
        &self,
        criteria: &Criteria,
        figures: &PacedFigures,
        node_median_ratio: Option<f64>,
    ) -> PacedJudgement {
        let s = &criteria.settings;
        let slow = figures.ratio < s.degraded_ratio;
        let gap_median = self.gaps.median_with(figures.gap_seconds);
        let own_median = self.ratios.median_with(figures.ratio);
        let below =
            |median: Option<f64>| median.is_some_and(|m| figures.ratio < s.baseline_drop * m);
        PacedJudgement {
            slow,
            stalled: figures
                .min_window_ratio
                .is_some_and(|r| r < s.stall_min_window_ratio),
            gapped: figures.gap_seconds > s.gap_floor.as_secs_f64()
                && gap_median.is_some_and(|m| figures.gap_seconds > f64::from(s.gap_factor) * m),
            below_baseline: !slow && below(own_median) && below(node_median_ratio),
        }
    }

    /// Every way the path is bad at `now`, its planned interval being `planned_interval`
    /// seconds: a streak of at least one probe, a probe overdue by `stale_probes` intervals, data
    /// that arrived wrong within `validation_window`.
    pub fn verdicts(&self, criteria: &Criteria, now: f64, planned_interval: f64) -> Vec<Verdict> {
        let s = &criteria.settings;
        let figures = self.paced.map(|(f, _)| f);
        let streak = |state, in_a_row: u32, figure: Option<f64>| {
            (in_a_row > 0).then_some(Verdict {
                state,
                in_a_row,
                figure,
            })
        };
        let timed = |state, since: Option<f64>, limit: f64| {
            since
                .map(|t| now - t)
                .filter(|age| *age > limit)
                .map(|age| Verdict {
                    state,
                    in_a_row: 0,
                    figure: Some(age),
                })
        };
        let recent = |state, since: Option<f64>, limit: f64| {
            since
                .map(|t| now - t)
                .filter(|age| (0.0..limit).contains(age))
                .map(|age| Verdict {
                    state,
                    in_a_row: 0,
                    figure: Some(age),
                })
        };
        let k = &self.streaks;
        [
            streak(BadState::Failed, k.failed, None),
            streak(BadState::Slow, k.slow, figures.map(|f| f.ratio)),
            streak(
                BadState::Stalled,
                k.stalled,
                figures.and_then(|f| f.min_window_ratio),
            ),
            streak(BadState::Gapped, k.gapped, figures.map(|f| f.gap_seconds)),
            streak(
                BadState::BelowBaseline,
                k.below_baseline,
                figures.map(|f| f.ratio),
            ),
            timed(
                BadState::Stale,
                self.last_attempt,
                f64::from(s.stale_probes) * planned_interval,
            ),
            recent(
                BadState::Corrupt,
                self.last_validation_failure,
                criteria.validation_seconds(),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// When the path's last probe ended.
    pub fn last_attempt(&self) -> Option<f64> {
        self.last_attempt
    }

    /// When a probe of the path last succeeded.
    pub fn last_success(&self) -> Option<f64> {
        self.last_success
    }

    /// When a probe of the path last succeeded at or above `degraded_ratio`.
    pub fn last_good(&self) -> Option<f64> {
        self.last_good
    }

    /// The ratio of its last paced success, for its node's median.
    pub fn paced_ratio(&self) -> Option<f64> {
        self.paced.map(|(f, _)| f.ratio)
    }
}
