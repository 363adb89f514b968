//! The budget's rules: never above the limit, detail first, then sampled paths oldest first,
//! never a path above the newcomer; expiry only out of the selection.

use std::cell::RefCell;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn series(base: usize, detail: usize) -> PathSeries {
    PathSeries {
        base,
        detail,
        derived: 0,
    }
}

#[test]
fn under_the_limit_everything_stays() {
    let mut b = SeriesBudget::new(100, s(60));
    for k in 0..4u32 {
        let a = b.record(k, s(u64::from(k)), k < 2, series(12, 8));
        assert!(a.admitted && a.evicted.is_empty() && !a.shed_detail);
    }
    assert_eq!((b.series(), b.paths(), b.dropped()), (80, 4, 0));
}

#[test]
fn detail_goes_first_then_sampled_paths_oldest_first() {
    let mut b = SeriesBudget::new(60, s(600));
    b.record(1u32, s(1), true, series(12, 8));
    b.record(2, s(2), false, series(12, 8));
    b.record(3, s(3), false, series(12, 8));
    assert_eq!(b.series(), 60);
    // A fourth path: the detail of all goes (4 × 12 = 48 fit).
    let a = b.record(4, s(4), true, series(12, 8));
    assert!(a.admitted && a.shed_detail && a.evicted.is_empty());
    assert_eq!(b.series(), 48);
    // A sixth: the oldest sampled path (2) makes room, not the older preferred one (1).
    b.record(5, s(5), false, series(12, 8));
    let a = b.record(6, s(6), true, series(12, 8));
    assert_eq!(a.evicted, [2]);
    assert!(!b.contains(&2) && b.contains(&1));
    assert_eq!(b.dropped(), 1);
    // Sampled newcomers evict the oldest sampled paths, never the preferred ones.
    let a = b.record(7, s(7), false, series(12, 8));
    assert_eq!(a.evicted, [3]);
    assert!(a.admitted);
    let a = b.record(8, s(8), false, series(12, 8));
    assert_eq!(a.evicted, [5]);
    let a = b.record(9, s(9), false, series(12, 8));
    assert_eq!(a.evicted, [7]);
    assert_eq!(b.series(), 60);
    assert!(b.contains(&1) && b.contains(&4) && b.contains(&6));
    assert!(b.series() <= b.limit());
    // A reload lets the detail come back at the next probe that fits it.
    b.reset(200, s(600));
    assert!(!b.detail_shed());
}

#[test]
fn a_path_that_cannot_fit_is_kept_off() {
    let mut b = SeriesBudget::new(24, s(600));
    b.record(1u32, s(1), true, series(12, 0));
    b.record(2, s(2), true, series(12, 0));
    // Sampled: may evict neither preferred path.
    let a = b.record(3, s(3), false, series(12, 0));
    assert!(!a.admitted && a.evicted.is_empty());
    assert!(!b.contains(&3));
    assert_eq!(b.dropped(), 1);
    // Bigger than the whole budget: kept off, and nobody is evicted for nothing.
    let a = b.record(4, s(4), true, series(30, 0));
    assert!(!a.admitted && a.evicted.is_empty());
    assert!(b.contains(&1) && b.contains(&2));
}

#[test]
fn expiry_takes_off_only_stale_paths_out_of_the_selection() {
    let mut b = SeriesBudget::new(1000, s(600));
    b.record(1u32, s(0), true, series(12, 0));
    b.record(2, s(0), false, series(12, 0));
    b.record(3, s(500), false, series(12, 0));
    assert!(b.expire(s(599), |_| false).is_empty());
    // At 700 s: 1 and 2 are 700 s old, 3 only 200 s; 1 is still selected.
    let gone = b.expire(s(700), |k| *k == 1);
    assert_eq!(gone, [2]);
    assert!(b.contains(&1) && b.contains(&3));
    assert_eq!(b.dropped(), 0, "expiry is not a drop");
}

