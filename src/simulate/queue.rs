//! A rail's wake-ups in time order, with its next few known in order: they are what the rail
//! will step next, so their state can be loaded ahead (module `rail`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// A wake-up: `(time in ns, node)`, ordered by time, then node.
pub(super) type Wake = (u64, u32);

/// How many of the next wake-ups are kept in order ahead of the heap.
pub(super) const AHEAD: usize = 16;

/// A priority queue of wake-ups, the first [`AHEAD`] in order in `soon` and the rest in a heap.
/// Every entry of `soon` comes before every entry of `later`, so the first of `soon` is the
/// first of all.
#[derive(Debug, Default)]
pub(super) struct WakeQueue {
    soon: VecDeque<Wake>,
    later: BinaryHeap<Reverse<Wake>>,
}

impl WakeQueue {
    pub fn new(entries: impl IntoIterator<Item = Wake>) -> Self {
        let mut queue = WakeQueue {
            soon: VecDeque::with_capacity(AHEAD + 1),
            later: entries.into_iter().map(Reverse).collect(),
        };
        queue.refill();
        queue
    }

    /// The first wake-up.
    pub fn first(&self) -> Option<Wake> {
        self.soon.front().copied()
    }

    /// The `i`-th wake-up after the first, if it is among the next [`AHEAD`].
    pub fn ahead(&self, i: usize) -> Option<Wake> {
        self.soon.get(i).copied()
    }

    /// Replaces the first wake-up with `wake` (the same node's next one).
    pub fn replace_first(&mut self, wake: Wake) {
        self.soon.pop_front();
        if let Some(mut first_later) = self.later.peek_mut() {
            if wake > first_later.0 {
                // It goes to the heap, whose first comes next: one sift, not a push and a pop.
                let Reverse(next) = std::mem::replace(&mut *first_later, Reverse(wake));
                drop(first_later);
                self.soon.push_back(next);
                return;
            }
        }
        let at = self.soon.partition_point(|w| *w < wake);
        self.soon.insert(at, wake);
        if self.soon.len() > AHEAD {
            if let Some(last) = self.soon.pop_back() {
                self.later.push(Reverse(last));
            }
        }
        self.refill();
    }

    fn refill(&mut self) {
        while self.soon.len() < AHEAD {
            let Some(Reverse(wake)) = self.later.pop() else {
                break;
            };
            self.soon.push_back(wake);
        }
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
