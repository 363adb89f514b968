//! The `/metrics` render benchmark (docs/performance.md, "Render"): 1,000 paths with every
//! per-path family filled (paced and capacity bursts, several QPs, a failure reason, a busy
//! deferral, port counters and other traffic on both sides), rendered in the classic text format
//! and in OpenMetrics, once with a series budget that holds them all and once at the default
//! budget. Next to it, the anchor measured in the same run: the same number of series in one
//! plain gauge family, encoded by the same library (what any exporter built on it pays).
//!
//! The plain tests are the short form CI runs: they check that the benchmark renders what it
//! says (every path in every family, the default budget's cut), never how fast.
//! `cargo test --release --test render -- --ignored --nocapture` prints the figures
//! (`scripts/bench` runs it and puts them in its table).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rdma_probe_exporter::metrics::budget::DEFAULT_SERIES_BUDGET;
use rdma_probe_exporter::metrics::probe::{
    BurstFigures, CounterRecord, DeferReason, Direction, OtherTrafficRecord, PathLabels,
    ProbeEvent, ProbeRecord, ProbeRecorder, ProbeResult, Side,
};
use rdma_probe_exporter::metrics::{Format, Metrics};
use rdma_probe_exporter::prober::BurstKind;
use rdma_probe_exporter::reason::ErrorReason;

const PATHS: usize = 1000;
/// A budget no full path set of this benchmark reaches.
const UNLIMITED: usize = 1_000_000;
/// The port counters a full path shows on each side (mlx5 RoCE: the data and packet counters
/// every burst moves), and one retransmission counter on the local side.
const TRAFFIC_COUNTERS: [&str; 4] = [
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
];
const ERROR_COUNTER: &str = "roce_adp_retrans";

fn path(i: usize) -> PathLabels {
    PathLabels {
        device: format!("mlx5_{}", i % 8),
        peer: format!("node-{:04}", i / 8),
        peer_device: format!("mlx5_{}", i % 8),
    }
}

fn figures(bandwidth: f64, qps: bool) -> BurstFigures {
    BurstFigures {
        bytes: 65536 * 2000,
        messages: 2000,
        elapsed_seconds: 0.5,
        bandwidth_bytes_per_second: bandwidth,
        min_window_bandwidth_bytes_per_second: bandwidth * 0.9,
        completion_gap_max_seconds: 0.000_3,
        message_rate_per_second: 4000.0,
        qp_bandwidth_min_bytes_per_second: qps.then_some(bandwidth / 4.2),
        qp_bandwidth_max_bytes_per_second: qps.then_some(bandwidth / 3.8),
    }
}

fn record(result: ProbeResult, kind: BurstKind, at: f64) -> ProbeRecord {
    let mut counters: Vec<CounterRecord> = [Side::Local, Side::Remote]
        .into_iter()
        .flat_map(|side| {
            TRAFFIC_COUNTERS
                .iter()
                .filter_map(move |label| CounterRecord::new(side, label, 1_000_000))
        })
        .collect();
    counters.extend(CounterRecord::new(Side::Local, ERROR_COUNTER, 3));
    let other_traffic = [Side::Local, Side::Remote]
        .into_iter()
        .flat_map(|side| {
            [Direction::Transmit, Direction::Receive]
                .into_iter()
                .map(move |direction| OtherTrafficRecord {
                    side,
                    direction,
                    bytes: 4096,
                })
        })
        .collect();
    ProbeRecord {
        result,
        kind,
        target_bytes_per_second: Some(12.5e9),
        setup_seconds: Some(0.02),
        at_unix_seconds: at,
        counters,
        other_traffic,
    }
}

/// An exporter's registry after `paths` full paths were probed, under `budget`.
fn full_paths(paths: usize, budget: usize) -> Metrics {
    let (metrics, mut recorder) = Metrics::with_recorder();
    recorder.apply(ProbeEvent::SeriesBudget {
        limit: budget,
        ttl: Duration::from_secs(600),
    });
    for i in 0..paths {
        probe_fully(&mut recorder, &path(i), i as f64);
    }
    metrics
}

