use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::Judge;

/// The rules' defaults, a 60 s probe interval and a 5 s ping interval.
fn criteria() -> Criteria {
    Criteria::new(
        Judge::default(),
        Duration::from_secs(60),
        Some(Duration::from_secs(5)),
    )
}

fn paced(ratio: f64) -> Probe {
    Probe::Success {
        paced: Some(PacedFigures {
            ratio,
            min_window_ratio: Some(0.9),
            gap_seconds: 0.002,
        }),
    }
}

const CAPACITY: Probe = Probe::Success { paced: None };
const FAILED: Probe = Probe::Failure { validation: false };

/// `probes` one a minute from t = 1000, with the node's median ratio at 1.
fn judged(probes: &[Probe]) -> PathJudge {
    let c = criteria();
    let mut j = PathJudge::new(&c);
    for (i, p) in probes.iter().enumerate() {
        j.on_probe(&c, 1000.0 + 60.0 * i as f64, *p, Some(1.0));
    }
    j
}

/// The streak of `state` just after the last probe (0 when the path is not bad that way).
fn in_a_row(j: &PathJudge, state: BadState) -> u32 {
    let now = j.last_attempt().unwrap_or(0.0);
    j.verdicts(&criteria(), now, 60.0)
        .iter()
        .find(|v| v.state == state)
        .map_or(0, |v| v.in_a_row)
}

#[test]
fn failures_in_a_row_make_a_streak_that_a_success_ends() {
    let j = judged(&[FAILED, FAILED, FAILED]);
    assert_eq!(in_a_row(&j, BadState::Failed), 3);
    let j = judged(&[FAILED, FAILED, paced(1.0), FAILED]);
    assert_eq!(in_a_row(&j, BadState::Failed), 1);
    let j = judged(&[FAILED, FAILED, CAPACITY]);
    assert_eq!(in_a_row(&j, BadState::Failed), 0);
    assert_eq!(j.last_success(), Some(1120.0));
}

#[test]
fn slow_paced_bursts_make_a_streak_and_a_capacity_burst_counts_as_the_paced_one_before_it() {
    let j = judged(&[paced(0.5), paced(0.6), CAPACITY]);
    assert_eq!(in_a_row(&j, BadState::Slow), 3);
    let v = j.verdicts(&criteria(), 1120.0, 60.0);
    let slow = v.iter().find(|v| v.state == BadState::Slow).unwrap();
    assert_eq!(slow.figure, Some(0.6));
    // At the threshold is not slow; a failure ends the streak.
    assert_eq!(
        in_a_row(&judged(&[paced(0.5), paced(0.7)]), BadState::Slow),
        0
    );
    assert_eq!(in_a_row(&judged(&[paced(0.5), FAILED]), BadState::Slow), 0);
    assert_eq!(
        in_a_row(&judged(&[paced(0.5), FAILED]), BadState::Failed),
        1
    );
}

#[test]
fn the_newest_good_result_is_a_success_at_or_above_the_degraded_ratio() {
    let j = judged(&[paced(1.0), paced(0.5), FAILED]);
    assert_eq!(j.last_good(), Some(1000.0));
    assert_eq!(j.last_success(), Some(1060.0));
    assert_eq!(j.last_attempt(), Some(1120.0));
    // Without any paced figures there is nothing to call good.
    assert_eq!(judged(&[CAPACITY]).last_good(), None);
    assert_eq!(judged(&[paced(1.0), CAPACITY]).last_good(), Some(1060.0));
}

#[test]
fn a_burst_that_stops_moving_within_itself_is_stalled() {
    let stalled = Probe::Success {
        paced: Some(PacedFigures {
            ratio: 1.0,
            min_window_ratio: Some(0.1),
            gap_seconds: 0.002,
        }),
    };
    assert_eq!(in_a_row(&judged(&[stalled, stalled]), BadState::Stalled), 2);
    assert_eq!(
        in_a_row(&judged(&[stalled, paced(1.0)]), BadState::Stalled),
        0
    );
}

#[test]
fn a_gap_far_above_the_paths_own_median_and_above_the_floor_is_gapped() {
    let gap = |gap_seconds| Probe::Success {
        paced: Some(PacedFigures {
            ratio: 1.0,
            min_window_ratio: Some(0.9),
            gap_seconds,
        }),
    };
    let mut probes = vec![gap(0.002); 20];
    probes.push(gap(0.05));
    assert_eq!(in_a_row(&judged(&probes), BadState::Gapped), 1);
    // Ten times the median but under the 10 ms floor: not gapped.
    let mut probes = vec![gap(0.0002); 20];
    probes.push(gap(0.005));
    assert_eq!(in_a_row(&judged(&probes), BadState::Gapped), 0);
    // A path whose gaps are all long has a long median: not gapped.
    assert_eq!(in_a_row(&judged(&[gap(0.05); 5]), BadState::Gapped), 0);
}

