//! The scheduler's test harness: simulated runs of one node's scheduler, a busy node over hours,
//! and random plans, outcomes and path-set changes under proptest, with every event checked
//! against the scheduling rules. (The cluster simulation behind the `simulate` command is
//! `crate::simulate`.)

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::rng::SplitMix64;
use super::*;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// One simulated dispatch.
#[derive(Debug, Clone, Copy)]
struct Rec {
    start: Duration,
    attempt: Attempt,
    /// The path's stretched interval when it was dispatched.
    stretched: Duration,
    /// The end of the busy-retry window, for a busy retry.
    retry_until: Option<Duration>,
    /// Filled in when the burst is reported.
    outcome: Option<OutcomeKind>,
}

/// Runs a scheduler against simulated bursts and checks the invariants on every event.
struct Sim {
    sc: Scheduler,
    t: Duration,
    rng: SplitMix64,
    /// Per device: (end time, key, outcome) of the running burst.
    running: BTreeMap<String, (Duration, PathKey, Outcome)>,
    /// Per device: `(start, end)` of burst time charged.
    spans: BTreeMap<String, Vec<(Duration, Duration)>>,
    /// Per path: every dispatch.
    dispatches: BTreeMap<PathKey, Vec<Rec>>,
    busy_answers: u64,
    gone: u64,
}

impl Sim {
    fn new(sc: Scheduler, seed: u64) -> Self {
        Sim {
            sc,
            t: Duration::ZERO,
            rng: SplitMix64::new(seed),
            running: BTreeMap::new(),
            spans: BTreeMap::new(),
            dispatches: BTreeMap::new(),
            busy_answers: 0,
            gone: 0,
        }
    }

    /// Runs until `end`. `behave` picks each burst's outcome and how long the device is held
    /// (at least the burst time).
    fn run(
        &mut self,
        end: Duration,
        mut behave: impl FnMut(&PathKey, &mut SplitMix64) -> (Outcome, Duration),
    ) {
        loop {
            for d in self.sc.poll(self.t) {
                assert!(
                    !self.running.contains_key(&d.key.device),
                    "two bursts on {} at {:?}",
                    d.key.device,
                    self.t
                );
                assert!(d.due <= self.t, "dispatched before due");
                let status = self.sc.path_status(&d.key).unwrap();
                assert!(status.running);
                self.dispatches.entry(d.key.clone()).or_default().push(Rec {
                    start: self.t,
                    attempt: d.attempt,
                    stretched: status.effective_interval,
                    retry_until: status.retry_until,
                    outcome: None,
                });
                let (outcome, hold) = behave(&d.key, &mut self.rng);
                let hold = hold.max(outcome.burst_time);
                self.running
                    .insert(d.key.device.clone(), (self.t + hold, d.key, outcome));
            }
            self.sc.check_index();
            // Progress: nothing due now that poll did not take.
            let wake = self.sc.wait_until();
            if let Some(w) = wake {
                assert!(
                    w > self.t,
                    "wait_until {w:?} not after poll at {:?}",
                    self.t
                );
            }
            let next_end = self.running.values().map(|r| r.0).min();
            let next = match (wake, next_end) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(n) => n,
                    None => return,
                },
            };
            if next > end {
                return;
            }
            self.t = next;
            let done: Vec<String> = self
                .running
                .iter()
                .filter(|(_, r)| r.0 <= self.t)
                .map(|(d, _)| d.clone())
                .collect();
            for dev in done {
                let (_, key, outcome) = self.running.remove(&dev).unwrap();
                match self.sc.completed(&key, outcome, self.t) {
                    Completion::Recorded => {
                        let rec = self.dispatches.get_mut(&key).and_then(|d| d.last_mut());
                        rec.expect("a recorded path has a dispatch").outcome = Some(outcome.kind);
                    }
                    Completion::PathGone => self.gone += 1,
                    Completion::NotRunning => panic!("{key} was running"),
                }
                if !outcome.burst_time.is_zero() {
                    self.spans
                        .entry(dev)
                        .or_default()
                        .push((self.t - outcome.burst_time, self.t));
                }
                if outcome.kind == OutcomeKind::Busy {
                    self.busy_answers += 1;
                }
            }
        }
    }

    /// Replaces the path set now, checking that the paths that stay keep their schedule and
    /// counters. The dispatch history of removed paths is dropped: if they come back, they
    /// are new paths.
    fn set_paths(&mut self, plans: Vec<PathPlan>) {
        let kept: Vec<(PathKey, PathStatus)> = plans
            .iter()
            .filter_map(|p| Some((p.key.clone(), self.sc.path_status(&p.key)?)))
            .collect();
        self.sc.set_paths(plans.clone(), self.t).unwrap();
        for (k, before) in kept {
            let after = self.sc.path_status(&k).unwrap();
            assert_eq!(after.next_due, before.next_due, "{k}");
            assert_eq!(after.retry_until, before.retry_until, "{k}");
            assert_eq!(after.running, before.running, "{k}");
            assert_eq!(after.stats, before.stats, "{k}");
        }
        self.dispatches
            .retain(|k, _| plans.iter().any(|p| &p.key == k));
    }

    /// Largest share of any window of `len` (starting at a burst start) spent bursting.
    fn max_window_ratio(&self, device: &str, len: Duration) -> f64 {
        let spans = &self.spans[device];
        spans
            .iter()
            .map(|&(from, _)| {
                let to = from + len;
                let used: Duration = spans
                    .iter()
                    .map(|&(a, b)| b.min(to).saturating_sub(a.max(from)))
                    .sum();
                used.as_secs_f64() / len.as_secs_f64()
            })
            .fold(0.0, f64::max)
    }

    fn total_ratio(&self, device: &str) -> f64 {
        let used: Duration = self.spans[device].iter().map(|(a, b)| *b - *a).sum();
        used.as_secs_f64() / self.t.as_secs_f64()
    }
}