proptest! {
    /// Whatever comes: the series never exceed the limit, every eviction ranks below the
    /// newcomer, and the counts add up.
    #[test]
    fn never_above_the_limit(
        limit in 0usize..400,
        probes in proptest::collection::vec(
            (0u32..60, any::<bool>(), 1usize..20, 0usize..10, 0usize..6),
            1..300,
        ),
    ) {
        let mut b = SeriesBudget::new(limit, s(300));
        let mut on: BTreeMap<u32, (bool, Duration, PathSeries)> = BTreeMap::new();
        for (i, (key, preferred, base, detail, derived)) in probes.into_iter().enumerate() {
            let now = s(i as u64);
            let this = PathSeries { base, detail, derived };
            let a = b.record(key, now, preferred, this);
            for e in &a.evicted {
                let (p, last, _) = on.remove(e).expect("evicted a path that was on");
                prop_assert!((p, last) < (preferred, now));
            }
            on.remove(&key);
            if a.admitted {
                on.insert(key, (preferred, now, this));
            }
            prop_assert!(b.series() <= limit, "{} > {limit}", b.series());
            let expect: usize = on
                .values()
                .map(|(_, _, s)| {
                    s.base
                        + if b.detail_shed() { 0 } else { s.detail }
                        + if b.derived_shed() { 0 } else { s.derived }
                })
                .sum();
            prop_assert_eq!(b.series(), expect);
            prop_assert_eq!(b.paths(), on.len());
            if i % 50 == 49 {
                for k in b.expire(now, |k| k % 3 == 0) {
                    let (_, last, _) = on.remove(&k).unwrap();
                    prop_assert!(last + s(300) < now && k % 3 != 0);
                }
            }
        }
    }
}

/// The budget as it was with a search tree for each order, kept as the model the compact
/// orders must match step for step. One line differs, marked below.
mod reference {
    use std::collections::BTreeSet;
    use std::hash::Hash;
    use std::time::Duration;

    use super::super::{Admission, FastMap, PathSeries};

    #[derive(Debug, Clone, Copy)]
    struct Entry {
        series: PathSeries,
        last: Duration,
        preferred: bool,
    }

    /// The series budget of one node; see the module docs.
    #[derive(Debug, Clone)]
    pub struct SeriesBudget<K> {
        limit: usize,
        ttl: Duration,
        paths: FastMap<K, Entry>,
        /// `(last probe, key)` of every path on `/metrics`, sampled ones and preferred ones apart:
        /// eviction order, and expiry order.
        sampled: BTreeSet<(Duration, K)>,
        preferred: BTreeSet<(Duration, K)>,
        /// At most the last probe of every path on `/metrics` ([`Duration::MAX`] when none is):
        /// lets [`expire`](Self::expire), which runs at every probe, return without walking to the
        /// first entry of each order when nothing can be stale.
        oldest: Duration,
        base: usize,
        detail: usize,
        derived: usize,
        /// What has been shed: 0 nothing, 1 the detail, 2 the detail and the derived series.
        shed: u8,
        dropped: u64,
    }

    impl<K: Clone + Eq + Hash + Ord> SeriesBudget<K> {
        pub fn new(limit: usize, ttl: Duration) -> Self {
            SeriesBudget {
                limit,
                ttl,
                paths: FastMap::default(),
                sampled: BTreeSet::new(),
                preferred: BTreeSet::new(),
                oldest: Duration::MAX,
                base: 0,
                detail: 0,
                derived: 0,
                shed: 0,
                dropped: 0,
            }
        }

        /// New limits (a reload); the detail may come back. What is on `/metrics` stays until the
        /// next probe that needs room or the next expiry.
        pub fn reset(&mut self, limit: usize, ttl: Duration) {
            self.limit = limit;
            self.ttl = ttl;
            self.shed = 0;
        }

        pub fn limit(&self) -> usize {
            self.limit
        }

        /// Series of the paths on `/metrics` now.
        pub fn series(&self) -> usize {
            self.base
                + if self.shed < 1 { self.detail } else { 0 }
                + if self.shed < 2 { self.derived } else { 0 }
        }

        /// Paths on `/metrics` now.
        pub fn paths(&self) -> usize {
            self.paths.len()
        }

        /// Whether `key` is on `/metrics`.
        pub fn contains(&self, key: &K) -> bool {
            self.paths.contains_key(key)
        }

        /// The detail series are off (the budget was reached since the last reset).
        pub fn detail_shed(&self) -> bool {
            self.shed >= 1
        }

        /// The derived series are off too.
        pub fn derived_shed(&self) -> bool {
            self.shed >= 2
        }

        /// Paths taken off or kept off `/metrics` for lack of room, since the start.
        pub fn dropped(&self) -> u64 {
            self.dropped
        }

