//! One path judged from its pings: lossy, slow to answer (RTT high), unanswered.

use std::collections::VecDeque;

use super::{BadState, Baseline, Criteria, Verdict};

/// A path's ping counts and window figures as one report of the ping engine gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PingSample {
    /// Unix seconds.
    pub at: f64,
    /// Pings sent and lost since the path was first pinged.
    pub sent: u64,
    pub lost: u64,
    /// Pings lost since the last answered one.
    pub lost_in_a_row: u32,
    /// The window's median RTT, seconds; `None` while nothing was answered in it.
    pub p50_seconds: Option<f64>,
}

/// The judge's memory of one path's pings.
#[derive(Debug, Clone, PartialEq)]
pub struct PingJudge {
    /// (time, sent, lost) of the reports within the loss window, and the last one before it.
    counts: VecDeque<(f64, u64, u64)>,
    rtt: Baseline,
    last: Option<PingSample>,
}

impl PingJudge {
    pub fn new(criteria: &Criteria) -> Self {
        PingJudge {
            counts: VecDeque::new(),
            rtt: Baseline::new(criteria.ping_baseline_seconds()),
            last: None,
        }
    }

    /// Counts a report. Counts that went down (the engine started over) or a time before the
    /// last report's start the loss window over.
    pub fn on_report(&mut self, criteria: &Criteria, sample: PingSample) {
        let went_back = self.counts.back().is_some_and(|(t, sent, lost)| {
            sample.at < *t || sample.sent < *sent || sample.lost < *lost
        });
        if went_back {
            self.counts.clear();
        }
        self.counts.push_back((sample.at, sample.sent, sample.lost));
        // Keep the last report at or before the window's start as the base of the increase.
        let start = sample.at - criteria.ping_loss_seconds();
        while self.counts.len() > 1 && self.counts.get(1).is_some_and(|(t, _, _)| *t <= start) {
            self.counts.pop_front();
        }
        // A caller reporting far more often than the ping interval cannot grow it unbounded.
        let most = criteria.settings.ping_loss_window as usize * 4 + 2;
        while self.counts.len() > most {
            self.counts.pop_front();
        }
        if let Some(p50) = sample.p50_seconds {
            self.rtt.push(sample.at, p50);
        }
        self.last = Some(sample);
    }

    /// When the last report came (Unix seconds).
    pub fn last_report(&self) -> Option<f64> {
        self.last.map(|s| s.at)
    }

    /// Pings sent and lost over the loss window (from the last report before it, or the first
    /// report kept).
    fn window_counts(&self) -> Option<(u64, u64)> {
        let (_, sent0, lost0) = self.counts.front()?;
        let (_, sent1, lost1) = self.counts.back()?;
        Some((sent1 - sent0, lost1 - lost0))
    }

    /// Every way the path's pings are bad as of its last report.
    pub fn verdicts(&self, criteria: &Criteria) -> Vec<Verdict> {
        let s = &criteria.settings;
        let mut out = Vec::new();
        if let Some((sent, lost)) = self.window_counts().filter(|(sent, _)| *sent > 0) {
            let share = lost as f64 / sent as f64;
            if share >= s.ping_loss_ratio
                && share < s.ping_loss_below
                && lost >= u64::from(s.ping_loss_min)
            {
                out.push(Verdict {
                    state: BadState::Lossy,
                    in_a_row: 0,
                    figure: Some(share),
                });
            }
        }
        let Some(last) = self.last else {
            return out;
        };
        if let Some(p50) = last.p50_seconds {
            let floor = s.ping_rtt_floor.as_secs_f64();
            let usual = self.rtt.median_with(p50);
            if p50 > floor && usual.is_some_and(|m| p50 > f64::from(s.ping_rtt_factor) * m) {
                out.push(Verdict {
                    state: BadState::RttHigh,
                    in_a_row: 0,
                    figure: Some(p50),
                });
            }
        }
        if last.lost_in_a_row >= s.ping_loss_min {
            out.push(Verdict {
                state: BadState::Unanswered,
                in_a_row: last.lost_in_a_row,
                figure: None,
            });
        }
        out
    }
}
