//! A prober's pings of one path: what was sent, what answered, what was lost, and the RTTs of a
//! sliding window.
//!
//! A ping is outstanding from its post until its send completion and both answers arrived, in
//! any order (then it is a sample), or `timeout` passed. At the timeout a ping whose first
//! answer (the ack) never came is lost, whatever arrives later; one whose ack came but not the
//! responder's delay was answered (the path carried it both ways) and gives no sample. An
//! answer that matches no outstanding ping (a late one, a duplicate, a replay of an old one) is
//! counted as unexpected and dropped, never measured. Samples older than `window` leave the window; the quantiles are
//! nearest-rank over what is left. Everything is bounded: at most [`MAX_OUTSTANDING`] pings wait
//! (a path that sends faster than it times out loses its oldest), and the window holds what one
//! `window` of pings gives.
//!
//! Time is the caller's monotonic clock as a [`Duration`] since any fixed start. Pure:
//! unit-tested here.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::delay::{delays, Clock, Delays, ProberTimes};
use super::packet::{Kind, Packet};

/// The most pings of one path waiting for answers.
pub const MAX_OUTSTANDING: usize = 64;

/// Pings lost in a row before a path's target is worth learning again (its peer may have
/// restarted, with a new ping QP and new keys): see [`PathPings::relearn_due`].
pub const RELEARN_AFTER: u64 = 3;

/// However long a path stays silent, its target is asked for again at least every this many
/// lost pings.
pub const RELEARN_EVERY_AT_MOST: u64 = 120;

/// One ping waiting for its send completion and its answers, which may come in any order (a
/// NIC may report the send's completion after the answer to it arrived).
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    posted_at: Duration,
    /// CPU time of the post (ns).
    posted: u64,
    /// The send's completion, once polled.
    sent: Option<u64>,
    /// The first answer's receive completion and the CPU time it was handled, once it arrived.
    acked: Option<(u64, u64)>,
    /// The responder's delay, once the second answer arrived.
    responder: Option<Duration>,
}

impl Outstanding {
    /// The four prober timestamps and the responder's delay, once all are in.
    fn complete(&self) -> Option<(ProberTimes, Duration)> {
        let (sent, (acked, done), responder) = (self.sent?, self.acked?, self.responder?);
        let times = ProberTimes {
            posted: self.posted,
            sent,
            acked,
            done,
        };
        Some((times, responder))
    }
}

/// What an event did to the ping it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The ping still waits for its send completion or an answer.
    Partial,
    /// The send completion and both answers are in: a sample of the window.
    Measured(Delays),
    /// All are in but contradict each other: no sample (counted in `invalid`).
    Invalid,
    /// It matched no outstanding ping: dropped (counted in `unexpected`).
    Unexpected,
}

/// Counters of one path since it was created; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub lost: u64,
    pub unexpected: u64,
    pub invalid: u64,
}

/// The prober's pings of one path.
#[derive(Debug)]
pub struct PathPings {
    clock: Clock,
    timeout: Duration,
    window: Duration,
    next_seq: u64,
    outstanding: BTreeMap<u64, Outstanding>,
    samples: VecDeque<(Duration, Delays)>,
    counts: Counts,
    /// Pings lost since the last ack, and that count when a new target was last asked for.
    lost_in_a_row: u64,
    relearn_asked_at: u64,
}

/// The window's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSummary {
    pub samples: usize,
    pub rtt_min: Duration,
    pub rtt_p50: Duration,
    pub rtt_p90: Duration,
    pub rtt_p99: Duration,
    pub rtt_max: Duration,
    pub responder_p50: Duration,
}

