//! The duty-cycle budget of one local device: how much of its wall time may be spent bursting.
//!
//! Two mechanisms, on purpose:
//! - **Plan** ([`stretch`]): each path costs about `cost / interval` of the device's time (its
//!   burst time per interval). When the sum over the device's paths exceeds the duty cycle,
//!   every interval on that device is multiplied by the same factor `demand / duty_cycle`, so the
//!   paths still fit and keep equal shares. The cost is the measured burst time of the path
//!   (a moving average), starting from the plan's expected burst: a path whose bursts run into
//!   timeouts costs what it really costs.
//! - **Gate** ([`Gate`]): a hard limit on what was actually spent, whatever the plan assumed
//!   (estimates lag, the path set changes, failures take longer). It is a GCRA (virtual
//!   scheduling) token bucket in time units: a burst may start once `now ≥ gate`, and a
//!   finished burst of length `b` that started at `s` moves the gate to
//!   `max(gate, s − credit_window) + b / duty`. So every burst pays for its share of wall time
//!   (`b / duty`: itself plus the rest that must follow it), and at most `credit_window` of
//!   idle time is banked. Over any stretch of wall time `T` the device bursts at most
//!   `duty × (T + credit_window) + one burst`. Integer times make the gate exact: a caller woken
//!   at the gate time is always let through.
//!
//! [`BurstWindow`] measures what was spent over a sliding window, for the duty-cycle gauge.

use std::collections::VecDeque;
use std::time::Duration;

/// The longest gap the scheduler computes (a stretched interval, a budget rest); far below
/// `Duration` overflow even when added to any plausible `now`.
pub(crate) const MAX_GAP: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// `s` seconds as a `Duration`, saturating at [`MAX_GAP`]; NaN and negatives are zero.
pub(crate) fn secs_to_duration(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(s)
        .unwrap_or(MAX_GAP)
        .min(MAX_GAP)
}

/// The factor (≥ 1) by which intervals are stretched so that `demand` (the fraction of wall
/// time the paths want, Σ cost/interval) fits in `duty_cycle`.
pub(crate) fn stretch(demand: f64, duty_cycle: f64) -> f64 {
    let s = demand / duty_cycle;
    if s.is_finite() && s > 1.0 {
        s
    } else {
        1.0
    }
}

/// The GCRA gate of one device; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gate {
    /// No burst may start before this time.
    open_at: Duration,
}

impl Gate {
    /// A gate with a full credit at `now` (open, `credit_window` banked).
    pub(crate) fn new(now: Duration, credit_window: Duration) -> Self {
        Gate {
            open_at: now.saturating_sub(credit_window),
        }
    }

    pub(crate) fn open_at(&self) -> Duration {
        self.open_at
    }

    pub(crate) fn is_open(&self, now: Duration) -> bool {
        now >= self.open_at
    }

    /// Charges a burst of `burst_time` that ended at `now` (so began at `now − burst_time`).
    pub(crate) fn charge(
        &mut self,
        now: Duration,
        burst_time: Duration,
        duty_cycle: f64,
        credit_window: Duration,
    ) {
        let start = now.saturating_sub(burst_time);
        let share = secs_to_duration(burst_time.as_secs_f64() / duty_cycle);
        self.open_at = self
            .open_at
            .max(start.saturating_sub(credit_window))
            .saturating_add(share);
    }
}

/// Bursts kept by a [`BurstWindow`] at most; beyond that the oldest are dropped (the gauge then
/// reads low). Only reachable with a very long window full of very short bursts.
const MAX_WINDOW_BURSTS: usize = 4096;

/// A [`BurstWindow`] drops the bursts that left it when it holds a multiple of this many.
const PRUNE_EVERY: usize = 8;

/// Burst time spent over a sliding window of wall time.
#[derive(Debug, Clone)]
pub(crate) struct BurstWindow {
    window: Duration,
    /// `(start, end)` of recent bursts, in nanoseconds of the caller's time, in order of their
    /// end.
    bursts: VecDeque<(u64, u64)>,
}

