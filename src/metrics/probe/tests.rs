use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::burst::BurstReport;
use crate::metrics::{Format, Metrics};
use crate::port::OtherTraffic;
use crate::prober::{BurstKind, ProbeOutcome};
use crate::reason::ErrorReason;

fn path(peer: &str) -> PathLabels {
    PathLabels {
        device: "mlx5_0".into(),
        peer: peer.into(),
        peer_device: "mlx5_0".into(),
    }
}

fn figures(bandwidth: f64) -> BurstFigures {
    BurstFigures {
        bytes: 65536 * 100,
        messages: 100,
        elapsed_seconds: 0.5,
        bandwidth_bytes_per_second: bandwidth,
        min_window_bandwidth_bytes_per_second: bandwidth * 0.9,
        completion_gap_max_seconds: 0.001,
        message_rate_per_second: 200.0,
        qp_bandwidth_min_bytes_per_second: None,
        qp_bandwidth_max_bytes_per_second: None,
    }
}

fn success(bandwidth: f64) -> ProbeRecord {
    ProbeRecord {
        result: ProbeResult::Success {
            figures: figures(bandwidth),
        },
        kind: BurstKind::Paced,
        target_bytes_per_second: Some(1.25e9),
        setup_seconds: Some(0.02),
        at_unix_seconds: 1_700_000_000.0,
        counters: Vec::new(),
        other_traffic: Vec::new(),
    }
}

fn failure(reason: ErrorReason) -> ProbeRecord {
    ProbeRecord {
        result: ProbeResult::Failure {
            reason,
            message: "peer gone".into(),
            figures: None,
        },
        kind: BurstKind::Paced,
        target_bytes_per_second: None,
        setup_seconds: None,
        at_unix_seconds: 1_700_000_060.0,
        counters: Vec::new(),
        other_traffic: Vec::new(),
    }
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

const B: &str = r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0"}"#;
/// The per-burst gauges of a path's paced bursts.
const PACED: &str = r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0",kind="paced"}"#;

#[test]
fn success_gauge_exists_from_the_first_attempt_and_stays_when_the_peer_is_down() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    recorder.apply(ProbeEvent::Attempt(path("node-b")));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
    assert!(
        !text.contains("rdma_probe_bandwidth_bytes_per_second{"),
        "{text}"
    );

    recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Connect),
    ));
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Connect),
    ));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
    let errors = r#"rdma_probe_errors_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",reason="connect"}"#;
    assert_eq!(sample(&text, errors), Some(2.0));
    let runs = r#"rdma_probe_runs_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",result="failure"}"#;
    assert_eq!(sample(&text, runs), Some(2.0));
    // The last burst that moved data still describes the link.
    assert_eq!(
        sample(
            &text,
            &format!("rdma_probe_bandwidth_bytes_per_second{PACED}")
        ),
        Some(1e9)
    );
    assert_eq!(
        sample(
            &text,
            &format!("rdma_probe_last_success_timestamp_seconds{B}")
        ),
        Some(1_700_000_000.0)
    );
    assert!(
        !text.contains("rdma_probe_burst_duration_seconds"),
        "the histogram that measured only the config is gone: {text}"
    );
    let state = recorder.snapshot().read().unwrap()[&path("node-b")].clone();
    assert_eq!(state.runs, 3);
    assert_eq!(state.failures, 2);
    assert_eq!(
        state.last_error.as_ref().map(|e| e.0),
        Some(ErrorReason::Connect)
    );
}

/// A burst whose data did not verify stamps the path's last validation failure, which the
/// alerts read (a counter's increase would fire again after a scrape gap); other failures and
/// later successes leave it; it goes with the path.
#[test]
fn a_validation_failure_stamps_the_path_until_the_path_goes() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
    let stamp = format!("rdma_probe_last_validation_failure_timestamp_seconds{B}");
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Timeout),
    ));
    assert_eq!(
        sample(&text(&metrics), &stamp),
        None,
        "not for other reasons"
    );
    let mut bad = failure(ErrorReason::Validation);
    bad.at_unix_seconds += 30.0;
    let at = bad.at_unix_seconds;
    recorder.apply(ProbeEvent::completed(path("node-b"), bad));
    let mut ok = success(1e9);
    ok.at_unix_seconds += 60.0;
    recorder.apply(ProbeEvent::completed(path("node-b"), ok));
    let t = text(&metrics);
    assert_eq!(sample(&t, &stamp), Some(at), "{t}");
    recorder.apply(ProbeEvent::ForgetPath(path("node-b")));
    assert_eq!(
        sample(&text(&metrics), &stamp),
        None,
        "it goes with the path"
    );
}