impl PathPings {
    /// A path whose device completion clock is `clock`; a ping unanswered after `timeout` is
    /// lost; the quantiles cover the last `window`. Its pings are numbered from `first_seq` on
    /// (the engine starts a path from the wall clock's nanoseconds: the numbers under one key
    /// then only grow, even when a path is forgotten and learnt again under the same key, as the
    /// answering side's replay window needs, and an answer captured from an earlier run of the
    /// path never matches a ping of this one).
    pub fn new(clock: Clock, timeout: Duration, window: Duration, first_seq: u64) -> PathPings {
        PathPings {
            clock,
            timeout,
            window,
            next_seq: first_seq,
            outstanding: BTreeMap::new(),
            samples: VecDeque::new(),
            counts: Counts::default(),
            lost_in_a_row: 0,
            relearn_asked_at: 0,
        }
    }

    /// A ping is about to be posted at CPU time `posted` (ns), at the caller's time `now`:
    /// returns its sequence number, for its packet. It is outstanding from here on, so answers
    /// that arrive before its send completion is polled find it.
    pub fn on_posted(&mut self, now: Duration, posted: u64) -> u64 {
        if self.outstanding.len() == MAX_OUTSTANDING {
            self.outstanding.pop_first();
            self.lose(1);
        }
        let seq = self.next_seq;
        self.outstanding.insert(
            seq,
            Outstanding {
                posted_at: now,
                posted,
                sent: None,
                acked: None,
                responder: None,
            },
        );
        self.next_seq = self.next_seq.wrapping_add(1);
        self.counts.sent += 1;
        seq
    }

    /// Ping `seq` was never sent (its post failed): forgotten, as if [`Self::on_posted`] had not
    /// been called, so a local failure is not counted as a loss of the path.
    pub fn cancel(&mut self, seq: u64) {
        if self.outstanding.remove(&seq).is_some() {
            self.counts.sent -= 1;
        }
    }

    /// The send of ping `seq` completed at `completed` (device clock), at the caller's time
    /// `now`.
    pub fn on_send_completed(&mut self, now: Duration, seq: u64, completed: u64) -> Answer {
        self.expire(now);
        match self.outstanding.get_mut(&seq) {
            Some(ping) if ping.sent.is_none() => ping.sent = Some(completed),
            _ => {
                self.counts.unexpected += 1;
                return Answer::Unexpected;
            }
        }
        self.measure_if_complete(now, seq)
    }

    /// An answer (already verified: [`Packet::decode`]) received at device time `completed`,
    /// handled by CPU time `done` (ns), at the caller's time `now`.
    pub fn on_answer(
        &mut self,
        now: Duration,
        packet: &Packet,
        completed: u64,
        done: u64,
    ) -> Answer {
        self.expire(now);
        let Some(ping) = self.outstanding.get_mut(&packet.seq) else {
            self.counts.unexpected += 1;
            return Answer::Unexpected;
        };
        match packet.kind {
            Kind::Ack if ping.acked.is_none() => {
                ping.acked = Some((completed, done));
                self.lost_in_a_row = 0;
                self.relearn_asked_at = 0;
            }
            Kind::Delay if ping.responder.is_none() => {
                ping.responder = Some(Duration::from_nanos(packet.responder_delay_ns));
            }
            _ => {
                self.counts.unexpected += 1;
                return Answer::Unexpected;
            }
        }
        self.measure_if_complete(now, packet.seq)
    }

    /// Ping `seq`'s sample once its send completion and both answers are in.
    fn measure_if_complete(&mut self, now: Duration, seq: u64) -> Answer {
        let Some((times, responder)) = self.outstanding.get(&seq).and_then(Outstanding::complete)
        else {
            return Answer::Partial;
        };
        self.outstanding.remove(&seq);
        match delays(&self.clock, &times, responder) {
            Ok(d) => {
                self.samples.push_back((now, d));
                Answer::Measured(d)
            }
            Err(_) => {
                self.counts.invalid += 1;
                Answer::Invalid
            }
        }
    }

