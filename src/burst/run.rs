//! The state of one running burst, without verbs or a clock: which WRs to post now, what a
//! completion retires, when the burst is over or must be abandoned, and how to wait.
//!
//! The engine (`engine.rs`) is the I/O loop around it: it reads the clock, posts the
//! [`PlannedWrite`]s this returns, polls the CQ and feeds the completions back. Keeping the
//! decisions here makes them testable with simulated time: a stall clock that must not run while
//! only unsignaled WRs are outstanding, a deadline that ends a too-slow burst with the figures of
//! what completed, the first-post-to-first-completion gap of a paced burst.
//!
//! Message placement: each QP owns `slots` message-sized slots on both ends; WR `i` of a QP
//! reads local slot `i mod slots` and writes the peer's slot `i mod slots`, so the last `slots`
//! messages of every QP land at distinct offsets and the responder can verify each of them
//! (docs/architecture.md, "Data integrity").

use std::time::Duration;

use super::pacing::{Completions, PaceDecision, Pacer, WaitAction, WaitPolicy};
use super::plan::{BurstLength, BurstPlan};
use super::signal::{split_wr_id, wr_id, SendWindow, WindowError};
use super::stats::{BurstReport, BurstStats};

/// How much longer than planned a paced count or bytes burst may run before it is ended with
/// the figures it has: a link at half the pace still finishes, and a slower one yields a figure
/// (its achieved bandwidth) instead of only `timeout`.
pub const DEADLINE_FACTOR: u32 = 2;

/// One RDMA WRITE to post: on which QP, its `wr_id`, which slot it reads and writes, and its
/// flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedWrite {
    pub qp: u16,
    pub wr_id: u64,
    /// Slot index within the QP's slots, on both ends.
    pub slot: u64,
    pub signaled: bool,
    /// The QP's last WR: carries the burst id as immediate data.
    pub last: bool,
}

/// Why a running burst was abandoned; the figures of what completed travel with it.
#[derive(Debug, Clone, PartialEq)]
pub enum Abandon {
    /// A signaled WR has been outstanding for the stall timeout with no completion.
    Stalled { timeout: Duration },
    /// The burst ran past its deadline (planned length × [`DEADLINE_FACTOR`] + timeout).
    Deadline { deadline: Duration },
}

/// The stall clock: runs only while a signaled WR is outstanding, from the post of the first
/// one or the last completion, whichever is later. Unsignaled WRs produce no completion, so
/// waiting on them is not a stall: with CQ moderation 100 at 5 messages/s, the first signaled WR
/// is 20 s into the burst. (A failed WR still completes with an error, signaled or not.)
#[derive(Debug, Clone, Copy)]
pub struct StallClock {
    timeout: Duration,
    waiting_since: Option<Duration>,
}

impl StallClock {
    pub fn new(timeout: Duration) -> Self {
        StallClock {
            timeout,
            waiting_since: None,
        }
    }

    /// Tells the clock whether a signaled WR is outstanding at `now`.
    pub fn observe(&mut self, now: Duration, signaled_outstanding: bool) {
        match (signaled_outstanding, self.waiting_since) {
            (false, _) => self.waiting_since = None,
            (true, None) => self.waiting_since = Some(now),
            (true, Some(_)) => {}
        }
    }

    /// A completion arrived: the wait starts over.
    pub fn on_completion(&mut self, now: Duration) {
        if self.waiting_since.is_some() {
            self.waiting_since = Some(now);
        }
    }

    /// When the burst counts as stalled, if a signaled WR is outstanding.
    pub fn stall_at(&self) -> Option<Duration> {
        self.waiting_since.map(|t| t + self.timeout)
    }

    pub fn is_stalled(&self, now: Duration) -> bool {
        self.stall_at().is_some_and(|at| now > at)
    }
}

/// The bookkeeping of one burst; see the module docs.
#[derive(Debug)]
pub struct BurstRun {
    qps: usize,
    message_size: u64,
    slots: u64,
    post_list: u64,
    /// Messages to post per QP (`u64::MAX` in duration mode).
    totals: Vec<u64>,
    duration: Option<Duration>,
    deadline: Option<Duration>,
    windows: Vec<SendWindow>,
    finished: Vec<bool>,
    pacer: Option<Pacer>,
    policy: WaitPolicy,
    stats: BurstStats,
    stall: StallClock,
    next_qp: usize,
    stopping: bool,
    first_post: Option<Duration>,
    last_progress: Duration,
    /// Closing WRs of a stopping duration burst posted so far (they are not paced).
    closing_posted: u64,
}