/// Checks the per-path rules on a finished simulation: gaps after success/failure; busy
/// retries numbered, inside the retry window (which ends within one stretched interval, give
/// or take `window_margin` for a stretch that changed meanwhile, of the regular attempt) and no
/// more than the backoffs that fit in it.
fn check_paths(
    sim: &Sim,
    plans: &BTreeMap<PathKey, PathPlan>,
    backoff: (Duration, Duration),
    window_margin: f64,
) {
    for (key, ds) in &sim.dispatches {
        let Some(plan) = plans.get(key) else { continue };
        let floor = plan.interval.mul_f64(1.0 - plan.jitter);
        let mut retries_in_window = 0;
        let mut regular = None;
        for (i, r) in ds.iter().enumerate() {
            match r.attempt {
                Attempt::Regular => {
                    retries_in_window = 0;
                    regular = Some(*r);
                }
                Attempt::BusyRetry(n) => {
                    retries_in_window += 1;
                    assert_eq!(n, retries_in_window, "{key}: retry numbering");
                    let first = regular.expect("a retry follows a regular attempt");
                    assert_eq!(ds[i - 1].outcome, Some(OutcomeKind::Busy));
                    let until = r.retry_until.expect("a retry has a window");
                    assert!(r.start < until, "{key}: retry past its window");
                    let window = until - first.start;
                    let longest = first.stretched.mul_f64((1.0 + plan.jitter) * window_margin);
                    assert!(
                        window <= longest,
                        "{key}: retry window {window:?} > {longest:?}"
                    );
                    let bound = max_busy_retries(window, backoff.0, backoff.1);
                    assert!(
                        n <= bound,
                        "{key}: {n} > {bound} busy retries in {window:?}"
                    );
                }
            }
            if i > 0 {
                let prev = ds[i - 1];
                assert!(r.start > prev.start, "{key}: two dispatches at once");
                if matches!(
                    prev.outcome,
                    Some(OutcomeKind::Success | OutcomeKind::Failure)
                ) {
                    let gap = r.start - prev.start;
                    assert!(
                        gap >= floor,
                        "{key}: {gap:?} after a probe, under {floor:?}"
                    );
                    assert_eq!(r.attempt, Attempt::Regular);
                }
            }
        }
    }
}