#[test]
fn each_path_shows_its_planned_interval_last_attempt_and_failures_since_its_last_success() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
    let key = |peer: &str| ("mlx5_0".to_owned(), peer.to_owned());
    recorder.apply(ProbeEvent::Selection(
        [(key("node-b"), true), (key("node-c"), false)].into(),
    ));
    recorder.apply(ProbeEvent::Intervals(vec![
        (key("node-b"), Duration::from_secs_f64(423.5)),
        (key("node-c"), Duration::from_secs(600)),
    ]));
    let interval = format!("rdma_probe_path_interval_seconds{B}");
    let last_attempt = format!("rdma_probe_last_attempt_timestamp_seconds{B}");
    let failures = format!("rdma_probe_consecutive_failures{B}");
    assert_eq!(sample(&text(&metrics), &interval), None, "no path yet");

    // From the first attempt: the interval, and no failure; no attempt has ended yet.
    recorder.apply(ProbeEvent::Attempt(path("node-b")));
    let t = text(&metrics);
    assert_eq!(sample(&t, &interval), Some(423.5), "{t}");
    assert_eq!(sample(&t, &failures), Some(0.0));
    assert_eq!(sample(&t, &last_attempt), None);

    // Failures count up and stamp the attempt; deferrals are not attempts.
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Timeout),
    ));
    let mut second = failure(ErrorReason::Connect);
    second.at_unix_seconds += 60.0;
    recorder.apply(ProbeEvent::completed(path("node-b"), second));
    let mut busy = failure(ErrorReason::Connect);
    busy.result = ProbeResult::Deferred {
        reason: DeferReason::Busy,
    };
    busy.at_unix_seconds += 90.0;
    recorder.apply(ProbeEvent::completed(path("node-b"), busy));
    recorder.apply(ProbeEvent::Deferred(path("node-b"), DeferReason::Budget));
    let t = text(&metrics);
    assert_eq!(sample(&t, &failures), Some(2.0), "{t}");
    assert_eq!(sample(&t, &last_attempt), Some(1_700_000_120.0));
    // A success: back to 0, stamped.
    let mut ok = success(1e9);
    ok.at_unix_seconds = 1_700_000_200.0;
    recorder.apply(ProbeEvent::completed(path("node-b"), ok));
    let t = text(&metrics);
    assert_eq!(sample(&t, &failures), Some(0.0));
    assert_eq!(sample(&t, &last_attempt), Some(1_700_000_200.0));
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Timeout),
    ));
    assert_eq!(sample(&text(&metrics), &failures), Some(1.0));

    // The stretch moved: the new plan shows at once.
    recorder.apply(ProbeEvent::Intervals(vec![(
        key("node-b"),
        Duration::from_secs(500),
    )]));
    assert_eq!(sample(&text(&metrics), &interval), Some(500.0));

    // A path whose labels move (the peer answered with its device) has its interval under
    // the new labels from their first result.
    let unknown = PathLabels {
        peer_device: "unknown".into(),
        ..path("node-c")
    };
    recorder.apply(ProbeEvent::Attempt(unknown.clone()));
    recorder.apply(ProbeEvent::ForgetPath(unknown));
    recorder.apply(ProbeEvent::completed(path("node-c"), success(1e9)));
    let c = r#"{device="mlx5_0",peer="node-c",peer_device="mlx5_0"}"#;
    let t = text(&metrics);
    assert_eq!(
        sample(&t, &format!("rdma_probe_path_interval_seconds{c}")),
        Some(600.0),
        "{t}"
    );
    assert!(!t.contains(r#"peer_device="unknown""#), "{t}");

    // Rotated out of the selection but still on /metrics: node-c keeps what it was last
    // planned at, whatever the others are told.
    recorder.apply(ProbeEvent::Selection([(key("node-b"), true)].into()));
    recorder.apply(ProbeEvent::Intervals(vec![(
        key("node-b"),
        Duration::from_secs(450),
    )]));
    let t = text(&metrics);
    assert_eq!(
        sample(&t, &format!("rdma_probe_path_interval_seconds{c}")),
        Some(600.0),
        "{t}"
    );
    assert_eq!(sample(&t, &interval), Some(450.0));

    // All three go with the path.
    recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
    let t = text(&metrics);
    for family in [
        "rdma_probe_path_interval_seconds{",
        "rdma_probe_last_attempt_timestamp_seconds{",
        "rdma_probe_consecutive_failures{",
    ] {
        assert!(!t.contains(family), "{t}");
    }
}

#[test]
fn prober_outcomes_map_to_records() {
    let report = BurstReport {
        bytes: 1000,
        messages: 10,
        completions: 10,
        elapsed: std::time::Duration::from_millis(500),
        bandwidth_bytes_per_second: 2000.0,
        message_rate_per_second: 20.0,
        min_window_bandwidth_bytes_per_second: 1500.0,
        window: std::time::Duration::from_millis(10),
        completion_gap_max: std::time::Duration::from_millis(30),
        cpu_seconds: None,
        per_qp_bandwidth_min_bytes_per_second: None,
        per_qp_bandwidth_max_bytes_per_second: None,
        per_qp_bandwidth_bytes_per_second: Vec::new(),
    };
    let ok = ProbeOutcome {
        report: Some(report.clone()),
        setup_seconds: Some(0.3),
        new_session: false,
        target_bandwidth_bytes_per_second: Some(4000.0),
        ..ProbeOutcome::default()
    };
    let record = ProbeRecord::from_outcome(&ok, 1.0);
    assert!(
        matches!(record.result, ProbeResult::Success { figures } if figures.bandwidth_bytes_per_second == 2000.0 && figures.completion_gap_max_seconds == 0.03)
    );
    assert_eq!(record.setup_seconds, None, "a warm burst paid no setup");
    let slow = ProbeOutcome {
        report: Some(report),
        error: Some(ErrorReason::Timeout),
        message: Some("deadline".into()),
        new_session: true,
        setup_seconds: Some(0.3),
        ..ProbeOutcome::default()
    };
    let record = ProbeRecord::from_outcome(&slow, 2.0);
    assert!(matches!(
        record.result,
        ProbeResult::Failure {
            reason: ErrorReason::Timeout,
            figures: Some(_),
            ..
        }
    ));
    assert_eq!(record.setup_seconds, Some(0.3));
    let busy = ProbeOutcome {
        deferred: Some("busy".into()),
        ..ProbeOutcome::default()
    };
    assert!(matches!(
        ProbeRecord::from_outcome(&busy, 3.0).result,
        ProbeResult::Deferred {
            reason: DeferReason::Busy
        }
    ));
}

#[test]
fn a_responder_only_process_has_no_probe_families() {
    let text = Metrics::new().encode(Format::PrometheusText).unwrap();
    assert!(!text.contains("rdma_probe_config_reload_success"), "{text}");
    assert!(!text.contains("rdma_probe_consecutive_failures"), "{text}");
}

#[test]
fn deferrals_are_counted_apart_from_failures() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let busy = ProbeRecord {
        result: ProbeResult::Deferred {
            reason: DeferReason::Busy,
        },
        kind: BurstKind::Paced,
        target_bytes_per_second: None,
        setup_seconds: None,
        at_unix_seconds: 1.0,
        counters: Vec::new(),
        other_traffic: Vec::new(),
    };
    recorder.apply(ProbeEvent::completed(path("node-b"), busy));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    let deferred = r#"rdma_probe_deferred_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",reason="busy"}"#;
    assert_eq!(sample(&text, deferred), Some(1.0));
    assert!(!text.contains("rdma_probe_runs_total{"), "{text}");
    assert!(!text.contains("rdma_probe_errors_total{"), "{text}");
}