    /// Counts the pings unanswered for `timeout` as lost and drops the samples older than the
    /// window, as of `now`.
    pub fn expire(&mut self, now: Duration) {
        let timeout = self.timeout;
        let mut lost = 0;
        self.outstanding.retain(|_, p| {
            let waiting = now.saturating_sub(p.posted_at) < timeout;
            lost += u64::from(!waiting && p.acked.is_none());
            waiting
        });
        self.lose(lost);
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.saturating_sub(*at) >= self.window)
        {
            self.samples.pop_front();
        }
    }

    fn lose(&mut self, n: u64) {
        self.counts.lost += n;
        self.lost_in_a_row += n;
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Pings lost since the last answered one.
    pub fn lost_in_a_row(&self) -> u64 {
        self.lost_in_a_row
    }

    /// Whether the path's target should be learnt again now: [`RELEARN_AFTER`] pings lost in a
    /// row, then each time twice as many as when it was last asked (at most
    /// [`RELEARN_EVERY_AT_MOST`] more), so a dead peer is asked less and less often. An ack
    /// starts the count again.
    pub fn relearn_due(&mut self) -> bool {
        let asked = self.relearn_asked_at;
        let next = if asked == 0 {
            RELEARN_AFTER
        } else {
            (2 * asked).min(asked + RELEARN_EVERY_AT_MOST)
        };
        let due = self.lost_in_a_row >= next;
        if due {
            self.relearn_asked_at = self.lost_in_a_row;
        }
        due
    }

    /// The window's quantiles as of the last [`Self::expire`]; `None` with no sample in it.
    pub fn summary(&self) -> Option<WindowSummary> {
        let mut rtts: Vec<Duration> = self.samples.iter().map(|(_, d)| d.network_rtt).collect();
        let mut held: Vec<Duration> = self.samples.iter().map(|(_, d)| d.responder).collect();
        if rtts.is_empty() {
            return None;
        }
        rtts.sort_unstable();
        held.sort_unstable();
        Some(WindowSummary {
            samples: rtts.len(),
            rtt_min: rtts[0],
            rtt_p50: nearest_rank(&rtts, 0.5),
            rtt_p90: nearest_rank(&rtts, 0.9),
            rtt_p99: nearest_rank(&rtts, 0.99),
            rtt_max: rtts[rtts.len() - 1],
            responder_p50: nearest_rank(&held, 0.5),
        })
    }
}