        /// Distinct values of `peer(key)` over the paths on `/metrics` (one `peer_info` each).
        pub fn peers<P: Eq + Hash>(&self, peer: impl Fn(&K) -> P) -> usize {
            self.paths
                .keys()
                .map(peer)
                .collect::<std::collections::HashSet<_>>()
                .len()
        }

        /// A probe of `key` at `now` leaves it with `series`; `preferred`: a same-group or
        /// full-mesh path.
        pub fn record(
            &mut self,
            key: K,
            now: Duration,
            preferred: bool,
            series: PathSeries,
        ) -> Admission<K> {
            let mut admission = Admission {
                admitted: true,
                evicted: Vec::new(),
                shed_detail: false,
                shed_derived: false,
            };
            // The common case: a path on /metrics probed again, its series unchanged.
            if let Some(entry) = self.paths.get_mut(&key) {
                if entry.series == series && entry.preferred == preferred {
                    let old = (entry.last, key.clone());
                    entry.last = now;
                    // The one change: `oldest` stays at most every last probe when the clock
                    // steps back too (else expiry missed such a path until the next
                    // recount). Time moving forward, it is a no-op.
                    self.oldest = self.oldest.min(now);
                    let order = if preferred {
                        &mut self.preferred
                    } else {
                        &mut self.sampled
                    };
                    order.remove(&old);
                    order.insert((now, key));
                    return admission;
                }
            }
            self.take(&key);
            while self.series() + self.size(&series) > self.limit && self.shed < 2 {
                self.shed += 1;
                match self.shed {
                    1 => admission.shed_detail = true,
                    _ => admission.shed_derived = true,
                }
            }
            let needed = self.size(&series);
            let room = self.limit.saturating_sub(self.series());
            if needed > room {
                // The lowest paths that rank below this one, as many as make room: all or none.
                let rank = (preferred, now);
                let mut freed = 0;
                let mut victims = Vec::new();
                let lowest_first = self
                    .sampled
                    .iter()
                    .map(|(last, k)| (false, last, k))
                    .chain(self.preferred.iter().map(|(last, k)| (true, last, k)));
                for (p, last, k) in lowest_first {
                    if (p, *last) >= rank || needed <= room + freed {
                        break;
                    }
                    freed += self.paths.get(k).map_or(0, |e| self.size(&e.series));
                    victims.push(k.clone());
                }
                if needed > room + freed {
                    // Kept off (and taken off, if it was on).
                    self.dropped += 1;
                    admission.admitted = false;
                    return admission;
                }
                for k in victims {
                    self.take(&k);
                    self.dropped += 1;
                    admission.evicted.push(k);
                }
            }
            self.put(
                key,
                Entry {
                    series,
                    last: now,
                    preferred,
                },
            );
            admission
        }

        /// Takes off `/metrics` the paths out of the selection (`selected` false) whose last probe
        /// is older than the TTL at `now`, and returns them.
        pub fn expire(&mut self, now: Duration, selected: impl Fn(&K) -> bool) -> Vec<K> {
            let Some(cutoff) = now.checked_sub(self.ttl) else {
                return Vec::new();
            };
            if self.oldest >= cutoff {
                return Vec::new();
            }
            // Each order is by last probe: the stale paths come first.
            let mut stale = Vec::new();
            for order in [&self.sampled, &self.preferred] {
                for (last, key) in order {
                    if *last >= cutoff {
                        break;
                    }
                    if !selected(key) {
                        stale.push(key.clone());
                    }
                }
            }
            for key in &stale {
                self.take(key);
            }
            self.oldest = [&self.sampled, &self.preferred]
                .into_iter()
                .filter_map(|order| order.first().map(|(last, _)| *last))
                .min()
                .unwrap_or(Duration::MAX);
            stale
        }

        /// Takes `key` off (its peer left the config).
        pub fn remove(&mut self, key: &K) {
            self.take(key);
        }

        /// What a path's series count for now (what is shed does not).
        fn size(&self, series: &PathSeries) -> usize {
            series.base
                + if self.shed < 1 { series.detail } else { 0 }
                + if self.shed < 2 { series.derived } else { 0 }
        }

        fn take(&mut self, key: &K) -> Option<Entry> {
            let entry = self.paths.remove(key)?;
            let order = if entry.preferred {
                &mut self.preferred
            } else {
                &mut self.sampled
            };
            order.remove(&(entry.last, key.clone()));
            self.base -= entry.series.base;
            self.detail -= entry.series.detail;
            self.derived -= entry.series.derived;
            Some(entry)
        }

