//! Each ping answered once: the answering side's window of the sequence numbers it has seen from
//! one prober's key (docs/security.md, "Pings").
//!
//! A captured ping is correctly tagged, so without this it would be answered every time it is
//! sent again: a replayer without the key could fill the device's send slots with answers and
//! keep the key in use past its time. A prober's sequence numbers only grow under one key (a
//! path's pings start from the time they started at, see [`super::path`]), so the window keeps
//! the highest sequence seen and which of the [`WINDOW`] before it were seen, as IPsec's
//! anti-replay window does (RFC 4303, 3.4.3): a ping is answered if it is new and not older
//! than the window, and pings reordered within the window still are.

/// How far behind the highest sequence seen a ping may be and still be answered.
pub const WINDOW: u64 = 64;

/// The sequence numbers seen from one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// The highest sequence seen, and whether any was (0 is a sequence like another).
    highest: Option<u64>,
    /// Bit `i`: sequence `highest - i` was seen.
    seen: u64,
}

impl ReplayWindow {
    /// Whether a ping numbered `seq` is answered: it is recorded as seen if so.
    pub fn accept(&mut self, seq: u64) -> bool {
        let Some(highest) = self.highest else {
            self.highest = Some(seq);
            self.seen = 1;
            return true;
        };
        if seq > highest {
            let ahead = seq - highest;
            self.seen = if ahead >= WINDOW {
                0
            } else {
                self.seen << ahead
            };
            self.seen |= 1;
            self.highest = Some(seq);
            return true;
        }
        let behind = highest - seq;
        if behind >= WINDOW {
            return false;
        }
        let bit = 1u64 << behind;
        if self.seen & bit != 0 {
            return false;
        }
        self.seen |= bit;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_ping_is_answered_once() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(0));
        assert!(!w.accept(0), "the same ping again");
        assert!(w.accept(1));
        assert!(!w.accept(1));
        assert!(!w.accept(0));
    }

    #[test]
    fn pings_reordered_within_the_window_are_answered() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(100));
        assert!(w.accept(103));
        assert!(w.accept(101));
        assert!(w.accept(102));
        assert!(!w.accept(101));
        assert!(w.accept(103 - (WINDOW - 1)), "the oldest still inside");
        assert!(!w.accept(103 - WINDOW), "just outside");
    }

    #[test]
    fn a_jump_beyond_the_window_forgets_what_was_seen() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(5));
        assert!(w.accept(5 + WINDOW + 10));
        assert!(!w.accept(5), "older than the window");
        assert!(w.accept(5 + WINDOW + 9), "inside the new window, unseen");
        assert!(!w.accept(5 + WINDOW + 10));
        // The largest sequence numbers do not overflow.
        assert!(w.accept(u64::MAX));
        assert!(!w.accept(u64::MAX));
        assert!(w.accept(u64::MAX - 1));
    }

    proptest! {
        /// Against a model that remembers every sequence: a ping is answered exactly when it
        /// was never answered before and is within the window of the highest one answered.
        #[test]
        fn answers_each_new_ping_in_the_window_once(
            start in any::<u64>(),
            steps in prop::collection::vec(0u64..200, 1..300),
        ) {
            let mut w = ReplayWindow::default();
            let mut answered = std::collections::BTreeSet::new();
            for step in steps {
                let seq = start.wrapping_add(step);
                let highest = answered.last().copied();
                let fresh = !answered.contains(&seq)
                    && highest.is_none_or(|h: u64| seq > h || h - seq < WINDOW);
                prop_assert_eq!(w.accept(seq), fresh, "sequence {}", seq);
                if fresh {
                    answered.insert(seq);
                }
            }
        }
    }
}
