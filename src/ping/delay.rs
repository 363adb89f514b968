//! One ping's six timestamps, and the delays they give.
//!
//! ```text
//!  prober                                   responder
//!  t1 post ──────────── ping ─────────────▶ t3 receive completion
//!  t2 send completion                       t4 ack's send completion
//!  t5 ack's receive completion ◀── ack ──── (then the delay answer carries t4 − t3)
//!  t6 done
//! ```
//!
//! - **network RTT** = (t5 − t2) − (t4 − t3): the time the ping and its ack spent between the
//!   two NICs, the responder's holding of it taken out;
//! - **responder delay** = t4 − t3, measured on the responder and sent back in the second answer
//!   (so it is measured, not guessed);
//! - **prober delay** = (t6 − t1) − (t5 − t2): the prober's own posting and polling.
//!
//! t2…t5 are completion timestamps: the NIC's clock where the device offers completion
//! timestamps ([`Clock::hardware`]), else the CPU's monotonic clock ([`Clock::software`], which
//! then counts the hosts' polling in the RTT): a receive is stamped as its completion is polled,
//! a send right after its post returns (Soft-RoCE reports a UD send's completion late, at times
//! after the answer has arrived), so on that clock t4 is the ack's post. t1 and t6 are
//! always the CPU's. Each difference is taken within one clock, so two hosts' clocks are never
//! compared. A ping whose differences contradict each other (the responder held it longer than
//! the round trip took) is dropped unmeasured, never a negative RTT.
//!
//! Pure: unit-tested here. The hardware clock's cases are made by hand or generated from a
//! model of a NIC's free-running counter (a frequency in kHz, a counter that wraps within its
//! mask), shaped like what mlx5 reports for a ConnectX (a 63-bit mask); none of them was read
//! from a NIC, and the hardware path has not run on one.

use std::time::Duration;

/// Where a device's completion timestamps come from (`timestamp` label of its metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The NIC's free-running clock, read into the completion.
    Hardware,
    /// The CPU's monotonic clock, read as the completion was polled.
    Software,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::Hardware => "hardware",
            Source::Software => "software",
        }
    }
}

/// How a device's completion timestamps count time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    source: Source,
    /// Ticks a second.
    hz: u64,
    /// The bits the timestamps have: a difference wraps around within them.
    mask: u64,
}

impl Clock {
    /// A NIC clock of `khz` kilohertz whose timestamps wrap at `mask` (what `ibv_query_device_ex`
    /// reports as `hca_core_clock` and `completion_timestamp_mask`); `None` for a zero frequency
    /// or mask (a device that reports it has no clock).
    pub fn hardware(khz: u64, mask: u64) -> Option<Clock> {
        (khz > 0 && mask > 0).then_some(Clock {
            source: Source::Hardware,
            hz: khz.saturating_mul(1000),
            mask,
        })
    }

    /// The CPU's monotonic clock in nanoseconds.
    pub fn software() -> Clock {
        Clock {
            source: Source::Software,
            hz: 1_000_000_000,
            mask: u64::MAX,
        }
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// A completion's timestamp on this clock: the NIC's `nic` stamp on a hardware clock, else
    /// `cpu` (the CPU's monotonic nanoseconds the caller read for it). A hardware clock's CQ
    /// stamps every completion; one without a stamp falls back to `cpu` only on a software clock.
    pub fn stamp(&self, nic: Option<u64>, cpu: u64) -> u64 {
        match (self.source, nic) {
            (Source::Hardware, Some(ticks)) => ticks,
            _ => cpu,
        }
    }

    /// Whether the responder's delay needs its ack's send completion (the NIC stamps it), rather
    /// than the CPU's time right after the ack's post (a software clock: a send completion can be
    /// reported late, after the answer it sent has arrived).
    pub fn delay_waits_for_send_completion(&self) -> bool {
        self.source == Source::Hardware
    }

    /// The time from timestamp `from` to timestamp `to` of this clock, across one wrap-around.
    pub fn between(&self, from: u64, to: u64) -> Duration {
        let ticks = to.wrapping_sub(from) & self.mask;
        let nanos = u128::from(ticks) * 1_000_000_000 / u128::from(self.hz);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The prober's four timestamps of one ping: t1 and t6 on the CPU's monotonic clock (ns), t2
/// and t5 on its device's completion clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProberTimes {
    pub posted: u64,
    pub sent: u64,
    pub acked: u64,
    pub done: u64,
}

/// What one answered ping measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delays {
    pub network_rtt: Duration,
    pub responder: Duration,
    pub prober: Duration,
}

/// Why an answered ping gave no sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DelayError {
    #[error("the responder held the ping ({responder:?}) longer than its round trip took ({round_trip:?})")]
    ResponderLongerThanRoundTrip {
        responder: Duration,
        round_trip: Duration,
    },
    #[error(
        "the prober's completions span longer ({completions:?}) than its whole ping ({whole:?})"
    )]
    ProberCompletionsLongerThanPing {
        completions: Duration,
        whole: Duration,
    },
}