#[test]
fn below_baseline_needs_both_the_paths_own_median_and_its_nodes() {
    let c = criteria();
    let mut j = PathJudge::new(&c);
    for i in 0..10 {
        j.on_probe(&c, 1000.0 + 60.0 * f64::from(i), paced(1.0), Some(1.0));
    }
    j.on_probe(&c, 1600.0, paced(0.8), Some(1.0));
    let v = j.verdicts(&c, 1600.0, 60.0);
    assert!(
        v.iter().any(|v| v.state == BadState::BelowBaseline),
        "{v:?}"
    );
    // The node as a whole runs at 0.9: 0.8 is not below 85% of it.
    j.on_probe(&c, 1660.0, paced(0.8), Some(0.9));
    let v = j.verdicts(&c, 1660.0, 60.0);
    assert!(
        !v.iter().any(|v| v.state == BadState::BelowBaseline),
        "{v:?}"
    );
    // Slow is not also below its baseline.
    j.on_probe(&c, 1720.0, paced(0.5), Some(1.0));
    let v = j.verdicts(&c, 1720.0, 60.0);
    assert!(
        !v.iter().any(|v| v.state == BadState::BelowBaseline),
        "{v:?}"
    );
}

#[test]
fn a_path_not_probed_for_three_planned_intervals_is_stale() {
    let c = criteria();
    let j = judged(&[paced(1.0)]);
    let stale = |now: f64, planned: f64| {
        j.verdicts(&c, now, planned)
            .into_iter()
            .find(|v| v.state == BadState::Stale)
    };
    assert_eq!(stale(1000.0 + 180.0, 60.0), None);
    assert_eq!(
        stale(1000.0 + 181.0, 60.0).and_then(|v| v.figure),
        Some(181.0)
    );
    // Its own interval, not the default one.
    assert_eq!(stale(1000.0 + 181.0, 600.0), None);
    // A path never probed is not stale.
    assert!(PathJudge::new(&c).verdicts(&c, 1e9, 60.0).is_empty());
}

#[test]
fn data_that_arrived_wrong_keeps_the_path_corrupt_for_the_validation_window() {
    let c = criteria();
    let j = judged(&[Probe::Failure { validation: true }, paced(1.0)]);
    let corrupt = |now: f64| {
        j.verdicts(&c, now, 60.0)
            .iter()
            .any(|v| v.state == BadState::Corrupt)
    };
    assert!(corrupt(1060.0));
    assert!(corrupt(1000.0 + 599.0));
    assert!(!corrupt(1000.0 + 600.0));
}

fn sample(at: f64, sent: u64, lost: u64, lost_in_a_row: u32, p50_ms: f64) -> PingSample {
    PingSample {
        at,
        sent,
        lost,
        lost_in_a_row,
        p50_seconds: Some(p50_ms / 1e3),
    }
}

fn ping_states(j: &PingJudge) -> Vec<BadState> {
    j.verdicts(&criteria()).iter().map(|v| v.state).collect()
}

#[test]
fn pings_lost_within_the_band_over_the_window_make_the_path_lossy() {
    let c = criteria();
    // A report every 5 s, one ping each; the window is 60 pings (300 s).
    let run = |lost_every: u64| {
        let mut j = PingJudge::new(&c);
        let mut lost = 0;
        for i in 1..=120u64 {
            if lost_every > 0 && i % lost_every == 0 {
                lost += 1;
            }
            j.on_report(&c, sample(5.0 * i as f64, i, lost, 0, 1.0));
        }
        j
    };
    assert_eq!(ping_states(&run(0)), vec![]);
    // One in ten lost: 6 of 60.
    assert_eq!(ping_states(&run(10)), vec![BadState::Lossy]);
    // Every other one lost: a total fault's share, not lossy.
    assert_eq!(ping_states(&run(2)), vec![]);
    // One in 40: 1.5 of 60, under both the 2% and the 3 pings.
    assert_eq!(ping_states(&run(40)), vec![]);
}

#[test]
fn the_loss_window_starts_over_when_the_counts_go_back() {
    let c = criteria();
    let mut j = PingJudge::new(&c);
    for i in 1..=60u64 {
        j.on_report(&c, sample(5.0 * i as f64, i, i / 10, 0, 1.0));
    }
    assert_eq!(ping_states(&j), vec![BadState::Lossy]);
    // The engine started over: counts from zero, nothing lost since.
    for i in 1..=5u64 {
        j.on_report(&c, sample(300.0 + 5.0 * i as f64, i, 0, 0, 1.0));
    }
    assert_eq!(ping_states(&j), vec![]);
}