#[test]
fn a_failed_burst_with_figures_reports_what_completed() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let slow = ProbeRecord {
        result: ProbeResult::Failure {
            reason: ErrorReason::Timeout,
            message: "deadline".into(),
            figures: Some(figures(2.5e5)),
        },
        kind: BurstKind::Paced,
        target_bytes_per_second: Some(7.5e5),
        setup_seconds: None,
        at_unix_seconds: 5.0,
        counters: Vec::new(),
        other_traffic: Vec::new(),
    };
    recorder.apply(ProbeEvent::completed(path("node-b"), slow));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert_eq!(
        sample(
            &text,
            &format!("rdma_probe_bandwidth_bytes_per_second{PACED}")
        ),
        Some(2.5e5)
    );
    assert_eq!(
        sample(
            &text,
            &format!("rdma_probe_target_bandwidth_bytes_per_second{PACED}")
        ),
        Some(7.5e5)
    );
    assert_eq!(sample(&text, &format!("rdma_probe_success{B}")), Some(0.0));
}

#[test]
fn the_series_budget_sheds_traffic_then_derived_series_then_evicts_the_oldest_sampled_path() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let at = |s: u64| Duration::from_secs(1_700_000_000 + s);
    recorder.apply_at(
        ProbeEvent::SeriesBudget {
            limit: 48,
            ttl: Duration::from_secs(600),
        },
        at(0),
    );
    let selected = |peers: &[(&str, bool)]| {
        ProbeEvent::Selection(
            peers
                .iter()
                .map(|(p, preferred)| (("mlx5_0".to_owned(), (*p).to_owned()), *preferred))
                .collect(),
        )
    };
    recorder.apply_at(
        selected(&[
            ("a", true),
            ("b", true),
            ("c", false),
            ("d", false),
            ("e", false),
        ]),
        at(0),
    );
    let peer = |name: &str| vec![("peer".to_owned(), name.to_owned())];
    recorder.apply_at(
        ProbeEvent::Info(InfoLabels {
            node: vec![("node".into(), "n".into())],
            peers: ["a", "b", "c", "d", "e", "f"]
                .iter()
                .map(|p| peer(p))
                .collect(),
        }),
        at(0),
    );
    recorder.apply_at(
        ProbeEvent::Intervals(
            ["a", "b", "c", "d", "e", "f"]
                .iter()
                .map(|p| {
                    (
                        ("mlx5_0".to_owned(), (*p).to_owned()),
                        Duration::from_secs(60),
                    )
                })
                .collect(),
        ),
        at(0),
    );
    // The device's judged paths take 3 of the 48 (paths, newest success, newest good: one
    // crossing), which rdma_probe_path_series counts; the paths get 45.
    // A healthy path: 10 series of its own (success, 4 paced gauges, runs, last success,
    // interval, last attempt, consecutive failures), 4 derived (message rate, setup, bytes,
    // messages) and 2 of port traffic.
    let healthy = || {
        let mut r = success(1e9);
        r.counters = vec![
            CounterRecord::new(Side::Local, "port_xmit_data", 100).unwrap(),
            CounterRecord::new(Side::Remote, "port_rcv_data", 100).unwrap(),
        ];
        r
    };
    let text = |m: &Metrics| m.encode(Format::PrometheusText).unwrap();
    for (i, p) in ["a", "b"].iter().enumerate() {
        recorder.apply_at(ProbeEvent::completed(path(p), healthy()), at(1 + i as u64));
    }
    let t = text(&metrics);
    assert_eq!(sample(&t, "rdma_probe_path_series"), Some(35.0));
    assert_eq!(sample(&t, "rdma_probe_path_series_budget"), Some(48.0));
    assert!(
        !t.contains(r#"peer_info{peer="f"}"#),
        "only selected peers: {t}"
    );
    assert!(t.contains(r#"peer_info{peer="d"}"#), "{t}");

    // c does not fit (48): the port traffic goes (28 + 14 = 42).
    recorder.apply_at(ProbeEvent::completed(path("c"), healthy()), at(3));
    let t = text(&metrics);
    assert!(!t.contains("rdma_probe_port_increase_total{"), "{t}");
    assert!(t.contains("rdma_probe_message_rate_per_second{"), "{t}");
    assert_eq!(sample(&t, "rdma_probe_path_series"), Some(45.0));
    assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(1.0));
    // d does not fit (56): the derived series go (4 × 10 = 40).
    recorder.apply_at(ProbeEvent::completed(path("d"), healthy()), at(4));
    let t = text(&metrics);
    assert!(!t.contains("rdma_probe_message_rate_per_second{"), "{t}");
    assert!(!t.contains("rdma_probe_bytes_total{"), "{t}");
    assert!(!t.contains("rdma_probe_setup_seconds{"), "{t}");
    assert_eq!(sample(&t, "rdma_probe_path_series"), Some(43.0));
    assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(2.0));
    assert_eq!(
        sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
        Some(0.0)
    );
    // e does not fit (50): the oldest sampled path, c, goes; not a or b.
    recorder.apply_at(ProbeEvent::completed(path("e"), healthy()), at(10));
    let t = text(&metrics);
    assert!(
        !t.contains(r#"rdma_probe_success{device="mlx5_0",peer="c""#),
        "c evicted: {t}"
    );
    assert!(t.contains(r#"peer_info{peer="c"}"#), "c is still selected");
    assert!(t.contains(r#"rdma_probe_success{device="mlx5_0",peer="a""#));
    assert!(t.contains(r#"rdma_probe_success{device="mlx5_0",peer="e""#));
    assert_eq!(sample(&t, "rdma_probe_path_series"), Some(43.0));
    assert_eq!(
        sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
        Some(1.0)
    );
    // Shed until a reload: a new result brings nothing shed back.
    recorder.apply_at(ProbeEvent::completed(path("a"), healthy()), at(20));
    let t = text(&metrics);
    assert!(!t.contains("rdma_probe_port_increase_total{"), "{t}");
    assert!(!t.contains("rdma_probe_message_rate_per_second{"), "{t}");

    // The next round selects a, b and f: d and e stay until the TTL after their last probe.
    recorder.apply_at(selected(&[("a", true), ("b", true), ("f", false)]), at(600));
    recorder.expire(at(600));
    let t = text(&metrics);
    assert!(t.contains(r#"peer="d""#), "{t}");
    assert_eq!(
        sample(&t, "rdma_probe_series_budget_expired_early_paths_total"),
        Some(0.0)
    );
    // f's result needs room: d, out of the selection and probed longest ago, leaves before its
    // TTL: an early expiry, not a drop.
    recorder.apply_at(ProbeEvent::completed(path("f"), healthy()), at(605));
    let t = text(&metrics);
    assert!(!t.contains(r#"peer="d""#), "made room, peer_info too: {t}");
    assert!(t.contains(r#"rdma_probe_success{device="mlx5_0",peer="f""#));
    assert_eq!(
        sample(&t, "rdma_probe_series_budget_expired_early_paths_total"),
        Some(1.0)
    );
    recorder.expire(at(611));
    let t = text(&metrics);
    assert!(!t.contains(r#"peer="e""#), "expired, peer_info too: {t}");
    assert!(
        t.contains(r#"rdma_probe_success{device="mlx5_0",peer="b""#),
        "{t}"
    );
    // 30 of a, b and f, 3 judged, and four more: every record here says it ended at 0 s, so
    // at 611 s the three paths, planned every 60 s, are stale
    // (rdma_probe_judged_bad_paths{state="stale"}, and a rdma_probe_bad_path_in_a_row row each).
    assert_eq!(sample(&t, "rdma_probe_path_series"), Some(37.0));
    assert!(
        t.contains(
            r#"rdma_probe_judged_bad_paths{device="mlx5_0",crossing="local",state="stale"} 3"#
        ),
        "{t}"
    );
    assert_eq!(
        sample(&t, "rdma_probe_series_budget_dropped_paths_total"),
        Some(1.0),
        "neither expiry is a drop"
    );
    // A reload resets what was shed.
    recorder.apply_at(
        ProbeEvent::SeriesBudget {
            limit: 4500,
            ttl: Duration::from_secs(600),
        },
        at(700),
    );
    recorder.apply_at(ProbeEvent::completed(path("a"), healthy()), at(701));
    let t = text(&metrics);
    assert!(t.contains("rdma_probe_port_increase_total{"), "{t}");
    assert!(t.contains("rdma_probe_message_rate_per_second{"), "{t}");
    assert_eq!(sample(&t, "rdma_probe_series_budget_shed_level"), Some(0.0));
}

#[test]
fn capacity_bursts_keep_their_own_gauges_beside_the_paced_ones() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    recorder.apply(ProbeEvent::completed(path("node-b"), success(2.5e6)));
    let mut capacity = success(9e8);
    capacity.kind = BurstKind::Capacity;
    capacity.target_bytes_per_second = Some(1.25e9);
    recorder.apply(ProbeEvent::completed(path("node-b"), capacity));
    // A paced burst after the capacity burst changes only the paced gauges.
    let mut paced = success(2.4e6);
    paced.target_bytes_per_second = Some(2.5e6);
    recorder.apply(ProbeEvent::completed(path("node-b"), paced));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    const CAPACITY: &str =
        r#"{device="mlx5_0",peer="node-b",peer_device="mlx5_0",kind="capacity"}"#;
    let value = |family: &str, labels: &str| sample(&text, &format!("{family}{labels}"));
    let bandwidth = "rdma_probe_bandwidth_bytes_per_second";
    let target = "rdma_probe_target_bandwidth_bytes_per_second";
    assert_eq!(value(bandwidth, PACED), Some(2.4e6), "{text}");
    assert_eq!(value(target, PACED), Some(2.5e6), "{text}");
    assert_eq!(value(bandwidth, CAPACITY), Some(9e8), "{text}");
    assert_eq!(value(target, CAPACITY), Some(1.25e9), "{text}");
    assert_eq!(
        value("rdma_probe_bandwidth_min_window_bytes_per_second", CAPACITY),
        Some(9e8 * 0.9)
    );
    // Counters add up both kinds; the path's success and run counts too.
    let runs = r#"rdma_probe_runs_total{device="mlx5_0",peer="node-b",peer_device="mlx5_0",result="success"}"#;
    assert_eq!(sample(&text, runs), Some(3.0));
    assert_eq!(
        sample(&text, &format!("rdma_probe_bytes_total{B}")),
        Some(3.0 * 65536.0 * 100.0)
    );
    // A removed path loses the series of both kinds.
    recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(!text.contains("peer=\"node-b\""), "{text}");
}

#[test]
fn bursts_over_several_qps_report_their_slowest_and_fastest_qp() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let mut four_qps = success(4e6);
    if let ProbeResult::Success { figures } = &mut four_qps.result {
        figures.qp_bandwidth_min_bytes_per_second = Some(1e5);
        figures.qp_bandwidth_max_bytes_per_second = Some(1.3e6);
    }
    recorder.apply(ProbeEvent::completed(path("node-b"), four_qps));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    let min = format!("rdma_probe_qp_bandwidth_min_bytes_per_second{PACED}");
    let max = format!("rdma_probe_qp_bandwidth_max_bytes_per_second{PACED}");
    assert_eq!(sample(&text, &min), Some(1e5), "{text}");
    assert_eq!(sample(&text, &max), Some(1.3e6), "{text}");
    // A reload down to one QP: its bursts have no per-QP figures, and the old ones go.
    recorder.apply(ProbeEvent::completed(path("node-b"), success(4e6)));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert_eq!(sample(&text, &min), None, "{text}");
    assert_eq!(sample(&text, &max), None, "{text}");
}

#[test]
fn paths_removed_by_a_reload_lose_every_series() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
    recorder.apply(ProbeEvent::completed(
        path("node-b"),
        failure(ErrorReason::Timeout),
    ));
    recorder.apply(ProbeEvent::completed(path("node-c"), success(2e9)));
    recorder.apply(ProbeEvent::RetainPeers(["node-c".to_owned()].into()));
    recorder.apply(ProbeEvent::ConfigLoaded {
        ok: true,
        at_unix_seconds: 9.0,
    });
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(!text.contains(r#"peer="node-b""#), "{text}");
    assert!(text.contains(r#"peer="node-c""#), "{text}");
    assert_eq!(sample(&text, "rdma_probe_config_reload_success"), Some(1.0));
    assert!(!recorder
        .snapshot()
        .read()
        .unwrap()
        .contains_key(&path("node-b")));
}

#[test]
fn port_counter_increases_add_up_per_side_and_go_with_the_path() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let outcome = ProbeOutcome {
        report: None,
        error: Some(ErrorReason::WcRetryExceeded),
        local_counters: vec![
            ("completer_retry_err".into(), 3),
            ("retry_exceeded_err".into(), 1),
        ],
        remote_counters: vec![
            ("duplicate_request".into(), 2),
            ("not_on_the_allowlist".into(), 7),
            ("out_of_seq_request".into(), 0),
        ],
        ..ProbeOutcome::default()
    };
    let record = ProbeRecord::from_outcome(&outcome, 1.0);
    assert_eq!(record.counters.len(), 3, "{:?}", record.counters);
    recorder.apply(ProbeEvent::completed(path("node-b"), record.clone()));
    recorder.apply(ProbeEvent::completed(path("node-b"), record));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    // Each series names the allowlist's kind of its counter: one name whatever the driver.
    let series = |side: &str, counter: &str, kind: &str| {
        format!(
            r#"rdma_probe_port_increase_total{{device="mlx5_0",peer="node-b",peer_device="mlx5_0",side="{side}",counter="{counter}",counter_kind="{kind}"}}"#
        )
    };
    assert_eq!(
        sample(&text, &series("local", "completer_retry_err", "retransmit")),
        Some(6.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &series("local", "retry_exceeded_err", "retry_exceeded")
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, &series("remote", "duplicate_request", "duplicate")),
        Some(4.0)
    );
    assert!(!text.contains("not_on_the_allowlist"), "{text}");
    assert!(
        !text.contains("out_of_seq_request"),
        "a zero creates no series: {text}"
    );
    recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(!text.contains("rdma_probe_port_increase_total{"), "{text}");
}

#[test]
fn other_traffic_adds_up_per_side_and_direction_zero_included() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let outcome = ProbeOutcome {
        report: Some(crate::burst::BurstStats::new(1, Duration::from_millis(10)).finish()),
        local_other_traffic: Some(OtherTraffic {
            transmit_bytes: Some(0),
            receive_bytes: Some(1_500_000),
        }),
        // The responder's port told only what it received.
        remote_other_traffic: Some(OtherTraffic {
            transmit_bytes: None,
            receive_bytes: Some(0),
        }),
        ..ProbeOutcome::default()
    };
    let record = ProbeRecord::from_outcome(&outcome, 1.0);
    assert_eq!(record.other_traffic.len(), 3, "{:?}", record.other_traffic);
    recorder.apply(ProbeEvent::completed(path("node-b"), record.clone()));
    recorder.apply(ProbeEvent::completed(path("node-b"), record));
    // A burst whose ports gave no byte counters adds nothing.
    recorder.apply(ProbeEvent::completed(path("node-b"), success(1e9)));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    let series = |side: &str, direction: &str| {
        format!(
            r#"rdma_probe_port_other_traffic_bytes_total{{device="mlx5_0",peer="node-b",peer_device="mlx5_0",side="{side}",direction="{direction}"}}"#
        )
    };
    assert_eq!(
        sample(&text, &series("local", "receive")),
        Some(3e6),
        "{text}"
    );
    assert_eq!(
        sample(&text, &series("local", "transmit")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &series("remote", "receive")),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, &series("remote", "transmit")), None, "{text}");
    recorder.apply(ProbeEvent::RetainPeers(BTreeSet::new()));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(
        !text.contains("rdma_probe_port_other_traffic_bytes_total{"),
        "{text}"
    );
}

#[test]
fn peer_info_gains_what_the_peer_said_and_never_the_path_labels() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let peer = "10.0.0.5";
    recorder.apply(ProbeEvent::Info(InfoLabels {
        node: vec![("node".into(), "n".into())],
        peers: vec![vec![("peer".into(), peer.into())]],
    }));
    recorder.apply(ProbeEvent::Selection(
        [(("mlx5_0".to_owned(), peer.to_owned()), true)].into(),
    ));
    let path = PathLabels {
        device: "mlx5_0".into(),
        peer: peer.into(),
        peer_device: "mlx5_0".into(),
    };
    recorder.apply(ProbeEvent::completed(path.clone(), success(1e9)));
    let text = metrics.encode(Format::PrometheusText).unwrap();
    // Never reached (or before its first answer): the peer label alone.
    assert!(
        text.contains(r#"rdma_probe_peer_info{peer="10.0.0.5"} 1"#),
        "{text}"
    );
    let told = vec![
        ("peer".to_owned(), peer.to_owned()),
        ("peer_node".to_owned(), "node5".to_owned()),
        ("tor".to_owned(), "t2".to_owned()),
    ];
    recorder.apply(ProbeEvent::PeerLabels {
        peer: peer.into(),
        labels: told,
    });
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(
        text.contains(r#"rdma_probe_peer_info{peer="10.0.0.5",peer_node="node5",tor="t2"} 1"#),
        "{text}"
    );
    assert_eq!(
        text.matches("rdma_probe_peer_info{").count(),
        1,
        "the old series went: {text}"
    );
    // The path keeps its labels: the address, not the name.
    assert_eq!(
        sample(
            &text,
            r#"rdma_probe_success{device="mlx5_0",peer="10.0.0.5",peer_device="mlx5_0"}"#
        ),
        Some(1.0)
    );
    assert!(!text.contains(r#"peer="node5""#), "{text}");
    // A peer that is not a candidate (removed by a reload) gets no peer_info from a late word.
    recorder.apply(ProbeEvent::PeerLabels {
        peer: "gone".into(),
        labels: vec![("peer".into(), "gone".into())],
    });
    let text = metrics.encode(Format::PrometheusText).unwrap();
    assert!(!text.contains(r#"peer="gone""#), "{text}");
}

#[test]
fn skipped_paths_are_counted_per_device_and_reason_and_shown_per_path() {
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
    let skipped = |peer: &str| PathLabels {
        device: "mlx5_0".into(),
        peer: peer.into(),
        peer_device: "unknown".into(),
    };
    recorder.apply(ProbeEvent::SkippedPaths {
        per_device: vec![
            ("mlx5_0".into(), "no_rail", 3),
            ("mlx5_0".into(), "itself", 0),
        ],
        paths: vec![
            (skipped("node-b"), "no_rail"),
            (skipped("node-c"), "itself"),
        ],
    });
    let text = metrics.encode(Format::PrometheusText).unwrap();
    for (peer, reason) in [("node-b", "no_rail"), ("node-c", "itself")] {
        let series = format!(
            r#"rdma_probe_path_skipped{{device="mlx5_0",peer="{peer}",peer_device="unknown",reason="{reason}"}}"#
        );
        assert_eq!(sample(&text, &series), Some(1.0), "{text}");
    }
    // A path probed again leaves the list, and its skipped series goes.
    recorder.apply(ProbeEvent::SkippedPaths {
        per_device: vec![("mlx5_0".into(), "itself", 0)],
        paths: vec![(skipped("node-b"), "no_rail")],
    });
    let later = metrics.encode(Format::PrometheusText).unwrap();
    assert!(
        !later.contains(r#"peer="node-c",peer_device="unknown",reason="itself""#),
        "{later}"
    );
    assert_eq!(
        sample(
            &text,
            r#"rdma_probe_schedule_skipped_paths{device="mlx5_0",reason="no_rail"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"rdma_probe_schedule_skipped_paths{device="mlx5_0",reason="itself"}"#
        ),
        Some(0.0)
    );
}