        fn put(&mut self, key: K, entry: Entry) {
            self.oldest = self.oldest.min(entry.last);
            self.base += entry.series.base;
            self.detail += entry.series.detail;
            self.derived += entry.series.derived;
            let order = if entry.preferred {
                &mut self.preferred
            } else {
                &mut self.sampled
            };
            order.insert((entry.last, key.clone()));
            self.paths.insert(key, entry);
        }
    }
}

/// One step of a run against the model.
#[derive(Debug, Clone)]
enum Step {
    /// A probe, `dt` quarters of a second after the previous step.
    Record {
        dt: i64,
        key: u32,
        /// Against the rank the key usually has (a path whose group changed).
        flip: bool,
        series: PathSeries,
    },
    /// An expiry, `dt` quarters of a second after the previous step; key `k` is selected iff bit `k` of
    /// `selected` is set.
    Expire {
        dt: i64,
        selected: u16,
    },
    Remove {
        key: u32,
    },
    Reset {
        limit: usize,
        ttl: u64,
    },
}

/// Keys come from a pool this small, so that paths are probed again and again.
const KEYS: u32 = 10;

/// A few series that recur (so a probe often finds its path's series unchanged), and others.
fn series_strategy() -> impl Strategy<Value = PathSeries> {
    let recurring = [
        PathSeries {
            base: 8,
            detail: 4,
            derived: 4,
        },
        PathSeries {
            base: 12,
            detail: 0,
            derived: 2,
        },
        PathSeries {
            base: 5,
            detail: 6,
            derived: 0,
        },
    ];
    prop_oneof![
        4 => (0..recurring.len()).prop_map(move |i| recurring[i]),
        1 => (0usize..16, 0usize..8, 0usize..5)
            .prop_map(|(base, detail, derived)| PathSeries { base, detail, derived }),
    ]
}

/// Steps whose time deltas come from `dt`.
fn steps_strategy(dt: impl Strategy<Value = i64> + Clone) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        12 => (dt.clone(), 0..KEYS, prop::bool::weighted(0.15), series_strategy())
            .prop_map(|(dt, key, flip, series)| Step::Record { dt, key, flip, series }),
        3 => (dt, any::<u16>()).prop_map(|(dt, selected)| Step::Expire { dt, selected }),
        1 => (0..KEYS).prop_map(|key| Step::Remove { key }),
        1 => (0usize..120, 0u64..60).prop_map(|(limit, ttl)| Step::Reset { limit, ttl }),
    ];
    proptest::collection::vec(step, 1..250)
}

/// Time only moves forward, often not at all between two steps.
fn forward() -> impl Strategy<Value = i64> + Clone {
    prop_oneof![3 => Just(0i64), 4 => 0i64..16, 1 => 0i64..360]
}

/// Time mostly moves forward, and sometimes steps back.
fn jumping() -> impl Strategy<Value = i64> + Clone {
    prop_oneof![3 => Just(0i64), 4 => 0i64..16, 1 => 0i64..360, 1 => -360i64..0]
}

/// Where the slots' numbers start: mostly at 0, sometimes just before they run out.
fn first_seq() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 1 => (u32::MAX - 300)..=u32::MAX]
}

/// What the compact orders promise: sorted slots, a live front, no more stale slots than live
/// ones, live counts that match the paths.
fn check_orders(b: &SeriesBudget<u32>) -> Result<(), TestCaseError> {
    for (preferred, order) in [(false, &b.sampled), (true, &b.preferred)] {
        let slots: Vec<&Slot<u32>> = order.slots.iter().collect();
        for pair in slots.windows(2) {
            prop_assert!(pair[0].rank() <= pair[1].rank());
        }
        if let Some(front) = slots.first() {
            prop_assert!(live(&b.paths, front).is_some(), "a stale front");
        }
        let live_slots = slots.iter().filter(|s| live(&b.paths, s).is_some()).count();
        let of_rank = b
            .paths
            .values()
            .filter(|e| e.preferred == preferred)
            .count();
        prop_assert_eq!(live_slots, order.live);
        prop_assert_eq!(of_rank, order.live);
        prop_assert!(
            slots.len() - order.live <= order.live,
            "more stale slots than live"
        );
    }
    Ok(())
}