impl BurstRun {
    /// A burst of `plan` with `slots` message slots per QP on both ends (at least 1); `timeout`
    /// bounds stalls and, added to the planned length, the whole burst. Time 0 is the burst's
    /// start (a paced burst's bucket starts empty there).
    pub fn new(plan: &BurstPlan, slots: u64, timeout: Duration) -> Self {
        let qps = usize::from(plan.qps());
        let duration = match plan.length() {
            BurstLength::Duration(d) => Some(d),
            _ => None,
        };
        let pacer = plan.pacer();
        let mut stats = BurstStats::new(plan.qps(), plan.stats_window());
        if pacer.is_some() {
            // The bucket starts empty at t = 0: measure from there, not from the first post, or
            // N messages would be timed over N-1 pacing gaps (perftest's bias).
            stats.on_start(Duration::ZERO);
        }
        BurstRun {
            qps,
            message_size: plan.message_size(),
            slots: slots.max(1),
            post_list: u64::from(plan.post_list()),
            totals: (0..plan.qps())
                .map(|q| plan.messages_for_qp(q).unwrap_or(u64::MAX))
                .collect(),
            duration,
            deadline: burst_deadline(plan, timeout),
            windows: (0..qps).map(|_| plan.send_window()).collect(),
            finished: vec![false; qps],
            pacer,
            policy: if plan.busy_poll() {
                WaitPolicy::busy_poll()
            } else {
                WaitPolicy::default()
            },
            stats,
            stall: StallClock::new(timeout),
            next_qp: 0,
            stopping: false,
            first_post: None,
            last_progress: Duration::ZERO,
            closing_posted: 0,
        }
    }

    /// The overall deadline, if the burst has a planned length.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// `Err` when the burst must be abandoned at `now`.
    pub fn check(&mut self, now: Duration) -> Result<(), Abandon> {
        if let Some(deadline) = self.deadline.filter(|&d| now > d) {
            return Err(Abandon::Deadline { deadline });
        }
        self.stall.observe(now, self.signaled_in_flight());
        if self.stall.is_stalled(now) {
            return Err(Abandon::Stalled {
                timeout: self.stall.timeout,
            });
        }
        Ok(())
    }

    /// The WRs to post at `now`, in per-QP groups (consecutive entries of one QP form one post
    /// chain), appended to `out`. Marks them posted: the caller must post them all or abandon the
    /// burst.
    pub fn plan_round(
        &mut self,
        now: Duration,
        out: &mut Vec<PlannedWrite>,
    ) -> Result<(), WindowError> {
        if let Some(d) = self.duration {
            self.stopping |= now >= d;
        }
        let mut allowance = match self.pacer.as_mut().map(|p| p.poll(now)) {
            None => u64::MAX,
            Some(PaceDecision::Send(n)) => n,
            Some(PaceDecision::WaitUntil(_)) => 0,
        };
        let before = out.len();
        for step in 0..self.qps {
            let q = (self.next_qp + step) % self.qps;
            if self.finished[q] {
                continue;
            }
            let window = &mut self.windows[q];
            let remaining = if self.stopping {
                1
            } else {
                self.totals[q] - window.posted()
            };
            // The final WR of a stopping duration burst is not paced: it only closes the burst.
            let paced_limit = if self.stopping { 1 } else { allowance };
            let n = self
                .post_list
                .min(remaining)
                .min(u64::from(window.room()))
                .min(paced_limit);
            for k in 0..n {
                let last = self.stopping || remaining - k == 1;
                let wr = window.post(last)?;
                out.push(PlannedWrite {
                    qp: q as u16,
                    wr_id: wr_id(q as u16, wr.index),
                    slot: wr.index % self.slots,
                    signaled: wr.signaled,
                    last,
                });
                if last {
                    self.finished[q] = true;
                }
                if self.stopping {
                    // The closing WR goes when the duration is up, not at its due time: it is
                    // timed to its due time, or a short paced burst would read above its pace
                    // (docs/architecture.md, "Paced bursts are timed from the pacer's start").
                    self.closing_posted += 1;
                    if let Some(p) = &self.pacer {
                        self.stats.on_paced_end(p.due_after(self.closing_posted));
                    }
                }
            }
            if !self.stopping && n > 0 {
                allowance -= n.min(allowance);
                if let Some(p) = self.pacer.as_mut() {
                    p.consume(n);
                }
            }
        }
        self.next_qp = (self.next_qp + 1) % self.qps;
        if out.len() > before {
            if self.first_post.is_none() {
                self.first_post = Some(now);
                // Paced or not, the first post starts the completion-gap clock: a paced burst's
                // wait for its first completion is a gap like any other.
                self.stats.on_first_post(now);
            }
            self.last_progress = now;
            self.stall.observe(now, self.signaled_in_flight());
        }
        Ok(())
    }

