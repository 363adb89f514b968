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
//! Pure: unit-tested here, with recorded hardware timestamps among the cases.

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

    /// Completion timestamps as a ConnectX-6 reports them: a 156.25 MHz clock (hca_core_clock
    /// 156250 kHz) of 63 bits; the CPU's t1 and t6 in ns.
    #[test]
    fn recorded_hardware_timestamps_give_the_network_rtt() {
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
}