/// Runs `steps` on the budget and on the model from the same start, and compares every answer
/// and every accessor after each step.
fn against_the_model(
    limit: usize,
    ttl: u64,
    seq: u32,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    let mut b = SeriesBudget::new(limit, s(ttl));
    b.next_seq = seq;
    let mut m = reference::SeriesBudget::new(limit, s(ttl));
    let mut quarters = 0u64;
    let at = |quarters: u64| Duration::from_millis(250 * quarters);
    for step in steps {
        match step {
            Step::Record {
                dt,
                key,
                flip,
                series,
            } => {
                quarters = quarters.saturating_add_signed(dt);
                let preferred = (key % 3 == 0) != flip;
                let got = b.record(key, at(quarters), preferred, series);
                let want = m.record(key, at(quarters), preferred, series);
                prop_assert_eq!(got, want);
            }
            Step::Expire { dt, selected } => {
                quarters = quarters.saturating_add_signed(dt);
                let asked = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
                let got = b.expire(at(quarters), |k| {
                    asked.0.borrow_mut().push(*k);
                    selected >> k & 1 == 1
                });
                let want = m.expire(at(quarters), |k| {
                    asked.1.borrow_mut().push(*k);
                    selected >> k & 1 == 1
                });
                prop_assert_eq!(got, want);
                prop_assert_eq!(asked.0.into_inner(), asked.1.into_inner());
            }
            Step::Remove { key } => {
                b.remove(&key);
                m.remove(&key);
            }
            Step::Reset { limit, ttl } => {
                b.reset(limit, s(ttl));
                m.reset(limit, s(ttl));
            }
        }
        prop_assert_eq!(b.series(), m.series());
        prop_assert_eq!(b.paths(), m.paths());
        prop_assert_eq!(b.dropped(), m.dropped());
        prop_assert_eq!(b.limit(), m.limit());
        prop_assert_eq!(b.detail_shed(), m.detail_shed());
        prop_assert_eq!(b.derived_shed(), m.derived_shed());
        prop_assert_eq!(b.peers(|k| k % 3), m.peers(|k| k % 3));
        prop_assert_eq!(b.peers(|k| k / 4), m.peers(|k| k / 4));
        for key in 0..KEYS {
            prop_assert_eq!(b.contains(&key), m.contains(&key), "key {}", key);
        }
        check_orders(&b)?;
    }
    Ok(())
}

proptest! {
    /// The compact orders answer exactly as the search trees did, time moving forward.
    #[test]
    fn same_answers_as_the_model(
        limit in 0usize..120,
        ttl in 0u64..60,
        seq in first_seq(),
        steps in steps_strategy(forward()),
    ) {
        against_the_model(limit, ttl, seq, steps)?;
    }

    /// And when the clock steps back (the recorder's is the wall clock).
    #[test]
    fn same_answers_as_the_model_when_the_clock_steps_back(
        limit in 0usize..120,
        ttl in 0u64..60,
        seq in first_seq(),
        steps in steps_strategy(jumping()),
    ) {
        against_the_model(limit, ttl, seq, steps)?;
    }
}

/// Slots probed again in a steady round leave no pile of stale ones behind.
#[test]
fn memory_follows_the_paths_on_metrics() {
    let mut b = SeriesBudget::new(10_000, s(600));
    for round in 0..200u64 {
        for key in 0..100u32 {
            // Out of key order within one instant, and in a different order every round.
            let key = (key * 37 + round as u32) % 100;
            b.record(key, s(round), key.is_multiple_of(2), series(12, 8));
        }
    }
    assert_eq!(b.paths(), 100);
    assert!(b.sampled.slots.len() <= 2 * 50 + 1 && b.preferred.slots.len() <= 2 * 50 + 1);
    // A crowd that goes gives its room back.
    let mut b = SeriesBudget::new(usize::MAX, s(1));
    for key in 0..10_000u32 {
        b.record(key, s(0), false, series(1, 0));
    }
    for key in 0..10_000u32 {
        b.record(key, s(10), false, series(1, 0));
    }
    assert_eq!(b.expire(s(20), |k| *k < 10).len(), 9_990);
    b.record(0, s(21), false, series(1, 0));
    assert!(
        b.sampled.slots.capacity() < 1_000,
        "{}",
        b.sampled.slots.capacity()
    );
}

/// A path's slot and entry stay small (a number key: the simulation's).
#[test]
fn slots_and_entries_are_compact() {
    assert_eq!(std::mem::size_of::<Slot<u64>>(), 24);
    assert_eq!(std::mem::size_of::<Entry>(), 32);
}