#[test]
fn pings_unanswered_in_a_row_and_an_rtt_far_above_the_paths_own_are_judged() {
    let c = criteria();
    let mut j = PingJudge::new(&c);
    for i in 1..=100u64 {
        j.on_report(&c, sample(5.0 * i as f64, i, 0, 0, 1.0));
    }
    assert_eq!(ping_states(&j), vec![]);
    j.on_report(&c, sample(505.0, 101, 0, 0, 4.0));
    assert_eq!(ping_states(&j), vec![BadState::RttHigh]);
    j.on_report(&c, sample(510.0, 104, 3, 3, 1.0));
    assert!(
        ping_states(&j).contains(&BadState::Unanswered),
        "{:?}",
        ping_states(&j)
    );
    // Under the floor (100 us), four times the median is not judged.
    let mut j = PingJudge::new(&c);
    for i in 1..=100u64 {
        j.on_report(&c, sample(5.0 * i as f64, i, 0, 0, 0.01));
    }
    j.on_report(&c, sample(505.0, 101, 0, 0, 0.04));
    assert_eq!(ping_states(&j), vec![]);
}

fn any_probe() -> impl Strategy<Value = Probe> {
    prop_oneof![
        (
            any::<f64>(),
            proptest::option::of(any::<f64>()),
            any::<f64>()
        )
            .prop_map(|(ratio, min_window_ratio, gap_seconds)| Probe::Success {
                paced: Some(PacedFigures {
                    ratio,
                    min_window_ratio,
                    gap_seconds,
                }),
            }),
        Just(CAPACITY),
        any::<bool>().prop_map(|validation| Probe::Failure { validation }),
    ]
}

proptest! {
    /// Whatever the figures (NaN, infinities, negative), the judge neither panics nor counts
    /// a streak longer than the probes, and the failed streak is exactly the trailing failures.
    #[test]
    fn streaks_are_bounded_by_the_probes_and_failures_are_counted_exactly(
        probes in proptest::collection::vec(any_probe(), 0..60),
        now in any::<f64>(),
        planned in any::<f64>(),
    ) {
        let j = judged(&probes);
        let trailing = probes
            .iter()
            .rev()
            .take_while(|p| matches!(p, Probe::Failure { .. }))
            .count() as u32;
        let c = criteria();
        for v in j.verdicts(&c, now, planned) {
            prop_assert!(v.in_a_row as usize <= probes.len());
            if trailing > 0 {
                prop_assert!(
                    matches!(v.state, BadState::Failed | BadState::Stale | BadState::Corrupt),
                    "{v:?} after a failure"
                );
            }
        }
        prop_assert_eq!(in_a_row(&j, BadState::Failed), trailing);
    }

    /// Arbitrary reports (counts going back, times out of order) never panic and keep the
    /// window bounded.
    #[test]
    fn ping_reports_in_any_order_never_panic(
        reports in proptest::collection::vec(
            (any::<f64>(), any::<u64>(), any::<u64>(), any::<u32>(), proptest::option::of(any::<f64>())),
            0..300,
        ),
    ) {
        let c = criteria();
        let mut j = PingJudge::new(&c);
        for (at, sent, lost, lost_in_a_row, p50_seconds) in reports {
            j.on_report(&c, PingSample { at, sent, lost, lost_in_a_row, p50_seconds });
            let _ = j.verdicts(&c);
        }
    }
}

#[test]
fn paced_figures_need_a_target_and_numbers() {
    assert_eq!(PacedFigures::of_burst(1.0, None, 1.0, 0.0), None);
    assert_eq!(PacedFigures::of_burst(1.0, Some(0.0), 1.0, 0.0), None);
    assert_eq!(PacedFigures::of_burst(f64::NAN, Some(1.0), 1.0, 0.0), None);
    let f = PacedFigures::of_burst(50.0, Some(100.0), 10.0, 0.003).unwrap();
    assert_eq!(f.ratio, 0.5);
    assert_eq!(f.min_window_ratio, Some(0.2));
    assert_eq!(
        PacedFigures::of_burst(0.0, Some(100.0), 0.0, 0.0)
            .unwrap()
            .min_window_ratio,
        None
    );
}

#[test]
fn every_state_has_its_own_label_value() {
    let names: std::collections::BTreeSet<&str> =
        BadState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names.len(), BadState::ALL.len());
}