/// The nearest-rank `q` quantile of sorted, non-empty `v`.
fn nearest_rank(v: &[Duration], q: f64) -> Duration {
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn path() -> PathPings {
        PathPings::new(Clock::software(), ms(500), ms(60_000), 0)
    }

    fn answer(kind: Kind, seq: u64, delay_ns: u64) -> Packet {
        Packet {
            kind,
            key_id: 1,
            seq,
            responder_delay_ns: delay_ns,
        }
    }

    /// Posts a ping at `now`, at CPU time `posted`, its send completed at `completed`.
    fn sent(p: &mut PathPings, now: Duration, posted: u64, completed: u64) -> u64 {
        let seq = p.on_posted(now, posted);
        assert_eq!(p.on_send_completed(now, seq, completed), Answer::Partial);
        seq
    }

    /// Sends a ping at `at` ms and answers it: RTT `rtt_us` µs with 2 µs held by the responder.
    fn ping(p: &mut PathPings, at: u64, rtt_us: u64) -> Answer {
        let t = at * 1_000_000;
        let seq = sent(p, ms(at), t, t + 1_000);
        let acked = t + 1_000 + (rtt_us + 2) * 1_000;
        assert_eq!(
            p.on_answer(ms(at), &answer(Kind::Ack, seq, 0), acked, acked + 500),
            Answer::Partial
        );
        p.on_answer(ms(at), &answer(Kind::Delay, seq, 2_000), 0, 0)
    }

    #[test]
    fn both_answers_make_a_sample_in_either_order() {
        let mut p = path();
        let Answer::Measured(d) = ping(&mut p, 0, 10) else {
            panic!("no sample")
        };
        assert_eq!(d.network_rtt, Duration::from_micros(10));
        assert_eq!(d.responder, Duration::from_micros(2));
        assert_eq!(d.prober, Duration::from_nanos(1_500));
        // The delay first, then the ack.
        sent(&mut p, ms(1), 5_000_000, 5_001_000);
        assert_eq!(
            p.on_answer(ms(1), &answer(Kind::Delay, 1, 2_000), 0, 0),
            Answer::Partial
        );
        assert!(matches!(
            p.on_answer(ms(1), &answer(Kind::Ack, 1, 0), 5_013_000, 5_014_000),
            Answer::Measured(d) if d.network_rtt == Duration::from_micros(10)
        ));
        assert_eq!(p.summary().unwrap().samples, 2);
        assert_eq!(
            p.counts(),
            Counts {
                sent: 2,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn duplicates_replays_and_strangers_are_unexpected_and_unmeasured() {
        let mut p = path();
        ping(&mut p, 0, 10);
        // The same answers again (a replay), and an answer to a ping never sent; then a ping
        // answered twice with an ack before its delay, and one "answered" by a ping.
        let answers = [
            (1, Kind::Ack, 0, Answer::Unexpected),
            (1, Kind::Delay, 0, Answer::Unexpected),
            (1, Kind::Ack, 7, Answer::Unexpected),
            (2, Kind::Ack, 1, Answer::Partial),
            (2, Kind::Ack, 1, Answer::Unexpected),
            (2, Kind::Ping, 1, Answer::Unexpected),
        ];
        for (at, kind, seq, want) in answers {
            if seq == 1 && p.counts().sent == 1 {
                sent(&mut p, ms(at), 0, 0);
            }
            let got = p.on_answer(ms(at), &answer(kind, seq, 0), 9, 9);
            assert_eq!(got, want, "{kind:?} of ping {seq} at {at} ms");
        }
        assert_eq!(p.counts().unexpected, 5);
        assert_eq!(p.summary().unwrap().samples, 1);
    }

    /// A silent path asks for its target again after 3 lost pings, then after 6, 12, ... in a
    /// row (at most 120 more each time); an ack starts again from 3.
    #[test]
    fn a_silent_path_asks_for_its_target_less_and_less_often() {
        let mut p = path();
        let mut asked_at = Vec::new();
        for n in 0..700u64 {
            sent(&mut p, ms(n * 1_000), 0, 0);
            p.expire(ms(n * 1_000 + 500));
            if p.relearn_due() {
                asked_at.push(p.counts().lost);
            }
            assert!(!p.relearn_due(), "asked twice at {n}");
        }
        assert_eq!(asked_at, [3, 6, 12, 24, 48, 96, 192, 312, 432, 552, 672]);
        // An answered ping starts the count again.
        let at = ms(700_000);
        sent(&mut p, at, 0, 0);
        p.on_answer(at, &answer(Kind::Ack, 700, 0), 9, 9);
        for n in 701..704u64 {
            assert!(!p.relearn_due(), "due before 3 more lost, at {n}");
            sent(&mut p, ms(n * 1_000), 0, 0);
            p.expire(ms(n * 1_000 + 500));
        }
        assert!(p.relearn_due());
    }

    #[test]
    fn an_unanswered_ping_is_lost_at_its_timeout_and_a_late_answer_is_unexpected() {
        let mut p = path();
        sent(&mut p, Duration::ZERO, 0, 0);
        p.expire(ms(499));
        assert_eq!(p.counts().lost, 0);
        p.expire(ms(500));
        assert_eq!(p.counts().lost, 1);
        assert_eq!(
            p.on_answer(ms(501), &answer(Kind::Ack, 0, 0), 9, 9),
            Answer::Unexpected
        );
        // Acked but without the responder's delay: answered, not lost, and no sample.
        sent(&mut p, ms(600), 0, 0);
        p.on_answer(ms(601), &answer(Kind::Ack, 1, 0), 9, 9);
        p.expire(ms(1_100));
        assert_eq!(p.summary(), None);
        // Only the delay: the ack was lost, so the ping was.
        sent(&mut p, ms(1_200), 0, 0);
        p.on_answer(ms(1_201), &answer(Kind::Delay, 2, 5), 0, 0);
        p.expire(ms(1_700));
        assert_eq!(
            p.counts(),
            Counts {
                sent: 3,
                lost: 2,
                unexpected: 1,
                invalid: 0
            }
        );
    }

    #[test]
    fn a_ping_whose_post_failed_is_neither_sent_nor_lost() {
        let mut p = path();
        let seq = p.on_posted(Duration::ZERO, 0);
        p.cancel(seq);
        p.cancel(seq);
        p.expire(ms(10_000));
        assert_eq!(p.counts(), Counts::default());
        assert_eq!(
            p.on_answer(ms(1), &answer(Kind::Ack, seq, 0), 9, 9),
            Answer::Unexpected
        );
    }

    #[test]
    fn pings_beyond_the_outstanding_bound_lose_the_oldest() {
        let mut p = path();
        for i in 0..MAX_OUTSTANDING as u64 + 3 {
            sent(&mut p, ms(1), i, i);
        }
        assert_eq!(p.counts().lost, 3);
        assert_eq!(
            p.on_answer(ms(1), &answer(Kind::Ack, 0, 0), 9, 9),
            Answer::Unexpected
        );
        assert_eq!(
            p.on_answer(ms(1), &answer(Kind::Ack, 3, 0), 9, 9),
            Answer::Partial
        );
    }

    #[test]
    fn answers_before_the_send_completion_wait_for_it() {
        let mut p = path();
        let seq = p.on_posted(ms(0), 0);
        assert_eq!(
            p.on_answer(ms(0), &answer(Kind::Ack, seq, 0), 13_000, 14_000),
            Answer::Partial
        );
        assert_eq!(
            p.on_answer(ms(0), &answer(Kind::Delay, seq, 2_000), 0, 0),
            Answer::Partial
        );
        assert!(matches!(
            p.on_send_completed(ms(1), seq, 1_000),
            Answer::Measured(d) if d.network_rtt == Duration::from_micros(10)
        ));
        // A second send completion for it, or one for a ping never posted.
        assert_eq!(p.on_send_completed(ms(1), seq, 1_000), Answer::Unexpected);
        assert_eq!(p.on_send_completed(ms(1), 9, 1_000), Answer::Unexpected);
        assert_eq!(p.counts().unexpected, 2);
    }

    #[test]
    fn contradicting_answers_are_invalid() {
        let mut p = path();
        sent(&mut p, Duration::ZERO, 0, 1_000);
        p.on_answer(Duration::ZERO, &answer(Kind::Ack, 0, 0), 3_000, 4_000);
        // The responder claims it held the ping 5 µs of a 2 µs round trip.
        assert_eq!(
            p.on_answer(Duration::ZERO, &answer(Kind::Delay, 0, 5_000), 0, 0),
            Answer::Invalid
        );
        assert_eq!(p.counts().invalid, 1);
        assert_eq!(p.summary(), None);
    }

    #[test]
    fn the_window_slides_and_its_quantiles_are_nearest_rank() {
        let mut p = path();
        // 100 samples of 1..=100 µs, one a ms.
        for i in 0..100 {
            ping(&mut p, i, i + 1);
        }
        let s = p.summary().unwrap();
        assert_eq!(s.samples, 100);
        assert_eq!(s.rtt_p50, Duration::from_micros(50));
        assert_eq!(s.rtt_p90, Duration::from_micros(90));
        assert_eq!(s.rtt_p99, Duration::from_micros(99));
        assert_eq!(
            (s.rtt_min, s.rtt_max),
            (Duration::from_micros(1), Duration::from_micros(100))
        );
        assert_eq!(s.responder_p50, Duration::from_micros(2));
        // A minute later the first 50 have left the window.
        p.expire(ms(60_050));
        let s = p.summary().unwrap();
        assert_eq!(s.samples, 49);
        assert_eq!(s.rtt_p50, Duration::from_micros(76));
        assert_eq!(s.rtt_min, Duration::from_micros(52));
        p.expire(ms(120_000));
        assert_eq!(p.summary(), None);
    }
}
