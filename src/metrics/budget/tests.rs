//! The budget's rules: never above the limit, detail first, then sampled paths oldest first,
//! never a path above the newcomer; expiry only out of the selection.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Every path is in the selection.
fn all(_: &u32) -> bool {
    true
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
        let a = b.record(k, s(u64::from(k)), k < 2, series(12, 8), all);
        assert!(a.admitted && a.evicted.is_empty() && !a.shed_detail);
    }
    assert_eq!((b.series(), b.paths(), b.dropped()), (80, 4, 0));
}

#[test]
fn detail_goes_first_then_sampled_paths_oldest_first() {
    let mut b = SeriesBudget::new(60, s(600));
    // Path 3's round is over: taking it off is an early expiry, not a drop. The others are
    // taken off seconds after their probe: drops.
    let selected = |k: &u32| *k != 3;
    b.record(1u32, s(1), true, series(12, 8), selected);
    b.record(2, s(2), false, series(12, 8), selected);
    b.record(3, s(3), false, series(12, 8), selected);
    assert_eq!(b.series(), 60);
    // A fourth path: the detail of all goes (4 × 12 = 48 fit).
    let a = b.record(4, s(4), true, series(12, 8), selected);
    assert!(a.admitted && a.shed_detail && a.evicted.is_empty());
    assert_eq!(b.series(), 48);
    // A sixth: the oldest sampled path (2) makes room, not the older preferred one (1).
    b.record(5, s(5), false, series(12, 8), selected);
    let a = b.record(6, s(6), true, series(12, 8), selected);
    assert_eq!(a.evicted, [2]);
    assert!(!b.contains(&2) && b.contains(&1));
    assert_eq!(b.dropped(), 1);
    // Sampled newcomers evict the oldest sampled paths, never the preferred ones.
    let a = b.record(7, s(7), false, series(12, 8), selected);
    assert_eq!(a.evicted, [3]);
    assert!(a.admitted);
    assert_eq!((b.dropped(), b.expired_early()), (1, 1));
    let a = b.record(8, s(8), false, series(12, 8), selected);
    assert_eq!(a.evicted, [5]);
    let a = b.record(9, s(9), false, series(12, 8), selected);
    assert_eq!(a.evicted, [7]);
    assert_eq!(b.series(), 60);
    assert!(b.contains(&1) && b.contains(&4) && b.contains(&6));
    assert!(b.series() <= b.limit());
    assert_eq!((b.dropped(), b.expired_early()), (3, 1));
    // A reload lets the detail come back at the next probe that fits it.
    b.reset(200, s(600));
    assert!(!b.detail_shed());
}

#[test]
fn a_selected_path_watched_for_half_its_ttl_expires_early() {
    let mut b = SeriesBudget::new(24, s(600));
    b.record(1u32, s(0), false, series(12, 0), all);
    b.record(2, s(100), false, series(12, 0), all);
    // At 350 s, path 1 (350 s on /metrics, more than half the TTL) makes room: not a drop.
    let a = b.record(3, s(350), false, series(12, 0), all);
    assert_eq!(a.evicted, [1]);
    assert_eq!((b.dropped(), b.expired_early()), (0, 1));
    // At 399 s, path 2 (299 s) makes room: a drop.
    let a = b.record(4, s(399), false, series(12, 0), all);
    assert_eq!(a.evicted, [2]);
    assert_eq!((b.dropped(), b.expired_early()), (1, 1));
}

#[test]
fn a_path_that_cannot_fit_is_kept_off() {
    let mut b = SeriesBudget::new(24, s(600));
    b.record(1u32, s(1), true, series(12, 0), all);
    b.record(2, s(2), true, series(12, 0), all);
    // Sampled: may evict neither preferred path.
    let a = b.record(3, s(3), false, series(12, 0), all);
    assert!(!a.admitted && a.evicted.is_empty());
    assert!(!b.contains(&3));
    assert_eq!(b.dropped(), 1);
    // Bigger than the whole budget: kept off, and nobody is evicted for nothing.
    let a = b.record(4, s(4), true, series(30, 0), all);
    assert!(!a.admitted && a.evicted.is_empty());
    assert!(b.contains(&1) && b.contains(&2));
}

#[test]
fn expiry_takes_off_only_stale_paths_out_of_the_selection() {
    let mut b = SeriesBudget::new(1000, s(600));
    b.record(1u32, s(0), true, series(12, 0), all);
    b.record(2, s(0), false, series(12, 0), all);
    b.record(3, s(500), false, series(12, 0), all);
    assert!(b.expire(s(599), |_| false).is_empty());
    // At 700 s: 1 and 2 are 700 s old, 3 only 200 s; 1 is still selected.
    let gone = b.expire(s(700), |k| *k == 1);
    assert_eq!(gone, [2]);
    assert!(b.contains(&1) && b.contains(&3));
    assert_eq!(b.dropped(), 0, "expiry is not a drop");
}

#[test]
fn a_clock_that_steps_back_still_expires() {
    // The recorder's clock is the wall clock: a path probed again "earlier" than before must
    // still expire from its new last probe.
    let mut b = SeriesBudget::new(1000, s(10));
    b.record(1u32, s(100), false, series(12, 0), all);
    b.record(1, s(20), false, series(12, 0), all);
    assert_eq!(b.expire(s(31), |_| false), [1]);
    assert!(!b.contains(&1));
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
        // Even keys are in the selection: their evictions less than half the TTL (150 s) after
        // their probe are drops, the others early expiries.
        let (mut dropped, mut early) = (0u64, 0u64);
        for (i, (key, preferred, base, detail, derived)) in probes.into_iter().enumerate() {
            let now = s(i as u64);
            let this = PathSeries { base, detail, derived };
            let a = b.record(key, now, preferred, this, |k| k % 2 == 0);
            for e in &a.evicted {
                let (p, last, _) = on.remove(e).expect("evicted a path that was on");
                prop_assert!((p, last) < (preferred, now));
                let young = now - last < s(150);
                *if e % 2 == 0 && young { &mut dropped } else { &mut early } += 1;
            }
            on.remove(&key);
            if a.admitted {
                on.insert(key, (preferred, now, this));
            } else {
                dropped += 1;
            }
            prop_assert_eq!((b.dropped(), b.expired_early()), (dropped, early));
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

#[test]
fn what_is_reserved_for_the_nodes_other_series_is_not_given_to_paths() {
    let mut b = SeriesBudget::new(100, s(600));
    b.reserve(30);
    for k in 0..3u32 {
        assert!(
            b.record(k, s(u64::from(k)), true, series(20, 0), all)
                .admitted
        );
    }
    // 60 of the 70 left: a fourth path of 20 does not fit, and ranks below none.
    let a = b.record(3, s(1), false, series(20, 0), all);
    assert!(!a.admitted, "{a:?}");
    assert_eq!((b.series(), b.paths()), (60, 3));
    // Less reserved: it fits.
    b.reserve(10);
    assert!(b.record(3, s(4), false, series(20, 0), all).admitted);
    assert_eq!(b.series(), 80);
}
