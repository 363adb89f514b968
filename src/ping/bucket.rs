//! How fast one source's pings are answered: a token bucket per source GID (docs/security.md,
//! "What the pre-shared key protects").
//!
//! Every answered ping takes two of the device's send slots for a moment. A prober with the key
//! pings each path every `ping.interval` (`probe --ping` at most every millisecond), far below
//! [`RATE`]; a source sending faster, such as a compromised node flooding distinct pings,
//! has the excess refused, so it cannot take every send slot and leave the device's own pings
//! and the other sources' answers waiting.

use std::time::Duration;

/// Answers a second to one source, on average.
pub const RATE: f64 = 2_000.0;
/// Answers one source may get back to back after a quiet while.
pub const BURST: f64 = 256.0;

/// One source's bucket: answered while it holds a token; tokens come back at `rate` a second
/// up to `burst`.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    tokens: f64,
    /// When `tokens` was last brought up to date (the engine's clock).
    at: Duration,
}

impl TokenBucket {
    /// A full bucket at `now`.
    pub fn new(now: Duration) -> TokenBucket {
        TokenBucket {
            tokens: BURST,
            at: now,
        }
    }

    /// Whether one more answer may go at `now`; takes its token if so. A clock that went back
    /// adds nothing.
    pub fn take(&mut self, now: Duration) -> bool {
        let elapsed = now.saturating_sub(self.at);
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * RATE).min(BURST);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let mut b = TokenBucket::new(ms(0));
        let burst = (0..1_000).take_while(|_| b.take(ms(0))).count();
        assert_eq!(burst as f64, BURST);
        assert!(!b.take(ms(0)));
        // 10 ms later, RATE / 100 more.
        let more = (0..1_000).take_while(|_| b.take(ms(10))).count();
        assert_eq!(more as f64, RATE / 100.0);
        // A quiet minute fills it to the burst, no further.
        let after = (0..100_000).take_while(|_| b.take(ms(60_010))).count();
        assert_eq!(after as f64, BURST);
    }

    #[test]
    fn a_sender_at_the_rate_is_always_answered_and_twice_it_half_the_time() {
        let mut b = TokenBucket::new(ms(0));
        let step = Duration::from_secs_f64(1.0 / RATE);
        let at_rate = (1..=20_000u32).filter(|&i| b.take(step * i)).count();
        assert_eq!(at_rate, 20_000);
        let mut b = TokenBucket::new(ms(0));
        let twice = (1..=40_000u32).filter(|&i| b.take(step * i / 2)).count();
        // 10 s at twice the rate: the burst and 10 s of tokens.
        let want = BURST + 10.0 * RATE;
        assert!(
            (twice as f64 - want).abs() <= 2.0,
            "{twice} of 40,000, want {want}"
        );
    }

    #[test]
    fn a_clock_going_back_gives_nothing() {
        let mut b = TokenBucket::new(ms(1_000));
        while b.take(ms(1_000)) {}
        assert!(!b.take(ms(10)));
        assert!(!b.take(ms(1_000)));
        assert!(b.take(ms(1_001)));
    }
}
