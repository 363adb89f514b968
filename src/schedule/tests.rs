//! Scheduler unit tests, one rule at a time, in simulated time (whole runs: `test_harness`).

use std::time::Duration;

use super::*;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn key(device: &str, peer: &str) -> PathKey {
    PathKey::new(device, peer, Some(0))
}

fn plan(device: &str, peer: &str, interval: Duration) -> PathPlan {
    PathPlan::new(key(device, peer), interval)
}

/// A scheduler with the default budget but no banked credit, so the gate acts as a strict rest.
fn sched(seed: u64) -> Scheduler {
    Scheduler::new(seed, ScheduleConfig::default()).unwrap()
}

fn unbudgeted(seed: u64) -> Scheduler {
    Scheduler::new(seed, ScheduleConfig::with_duty_cycle(1.0)).unwrap()
}

/// Polls at each due time until `key` is dispatched (completing other paths' bursts at once,
/// with zero burst time); returns the dispatch.
fn run_until_dispatched(sc: &mut Scheduler, key: &PathKey, t: &mut Duration) -> Dispatch {
    for _ in 0..10_000 {
        for d in sc.poll(*t) {
            if &d.key == key {
                return d;
            }
            sc.completed(&d.key, Outcome::success(Duration::ZERO), *t);
        }
        *t = sc.wait_until().expect("something is due").max(*t);
    }
    panic!("{key} never dispatched");
}

#[test]
fn no_paths_nothing_to_do() {
    let mut sc = sched(1);
    assert!(sc.poll(s(0)).is_empty());
    assert_eq!(sc.wait_until(), None);
    assert_eq!(sc.next_due("mlx5_0"), None);
    assert!(sc.is_empty());
    sc.set_paths(vec![], s(5)).unwrap();
    assert!(sc.poll(s(10)).is_empty());
    assert_eq!(sc.devices().count(), 0);
    assert_eq!(
        sc.completed(&key("mlx5_0", "b"), Outcome::success(s(1)), s(11)),
        Completion::NotRunning
    );
}

#[test]
fn config_and_plans_are_validated() {
    for duty in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
        assert!(matches!(
            Scheduler::<PathKey>::new(0, ScheduleConfig::with_duty_cycle(duty)),
            Err(ScheduleError::DutyCycle(_))
        ));
    }
    let bad = ScheduleConfig {
        busy_backoff_max: ms(500),
        ..ScheduleConfig::default()
    };
    assert!(matches!(
        Scheduler::<PathKey>::new(0, bad),
        Err(ScheduleError::Backoff { .. })
    ));
    let bad = ScheduleConfig {
        measure_window: Duration::ZERO,
        ..ScheduleConfig::default()
    };
    assert!(Scheduler::<PathKey>::new(0, bad).is_err());
    // A zero credit window is fine: a strict rest after each burst.
    let ok = ScheduleConfig {
        credit_window: Duration::ZERO,
        ..ScheduleConfig::default()
    };
    assert!(Scheduler::<PathKey>::new(0, ok).is_ok());

    let mut sc = sched(1);
    sc.set_paths(vec![plan("d", "a", s(60))], s(0)).unwrap();
    let before = sc.path_status(&key("d", "a")).unwrap();
    let bads = [
        vec![plan("d", "b", Duration::ZERO)],
        vec![plan("d", "b", MAX_INTERVAL + s(1))],
        vec![plan("d", "b", s(60)).with_jitter(1.0)],
        vec![plan("d", "b", s(60)).with_jitter(-0.1)],
        vec![plan("d", "b", s(60)).with_jitter(f64::NAN)],
        vec![plan("d", "b", s(60)).with_expected_burst(MAX_INTERVAL + s(1))],
        vec![plan("d", "b", s(60)), plan("d", "b", s(30))],
    ];
    for plans in bads {
        let err = sc.set_paths(plans.clone(), s(1)).unwrap_err();
        assert!(err.to_string().contains("d -> b"), "{err}");
        // Rejected as a whole: the old set is untouched.
        assert_eq!(sc.paths().collect::<Vec<_>>(), vec![&key("d", "a")]);
        assert_eq!(sc.path_status(&key("d", "a")).unwrap(), before);
    }
}

