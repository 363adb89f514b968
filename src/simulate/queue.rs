//! A rail's wake-ups in time order, with its next few known in order: they are what the rail
//! will step next, so their state can be loaded ahead (module `rail`).

use std::collections::VecDeque;

/// A wake-up: `(time in ns, node)`, ordered by time, then node.
pub(super) type Wake = (u64, u32);

/// How many of the next wake-ups are kept in order ahead of the rest.
pub(super) const AHEAD: usize = 32;

/// A priority queue of wake-ups: the first [`AHEAD`] or more in order in `soon`, the rest in a
/// radix heap. Every entry of `soon` comes before every entry of `later`, so the first of
/// `soon` is the first of all.
#[derive(Debug, Default)]
pub(super) struct WakeQueue {
    soon: VecDeque<Wake>,
    later: RadixHeap,
}

impl WakeQueue {
    pub fn new(entries: impl IntoIterator<Item = Wake>) -> Self {
        let mut later = RadixHeap::default();
        for wake in entries {
            later.push(wake);
        }
        let mut queue = WakeQueue {
            soon: VecDeque::with_capacity(AHEAD + 1),
            later,
        };
        queue.refill();
        queue
    }

    /// The first wake-up.
    pub fn first(&self) -> Option<Wake> {
        self.soon.front().copied()
    }

    /// The wake-up `i` places after the first (0: the first), if it is among the next [`AHEAD`].
    pub fn ahead(&self, i: usize) -> Option<Wake> {
        self.soon.get(i).copied()
    }

    /// Replaces the first wake-up with `wake`, which is not before it (the same node's next).
    pub fn replace_first(&mut self, wake: Wake) {
        self.soon.pop_front();
        if self
            .later
            .first()
            .is_some_and(|first_later| wake > first_later)
        {
            self.later.push(wake);
        } else {
            // Among the next few: `soon` may hold more than `AHEAD` for a while, as the heap
            // takes nothing before what it has given.
            let at = self.soon.partition_point(|w| *w < wake);
            self.soon.insert(at, wake);
        }
        self.refill();
    }

    fn refill(&mut self) {
        while self.soon.len() < AHEAD {
            let Some(wake) = self.later.pop() else {
                break;
            };
            self.soon.push_back(wake);
        }
    }
}

/// A monotone priority queue (a radix heap): nothing pushed may come before the last entry
/// taken, which holds for wake-ups, as time only moves on. An entry goes to the bucket of the
/// highest bit where it differs from the last entry taken; when the bucket of equal ones is
/// empty, the first non-empty bucket is spread over the lower ones around its least entry.
/// Every bucket is a vector written at its end, so a push touches one cache line that is
/// usually warm, where a binary heap of ten thousand wake-ups sifts through a dozen.
#[derive(Debug)]
struct RadixHeap {
    /// The last entry taken (or the least, once a bucket was spread).
    last: u128,
    /// Bucket `b` holds the entries whose highest bit differing from `last` is bit `b − 1`;
    /// bucket 0 those equal to it.
    buckets: Vec<Vec<u128>>,
    /// Bit `b − 1` set: bucket `b` holds entries (so that finding the first is one instruction,
    /// not a walk over the buckets).
    occupied: u128,
}

impl Default for RadixHeap {
    fn default() -> Self {
        RadixHeap {
            last: 0,
            buckets: vec![Vec::new(); 129],
            occupied: 0,
        }
    }
}

/// `(time, node)` as one number in the same order.
fn key((time, node): Wake) -> u128 {
    (u128::from(time) << 32) | u128::from(node)
}

fn wake(key: u128) -> Wake {
    ((key >> 32) as u64, key as u32)
}

impl RadixHeap {
    fn bucket(&self, key: u128) -> usize {
        (128 - (key ^ self.last).leading_zeros()) as usize
    }

    fn push(&mut self, w: Wake) {
        let k = key(w);
        debug_assert!(k >= self.last, "a wake-up before the last one taken");
        self.put(k);
    }

    fn put(&mut self, k: u128) {
        let b = self.bucket(k);
        self.buckets[b].push(k);
        if b > 0 {
            self.occupied |= 1 << (b - 1);
        }
    }

    /// The least entry, once the bucket of equal ones holds it.
    fn first(&mut self) -> Option<Wake> {
        if self.buckets[0].is_empty() {
            if self.occupied == 0 {
                return None;
            }
            let b = self.occupied.trailing_zeros() as usize + 1;
            self.occupied &= !(1 << (b - 1));
            let mut spread = std::mem::take(&mut self.buckets[b]);
            self.last = spread.iter().copied().min()?;
            for k in spread.drain(..) {
                self.put(k);
            }
            // Its room, for the next entries of this bucket (none went back into it: they all
            // agree with the new `last` above bit `b − 1`).
            debug_assert!(self.buckets[b].is_empty());
            self.buckets[b] = spread;
        }
        Some(wake(self.last))
    }

    fn pop(&mut self) -> Option<Wake> {
        let first = self.first()?;
        self.buckets[0].pop();
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Stepping the queue gives the wake-ups in the order one sorted list would, however
        /// the replacements fall (before, among or after the next few).
        #[test]
        fn steps_in_time_then_node_order(
            start in prop::collection::vec(0u64..1_000, 1..40),
            steps in prop::collection::vec(0u64..200, 0..300),
        ) {
            let mut queue = WakeQueue::new(start.iter().enumerate().map(|(n, &t)| (t, n as u32)));
            let mut model: Vec<Wake> = start.iter().enumerate().map(|(n, &t)| (t, n as u32)).collect();
            for delay in steps {
                model.sort_unstable();
                let first = model[0];
                prop_assert_eq!(queue.first(), Some(first));
                for i in 0..AHEAD {
                    prop_assert_eq!(queue.ahead(i), model.get(i).copied());
                }
                let next = (first.0 + delay, first.1);
                model[0] = next;
                queue.replace_first(next);
            }
        }
    }
}