    /// Retires one successful completion (`wr_id` as posted) at `now`.
    pub fn on_completion(&mut self, now: Duration, id: u64) -> Result<(), WindowError> {
        let (q, index) = split_wr_id(id);
        let window =
            self.windows
                .get_mut(usize::from(q))
                .ok_or(WindowError::UnexpectedCompletion {
                    wr_index: index,
                    expected: None,
                })?;
        let covered = window.on_completion(index)?;
        self.stats
            .on_completion(q, now, covered, covered * self.message_size);
        self.stall.on_completion(now);
        self.last_progress = now;
        Ok(())
    }

    /// Every QP posted its last WR and everything posted completed.
    pub fn is_done(&self) -> bool {
        self.finished.iter().all(|&f| f) && self.windows.iter().all(SendWindow::is_drained)
    }

    /// Whether any signaled WR is outstanding (what the stall clock watches).
    pub fn signaled_in_flight(&self) -> bool {
        self.windows.iter().any(|w| w.signaled_outstanding() > 0)
    }

    /// When the first WR was posted.
    pub fn first_post(&self) -> Option<Duration> {
        self.first_post
    }

    /// WRs posted on each QP so far (what the responder verifies against).
    pub fn posted_per_qp(&self) -> Vec<u64> {
        self.windows.iter().map(SendWindow::posted).collect()
    }