#[test]
fn first_due_times_spread_over_the_first_interval() {
    let mut sc = unbudgeted(7);
    let plans = (0..200)
        .map(|i| plan("d", &format!("p{i}"), s(60)))
        .collect();
    sc.set_paths(plans, s(1000)).unwrap();
    let mut dues: Vec<_> = sc
        .paths()
        .map(|k| sc.path_status(k).unwrap().next_due)
        .collect();
    dues.sort();
    assert!(dues[0] >= s(1000) && dues[199] < s(1060));
    // Roughly uniform: each 6 s tenth of the interval holds some.
    for tenth in 0..10 {
        let lo = s(1000 + 6 * tenth);
        let n = dues.iter().filter(|&&d| d >= lo && d < lo + s(6)).count();
        assert!((8..=40).contains(&n), "tenth {tenth}: {n}");
    }
    // Another node's phases differ.
    let mut other = unbudgeted(8);
    other
        .set_paths(
            (0..200)
                .map(|i| plan("d", &format!("p{i}"), s(60)))
                .collect(),
            s(1000),
        )
        .unwrap();
    let same = sc
        .paths()
        .filter(|k| sc.path_status(k).unwrap().next_due == other.path_status(k).unwrap().next_due)
        .count();
    assert_eq!(same, 0);
}

#[test]
fn same_seed_same_schedule() {
    let run = |seed| {
        let mut sc = sched(seed);
        let plans = (0..10)
            .map(|i| {
                plan("d", &format!("p{i}"), s(30))
                    .with_jitter(0.2)
                    .with_expected_burst(ms(200))
            })
            .collect();
        sc.set_paths(plans, s(0)).unwrap();
        let mut t = s(0);
        let mut starts = Vec::new();
        while t < s(600) {
            for d in sc.poll(t) {
                starts.push((t, d.key.clone()));
                sc.completed(&d.key, Outcome::success(ms(200)), t + ms(200));
            }
            t = sc.wait_until().unwrap().max(t + ms(200));
        }
        starts
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn one_burst_per_device_devices_in_parallel() {
    let mut sc = unbudgeted(3);
    sc.set_paths(
        vec![
            plan("mlx5_0", "a", s(10)),
            plan("mlx5_0", "b", s(10)),
            plan("mlx5_1", "a", s(10)),
        ],
        s(0),
    )
    .unwrap();
    // By 10 s everything is due; one dispatch per device.
    let d = sc.poll(s(10));
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].key.device, "mlx5_0");
    assert_eq!(d[1].key.device, "mlx5_1");
    assert!(d
        .iter()
        .all(|d| d.attempt == Attempt::Regular && !d.budget_deferred));
    assert!(sc.poll(s(11)).is_empty(), "both devices are busy");
    // Only running devices: nothing to wake for.
    assert_eq!(sc.wait_until(), None);
    assert!(sc.device_stats("mlx5_0", s(11)).unwrap().running);
    let first = d[0].key.clone();
    assert_eq!(
        sc.completed(&first, Outcome::success(s(1)), s(12)),
        Completion::Recorded
    );
    // The other mlx5_0 path goes next, at once.
    assert_eq!(sc.wait_until(), Some(sc.next_due("mlx5_0").unwrap().1));
    let d2 = sc.poll(s(12));
    assert_eq!(d2.len(), 1);
    assert_eq!(d2[0].key.device, "mlx5_0");
    assert_ne!(d2[0].key, first);
}

#[test]
fn most_overdue_path_goes_first() {
    let mut sc = unbudgeted(5);
    let peers = ["a", "b", "c", "d"];
    sc.set_paths(peers.iter().map(|p| plan("d", p, s(10))).collect(), s(0))
        .unwrap();
    let mut by_due: Vec<_> = peers
        .iter()
        .map(|p| (sc.path_status(&key("d", p)).unwrap().next_due, key("d", p)))
        .collect();
    by_due.sort();
    // At 20 s all are overdue; each completes instantly: served in due order.
    let mut t = s(20);
    let mut order = Vec::new();
    for _ in 0..4 {
        let d = sc.poll(t);
        assert_eq!(d.len(), 1);
        order.push(d[0].key.clone());
        sc.completed(&d[0].key, Outcome::success(Duration::ZERO), t);
        t += ms(1);
    }
    assert_eq!(
        order,
        by_due.into_iter().map(|(_, k)| k).collect::<Vec<_>>()
    );
}