/// Most busy retries that fit in a retry window of `len`: the backoffs (doubling from `initial`
/// up to `max`) add up to less than `len`.
fn max_busy_retries(len: Duration, initial: Duration, max: Duration) -> u32 {
    let (mut n, mut sum, mut b) = (0, Duration::ZERO, initial);
    while sum + b < len && n < 1_000_000 {
        sum += b;
        b = (b * 2).min(max);
        n += 1;
    }
    n
}

#[test]
fn busy_retry_bound() {
    assert_eq!(max_busy_retries(s(60), s(1), s(30)), 5);
    assert_eq!(max_busy_retries(s(62), s(1), s(30)), 6);
    assert_eq!(max_busy_retries(s(1), s(1), s(30)), 0);
}

#[test]
fn simulation_three_devices_twenty_paths_six_hours() {
    let devices = ["mlx5_0", "mlx5_1", "mlx5_2"];
    let interval = s(60);
    let jitter = 0.1;
    let mut plans = BTreeMap::new();
    for (rail, dev) in devices.iter().enumerate() {
        for p in 0..20 {
            let k = PathKey::new(*dev, format!("node-{p:02}"), Some(rail as u16));
            plans.insert(
                k.clone(),
                PathPlan::new(k, interval)
                    .with_jitter(jitter)
                    .with_expected_burst(ms(500)),
            );
        }
    }
    let config = ScheduleConfig::default();
    let duty = config.duty_cycle;
    let credit = config.credit_window;
    let mut sc = Scheduler::new(seed_from_name("node-a"), config).unwrap();
    sc.set_paths(plans.values().cloned().collect(), Duration::ZERO)
        .unwrap();
    let mut sim = Sim::new(sc, 99);
    let mut outcomes: BTreeMap<PathKey, Vec<(Duration, OutcomeKind)>> = BTreeMap::new();
    let hours = s(6 * 3600);
    // node-03 is down (every burst fails after a 2 s timeout); node-07 is always busy;
    // the others are busy 10% of the time and fail 2% of the time.
    let behave = |k: &PathKey, rng: &mut SplitMix64| {
        let setup = ms(20 + (rng.unit() * 30.0) as u64);
        let burst = ms(400 + (rng.unit() * 200.0) as u64);
        let r = rng.unit();
        let o = if k.peer == "node-03" {
            Outcome::failure(s(2))
        } else if k.peer == "node-07" || r < 0.10 {
            Outcome::busy(Duration::ZERO)
        } else if r < 0.12 {
            Outcome::failure(burst / 2)
        } else {
            Outcome::success(burst)
        };
        (o, setup + o.burst_time)
    };
    sim.run(hours, |k, rng| {
        let (o, hold) = behave(k, rng);
        outcomes.entry(k.clone()).or_default().push((hold, o.kind));
        (o, hold)
    });

    // The budget: all 60 paths want 1/6 of each device's time, more than 5%.
    let max_burst = 2.0;
    for dev in devices {
        let st = sim.sc.device_stats(dev, sim.t).unwrap();
        assert!(st.stretch_factor > 2.5 && st.stretch_factor < 4.0, "{st:?}");
        let total = sim.total_ratio(dev);
        let bound = duty + (duty * credit.as_secs_f64() + max_burst) / sim.t.as_secs_f64();
        assert!(total <= bound, "{dev}: {total} > {bound}");
        // Using the budget, not starving: within 15% of it.
        assert!(total > duty * 0.85, "{dev}: only {total}");
        // Any 10 minutes: duty × (10 min + credit window) + one burst.
        let w = s(600);
        let wbound = duty * (1.0 + credit.as_secs_f64() / 600.0) + max_burst / 600.0;
        let worst = sim.max_window_ratio(dev, w);
        assert!(worst <= wbound, "{dev}: {worst} > {wbound}");
        assert!(st.duty_cycle_used <= wbound);
        assert!(st.deferred_busy > 0);
    }

    // Busy: counted (device counters add up to the simulated answers), never a failure, and
    // bounded by the backoffs that fit in an interval (about 11 in a 240 s interval).
    let busy_total: u64 = devices
        .iter()
        .map(|d| sim.sc.device_stats(*d, sim.t).unwrap().deferred_busy)
        .sum();
    assert_eq!(busy_total, sim.busy_answers);
    check_paths(
        &sim,
        &plans,
        (DEFAULT_BUSY_BACKOFF, DEFAULT_BUSY_BACKOFF_MAX),
        1.05,
    );
    for dev in devices {
        let k = PathKey::new(
            dev,
            "node-07",
            Some(devices.iter().position(|d| *d == dev).unwrap() as u16),
        );
        let st = sim.sc.path_status(&k).unwrap().stats;
        assert_eq!(st.failures, 0);
        assert_eq!(st.successes, 0);
        assert!(st.deferred_busy > 50);
    }

    // Every path was probed at least once per stretched interval (plus queueing: the device
    // serves one path at a time under the budget gate), and a failing path no faster than its
    // interval.
    for (key, ds) in &sim.dispatches {
        let plan = &plans[key];
        let regular: Vec<_> = ds
            .iter()
            .filter(|d| d.attempt == Attempt::Regular)
            .collect();
        assert!(regular.len() >= 80, "{key}: {}", regular.len());
        for w in regular.windows(2) {
            let gap = w[1].start - w[0].start;
            let stretched = w[0].stretched;
            assert!(
                gap <= stretched.mul_f64(1.0 + plan.jitter) + s(60),
                "{key}: gap {gap:?} with stretched interval {stretched:?}"
            );
            assert!(gap >= plan.interval.mul_f64(1.0 - plan.jitter));
        }
        assert!(
            ds[0].start < s(300),
            "{key}: first probe at {:?}",
            ds[0].start
        );
    }
    let dead = sim
        .sc
        .path_status(&PathKey::new("mlx5_0", "node-03", Some(0)))
        .unwrap()
        .stats;
    assert!(dead.failures >= 80 && dead.successes == 0);
    assert_eq!(dead.consecutive_failures, dead.failures);
    let _ = outcomes;
}