    /// How to wait at `now` when nothing could be posted or polled, and the longest a block may
    /// last before the deadline or stall clock needs a look.
    pub fn wait_action(&self, now: Duration) -> (WaitAction, Option<Duration>) {
        let can_send = (0..self.qps).any(|q| !self.finished[q] && self.windows[q].room() > 0);
        let mut next_send_in = match (&self.pacer, can_send && !self.stopping) {
            (Some(p), true) => Some(p.next_due().saturating_sub(now)),
            _ => None,
        };
        if let (Some(d), false) = (self.duration, self.stopping) {
            let until_stop = d.saturating_sub(now);
            next_send_in = Some(next_send_in.map_or(until_stop, |s| s.min(until_stop)));
        }
        let completions = if self.signaled_in_flight() {
            Completions::Outstanding {
                expected_in: None,
                waited: now.saturating_sub(self.last_progress),
            }
        } else {
            Completions::NoneOutstanding
        };
        let check_at = match (self.deadline, self.stall.stall_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (
            self.policy.decide(next_send_in, completions),
            check_at.map(|at| at.saturating_sub(now)),
        )
    }

    /// Records the CPU time of the burst thread.
    pub fn set_cpu_seconds(&mut self, seconds: f64) {
        self.stats.set_cpu_seconds(seconds);
    }

    /// The figures of what completed so far (the whole burst once [`BurstRun::is_done`]).
    pub fn report(&self) -> BurstReport {
        self.stats.finish()
    }
}

/// Only a burst with a planned length gets an overall deadline: a duration burst its duration
/// plus `timeout` (the drain), a paced count or bytes burst [`DEADLINE_FACTOR`] times its planned
/// length plus `timeout`. An unpaced count burst takes as long as the link needs, bounded by the
/// stall clock.
pub fn burst_deadline(plan: &BurstPlan, timeout: Duration) -> Option<Duration> {
    if let BurstLength::Duration(d) = plan.length() {
        return Some(d.saturating_add(timeout));
    }
    let planned = match (plan.rate(), plan.total_messages()) {
        (Some(rate), Some(total)) => {
            Duration::try_from_secs_f64(total as f64 / rate.messages_per_second())
                .unwrap_or(Duration::MAX / 4)
        }
        _ => return None,
    };
    Some(
        planned
            .saturating_mul(DEADLINE_FACTOR)
            .saturating_add(timeout),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::burst::plan::BurstPlan;
    use crate::units::ResolvedRate;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    fn paced_plan(size: u64, messages: u64, per_second: f64) -> BurstPlan {
        BurstPlan::builder(size, BurstLength::Messages(messages))
            .rate(Some(
                ResolvedRate::from_messages_per_second(per_second, size).unwrap(),
            ))
            .build()
            .unwrap()
    }

    /// Drives a run in simulated time over a link that carries one message per `per_message`
    /// (serially) and completes it `latency` later.
    fn simulate(
        run: &mut BurstRun,
        per_message: Duration,
        latency: Duration,
        step: Duration,
        until: Duration,
    ) {
        let mut pending: Vec<(Duration, u64)> = Vec::new();
        let mut link_free = Duration::ZERO;
        let mut out = Vec::new();
        let mut now = Duration::ZERO;
        while now <= until && !run.is_done() {
            run.check(now).unwrap();
            out.clear();
            run.plan_round(now, &mut out).unwrap();
            for w in &out {
                link_free = link_free.max(now) + per_message;
                if w.signaled {
                    pending.push((link_free + latency, w.wr_id));
                }
            }
            pending.sort();
            while pending.first().is_some_and(|&(t, _)| t <= now) {
                let (_, id) = pending.remove(0);
                run.on_completion(now, id).unwrap();
            }
            now += step;
        }
    }

    #[test]
    fn stall_clock_waits_for_a_signaled_wr() {
        let mut clock = StallClock::new(s(1.0));
        clock.observe(s(0.0), false);
        assert!(!clock.is_stalled(s(100.0)));
        clock.observe(s(5.0), true);
        assert!(!clock.is_stalled(s(5.9)));
        assert!(clock.is_stalled(s(6.1)));
        clock.on_completion(s(6.0));
        assert!(!clock.is_stalled(s(6.9)));
        clock.observe(s(6.5), false);
        assert!(!clock.is_stalled(s(50.0)));
    }

    /// 4 KiB messages (CQ moderation 100) at 5 msg/s: the first signaled WR is the 100th, 20 s
    /// in. Only unsignaled WRs are outstanding before it, which is not a stall, even with a 3 s
    /// timeout.
    #[test]
    fn unsignaled_wrs_outstanding_are_not_a_stall() {
        let plan = paced_plan(4096, 200, 5.0);
        assert_eq!(plan.cq_mod(), 100);
        let mut run = BurstRun::new(&plan, 1, s(3.0));
        let mut out = Vec::new();
        let mut now = Duration::ZERO;
        while now < s(19.5) {
            run.check(now)
                .expect("no stall before the first signaled WR");
            run.plan_round(now, &mut out).unwrap();
            now += s(0.05);
        }
        assert!(out.len() >= 95, "{} posted", out.len());
        assert!(out.iter().all(|w| !w.signaled));
        assert!(!run.signaled_in_flight());
        // With the 100th WR (signaled) out and no completion, the clock runs from its post.
        while !run.signaled_in_flight() {
            run.check(now).unwrap();
            run.plan_round(now, &mut out).unwrap();
            now += s(0.05);
        }
        let posted_at = now;
        assert!(run.check(posted_at + s(2.9)).is_ok());
        assert_eq!(
            run.check(posted_at + s(3.1)),
            Err(Abandon::Stalled { timeout: s(3.0) })
        );
    }

    #[test]
    fn a_paced_count_burst_gets_a_generous_deadline_and_keeps_its_figures() {
        // 100 messages at 100/s: planned 1 s, deadline 2 x 1 s + 0.5 s.
        let plan = paced_plan(65536, 100, 100.0);
        let mut run = BurstRun::new(&plan, 1, s(0.5));
        assert_eq!(run.deadline(), Some(s(2.5)));
        // The link carries 30 messages/s, steadily: never a stall, but past the deadline.
        simulate(&mut run, s(1.0 / 30.0), s(0.01), s(0.01), s(2.5));
        assert!(!run.is_done());
        assert!(matches!(run.check(s(2.51)), Err(Abandon::Deadline { .. })));
        let partial = run.report();
        // About 30 msg/s x 64 KiB achieved: the figure a too-slow link gets next to the error.
        assert!(
            partial.messages > 50 && partial.messages < 100,
            "{partial:?}"
        );
        let rate = partial.message_rate_per_second;
        assert!((rate - 30.0).abs() < 3.0, "{partial:?}");
    }

    #[test]
    fn a_paced_burst_counts_the_wait_for_its_first_completion_as_a_gap() {
        // The pacer's t = 0 is the start; the first WR goes out at ~10 ms and completes 300 ms
        // later: that 300 ms is the longest gap.
        let plan = paced_plan(65536, 10, 100.0);
        let mut run = BurstRun::new(&plan, 1, s(5.0));
        simulate(&mut run, s(0.0001), s(0.3), s(0.001), s(10.0));
        assert!(run.is_done());
        let report = run.report();
        assert!(
            report.completion_gap_max >= s(0.29),
            "gap {:?}",
            report.completion_gap_max
        );
    }

    /// What a burst sent exactly at its pace reads: `n` messages of 64 KiB at 1,000 msg/s over a
    /// link that carries each in 1 µs and completes it `latency` later, driven in 10 µs steps
    /// (the pacer's due times fall on steps). A count burst of `n`, or a duration burst whose
    /// duration ends half a period before the n-th due time: n − 1 paced messages and its closing
    /// one.
    fn paced_reading(n: u64, duration: bool, latency: Duration) -> f64 {
        let per_second = 1000.0;
        let length = if duration {
            BurstLength::Duration(s((n as f64 - 0.5) / per_second))
        } else {
            BurstLength::Messages(n)
        };
        let plan = BurstPlan::builder(65536, length)
            .rate(Some(
                ResolvedRate::from_messages_per_second(per_second, 65536).unwrap(),
            ))
            .build()
            .unwrap();
        let mut run = BurstRun::new(&plan, 1, s(5.0));
        simulate(
            &mut run,
            s(1e-6),
            latency,
            s(1e-5),
            s(n as f64 / per_second + 1.0),
        );
        assert!(run.is_done());
        let report = run.report();
        assert_eq!(report.messages, n, "{report:?}");
        report.bandwidth_bytes_per_second / (per_second * 65536.0)
    }

    #[test]
    fn a_burst_sent_at_its_pace_reads_its_pace_whatever_its_length() {
        for n in [5, 10, 100, 10_000] {
            for duration in [false, true] {
                // Completions 10 µs after the post (1% of a period), as on a NIC.
                let ratio = paced_reading(n, duration, s(10e-6));
                assert!(
                    (ratio - 1.0).abs() <= 0.005,
                    "{n} messages (duration burst: {duration}) read {ratio} of the pace"
                );
                // Never above the pace, however short.
                assert!(paced_reading(n, duration, Duration::ZERO) <= 1.0 + 1e-9);
            }
        }
    }

    #[test]
    fn messages_rotate_over_the_slots() {
        let plan = BurstPlan::builder(4096, BurstLength::Messages(10))
            .build()
            .unwrap();
        let mut run = BurstRun::new(&plan, 4, s(1.0));
        let mut out = Vec::new();
        while out.len() < 10 {
            run.plan_round(Duration::ZERO, &mut out).unwrap();
        }
        let slots: Vec<u64> = out.iter().map(|w| w.slot).collect();
        assert_eq!(slots, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        assert!(out.last().unwrap().last && out.last().unwrap().signaled);
        assert_eq!(run.posted_per_qp(), [10]);
    }

    #[test]
    fn unpaced_count_bursts_have_no_deadline() {
        let plan = BurstPlan::builder(4096, BurstLength::Messages(10))
            .build()
            .unwrap();
        assert_eq!(BurstRun::new(&plan, 1, s(1.0)).deadline(), None);
        let plan = BurstPlan::builder(4096, BurstLength::Duration(s(2.0)))
            .build()
            .unwrap();
        assert_eq!(BurstRun::new(&plan, 1, s(1.0)).deadline(), Some(s(3.0)));
    }
}
