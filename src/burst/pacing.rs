//! Software pacing: a token bucket at message granularity, and when to spin, sleep or block.
//!
//! Why not perftest's limiter (docs/architecture.md, "Pacing and waiting"; measured in the lab:
//! lab/README.md): it sends bursts of tx_depth messages per gap, so below tx_depth msg/s the
//! integer bursts-per-second truncates to zero and the limit silently does nothing; its deadline
//! is never reset, so a sender that fell behind catches up with back-to-back bursts; and it spins
//! a core the whole time.
//!
//! [`Pacer`] instead meters single messages:
//! - **Starts empty.** The bucket is empty at `t = 0` (the burst start the engine passes times
//!   relative to) and fills at `messages_per_second`, so message *k* (1-based) is never sent
//!   before `k / rate`. There is no initial burst.
//! - **Burst allowance as time.** The sender may fall up to `allowance` (default 1 ms, and at
//!   least one message interval) behind schedule and still catch up; the bucket therefore holds
//!   at most `1 + allowance · rate` messages (two at low rates). Small wake-up delays (timer
//!   slack, a full send window) thus cost no rate.
//! - **No catch-up after a stall.** Credit older than the allowance is dropped: a sender blocked
//!   for 1 s then sends at most [`Pacer::capacity`] messages back to back, not 1 s worth.
//!
//! Time is passed in ([`Duration`] since the burst start), so the pacer is pure and testable.
//!
//! ## Measuring the achieved rate
//! Because the bucket starts empty, the first message "pays" for the interval `[0, 1/rate]`
//! before it. A sender that always sends when allowed posts message N at `N / rate`, so
//! `N / (time of the N-th post − burst start)` equals the limit. Measuring from the *first post*
//! instead would count N messages over N−1 intervals and read high by a factor N/(N−1): the same
//! bias perftest's limiter has with its (bursts − 1) gaps (+2.8% for 5000 iterations in bursts
//! of 128: 39 bursts, 38 gaps). So for a paced burst the engine starts the statistics clock
//! ([`super::stats::BurstStats::on_start`]) at the pacer's `t = 0`, not at the first post.

use std::time::Duration;

use crate::units::ResolvedRate;

/// Default burst allowance: about 1 ms of traffic at the limit (docs/architecture.md, "Pacing and
/// waiting").
pub const DEFAULT_BURST_ALLOWANCE: Duration = Duration::from_millis(1);

/// What the pacer allows at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceDecision {
    /// `n ≥ 1` messages may be sent now (then call [`Pacer::consume`] with what was sent).
    Send(u64),
    /// Nothing may be sent before this time (since the burst start).
    WaitUntil(Duration),
}