/// Every kind of result a path can have, so that every per-path family has its series.
fn probe_fully(recorder: &mut ProbeRecorder, p: &PathLabels, i: f64) {
    let at = 1_700_000_000.0 + i;
    let bandwidth = 1.2e10 + i;
    recorder.apply(ProbeEvent::Attempt(p.clone()));
    recorder.apply(ProbeEvent::completed(
        p.clone(),
        record(
            ProbeResult::Failure {
                reason: ErrorReason::Timeout,
                message: "stalled".into(),
                figures: Some(figures(bandwidth / 2.0, true)),
            },
            BurstKind::Paced,
            at,
        ),
    ));
    recorder.apply(ProbeEvent::Deferred(p.clone(), DeferReason::Busy));
    for kind in [BurstKind::Capacity, BurstKind::Paced] {
        recorder.apply(ProbeEvent::completed(
            p.clone(),
            record(
                ProbeResult::Success {
                    figures: figures(bandwidth, true),
                },
                kind,
                at + 30.0,
            ),
        ));
    }
}

/// What one render gives: per-path families (name → paths in it), series, bytes.
#[derive(Debug)]
struct Rendered {
    families: BTreeMap<String, BTreeSet<String>>,
    series: usize,
    text_bytes: usize,
    openmetrics_bytes: usize,
}

/// `device|peer|peer_device` of a sample of a per-path family.
fn path_of(sample: &str) -> Option<String> {
    let rest = sample.split_once('{')?.1;
    let labels = rest.rsplit_once('}')?.0;
    let value = |key: &str| {
        labels
            .split(',')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    Some(format!(
        "{}|{}|{}",
        value("device")?,
        value("peer")?,
        value("peer_device")?
    ))
}

fn rendered(metrics: &Metrics) -> Rendered {
    let text = metrics.encode(Format::PrometheusText).unwrap();
    let openmetrics = metrics.encode(Format::OpenMetrics).unwrap();
    let mut families: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut series = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        series += 1;
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        if let Some(path) = path_of(line) {
            families.entry(name.to_owned()).or_default().insert(path);
        }
    }
    Rendered {
        families,
        series,
        text_bytes: text.len(),
        openmetrics_bytes: openmetrics.len(),
    }
}