/// A random node: 1–3 devices, each with up to 6 paths drawn from a pool of peers, random
/// intervals, jitters and expected bursts.
fn arb_plans() -> impl Strategy<Value = Vec<PathPlan>> {
    proptest::collection::vec(
        (0usize..3, 0usize..8, 5u64..300, 0u32..50, 0u64..3_000),
        0..18,
    )
    .prop_map(|v| {
        let mut seen = std::collections::BTreeSet::new();
        v.into_iter()
            .filter(|&(d, p, ..)| seen.insert((d, p)))
            .map(|(d, p, interval, jitter_pct, expected_ms)| {
                PathPlan::new(
                    PathKey::new(format!("dev{d}"), format!("peer{p}"), Some(d as u16)),
                    s(interval),
                )
                .with_jitter(f64::from(jitter_pct) / 100.0)
                .with_expected_burst(ms(expected_ms))
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// `update_paths(removed, added)` leaves the scheduler exactly as `set_paths` of the whole
    /// resulting set does (the same phase draws, due times, index), also while bursts run.
    #[test]
    fn update_paths_is_set_paths_of_the_result(
        seed in any::<u64>(),
        first in arb_plans(),
        second in arb_plans(),
        run_s in 0u64..600,
    ) {
        let mut a = Sim::new(Scheduler::new(seed, ScheduleConfig::default()).unwrap(), seed);
        a.set_paths(first.clone());
        a.run(s(run_s), |_, _| (Outcome::success(ms(400)), ms(700)));
        // The same history, then the set changed both ways.
        let mut b = a.sc.clone();
        let keep: Vec<PathPlan> = first
            .iter()
            .filter(|p| second.iter().any(|q| q.key == p.key))
            .cloned()
            .collect();
        let added: Vec<PathPlan> = second
            .iter()
            .filter(|q| !first.iter().any(|p| p.key == q.key))
            .cloned()
            .collect();
        let removed: Vec<PathKey> = first
            .iter()
            .filter(|p| !second.iter().any(|q| q.key == p.key))
            .map(|p| p.key.clone())
            .collect();
        let mut whole = keep.clone();
        whole.extend(added.clone());
        a.sc.set_paths(whole, a.t).unwrap();
        b.update_paths(&removed, added, a.t).unwrap();
        a.sc.check_index();
        b.check_index();
        let keys: Vec<PathKey> = a.sc.paths().cloned().collect();
        prop_assert_eq!(&keys, &b.paths().cloned().collect::<Vec<_>>());
        for k in &keys {
            let (mut x, mut y) = (a.sc.path_status(k).unwrap(), b.path_status(k).unwrap());
            let diff = x.effective_interval.abs_diff(y.effective_interval);
            prop_assert!(diff < Duration::from_micros(1), "{k}: {diff:?}");
            (x.effective_interval, y.effective_interval) = (Duration::ZERO, Duration::ZERO);
            prop_assert_eq!(x, y);
        }
        prop_assert_eq!(a.sc.wait_until(), b.wait_until());
        let devices: Vec<String> = a.sc.devices().cloned().collect();
        prop_assert_eq!(&devices, &b.devices().cloned().collect::<Vec<_>>());
        for d in &devices {
            // The demand may differ in its last bits: summed afresh, or kept up to date.
            let (mut x, mut y) = (a.sc.device_stats(d, a.t).unwrap(), b.device_stats(d, a.t).unwrap());
            prop_assert!((x.demand - y.demand).abs() < 1e-12);
            // So may the stretch derived from it.
            prop_assert!((x.stretch_factor - y.stretch_factor).abs() < 1e-9 * x.stretch_factor);
            (x.demand, y.demand) = (0.0, 0.0);
            (x.stretch_factor, y.stretch_factor) = (0.0, 0.0);
            prop_assert_eq!(x, y);
        }
    }

    /// Any plans, outcomes and path-set changes: one burst per device, nothing before it is
    /// due, no stall, gaps after success/failure of at least interval × (1 − jitter), busy
    /// retries inside their window and bounded, kept paths keep their state (checked by
    /// `Sim::set_paths`), and the budget holds.
    #[test]
    fn rules_hold_for_any_plans(
        seed in any::<u64>(),
        duty_pct in 1u32..=100,
        credit_s in 0u64..120,
        phases in proptest::collection::vec(arb_plans(), 1..4),
        busy_pct in 0u32..60,
        fail_pct in 0u32..40,
        max_burst_ms in 0u64..4_000,
    ) {
        let config = ScheduleConfig {
            duty_cycle: f64::from(duty_pct) / 100.0,
            credit_window: s(credit_s),
            ..ScheduleConfig::default()
        };
        let duty = config.duty_cycle;
        let sc = Scheduler::new(seed, config).unwrap();
        let mut sim = Sim::new(sc, seed ^ 1);
        let mut all_plans = BTreeMap::new();
        let segment = s(1800);
        for (i, plans) in phases.into_iter().enumerate() {
            // Later phases keep the plans of paths that stay (a reload with the same settings).
            let plans: Vec<PathPlan> = plans
                .into_iter()
                .map(|p| all_plans.get(&p.key).cloned().unwrap_or(p))
                .collect();
            for p in &plans {
                all_plans.insert(p.key.clone(), p.clone());
            }
            sim.set_paths(plans);
            sim.run(segment * (i as u32 + 1), |_, rng| {
                let burst = ms((rng.unit() * max_burst_ms as f64) as u64);
                let hold = burst + ms((rng.unit() * 300.0) as u64);
                let r = rng.unit() * 100.0;
                let o = if r < f64::from(busy_pct) {
                    Outcome::busy(burst / 10)
                } else if r < f64::from(busy_pct + fail_pct) {
                    Outcome::failure(burst)
                } else {
                    Outcome::success(burst)
                };
                (o, hold)
            });
        }
        // Busy retries: within the window drawn at the first busy answer; the stretch may have
        // changed a lot between that and the regular attempt (paths added), so the window is
        // checked against the largest stretch possible here (every path of a device at the
        // largest expected or measured burst and the shortest interval).
        let worst_stretch = (18.0 * 4.0 / 5.0 / duty).max(1.0);
        check_paths(
            &sim,
            &all_plans,
            (DEFAULT_BUSY_BACKOFF, DEFAULT_BUSY_BACKOFF_MAX),
            worst_stretch,
        );
        // The budget: over each device's whole run, duty × (T + credit window) + one burst.
        let max_burst = ms(max_burst_ms).max(ms(3_000)).as_secs_f64();
        for (dev, spans) in &sim.spans {
            let (Some(first), Some(last)) = (spans.first(), spans.last()) else { continue };
            let used: f64 = spans.iter().map(|(a, b)| (*b - *a).as_secs_f64()).sum();
            let bound = duty * (last.1 - first.0 + s(credit_s)).as_secs_f64() + max_burst + 1e-6;
            prop_assert!(used <= bound, "{dev}: {used} > {bound}");
        }
        for dev in sim.sc.devices().cloned().collect::<Vec<_>>() {
            let st = sim.sc.device_stats(&dev, sim.t).unwrap();
            prop_assert!(st.stretch_factor >= 1.0 && st.stretch_factor.is_finite());
            prop_assert!(st.duty_cycle_used >= 0.0);
            prop_assert!(st.duty_cycle_used <= duty * (1.0 + credit_s as f64 / 600.0) + 4.0 / 600.0 + 1e-9);
        }
    }

    /// Every path gets probed: in a run of a fixed path set, each path's first dispatch comes
    /// within its first stretched interval plus the queue of its device under the budget, and
    /// regular probes follow at most a stretched interval (plus that queue) apart.
    #[test]
    fn no_path_starves(
        seed in any::<u64>(),
        duty_pct in 1u32..=100,
        plans in arb_plans(),
        burst_ms in 0u64..2_000,
    ) {
        let duty = f64::from(duty_pct) / 100.0;
        let sc = Scheduler::new(seed, ScheduleConfig::with_duty_cycle(duty)).unwrap();
        let mut sim = Sim::new(sc, seed);
        // Bursts as expected, so the stretch is right from the start.
        let plans: Vec<PathPlan> = plans.into_iter().map(|p| p.with_expected_burst(ms(burst_ms))).collect();
        sim.set_paths(plans.clone());
        sim.run(s(4 * 3600), |_, _| (Outcome::success(ms(burst_ms)), ms(burst_ms)));
        for p in &plans {
            let n = plans.iter().filter(|q| q.key.device == p.key.device).count() as u32;
            let status = sim.sc.path_status(&p.key).unwrap();
            // The device's queue: every other path's burst and its budget share.
            let share = ms(burst_ms).mul_f64(1.0 / duty) + ms(burst_ms);
            let slack = share * n + s(1);
            let longest = status.effective_interval.mul_f64(1.0 + p.jitter) + slack;
            let ds = &sim.dispatches[&p.key];
            prop_assert!(ds[0].start <= status.effective_interval + slack,
                "{}: first at {:?}", p.key, ds[0].start);
            for w in ds.windows(2) {
                prop_assert!(w[1].start - w[0].start <= longest,
                    "{}: gap {:?} > {:?}", p.key, w[1].start - w[0].start, longest);
            }
            prop_assert!(sim.t - ds.last().unwrap().start <= longest);
        }
    }
}