/// Token bucket at message granularity; see the module docs for the semantics.
///
/// State is an anchor time plus a count of messages consumed since it; the schedule of message
/// k after the anchor is `anchor + ceil(k · period)` computed afresh each time, so rounding does
/// not accumulate over long bursts (no floating token counter that drifts).
#[derive(Debug, Clone)]
pub struct Pacer {
    /// Nanoseconds per message (`1e9 / messages_per_second`), > 0 and finite.
    period_ns: f64,
    /// How far behind schedule the sender may fall and still catch up.
    allowance_ns: u64,
    /// Time (ns since the burst start) at which the bucket was empty with `consumed` = 0.
    anchor_ns: u64,
    /// Messages consumed since `anchor_ns`.
    consumed: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Pacer {
    /// A pacer for `rate`, empty at `t = 0`, with a burst allowance of `allowance`.
    pub fn new(rate: &ResolvedRate, allowance: Duration) -> Self {
        Self::with_messages_per_second(rate.messages_per_second(), allowance)
    }

    /// As [`Pacer::new`], from a bare rate. A non-finite or non-positive rate is treated as the
    /// slowest representable one (a message every ~584 years) rather than panicking;
    /// [`ResolvedRate`] never carries one.
    pub fn with_messages_per_second(messages_per_second: f64, allowance: Duration) -> Self {
        let period_ns = 1e9 / messages_per_second;
        let period_ns = if period_ns.is_finite() && period_ns > 0.0 {
            period_ns
        } else if period_ns == 0.0 {
            f64::MIN_POSITIVE
        } else {
            u64::MAX as f64
        };
        // The allowance is at least one message interval: at low rates 1 ms is far less than a
        // gap, and a sender woken a little late — timer
        // slack, or on Soft-RoCE the emulated NIC's own work holding the CPU — would otherwise
        // lose that lateness from the rate on every message. Catch-up stays bounded: at most
        // one extra message goes back to back after a stall.
        let allowance_ns = nanos(allowance).max(period_ns.min(u64::MAX as f64).ceil() as u64);
        Self {
            period_ns,
            allowance_ns,
            anchor_ns: 0,
            consumed: 0,
        }
    }

    /// The metered rate, messages per second.
    pub fn messages_per_second(&self) -> f64 {
        1e9 / self.period_ns
    }

    /// The most messages ever allowed at once (`1 + allowance · rate`, rounded down, ≥ 1): the
    /// bound on catch-up after a stall.
    pub fn capacity(&self) -> u64 {
        let extra = self.allowance_ns as f64 / self.period_ns;
        (extra as u64).saturating_add(1)
    }

    /// Scheduled time of the k-th message after the anchor (k ≥ 1).
    fn due_ns(&self, k: u64) -> u64 {
        // `as u64` saturates; ceil so that a caller woken at the returned time is never early.
        let offset = (k as f64 * self.period_ns).ceil() as u64;
        self.anchor_ns.saturating_add(offset)
    }

    /// Drops credit older than the allowance (no catch-up after a stall).
    fn clamp(&mut self, now_ns: u64) {
        let next_due = self.due_ns(self.consumed.saturating_add(1));
        if now_ns > next_due.saturating_add(self.allowance_ns) {
            // Re-anchor so that the next message is exactly `allowance` late.
            let period = self.period_ns.ceil() as u64;
            self.anchor_ns = now_ns
                .saturating_sub(self.allowance_ns)
                .saturating_sub(period);
            self.consumed = 0;
        }
    }

    /// What may be sent at `now` (time since the burst start). Never returns `Send(0)`.
    ///
    /// `now` should not go backwards; if it does, the pacer simply allows less.
    pub fn poll(&mut self, now: Duration) -> PaceDecision {
        let now_ns = nanos(now);
        self.clamp(now_ns);
        let first = self.consumed.saturating_add(1);
        let first_due = self.due_ns(first);
        if now_ns < first_due {
            return PaceDecision::WaitUntil(Duration::from_nanos(first_due));
        }
        // Estimate how many periods have passed, then correct for rounding.
        let elapsed_periods = ((now_ns - self.anchor_ns) as f64 / self.period_ns).floor() as u64;
        let cap = self.capacity();
        let mut n = elapsed_periods.saturating_sub(self.consumed).clamp(1, cap);
        while n > 1 && self.due_ns(self.consumed.saturating_add(n)) > now_ns {
            n -= 1;
        }
        while n < cap && self.due_ns(self.consumed.saturating_add(n + 1)) <= now_ns {
            n += 1;
        }
        PaceDecision::Send(n)
    }

    /// Records that `n` messages were sent. Sending more than the last [`PaceDecision::Send`]
    /// allowed (e.g. a whole post list) is allowed: the excess is paid back by waiting longer.
    pub fn consume(&mut self, n: u64) {
        self.consumed = self.consumed.saturating_add(n);
    }

    /// When the next message is due if nothing is consumed before then (ignores the stall
    /// clamp, which can only make it earlier).
    pub fn next_due(&self) -> Duration {
        self.due_after(1)
    }

    /// The due time of the `n`-th message after those consumed (`n ≥ 1`): when it would be due if
    /// nothing else were consumed before it.
    pub fn due_after(&self, n: u64) -> Duration {
        Duration::from_nanos(self.due_ns(self.consumed.saturating_add(n.max(1))))
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting

/// Waits due within this are spent polling: a sleep's wake-up error is of the same order
/// (Linux's default timer slack alone is 50 µs), so sleeping would miss the deadline.
pub const SPIN_THRESHOLD: Duration = Duration::from_micros(100);

/// A sleep ends this much before the deadline, and the rest is spun, so timer slack and
/// scheduling latency do not make the sender late (late costs rate once past the allowance).
pub const SLEEP_MARGIN: Duration = Duration::from_micros(50);

/// With completions outstanding and none arriving, poll this long before arming the CQ and
/// blocking on its completion channel ("poll first, then arm": one interrupt per message would
/// cost more than polling; rxe signalled the channel 43–480 µs after posting, lab/README.md).
pub const POLL_BEFORE_ARM: Duration = Duration::from_micros(200);

/// A completion expected later than this is waited for on the completion channel rather than
/// by sleeping until its estimated time: arming plus one interrupt (tens of µs) is cheap against
/// a multi-millisecond wait, and the channel wakes us at the real completion, not the estimate.
pub const BLOCK_THRESHOLD: Duration = Duration::from_millis(2);

/// Where signaled completions stand when the engine has nothing it can do right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completions {
    /// No signaled completion is outstanding.
    NoneOutstanding,
    /// Signaled completions are outstanding.
    Outstanding {
        /// The engine's estimate of when the next one arrives (e.g. queued bytes ahead of it at
        /// the link rate); `None` if unknown, zero if it is already overdue.
        expected_in: Option<Duration>,
        /// How long the engine has been waiting without any completion arriving.
        waited: Duration,
    },
}

/// How the engine should wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitAction {
    /// Busy-poll the CQ (and the clock) and decide again.
    Spin,
    /// Sleep this long (already shortened by [`SLEEP_MARGIN`]), then decide again.
    Sleep(Duration),
    /// Arm the CQ (`ibv_req_notify_cq`), poll it once more (a completion may have arrived before
    /// arming), then block on the completion channel for at most `timeout` (`None`: until an
    /// event; the engine should still apply its own burst timeout).
    Block { timeout: Option<Duration> },
}

/// The CPU-frugal waiting policy (docs/architecture.md, "Pacing and waiting"): poll while
/// completions are due soon, sleep through long pacing gaps, block on the completion channel
/// when nothing is due for a while.
///
/// The thresholds are fields so tests and benchmarks can vary them; [`WaitPolicy::default`]
/// uses the documented constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPolicy {
    pub spin_threshold: Duration,
    pub sleep_margin: Duration,
    pub poll_before_arm: Duration,
    pub block_threshold: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        Self {
            spin_threshold: SPIN_THRESHOLD,
            sleep_margin: SLEEP_MARGIN,
            poll_before_arm: POLL_BEFORE_ARM,
            block_threshold: BLOCK_THRESHOLD,
        }
    }
}