/// Whether a record that leaves `len` bursts in the window drops those that left it.
fn prunes_at(len: usize) -> bool {
    len.is_multiple_of(PRUNE_EVERY)
}

/// `t` in nanoseconds, saturating (584 years).
pub(crate) fn nanos(t: Duration) -> u64 {
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

impl BurstWindow {
    pub(crate) fn new(window: Duration) -> Self {
        BurstWindow {
            window,
            bursts: VecDeque::new(),
        }
    }

    pub(crate) fn set_window(&mut self, window: Duration) {
        self.window = window;
    }

    /// Records a burst of `burst_time` that ended at `end`.
    pub(crate) fn record(&mut self, end: Duration, burst_time: Duration) {
        if burst_time.is_zero() {
            return;
        }
        self.bursts
            .push_back((nanos(end.saturating_sub(burst_time)), nanos(end)));
        if self.bursts.len() > MAX_WINDOW_BURSTS {
            self.bursts.pop_front();
        }
        // Bursts that left the window count for nothing in `used`, so they are dropped in
        // batches, not at every record.
        if prunes_at(self.bursts.len()) {
            let from = nanos(end.saturating_sub(self.window));
            while self.bursts.front().is_some_and(|&(_, e)| e <= from) {
                self.bursts.pop_front();
            }
        }
    }

    /// Burst time within `[now − window, now]`.
    pub(crate) fn used(&self, now: Duration) -> Duration {
        let from = nanos(now.saturating_sub(self.window));
        let now = nanos(now);
        let used = self
            .bursts
            .iter()
            .map(|&(s, e)| e.min(now).saturating_sub(s.max(from)))
            .fold(0u64, u64::saturating_add);
        Duration::from_nanos(used)
    }

    /// Fraction of the window spent bursting (reads low during the first window).
    pub(crate) fn ratio(&self, now: Duration) -> f64 {
        self.used(now).as_secs_f64() / self.window.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn stretch_is_one_when_paths_fit() {
        assert_eq!(stretch(0.0, 0.05), 1.0);
        assert_eq!(stretch(0.05, 0.05), 1.0);
        assert!((stretch(0.1, 0.05) - 2.0).abs() < 1e-12);
        assert_eq!(stretch(f64::NAN, 0.05), 1.0);
        assert_eq!(stretch(f64::INFINITY, 0.05), 1.0);
    }

    #[test]
    fn secs_to_duration_saturates() {
        assert_eq!(secs_to_duration(-1.0), Duration::ZERO);
        assert_eq!(secs_to_duration(f64::NAN), Duration::ZERO);
        assert_eq!(secs_to_duration(1.5), ms(1500));
        assert_eq!(secs_to_duration(1e30), MAX_GAP);
        assert_eq!(secs_to_duration(f64::INFINITY), MAX_GAP);
    }

    #[test]
    fn a_burst_pays_for_its_rest() {
        // 5%: a 0.5 s burst from 100 s, with no credit banked, opens the gate at 110 s.
        let mut g = Gate::new(s(100), Duration::ZERO);
        assert!(g.is_open(s(100)));
        g.charge(ms(100_500), ms(500), 0.05, Duration::ZERO);
        assert_eq!(g.open_at(), s(110));
        assert!(!g.is_open(s(110) - Duration::from_nanos(1)));
        assert!(g.is_open(s(110)));
    }

    #[test]
    fn idle_time_is_banked_up_to_the_credit_window() {
        // 60 s window at 5%: 3 s banked, plus what accrues while bursting (5% of it), so seven
        // 0.5 s bursts may run back to back after a long idle time, then the device rests.
        let mut g = Gate::new(Duration::ZERO, s(60));
        let mut t = s(1000);
        for _ in 0..7 {
            assert!(g.is_open(t));
            t += ms(500);
            g.charge(t, ms(500), 0.05, s(60));
        }
        assert_eq!(t, ms(1_003_500));
        // Each burst moved the gate by 10 s from 940 s (first start − 60 s).
        assert_eq!(g.open_at(), s(1010));
        assert!(!g.is_open(t));
    }

    #[test]
    fn an_empty_credit_window_is_a_strict_rest() {
        let mut g = Gate::new(s(5), Duration::ZERO);
        g.charge(s(6), s(1), 0.25, Duration::ZERO);
        // 1 s at 25%: a share of 4 s from its start (5 s), i.e. a rest of 3 s after it.
        assert_eq!(g.open_at(), s(9));
        // Duty cycle 1: back to back.
        let mut g = Gate::new(s(5), Duration::ZERO);
        g.charge(s(6), s(1), 1.0, Duration::ZERO);
        assert_eq!(g.open_at(), s(6));
    }

    #[test]
    fn window_counts_overlap_only() {
        let mut w = BurstWindow::new(s(10));
        w.record(s(2), s(1)); // [1, 2]
        w.record(s(8), s(2)); // [6, 8]
        w.record(s(8), Duration::ZERO); // ignored
        assert_eq!(w.used(s(8)), s(3));
        assert!((w.ratio(s(8)) - 0.3).abs() < 1e-12);
        // At 11.5 s the window is [1.5, 11.5]: half of the first burst is left.
        assert_eq!(w.used(ms(11_500)), ms(2500));
        assert_eq!(w.used(s(30)), Duration::ZERO);
        w.record(s(40), s(1));
        assert_eq!(
            w.used(s(40)),
            s(1),
            "bursts out of the window count for nothing"
        );
        // Old bursts are dropped in batches: once the window holds PRUNE_EVERY of them.
        for k in 0..PRUNE_EVERY as u64 - 3 {
            w.record(s(41 + k), ms(500));
        }
        assert_eq!(
            w.bursts.len(),
            PRUNE_EVERY - 2,
            "the two old bursts are pruned"
        );
        assert_eq!(w.used(s(45)), s(1) + ms(2500));
    }

    proptest! {
        /// Whatever the bursts (each starting once the gate is open), the time spent over the
        /// whole run, and over any window, stays within duty × (T + credit window) + one burst.
        #[test]
        fn gate_bounds_spending(
            duty_pct in 1u32..=100,
            credit_s in 0u64..120,
            bursts in proptest::collection::vec((0u64..5_000, 0u64..3_000), 1..200),
        ) {
            let duty = f64::from(duty_pct) / 100.0;
            let credit = s(credit_s);
            let mut g = Gate::new(Duration::ZERO, credit);
            let mut t = Duration::ZERO;
            let mut spans = Vec::new();
            for (idle_ms, len_ms) in bursts {
                t = (t + ms(idle_ms)).max(g.open_at());
                let start = t;
                t += ms(len_ms);
                g.charge(t, ms(len_ms), duty, credit);
                spans.push((start, t));
            }
            let max_burst = spans.iter().map(|(a, b)| *b - *a).max().unwrap();
            // Bursts follow each other, so the busiest windows run from a burst's start to a
            // later burst's end, and what they hold is a difference of prefix sums.
            let mut prefix = vec![Duration::ZERO];
            for &(a, b) in &spans {
                prefix.push(*prefix.last().unwrap() + (b - a));
            }
            for (i, &(from, _)) in spans.iter().enumerate() {
                for (j, &(_, to)) in spans.iter().enumerate().skip(i) {
                    let spent = prefix[j + 1] - prefix[i];
                    let bound = duty * (to - from + credit).as_secs_f64()
                        + max_burst.as_secs_f64() + 1e-6;
                    prop_assert!(spent.as_secs_f64() <= bound,
                        "{spent:?} in [{from:?}, {to:?}] > {bound}");
                }
            }
        }
    }
}