/// How many samples start with `prefix`.
fn has_samples(metrics: &Metrics, prefix: &str) -> usize {
    let text = metrics.encode(Format::PrometheusText).unwrap();
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

/// The per-path families a full path must show (pings do not exist yet).
const EXPECTED: [&str; 12] = [
    "rdma_probe_success{",
    "rdma_probe_bandwidth_bytes_per_second{",
    "rdma_probe_qp_bandwidth_min_bytes_per_second{",
    "rdma_probe_qp_bandwidth_max_bytes_per_second{",
    "rdma_probe_runs_total{",
    "rdma_probe_errors_total{",
    "rdma_probe_deferred_total{",
    "rdma_probe_port_increase_total{",
    "rdma_probe_port_other_traffic_bytes_total{",
    "rdma_probe_setup_seconds{",
    "rdma_probe_last_success_timestamp_seconds{",
    "rdma_probe_bytes_total{",
];

/// Checks that the benchmark renders what it says: every per-path family with every one of the
/// paths, both kinds of burst, both sides of the port counters and other traffic.
fn assert_full(metrics: &Metrics, paths: usize) -> Rendered {
    let r = rendered(metrics);
    for family in EXPECTED {
        let name = family.trim_end_matches('{');
        let seen = r.families.get(name).map_or(0, BTreeSet::len);
        assert_eq!(seen, paths, "{name}: {seen} paths rendered, not {paths}");
    }
    for (name, seen) in &r.families {
        assert_eq!(
            seen.len(),
            paths,
            "{name}: {} paths, not {paths}",
            seen.len()
        );
    }
    for (prefix, per_path) in [
        (r#"rdma_probe_bandwidth_bytes_per_second{"#, 2),
        (r#"rdma_probe_port_increase_total{"#, 9),
        (r#"rdma_probe_port_other_traffic_bytes_total{"#, 4),
    ] {
        assert_eq!(has_samples(metrics, prefix), per_path * paths, "{prefix}");
    }
    for variant in [
        r#"kind="capacity""#,
        r#"kind="paced""#,
        r#"side="local""#,
        r#"side="remote""#,
    ] {
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(text.contains(variant), "no {variant}");
    }
    r
}

#[test]
fn renders_1000_full_paths_with_every_family() {
    let metrics = full_paths(PATHS, UNLIMITED);
    let r = assert_full(&metrics, PATHS);
    // The anchor has as many series as ours, so the ratio compares like with like.
    let anchor = plain_gauges(r.series);
    let anchor_series = anchor_text(&anchor)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    assert_eq!(anchor_series, r.series);
}

#[test]
fn the_benchmark_notices_a_path_missing_from_a_family() {
    // A path probed with successes only has no error or deferral series: the check must see it.
    let (metrics, mut recorder) = Metrics::with_recorder();
    recorder.apply(ProbeEvent::SeriesBudget {
        limit: UNLIMITED,
        ttl: Duration::from_secs(600),
    });
    probe_fully(&mut recorder, &path(0), 0.0);
    recorder.apply(ProbeEvent::completed(
        path(1),
        record(
            ProbeResult::Success {
                figures: figures(1e10, true),
            },
            BurstKind::Paced,
            1.0,
        ),
    ));
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| assert_full(&metrics, 2)));
    assert!(outcome.is_err(), "a partial path passed as full");
}

#[test]
fn the_default_budget_keeps_what_fits() {
    let metrics = full_paths(PATHS, DEFAULT_SERIES_BUDGET);
    let r = rendered(&metrics);
    let on = r.families["rdma_probe_success"].len();
    assert!(on > 0 && on < PATHS, "{on} paths at the default budget");
    let per_path: usize = r.families.values().map(BTreeSet::len).sum::<usize>();
    assert!(
        per_path <= DEFAULT_SERIES_BUDGET,
        "{per_path} families x paths"
    );
}

/// `series` series of one gauge family with the path labels and a `kind`, in a registry of their
/// own: what the library pays to encode that many series, nothing of ours.
fn plain_gauges(series: usize) -> Registry {
    let family = Family::<Vec<(String, String)>, Gauge>::default();
    for i in 0..series {
        let p = path(i / 36);
        family
            .get_or_create(&vec![
                ("device".to_owned(), p.device),
                ("peer".to_owned(), p.peer),
                ("peer_device".to_owned(), p.peer_device),
                ("kind".to_owned(), format!("k{}", i % 36)),
            ])
            .set(i as i64);
    }
    let mut registry = Registry::default();
    registry.register("rdma_probe_anchor", "Plain gauges", family);
    registry
}

fn anchor_text(registry: &Registry) -> String {
    let mut text = String::with_capacity(4096);
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

/// Median time of `rounds` calls.
fn median(rounds: usize, mut f: impl FnMut() -> usize) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(f());
            started.elapsed()
        })
        .collect();
    times.sort();
    times[rounds / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One row of `scripts/bench`'s table: figure, ours, anchor, ratio ours/anchor.
fn row(figure: &str, ours: f64, anchor: f64, unit: &str) {
    println!(
        "ROW | {figure} | {ours:.2} {unit} | {anchor:.2} {unit} | {:.2} |",
        ours / anchor
    );
}

#[test]
#[ignore = "benchmark: prints figures, see the module docs"]
fn render_benchmark() {
    let rounds = 31;
    for (label, budget) in [
        ("series budget set to hold them", UNLIMITED),
        ("default series budget", DEFAULT_SERIES_BUDGET),
    ] {
        let metrics = full_paths(PATHS, budget);
        let r = rendered(&metrics);
        let paths = r.families["rdma_probe_success"].len();
        if budget == UNLIMITED {
            assert_full(&metrics, PATHS);
        }
        let text = median(rounds, || {
            metrics.encode(Format::PrometheusText).unwrap().len()
        });
        let om = median(rounds, || {
            metrics.encode(Format::OpenMetrics).unwrap().len()
        });
        let anchor = plain_gauges(r.series);
        let floor = median(rounds, || anchor_text(&anchor).len());
        println!(
            "render, 1,000 full paths, {label}: {paths} paths on /metrics, {} series; classic \
             text {} KiB in {:.2} ms, OpenMetrics {} KiB in {:.2} ms; the library's floor for \
             {} plain series {:.2} ms",
            r.series,
            r.text_bytes / 1024,
            ms(text),
            r.openmetrics_bytes / 1024,
            ms(om),
            r.series,
            ms(floor)
        );
        let name = if budget == UNLIMITED {
            format!("render {paths} full paths ({} series)", r.series)
        } else {
            format!(
                "render at the default budget ({paths} paths, {} series)",
                r.series
            )
        };
        row(
            &format!("{name}, classic text, vs plain gauges"),
            ms(text),
            ms(floor),
            "ms",
        );
        row(
            &format!("{name}, OpenMetrics, vs plain gauges"),
            ms(om),
            ms(floor),
            "ms",
        );
    }
}