impl WaitPolicy {
    /// Never sleep or block: poll the CQ and the clock all the time, as perftest does. Costs a
    /// whole CPU for the burst; for measuring exactly as perftest measures.
    pub fn busy_poll() -> Self {
        Self {
            spin_threshold: Duration::MAX,
            sleep_margin: Duration::ZERO,
            poll_before_arm: Duration::MAX,
            block_threshold: Duration::MAX,
        }
    }

    /// Decides how to wait.
    ///
    /// `next_send_in`: time until the pacer allows the next message, or `None` when the engine
    /// cannot send before a completion (window full) or has nothing left to send. When a send is
    /// possible right now the engine should send instead of asking.
    pub fn decide(&self, next_send_in: Option<Duration>, completions: Completions) -> WaitAction {
        let sleep_until = |w: Duration| {
            if w <= self.spin_threshold {
                WaitAction::Spin
            } else {
                WaitAction::Sleep(w.saturating_sub(self.sleep_margin))
            }
        };
        match completions {
            // Nothing can wake us but the clock.
            Completions::NoneOutstanding => match next_send_in {
                Some(s) => sleep_until(s),
                None => WaitAction::Spin, // nothing to wait for: return at once
            },
            Completions::Outstanding {
                expected_in,
                waited,
            } => {
                if next_send_in.is_some_and(|s| s <= self.spin_threshold) {
                    return WaitAction::Spin;
                }
                match expected_in.filter(|d| !d.is_zero()) {
                    Some(d) if d <= self.spin_threshold => WaitAction::Spin,
                    Some(d) => {
                        // Not due yet: wake at the earlier of the completion and the next send.
                        let w = next_send_in.map_or(d, |s| s.min(d));
                        if w <= self.block_threshold {
                            sleep_until(w)
                        } else {
                            WaitAction::Block {
                                timeout: Some(w.saturating_sub(self.sleep_margin)),
                            }
                        }
                    }
                    // Unknown or overdue: poll a little first, then arm and block. Polling
                    // first pays off only when messages follow each other closely (one
                    // interrupt per message would cost more); with the next send a long pacing
                    // gap away, one event per message is the cheap way to wait.
                    None if waited < self.poll_before_arm
                        && next_send_in.is_none_or(|s| s <= self.block_threshold) =>
                    {
                        WaitAction::Spin
                    }
                    None => WaitAction::Block {
                        timeout: next_send_in.map(|s| s.saturating_sub(self.sleep_margin)),
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pacer(rate: f64, allowance: Duration) -> Pacer {
        Pacer::new(
            &ResolvedRate::from_messages_per_second(rate, 1).unwrap(),
            allowance,
        )
    }

    const fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn starts_empty_first_message_at_one_period() {
        let mut p = pacer(1000.0, DEFAULT_BURST_ALLOWANCE);
        assert_eq!(p.poll(Duration::ZERO), PaceDecision::WaitUntil(us(1000)));
        assert_eq!(
            p.poll(us(1000) - Duration::from_nanos(1)),
            PaceDecision::WaitUntil(us(1000))
        );
        assert_eq!(p.poll(us(1000)), PaceDecision::Send(1));
        p.consume(1);
        assert_eq!(p.poll(us(1000)), PaceDecision::WaitUntil(us(2000)));
        assert_eq!(p.next_due(), us(2000));
    }

    #[test]
    fn capacity_is_allowance_plus_one_message() {
        assert_eq!(pacer(1000.0, DEFAULT_BURST_ALLOWANCE).capacity(), 2);
        assert_eq!(pacer(1e6, DEFAULT_BURST_ALLOWANCE).capacity(), 1001);
        // The allowance is at least one message interval, so catch-up is at most one extra
        // message at low rates, and a late wake-up of up to one interval costs no rate.
        assert_eq!(pacer(1.0, DEFAULT_BURST_ALLOWANCE).capacity(), 2);
        assert_eq!(pacer(1e6, Duration::ZERO).capacity(), 2);
    }

    #[test]
    fn long_pacing_gap_blocks_at_once_instead_of_polling_first() {
        let policy = WaitPolicy::default();
        let outstanding = Completions::Outstanding {
            expected_in: None,
            waited: Duration::ZERO,
        };
        // Next send 20 ms away: arm and block now, waking for the completion or the send.
        assert_eq!(
            policy.decide(Some(Duration::from_millis(20)), outstanding),
            WaitAction::Block {
                timeout: Some(Duration::from_millis(20) - SLEEP_MARGIN)
            }
        );
        // Window full (no send possible) or the next send soon: poll first, as before.
        assert_eq!(policy.decide(None, outstanding), WaitAction::Spin);
        assert_eq!(
            policy.decide(Some(Duration::from_millis(1)), outstanding),
            WaitAction::Spin
        );
    }

    #[test]
    fn late_wakeups_within_one_interval_cost_no_rate_at_low_rates() {
        // 95 msg/s (50 Mbps of 64 KiB messages); every wake-up 4 ms late, far beyond 1 ms.
        let mut p = pacer(95.0, DEFAULT_BURST_ALLOWANCE);
        let mut sent = 0u64;
        let mut t = Duration::ZERO;
        while sent < 400 {
            match p.poll(t) {
                PaceDecision::Send(n) => {
                    p.consume(n);
                    sent += n;
                }
                PaceDecision::WaitUntil(due) => t = due + Duration::from_millis(4),
            }
        }
        let achieved = sent as f64 / t.as_secs_f64();
        assert!((achieved / 95.0 - 1.0).abs() < 0.005, "{achieved}");
    }

    #[test]
    fn stall_catch_up_is_bounded_by_capacity() {
        let mut p = pacer(1e6, DEFAULT_BURST_ALLOWANCE);
        // Steady for 10 ms.
        let mut t = Duration::ZERO;
        while t < Duration::from_millis(10) {
            if let PaceDecision::Send(n) = p.poll(t) {
                p.consume(n);
            }
            t += us(1);
        }
        // Blocked for one second: at most capacity (1001) messages come out at once.
        let t = t + Duration::from_secs(1);
        assert_eq!(p.poll(t), PaceDecision::Send(1001));
        p.consume(1001);
        assert!(matches!(p.poll(t), PaceDecision::WaitUntil(_)));
        // And then the schedule continues at the rate, not faster.
        assert_eq!(p.poll(t + us(1)), PaceDecision::Send(1));
    }

    #[test]
    fn overconsumption_is_paid_back() {
        let mut p = pacer(1000.0, Duration::ZERO);
        assert_eq!(p.poll(us(1000)), PaceDecision::Send(1));
        p.consume(4); // a post list of 4
        assert_eq!(p.poll(us(1000)), PaceDecision::WaitUntil(us(5000)));
    }

    #[test]
    fn extreme_rates_do_not_panic() {
        for rate in [1e-12, 1e-300, 1e18, 1e300] {
            let mut p = pacer(rate, Duration::from_secs(1));
            for t in [0, 1, u64::MAX / 2, u64::MAX] {
                if let PaceDecision::Send(n) = p.poll(Duration::from_nanos(t)) {
                    assert!(n >= 1);
                    p.consume(n);
                }
            }
            let _ = p.next_due();
        }
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut p = Pacer::with_messages_per_second(rate, Duration::ZERO);
            let _ = p.poll(Duration::from_secs(5));
        }
    }

    /// Tiny deterministic generator for the simulations (no dependency on proptest's RNG).
    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// A sender that polls, sends at most `max_post` messages per step when allowed, wakes late
    /// by up to `jitter` after each wait, and now and then stalls for up to `stall`. Returns
    /// (messages sent, time of the last send, largest single grant).
    fn simulate(
        rate: f64,
        messages: u64,
        max_post: u64,
        jitter: Duration,
        stall: Duration,
        seed: u64,
    ) -> (u64, Duration, u64) {
        let mut p = pacer(rate, DEFAULT_BURST_ALLOWANCE);
        let mut rng = XorShift(seed | 1);
        let mut t = Duration::ZERO;
        let (mut sent, mut last, mut max_grant) = (0u64, Duration::ZERO, 0u64);
        while sent < messages {
            match p.poll(t) {
                PaceDecision::Send(n) => {
                    max_grant = max_grant.max(n);
                    let k = n.min(max_post).min(messages - sent);
                    p.consume(k);
                    sent += k;
                    last = t;
                    // Posting costs a little time.
                    t += Duration::from_nanos(20 * k);
                    if rng.below(1000) == 0 {
                        t += Duration::from_nanos(rng.below(nanos(stall) + 1));
                    }
                }
                PaceDecision::WaitUntil(w) => {
                    assert!(w > t, "WaitUntil must be in the future");
                    t = w + Duration::from_nanos(rng.below(nanos(jitter) + 1));
                }
            }
        }
        (sent, last, max_grant)
    }

    /// Achieved rate = messages / (last send − burst start) over a simulated run, with sleep
    /// overshoot up to 50 µs and, after one send in a thousand, a stall of up to 0.5 ms (inside
    /// the 1 ms allowance, so the sender can catch up).
    #[test]
    fn achieved_rate_within_half_percent_from_1_to_10m_msgs() {
        let cases = [
            (1.0, 400),
            (7.0, 1_000),
            (100.0, 5_000),
            (1_000.0, 20_000),
            (33_333.0, 100_000),
            (100_000.0, 300_000),
            (1e6, 1_000_000),
            (1e7, 3_000_000),
        ];
        let mut worst = 0.0f64;
        for (rate, messages) in cases {
            for seed in 1..4u64 {
                let (sent, last, max_grant) =
                    simulate(rate, messages, 32, us(50), us(500), seed * 7919);
                let achieved = sent as f64 / last.as_secs_f64();
                let error = achieved / rate - 1.0;
                assert!(
                    error.abs() < 0.005,
                    "rate {rate}: achieved {achieved} ({:+.4}%)",
                    error * 100.0
                );
                assert!(max_grant <= pacer(rate, DEFAULT_BURST_ALLOWANCE).capacity());
                worst = worst.max(error.abs());
            }
        }
        eprintln!("pacing: worst |achieved/limit - 1| = {:.5}%", worst * 100.0);
    }

    /// Never ahead of the limit: at every instant, sent ≤ 1 + allowance·rate + elapsed·rate
    /// (and the first message only at 1/rate).
    #[test]
    fn never_ahead_of_schedule() {
        let rate = 250_000.0;
        let mut p = pacer(rate, DEFAULT_BURST_ALLOWANCE);
        let mut rng = XorShift(42);
        let mut t = Duration::ZERO;
        let mut sent = 0u64;
        for _ in 0..200_000 {
            if let PaceDecision::Send(n) = p.poll(t) {
                sent += n;
                p.consume(n);
                // floor(t · rate) in exact integer arithmetic (rate = 250000/s: 4 µs a message).
                let bound = nanos(t) / 4_000;
                assert!(sent <= bound, "sent {sent} > {bound} at {t:?}");
            }
            t += Duration::from_nanos(rng.below(20_000));
        }
    }

    /// With long stalls the sender loses the time beyond the allowance instead of bursting.
    #[test]
    fn long_stalls_lose_rate_instead_of_bursting() {
        let rate = 10_000.0;
        let (sent, last, max_grant) = simulate(rate, 200_000, u64::MAX, us(10), us(200_000), 3);
        let achieved = sent as f64 / last.as_secs_f64();
        assert!(
            achieved < rate,
            "stalls beyond the allowance must cost rate"
        );
        assert!(max_grant <= 11, "catch-up {max_grant} > capacity 11");
    }

    proptest! {
        #[test]
        fn grants_bounded_and_waits_in_future(
            rate in 1e-3f64..1e9,
            allowance_us in 0u64..10_000,
            steps in proptest::collection::vec((0u64..5_000_000, 0u64..64), 1..200),
        ) {
            let mut p = pacer(rate, us(allowance_us));
            let cap = p.capacity();
            let mut t = 0u64;
            for (dt, want) in steps {
                t = t.saturating_add(dt);
                match p.poll(Duration::from_nanos(t)) {
                    PaceDecision::Send(n) => {
                        prop_assert!(n >= 1 && n <= cap, "n {} cap {}", n, cap);
                        p.consume(want.min(n));
                    }
                    PaceDecision::WaitUntil(w) => prop_assert!(nanos(w) > t),
                }
            }
        }
    }

    #[test]
    fn busy_poll_never_sleeps_or_blocks() {
        let w = WaitPolicy::busy_poll();
        let long = Duration::from_secs(3600);
        for next in [None, Some(Duration::ZERO), Some(us(500)), Some(long)] {
            for completions in [
                Completions::NoneOutstanding,
                Completions::Outstanding {
                    expected_in: None,
                    waited: long,
                },
                Completions::Outstanding {
                    expected_in: Some(long),
                    waited: Duration::ZERO,
                },
            ] {
                assert_eq!(w.decide(next, completions), WaitAction::Spin);
            }
        }
    }

    #[test]
    fn wait_policy() {
        let w = WaitPolicy::default();
        let none = Completions::NoneOutstanding;
        let due = |d: Duration| Completions::Outstanding {
            expected_in: Some(d),
            waited: Duration::ZERO,
        };
        let unknown = |waited: Duration| Completions::Outstanding {
            expected_in: None,
            waited,
        };
        // Short pacing gaps are spun, long ones slept leaving 50 µs to spin.
        assert_eq!(w.decide(Some(us(80)), none), WaitAction::Spin);
        assert_eq!(w.decide(Some(us(1000)), none), WaitAction::Sleep(us(950)));
        assert_eq!(
            w.decide(Some(Duration::from_secs(1)), none),
            WaitAction::Sleep(Duration::from_secs(1) - us(50))
        );
        assert_eq!(w.decide(None, none), WaitAction::Spin);
        // Completions due soon: poll.
        assert_eq!(w.decide(None, due(us(20))), WaitAction::Spin);
        assert_eq!(w.decide(Some(us(5000)), due(us(20))), WaitAction::Spin);
        // A send imminent: poll even if completions are far.
        assert_eq!(
            w.decide(Some(us(10)), due(Duration::from_secs(1))),
            WaitAction::Spin
        );
        // Completion due in 1 ms, send in 5 ms: sleep until the completion is due.
        assert_eq!(
            w.decide(Some(us(5000)), due(us(1000))),
            WaitAction::Sleep(us(950))
        );
        // Completion far away: block on the channel, waking for the next send.
        assert_eq!(
            w.decide(Some(us(5000)), due(us(50_000))),
            WaitAction::Block {
                timeout: Some(us(4950))
            }
        );
        assert_eq!(
            w.decide(None, due(us(50_000))),
            WaitAction::Block {
                timeout: Some(us(49_950))
            }
        );
        // Unknown or overdue: poll first, then arm and block.
        assert_eq!(w.decide(None, unknown(us(10))), WaitAction::Spin);
        assert_eq!(
            w.decide(None, unknown(us(300))),
            WaitAction::Block { timeout: None }
        );
        assert_eq!(
            w.decide(Some(us(3000)), unknown(us(300))),
            WaitAction::Block {
                timeout: Some(us(2950))
            }
        );
        let overdue = Completions::Outstanding {
            expected_in: Some(Duration::ZERO),
            waited: us(500),
        };
        assert_eq!(w.decide(None, overdue), WaitAction::Block { timeout: None });
    }
}