#[test]
fn success_and_failure_wait_a_full_interval_from_the_start() {
    let mut sc = unbudgeted(9);
    sc.set_paths(vec![plan("d", "a", s(60))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    let d = run_until_dispatched(&mut sc, &k, &mut t);
    let start = t;
    assert_eq!(d.due, sc.path_status(&k).unwrap().next_due);
    // Jitter 0: exactly one interval after the start, however long the burst took.
    sc.completed(&k, Outcome::failure(s(10)), start + s(10));
    assert_eq!(sc.path_status(&k).unwrap().next_due, start + s(60));
    assert!(sc.poll(start + s(59)).is_empty());
    let d = sc.poll(start + s(60));
    assert_eq!(d.len(), 1);
    sc.completed(&k, Outcome::failure(s(1)), start + s(61));
    // A failing path: still one interval, never sooner.
    assert_eq!(sc.path_status(&k).unwrap().next_due, start + s(120));
    let st = sc.path_status(&k).unwrap().stats;
    assert_eq!(
        (st.failures, st.consecutive_failures, st.successes),
        (2, 2, 0)
    );
    sc.poll(start + s(120));
    sc.completed(&k, Outcome::success(s(1)), start + s(121));
    let st = sc.path_status(&k).unwrap().stats;
    assert_eq!(
        (st.failures, st.consecutive_failures, st.successes),
        (2, 0, 1)
    );
    assert_eq!(st.last_success, Some(start + s(120)));
    assert_eq!(st.dispatched, 3);
}

/// The counters through every outcome, and while a burst runs (what it adds shows at once).
#[test]
fn counters_follow_every_outcome() {
    let mut sc = unbudgeted(9);
    sc.set_paths(vec![plan("d", "a", s(60))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    let first = t;
    let stats = |sc: &Scheduler| sc.path_status(&k).unwrap().stats;
    let running = stats(&sc);
    assert_eq!((running.dispatched, running.last_start), (1, Some(first)));
    assert_eq!(running.last_success, None);
    sc.completed(&k, Outcome::success(s(1)), first + s(1));
    assert_eq!(stats(&sc).last_success, Some(first));
    // A `busy` answer, then a failure: the last success stays the first burst.
    let second = first + s(60);
    assert_eq!(sc.poll(second).len(), 1);
    assert_eq!(stats(&sc).last_start, Some(second));
    assert_eq!(stats(&sc).last_success, Some(first));
    sc.completed(&k, Outcome::busy(Duration::ZERO), second);
    let retry = sc.path_status(&k).unwrap().next_due;
    assert_eq!(retry, second + DEFAULT_BUSY_BACKOFF);
    let d = sc.poll(retry);
    assert_eq!(d[0].attempt, Attempt::BusyRetry(1));
    sc.completed(&k, Outcome::failure(s(1)), retry + s(1));
    let st = stats(&sc);
    assert_eq!(
        (st.dispatched, st.successes, st.failures, st.deferred_busy),
        (3, 1, 1, 1)
    );
    assert_eq!(st.consecutive_failures, 1);
    assert_eq!((st.last_start, st.last_success), (Some(retry), Some(first)));
    // A success resets the failures and is the last success (a full interval after the
    // retry's start).
    let third = retry + s(60);
    assert_eq!(sc.poll(third)[0].attempt, Attempt::Regular);
    sc.completed(&k, Outcome::success(s(1)), third + s(1));
    let st = stats(&sc);
    assert_eq!((st.consecutive_failures, st.successes), (0, 2));
    assert_eq!((st.last_start, st.last_success), (Some(third), Some(third)));
    // Two failures in a row count from zero again, and keep that success.
    for n in 1..=2u64 {
        let at = third + s(60 * n);
        assert_eq!(sc.poll(at).len(), 1);
        sc.completed(&k, Outcome::failure(s(1)), at + s(1));
        assert_eq!(stats(&sc).consecutive_failures, n);
        assert_eq!(stats(&sc).last_success, Some(third));
    }
    assert_eq!(stats(&sc).dispatched, 6);
}

#[test]
fn jittered_gaps_stay_within_bounds() {
    let mut sc = unbudgeted(11);
    sc.set_paths(vec![plan("d", "a", s(100)).with_jitter(0.2)], s(0))
        .unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    let mut gaps = Vec::new();
    let mut last = None;
    for _ in 0..500 {
        run_until_dispatched(&mut sc, &k, &mut t);
        if let Some(l) = last {
            gaps.push(t - l);
        }
        last = Some(t);
        sc.completed(&k, Outcome::success(ms(100)), t + ms(100));
    }
    assert!(gaps.iter().all(|&g| g >= s(80) && g <= s(120)));
    let mean = gaps.iter().sum::<Duration>().as_secs_f64() / gaps.len() as f64;
    assert!((mean - 100.0).abs() < 2.0, "{mean}");
    assert!(gaps.iter().any(|&g| g < s(85)) && gaps.iter().any(|&g| g > s(115)));
}

#[test]
fn busy_retries_back_off_within_the_interval() {
    let mut sc = unbudgeted(13);
    sc.set_paths(vec![plan("d", "a", s(60))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    let start = t;
    // Busy answers: retries after 1, 2, 4, 8, 16, 30 (cap) s...
    for (expected_attempt, backoff) in (1..).zip([1, 2, 4, 8, 16]) {
        t += ms(10);
        assert_eq!(
            sc.completed(&k, Outcome::busy(Duration::ZERO), t),
            Completion::Recorded
        );
        let st = sc.path_status(&k).unwrap();
        assert_eq!(st.next_due, t + s(backoff));
        assert_eq!(st.retry_until, Some(start + s(60)));
        t = st.next_due;
        let d = sc.poll(t);
        assert_eq!(d[0].attempt, Attempt::BusyRetry(expected_attempt));
        assert!(!d[0].budget_deferred);
    }
    // Now at ~31 s: the next retry would be at ~61 s, past the 60 s interval: wait for the
    // regular probe.
    t += ms(10);
    sc.completed(&k, Outcome::busy(Duration::ZERO), t);
    let st = sc.path_status(&k).unwrap();
    assert_eq!(st.next_due, start + s(60));
    assert_eq!(st.retry_until, None);
    assert_eq!(st.stats.deferred_busy, 6);
    assert_eq!(st.stats.failures, 0);
    // The regular probe is a regular attempt again, with the backoff reset.
    let d = sc.poll(start + s(60));
    assert_eq!(d[0].attempt, Attempt::Regular);
    sc.completed(&k, Outcome::busy(Duration::ZERO), start + s(60));
    assert_eq!(sc.path_status(&k).unwrap().next_due, start + s(61));
    assert_eq!(sc.device_stats("d", t).unwrap().deferred_busy, 7);
}

#[test]
fn a_retry_that_succeeds_restarts_the_interval_from_its_start() {
    let mut sc = unbudgeted(17);
    sc.set_paths(vec![plan("d", "a", s(60))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::busy(Duration::ZERO), t);
    let retry_at = t + s(1);
    assert_eq!(sc.poll(retry_at)[0].attempt, Attempt::BusyRetry(1));
    sc.completed(&k, Outcome::success(s(1)), retry_at + s(1));
    let st = sc.path_status(&k).unwrap();
    assert_eq!(st.next_due, retry_at + s(60));
    assert_eq!(st.retry_until, None);
    // A retry delayed past the regular probe's time (device busy elsewhere) counts as the
    // regular attempt.
    let mut sc = unbudgeted(17);
    sc.set_paths(vec![plan("d", "a", s(10))], s(0)).unwrap();
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::busy(Duration::ZERO), t);
    assert_eq!(sc.poll(t + s(30))[0].attempt, Attempt::Regular);
}

#[test]
fn busy_retry_never_runs_past_a_short_interval() {
    let mut sc = unbudgeted(19);
    sc.set_paths(vec![plan("d", "a", ms(1500))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    let start = t;
    sc.completed(&k, Outcome::busy(Duration::ZERO), start + ms(100));
    // Retry at 1.1 s < 1.5 s, the regular probe.
    assert_eq!(sc.path_status(&k).unwrap().next_due, start + ms(1100));
    sc.poll(start + ms(1100));
    sc.completed(&k, Outcome::busy(Duration::ZERO), start + ms(1200));
    // 1.2 + 2 s > 1.5 s: back to the regular probe.
    assert_eq!(sc.path_status(&k).unwrap().next_due, start + ms(1500));
}

#[test]
fn budget_stretches_intervals_when_paths_do_not_fit() {
    let mut sc = sched(23);
    // 20 paths × 0.5 s every 60 s = 1/6 of the time; the budget is 5%: stretch 10/3.
    let plans = (0..20)
        .map(|i| plan("d", &format!("p{i}"), s(60)).with_expected_burst(ms(500)))
        .collect();
    sc.set_paths(plans, s(0)).unwrap();
    let st = sc.device_stats("d", s(0)).unwrap();
    assert!((st.demand - 1.0 / 6.0).abs() < 1e-9);
    assert!((st.stretch_factor - 10.0 / 3.0).abs() < 1e-9);
    assert_eq!(st.paths, 20);
    let ps = sc.path_status(&key("d", "p0")).unwrap();
    assert_eq!(ps.effective_interval, s(200));
    assert_eq!(ps.cost, ms(500));
    // First phases spread over the stretched interval.
    assert!(sc
        .paths()
        .all(|k| sc.path_status(k).unwrap().next_due < s(200)));
    assert!(sc
        .paths()
        .any(|k| sc.path_status(k).unwrap().next_due > s(100)));

    // Two paths fit: no stretch.
    let mut sc = sched(23);
    sc.set_paths(
        vec![
            plan("d", "a", s(60)).with_expected_burst(ms(500)),
            plan("d", "b", s(60)).with_expected_burst(ms(500)),
        ],
        s(0),
    )
    .unwrap();
    assert_eq!(sc.device_stats("d", s(0)).unwrap().stretch_factor, 1.0);
}

#[test]
fn measured_burst_time_drives_the_stretch() {
    let mut sc = sched(29);
    sc.set_paths(
        vec![plan("d", "a", s(60)).with_expected_burst(ms(500))],
        s(0),
    )
    .unwrap();
    assert_eq!(sc.device_stats("d", s(0)).unwrap().stretch_factor, 1.0);
    let k = key("d", "a");
    let mut t = s(0);
    // The path's bursts really take 10 s (timeouts): its cost converges to 10 s, a demand of
    // 1/6, a stretch of 10/3.
    for _ in 0..40 {
        run_until_dispatched(&mut sc, &k, &mut t);
        t += s(10);
        sc.completed(&k, Outcome::failure(s(10)), t);
    }
    let st = sc.device_stats("d", t).unwrap();
    assert!((st.stretch_factor - 10.0 / 3.0).abs() < 0.01, "{st:?}");
    let ps = sc.path_status(&k).unwrap();
    assert!(ps.effective_interval > s(199) && ps.effective_interval < s(201));
    // Busy answers do not move the cost.
    let cost = ps.cost;
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::busy(Duration::ZERO), t);
    assert_eq!(sc.path_status(&k).unwrap().cost, cost);
}

#[test]
fn budget_gate_holds_back_and_counts() {
    // No banked credit: after a 1 s burst at 5% the device rests 19 s.
    let config = ScheduleConfig {
        credit_window: Duration::ZERO,
        ..ScheduleConfig::default()
    };
    let mut sc = Scheduler::new(31, config).unwrap();
    sc.set_paths(vec![plan("d", "a", s(10)), plan("d", "b", s(10))], s(0))
        .unwrap();
    let mut t = s(20);
    let d = sc.poll(t);
    assert_eq!(d.len(), 1);
    assert!(!d[0].budget_deferred);
    t += s(1);
    sc.completed(&d[0].key, Outcome::success(s(1)), t);
    // The other path is overdue but the gate is closed until 20 s after the burst start
    // (1 s of burst at 5%).
    assert_eq!(sc.wait_until(), Some(s(40)));
    assert_eq!(sc.next_due("d").unwrap().1, s(40));
    assert!(sc.poll(s(39)).is_empty());
    let d = sc.poll(s(40));
    assert_eq!(d.len(), 1);
    assert!(d[0].budget_deferred);
    let st = sc.device_stats("d", s(40)).unwrap();
    assert_eq!(st.deferred_budget, 1);
    assert_eq!(st.bursts, 1);
    assert_eq!(st.burst_time, s(1));
    assert_eq!(sc.path_status(&d[0].key).unwrap().stats.deferred_budget, 1);
    // Measured: 1 s over the 600 s window.
    assert!((st.duty_cycle_used - 1.0 / 600.0).abs() < 1e-12);
}

#[test]
fn intervals_shorter_than_the_burst() {
    // Duty cycle 1, a 100 ms interval, 500 ms bursts: the device runs back to back, each path
    // as soon as the device frees up, and never two at once.
    let mut sc = unbudgeted(37);
    sc.set_paths(
        vec![
            plan("d", "a", ms(100)).with_expected_burst(ms(500)),
            plan("d", "b", ms(100)).with_expected_burst(ms(500)),
        ],
        s(0),
    )
    .unwrap();
    // Demand 10 → stretch 10: effective interval 1 s.
    let st = sc.device_stats("d", s(0)).unwrap();
    assert!((st.stretch_factor - 10.0).abs() < 1e-9);
    let mut t = s(0);
    let mut n = 0;
    while t < s(100) {
        let d = sc.poll(t);
        assert!(d.len() <= 1);
        if let Some(d) = d.first() {
            n += 1;
            t += ms(500);
            sc.completed(&d.key, Outcome::success(ms(500)), t);
        }
        t = sc.wait_until().unwrap().max(t);
    }
    // 100 s of back-to-back 0.5 s bursts, two paths alternating every 1 s interval.
    assert!((195..=201).contains(&n), "{n}");
    // At 5% the same paths get 0.5 s every 10 s per device.
    let mut sc = sched(37);
    sc.set_paths(
        vec![
            plan("d", "a", ms(100)).with_expected_burst(ms(500)),
            plan("d", "b", ms(100)).with_expected_burst(ms(500)),
        ],
        s(0),
    )
    .unwrap();
    let st = sc.device_stats("d", s(0)).unwrap();
    assert!((st.stretch_factor - 200.0).abs() < 1e-9);
    assert_eq!(
        sc.path_status(&key("d", "a")).unwrap().effective_interval,
        s(20)
    );
}

#[test]
fn removed_path_completion_frees_the_device_only() {
    let mut sc = unbudgeted(41);
    sc.set_paths(vec![plan("d", "a", s(10)), plan("d", "b", s(10))], s(0))
        .unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    // "a" leaves while running; "b" may not start before "a"'s burst is over.
    sc.set_paths(vec![plan("d", "b", s(10))], t).unwrap();
    assert!(sc.poll(t + s(30)).is_empty());
    assert_eq!(sc.path_status(&k), None);
    assert_eq!(
        sc.completed(&k, Outcome::success(s(1)), t + s(31)),
        Completion::PathGone
    );
    assert_eq!(sc.device_stats("d", t + s(31)).unwrap().burst_time, s(1));
    assert_eq!(sc.poll(t + s(31))[0].key, key("d", "b"));
    // A second report of the same burst is ignored.
    assert_eq!(
        sc.completed(&k, Outcome::success(s(1)), t + s(32)),
        Completion::NotRunning
    );
    // A report for a path that is not running is ignored, and does not free the device.
    assert_eq!(
        sc.completed(&key("d", "zz"), Outcome::success(s(1)), t + s(32)),
        Completion::NotRunning
    );
    assert!(sc.device_stats("d", t + s(32)).unwrap().running);
}

#[test]
fn removed_device_lingers_until_its_burst_is_reported() {
    let mut sc = unbudgeted(43);
    sc.set_paths(vec![plan("d", "a", s(10))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.set_paths(vec![], t).unwrap();
    assert!(sc.is_empty());
    let st = sc.device_stats("d", t).unwrap();
    assert_eq!((st.paths, st.running), (0, true));
    assert_eq!(sc.wait_until(), None);
    assert_eq!(
        sc.completed(&k, Outcome::failure(s(1)), t + s(1)),
        Completion::PathGone
    );
    assert_eq!(sc.device_stats("d", t), None);
    assert_eq!(sc.devices().count(), 0);
}

#[test]
fn path_readded_while_its_old_burst_runs_starts_fresh() {
    let mut sc = unbudgeted(47);
    sc.set_paths(vec![plan("d", "a", s(10))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.set_paths(vec![], t).unwrap();
    sc.set_paths(vec![plan("d", "a", s(10))], t + s(1)).unwrap();
    let fresh = sc.path_status(&k).unwrap();
    assert!(!fresh.running);
    assert_eq!(fresh.stats, PathStats::default());
    // The old burst's report frees the device but is not the new path's result.
    assert_eq!(
        sc.completed(&k, Outcome::success(s(1)), t + s(2)),
        Completion::PathGone
    );
    assert_eq!(sc.path_status(&k).unwrap(), fresh);
    assert!(!sc.device_stats("d", t + s(2)).unwrap().running);
}

#[test]
fn set_paths_keeps_the_state_of_unchanged_paths() {
    let mut sc = sched(53);
    let base = |peer: &str| plan("d", peer, s(60)).with_expected_burst(ms(100));
    sc.set_paths(vec![base("a"), base("b")], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::busy(Duration::ZERO), t + ms(5));
    let before = sc.path_status(&k).unwrap();
    assert!(before.retry_until.is_some());
    // Peers come and go around it; "a" keeps its due time, backoff and counters.
    sc.set_paths(vec![base("c"), base("a")], t + s(1)).unwrap();
    assert_eq!(sc.path_status(&k).unwrap(), before);
    sc.set_paths(vec![base("a"), base("d"), base("e")], t + s(2))
        .unwrap();
    assert_eq!(sc.path_status(&k).unwrap(), before);
    assert_eq!(sc.len(), 3);
    // A new expected burst resets the cost estimate; a longer interval keeps the due time.
    sc.set_paths(
        vec![plan("d", "a", s(120)).with_expected_burst(ms(300))],
        t + s(3),
    )
    .unwrap();
    let after = sc.path_status(&k).unwrap();
    assert_eq!(after.next_due, before.next_due);
    assert_eq!(after.cost, ms(300));
    assert_eq!(after.stats, before.stats);
}

#[test]
fn a_shorter_interval_pulls_the_due_time_in() {
    let mut sc = unbudgeted(59);
    let k = key("d", "a");
    sc.set_paths(vec![plan("d", "a", s(3600))], s(0)).unwrap();
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::success(Duration::ZERO), t);
    assert_eq!(sc.path_status(&k).unwrap().next_due, t + s(3600));
    sc.set_paths(vec![plan("d", "a", s(60))], t + s(10))
        .unwrap();
    let due = sc.path_status(&k).unwrap().next_due;
    assert!(due >= t + s(10) && due < t + s(70), "{due:?}");
}

#[test]
fn next_due_and_wait_until_agree_with_poll() {
    let mut sc = sched(61);
    sc.set_paths(
        (0..5)
            .map(|i| plan("d", &format!("p{i}"), s(30)).with_expected_burst(ms(300)))
            .collect(),
        s(0),
    )
    .unwrap();
    let (k, at) = sc.next_due("d").map(|(k, t)| (k.clone(), t)).unwrap();
    assert_eq!(sc.wait_until(), Some(at));
    assert!(sc.poll(at - Duration::from_nanos(1)).is_empty());
    let d = sc.poll(at);
    assert_eq!(d[0].key, k);
    assert_eq!(d[0].due, at);
}

#[test]
fn duty_cycle_used_is_measured_over_the_window() {
    let config = ScheduleConfig {
        duty_cycle: 0.5,
        measure_window: s(100),
        ..ScheduleConfig::default()
    };
    let mut sc = Scheduler::new(67, config).unwrap();
    sc.set_paths(vec![plan("d", "a", s(10))], s(0)).unwrap();
    let k = key("d", "a");
    let mut t = s(0);
    for _ in 0..30 {
        run_until_dispatched(&mut sc, &k, &mut t);
        t += s(2);
        sc.completed(&k, Outcome::success(s(2)), t);
    }
    // 2 s every 10 s.
    let used = sc.device_stats("d", t).unwrap().duty_cycle_used;
    assert!((used - 0.2).abs() < 0.021, "{used}");
    assert_eq!(
        sc.device_stats("d", t + s(200)).unwrap().duty_cycle_used,
        0.0
    );
}

#[test]
fn set_config_keeps_state() {
    let mut sc = sched(71);
    sc.set_paths(
        (0..20)
            .map(|i| plan("d", &format!("p{i}"), s(60)).with_expected_burst(ms(500)))
            .collect(),
        s(0),
    )
    .unwrap();
    assert!((sc.device_stats("d", s(0)).unwrap().stretch_factor - 10.0 / 3.0).abs() < 1e-9);
    let k = key("d", "p0");
    let mut t = s(0);
    run_until_dispatched(&mut sc, &k, &mut t);
    sc.completed(&k, Outcome::success(ms(500)), t + ms(500));
    let before = sc.path_status(&k).unwrap();
    // 20% fits: no stretch any more; the path keeps its due time and counters.
    sc.set_config(ScheduleConfig::with_duty_cycle(0.2)).unwrap();
    assert_eq!(sc.device_stats("d", t).unwrap().stretch_factor, 1.0);
    let after = sc.path_status(&k).unwrap();
    assert_eq!(
        (after.next_due, after.stats),
        (before.next_due, before.stats)
    );
    assert!(sc.set_config(ScheduleConfig::with_duty_cycle(2.0)).is_err());
    assert_eq!(sc.config().duty_cycle, 0.2);
}

/// Runs `sc` for 20 minutes: each dispatch ends after 300 ms, one in five with `busy` (by key
/// and count, so the same whatever else the scheduler holds); at 5 minutes `change` is applied
/// (removed keys, added plans). Returns each dispatch: (start, key, attempt).
fn run_with_change(
    mut sc: Scheduler,
    change: (Vec<PathKey>, Vec<PathPlan>),
) -> Vec<(Duration, PathKey, Attempt)> {
    let mut started: Vec<(Duration, PathKey, Attempt)> = Vec::new();
    let mut running: Vec<(Duration, PathKey, Outcome)> = Vec::new();
    let mut change = Some(change);
    let mut t = s(0);
    while t < s(1200) {
        running.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        while running.first().is_some_and(|(end, ..)| *end <= t) {
            let (end, key, outcome) = running.remove(0);
            sc.completed(&key, outcome, end);
        }
        if t >= s(300) {
            if let Some((remove, upsert)) = change.take() {
                sc.update_paths(&remove, upsert, s(300)).unwrap();
            }
        }
        for d in sc.poll(t) {
            let count = started.iter().filter(|(_, k, _)| *k == d.key).count();
            let busy =
                (seed_from_name(&d.key.to_string()).wrapping_add(count as u64)).is_multiple_of(5);
            let outcome = if busy {
                Outcome::busy(Duration::ZERO)
            } else {
                Outcome::success(ms(300))
            };
            running.push((t + ms(300), d.key.clone(), outcome));
            started.push((t, d.key, d.attempt));
        }
        // The next thing to happen: a due path, or the end of a burst (after a poll, nothing
        // is due at `t` any more).
        let mut next = sc.wait_until().unwrap_or(s(1200));
        if let Some((end, ..)) = running.iter().min_by_key(|(end, ..)| *end) {
            next = next.min(*end);
        }
        let next = next.max(t + Duration::from_nanos(1));
        t = if change.is_some() {
            next.min(s(300))
        } else {
            next
        };
    }
    started
}

#[test]
fn devices_are_scheduled_independently() {
    // What one device does (its phases, jitter, busy retries, path changes) never shifts what
    // another does: a node's scheduler is the same as one scheduler per device, each with the
    // node's seed. The cluster simulation relies on it to run the rails apart.
    let devices = ["mlx5_0", "mlx5_1", "mlx5_2"];
    let plans = |only: Option<&str>| -> Vec<PathPlan> {
        let mut out = Vec::new();
        for (d, device) in devices.iter().enumerate() {
            for p in 0..(4 + d) {
                out.push(
                    plan(device, &format!("peer{p}"), s(20 + 10 * d as u64))
                        .with_jitter(0.2)
                        .with_expected_burst(ms(300)),
                );
            }
        }
        out.retain(|p| only.is_none_or(|d| p.key.device == d));
        out
    };
    let change = |only: Option<&str>| -> (Vec<PathKey>, Vec<PathPlan>) {
        let mut remove: Vec<PathKey> = devices.iter().map(|d| key(d, "peer1")).collect();
        let mut add: Vec<PathPlan> = devices
            .iter()
            .map(|d| plan(d, "new", s(15)).with_jitter(0.1))
            .collect();
        remove.retain(|k| only.is_none_or(|d| k.device == d));
        add.retain(|p| only.is_none_or(|d| p.key.device == d));
        (remove, add)
    };
    let start = |only: Option<&str>| {
        let mut sc = sched(7);
        sc.set_paths(plans(only), s(0)).unwrap();
        sc
    };
    let together = run_with_change(start(None), change(None));
    for device in devices {
        let alone = run_with_change(start(Some(device)), change(Some(device)));
        let of_device: Vec<_> = together
            .iter()
            .filter(|(_, k, _)| k.device == device)
            .cloned()
            .collect();
        assert!(alone.len() > 40, "{device}: {} dispatches", alone.len());
        assert!(
            alone.iter().any(|(_, _, a)| *a != Attempt::Regular),
            "{device}: no retry"
        );
        assert_eq!(of_device, alone, "{device}");
    }
}

#[test]
fn planned_intervals_are_the_plans_with_the_selection_and_the_stretch() {
    // 31 same-group paths every 60 s and 10 sampled ones a 10-minute round, 0.5 s bursts, 5%:
    // fit_plans lengthens the same-group intervals so that both fit 90% of the budget, and a
    // sampled path is planned once a round.
    let round = s(600);
    let mut selected: Vec<Selected> = (0..31)
        .map(|i| Selected {
            key: key("d", &format!("g{i}")),
            role: Role::SameGroup,
        })
        .collect();
    selected.extend((0..10).map(|i| Selected {
        key: key("d", &format!("s{i}")),
        role: Role::Sampled,
    }));
    let plans = fit_plans(
        &selected,
        |k| PathPlan::new(k.clone(), s(60)).with_expected_burst(ms(500)),
        0.05,
        round,
        10,
    );
    let mut sc = sched(41);
    sc.set_paths(plans, s(0)).unwrap();
    let planned: std::collections::BTreeMap<&PathKey, Duration> =
        sc.planned_intervals("d").into_iter().collect();
    assert_eq!(planned.len(), 41);
    // I_tor = 31 × 0.5 s / (4.5% − 10 × 0.5 s / 600 s) = 423.5 s (docs/scale.md, "Plans").
    let same = planned[&key("d", "g0")].as_secs_f64();
    assert!((same - 15.5 / (0.045 - 5.0 / 600.0)).abs() < 0.01, "{same}");
    assert_eq!(planned[&key("d", "s3")], round);
    for (k, interval) in &planned {
        assert_eq!(sc.path_status(k).unwrap().effective_interval, *interval);
    }
    assert!(sc.planned_intervals("other").is_empty());

    // Paths that do not fit the budget: every interval stretched alike, the planned ones too.
    let mut sc = sched(43);
    let plans = (0..20)
        .map(|i| plan("d", &format!("p{i}"), s(60)).with_expected_burst(ms(500)))
        .collect();
    sc.set_paths(plans, s(0)).unwrap();
    assert!(sc
        .planned_intervals("d")
        .iter()
        .all(|(_, interval)| *interval == s(200)));
}