/// The delays of one ping from the prober's timestamps on `prober` (its device's clock) and the
/// responder's delay its second answer carried.
pub fn delays(
    prober: &Clock,
    times: &ProberTimes,
    responder: Duration,
) -> Result<Delays, DelayError> {
    let round_trip = prober.between(times.sent, times.acked);
    let network_rtt =
        round_trip
            .checked_sub(responder)
            .ok_or(DelayError::ResponderLongerThanRoundTrip {
                responder,
                round_trip,
            })?;
    let whole = Clock::software().between(times.posted, times.done);
    let prober_delay =
        whole
            .checked_sub(round_trip)
            .ok_or(DelayError::ProberCompletionsLongerThanPing {
                completions: round_trip,
                whole,
            })?;
    Ok(Delays {
        network_rtt,
        responder,
        prober: prober_delay,
    })
}

/// The responder's delay for its second answer: its receive completion `received` to its ack's
/// send completion `acked`, on its device's clock, in whole nanoseconds.
pub fn responder_delay(clock: &Clock, received: u64, acked: u64) -> u64 {
    u64::try_from(clock.between(received, acked).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn a_hardware_clock_takes_the_nics_stamp_and_a_software_one_the_cpus() {
        let nic = Clock::hardware(156_250, (1 << 63) - 1).unwrap();
        assert_eq!(nic.stamp(Some(42), 7), 42);
        assert!(nic.delay_waits_for_send_completion());
        let cpu = Clock::software();
        assert_eq!(cpu.stamp(Some(42), 7), 7);
        assert_eq!(cpu.stamp(None, 7), 7);
        assert!(!cpu.delay_waits_for_send_completion());
    }

    #[test]
    fn software_timestamps_are_nanoseconds() {
        let times = ProberTimes {
            posted: 1_000,
            sent: 3_000,
            acked: 23_000,
            done: 24_500,
        };
        let d = delays(&Clock::software(), &times, Duration::from_nanos(5_000)).unwrap();
        assert_eq!(d.network_rtt, Duration::from_nanos(15_000));
        assert_eq!(d.responder, Duration::from_nanos(5_000));
        assert_eq!(d.prober, Duration::from_nanos(3_500));
        assert_eq!(Clock::software().source().label(), "software");
    }

    /// Hand-made completion timestamps shaped like a ConnectX's: a 63-bit counter (the mask
    /// mlx5 reports) at 156,250 kHz (a frequency picked for round tick counts, not read from a
    /// card); the CPU's t1 and t6 in ns.
    #[test]
    fn hand_made_hardware_timestamps_give_the_network_rtt() {
        let nic = Clock::hardware(156_250, (1 << 63) - 1).unwrap();
        assert_eq!(nic.source(), Source::Hardware);
        // t2 → t5: 1,250 ticks = 8 µs; the responder held it 3 µs (its own clock).
        let times = ProberTimes {
            posted: 7_000_000,
            sent: 912_345_000,
            acked: 912_346_250,
            done: 7_011_000,
        };
        let responder_clock = Clock::hardware(156_250, (1 << 63) - 1).unwrap();
        let held = responder_delay(&responder_clock, 55_000_000, 55_000_469);
        assert_eq!(held, 3_001);
        let d = delays(&nic, &times, Duration::from_nanos(held)).unwrap();
        assert_eq!(d.network_rtt, Duration::from_nanos(4_999));
        // 11 µs in all, 8 of them between the completions.
        assert_eq!(d.prober, 3 * US);
    }

    #[test]
    fn a_difference_across_the_clocks_wrap_is_the_short_way_round() {
        let nic = Clock::hardware(1_000_000, (1 << 48) - 1).unwrap(); // 1 GHz, 48 bits
        assert_eq!(nic.between((1 << 48) - 100, 50), Duration::from_nanos(150));
        assert_eq!(
            Clock::software().between(u64::MAX - 9, 10),
            Duration::from_nanos(20)
        );
    }

    #[test]
    fn a_device_without_a_clock_has_no_hardware_timestamps() {
        assert_eq!(Clock::hardware(0, u64::MAX), None);
        assert_eq!(Clock::hardware(156_250, 0), None);
    }

    #[test]
    fn contradicting_timestamps_give_no_sample() {
        let times = ProberTimes {
            posted: 0,
            sent: 1_000,
            acked: 5_000,
            done: 6_000,
        };
        assert!(matches!(
            delays(&Clock::software(), &times, 4_001 * Duration::from_nanos(1)),
            Err(DelayError::ResponderLongerThanRoundTrip { .. })
        ));
        let short = ProberTimes {
            done: 3_000,
            ..times
        };
        assert!(matches!(
            delays(&Clock::software(), &short, Duration::ZERO),
            Err(DelayError::ProberCompletionsLongerThanPing { .. })
        ));
    }

    /// The hardware path end to end, as the engine drives it (`ping::engine` with a
    /// timestamped CQ): each end's completions stamped by its own NIC's counter, the responder's
    /// delay taken on its clock and carried in a tagged packet, the prober's path accounting
    /// measuring the ping. The NICs are models (no NIC has run this): free-running counters of
    /// any frequency from 10 MHz to 2 GHz, 32 to 64 bits wide, any phase, and on request one
    /// that wraps between the two stamps it is differenced on.
    mod hardware_path {
        use proptest::prelude::*;

        use super::super::super::packet::{Kind, Packet, PingKey};
        use super::super::super::path::{Answer, PathPings};
        use super::*;

        /// A NIC's completion counter: `khz` ticks a millisecond, reading `offset` at time zero,
        /// carried in the bits of `mask`.
        #[derive(Debug, Clone, Copy)]
        struct NicCounter {
            khz: u64,
            mask: u64,
            offset: u64,
        }

        impl NicCounter {
            fn new(khz: u64, bits: u32, offset: u64) -> NicCounter {
                let mask = u64::MAX >> (64 - bits);
                NicCounter {
                    khz,
                    mask,
                    offset: offset & mask,
                }
            }

            /// Ticks counted in the first `t` ns.
            fn elapsed(&self, t: u64) -> u64 {
                u64::try_from(u128::from(t) * u128::from(self.khz) / 1_000_000)
                    .expect("ticks of a run of milliseconds fit")
            }

            /// The stamp of a completion `t` ns after time zero.
            fn at(&self, t: u64) -> u64 {
                self.offset.wrapping_add(self.elapsed(t)) & self.mask
            }

            /// The same counter, phased to read its mask at `t`: it wraps right after.
            fn wrapping_after(self, t: u64) -> NicCounter {
                NicCounter {
                    offset: self.mask.wrapping_sub(self.elapsed(t)) & self.mask,
                    ..self
                }
            }

            fn clock(&self) -> Clock {
                Clock::hardware(self.khz, self.mask).expect("a non-zero frequency and mask")
            }

            /// One tick rounded up to the nanosecond, plus the nanosecond a conversion floors
            /// away: how far a difference of two stamps may be from the time between them.
            fn error(&self) -> Duration {
                Duration::from_nanos(1_000_000u64.div_ceil(self.khz) + 1)
            }
        }

        fn close(measured: Duration, truth: Duration, error: Duration) -> bool {
            measured.abs_diff(truth) <= error
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

            #[test]
            fn a_ping_between_two_nic_clocks_measures_the_time_between_the_nics(
                prober_khz in 10_000u64..=2_000_000,
                responder_khz in 10_000u64..=2_000_000,
                bits in (32u32..=64, 32u32..=64),
                offsets in (any::<u64>(), any::<u64>()),
                wraps in (any::<bool>(), any::<bool>()),
                cpu_start in 0u64..1 << 62,
                post_to_send in 0u64..50_000,
                out in 500u64..10_000_000,
                hold in 0u64..1_000_000,
                back in 500u64..10_000_000,
                poll in 0u64..50_000,
            ) {
                // True times in ns from the post (t1); the CPU's clock reads them from
                // `cpu_start`, each NIC's counter from its own phase.
                let (t2, t3) = (post_to_send, post_to_send + out);
                let (t4, t5) = (t3 + hold, t3 + hold + back);
                let t6 = t5 + poll;
                let cpu = |t: u64| cpu_start + t;
                let mut prober = NicCounter::new(prober_khz, bits.0, offsets.0);
                let mut responder = NicCounter::new(responder_khz, bits.1, offsets.1);
                if wraps.0 {
                    prober = prober.wrapping_after(t2);
                    prop_assert!(prober.at(t5) < prober.at(t2), "the prober's counter wraps");
                }
                if wraps.1 {
                    responder = responder.wrapping_after(t3);
                    prop_assert!(responder.at(t4) < responder.at(t3), "the responder's wraps");
                }
                let key = PingKey::derive(b"a secret", &[3; 32]);
                let decode = |bytes: &[u8]| Packet::decode(bytes, |_| Some(&key)).unwrap();

                // The prober posts (engine: `on_posted` at the CPU's time).
                let now = |t: u64| Duration::from_nanos(cpu(t));
                let (p_clock, r_clock) = (prober.clock(), responder.clock());
                let mut path = PathPings::new(p_clock, Duration::from_secs(1), Duration::from_secs(60), 0);
                let seq = path.on_posted(now(0), cpu(0));
                let ping = Packet { kind: Kind::Ping, key_id: 7, seq, responder_delay_ns: 0 };
                let on_the_wire = ping.encode(&key);
                // The CPU's times stand beside each NIC stamp, as the engine passes them: a
                // hardware clock must never take them.
                prop_assert_eq!(path.on_send_completed(now(t2), seq, p_clock.stamp(Some(prober.at(t2)), cpu(t2))), Answer::Partial);

                // The responder: the ping's receive completion, then the ack's send completion.
                let received = r_clock.stamp(Some(responder.at(t3)), cpu(t3));
                let ping = decode(&on_the_wire);
                let acked = r_clock.stamp(Some(responder.at(t4)), cpu(t4));
                let held = responder_delay(&r_clock, received, acked);
                let ack = ping.ack().encode(&key);
                let delay = ping.delay(held).encode(&key);

                // The prober: the ack's receive completion, then the delay answer.
                let ack_stamp = p_clock.stamp(Some(prober.at(t5)), cpu(t5));
                prop_assert_eq!(path.on_answer(now(t5), &decode(&ack), ack_stamp, cpu(t6)), Answer::Partial);
                let delay_stamp = p_clock.stamp(Some(prober.at(t6)), cpu(t6));
                let answer = path.on_answer(now(t6), &decode(&delay), delay_stamp, cpu(t6));
                let Answer::Measured(d) = answer else {
                    return Err(TestCaseError::fail(format!("no sample: {answer:?}")));
                };

                let ns = Duration::from_nanos;
                prop_assert!(close(d.responder, ns(hold), responder.error()), "responder {:?}, held {hold} ns", d.responder);
                prop_assert!(close(d.network_rtt, ns(out + back), prober.error() + responder.error()), "network RTT {:?}, true {} ns", d.network_rtt, out + back);
                prop_assert!(close(d.prober, ns(t6 - (t5 - t2)), prober.error()), "prober {:?}, true {} ns", d.prober, t6 - (t5 - t2));
                prop_assert_eq!(path.counts().invalid, 0);
            }

            /// The difference of two stamps of one counter is the time between them, whatever
            /// the counter read and however often it wrapped before (never between).
            #[test]
            fn a_difference_of_stamps_is_the_time_between_them(
                khz in 1u64..=4_000_000,
                bits in 8u32..=64,
                offset in any::<u64>(),
                from in 0u64..1 << 40,
                span_ns in any::<u64>(),
            ) {
                let nic = NicCounter::new(khz, bits, offset);
                // Only a difference within the counter's range can be measured: at most `mask`
                // ticks, so a span of at most `mask - 1` ticks' time (plus the one it may straddle).
                let longest = u128::from(nic.mask - 1) * 1_000_000 / u128::from(khz);
                let span_ns = span_ns % u64::try_from(longest.min(1 << 40) + 1).expect("fits");
                let span = nic.elapsed(from + span_ns) - nic.elapsed(from);
                prop_assert!(span <= nic.mask);
                let measured = nic.clock().between(nic.at(from), nic.at(from + span_ns));
                let expected = u128::from(span) * 1_000_000 / u128::from(khz);
                prop_assert_eq!(measured.as_nanos(), expected);
                prop_assert!(close(measured, Duration::from_nanos(span_ns), nic.error()));
            }
        }
    }
}
