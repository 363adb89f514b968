//! The ping families (docs/metrics.md, "Pings"): per path, the RTT quantiles of the window, the
//! responder's delay, pings sent and lost; per device, a histogram of every RTT, pings answered
//! and refused and which clock stamps them. Written only by the recorder, from the ping engines'
//! reports.
//!
//! The ping series live in what the series budget leaves: the room the bursts' series do not
//! take, the devices' histograms first (16 series a device, all or none). Beyond it the pinged
//! paths whose bursts are not on
//! `/metrics`, then the last in label order, show none (`rdma_probe_ping_shed_paths`), so the
//! same paths stay shown.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::probe::PathLabels;
use super::PREFIX;
use crate::ping::path::{Counts, WindowSummary};
use crate::ping::PingReports;

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PercentileLabels {
    device: String,
    peer: String,
    peer_device: String,
    percentile: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClockLabels {
    device: String,
    timestamp: &'static str,
}

/// The window's percentiles, as the `percentile` label says them. Not `quantile`: Prometheus
/// keeps that label for summaries, and these are gauges of a sliding window.
const PERCENTILES: [&str; 3] = ["50", "90", "99"];
/// Series of one pinged path at most: three RTT quantiles, the responder's delay, sent and lost.
pub const SERIES_PER_PATH: usize = 6;

/// The upper bounds of the device histogram's buckets (seconds): from a few microseconds (a
/// hardware RDMA fabric) to a tenth of a second (congestion, or an emulated NIC).
const RTT_BUCKETS: [f64; 13] = [
    5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 1e-1,
];
/// Series of one device's RTT histogram: its buckets, `+Inf`, sum and count.
pub const SERIES_PER_DEVICE_HISTOGRAM: usize = RTT_BUCKETS.len() + 3;

fn rtt_histogram() -> Histogram {
    Histogram::new(RTT_BUCKETS)
}

/// The ping families, registered once.
#[derive(Debug, Clone)]
pub struct PingFamilies {
    rtt: Family<PercentileLabels, FloatGauge>,
    responder_delay: Family<PathLabels, FloatGauge>,
    sent: Family<PathLabels, Counter>,
    lost: Family<PathLabels, Counter>,
    answered: Family<DeviceLabels, Counter>,
    refused: Family<DeviceLabels, Counter>,
    clock: Family<ClockLabels, Gauge>,
    shed: Gauge,
    device_rtt: Family<DeviceLabels, Histogram, fn() -> Histogram>,
}

impl Default for PingFamilies {
    fn default() -> Self {
        PingFamilies {
            rtt: Family::default(),
            responder_delay: Family::default(),
            sent: Family::default(),
            lost: Family::default(),
            answered: Family::default(),
            refused: Family::default(),
            clock: Family::default(),
            shed: Gauge::default(),
            device_rtt: Family::new_with_constructor(rtt_histogram),
        }
    }
}

impl PingFamilies {
    pub fn register(registry: &mut Registry) -> Self {
        let f = PingFamilies::default();
        macro_rules! add {
            ($name:literal, $help:literal, $metric:expr) => {
                registry.register(format!("{PREFIX}_{}", $name), $help, $metric)
            };
        }
        add!(
            "ping_rtt_seconds",
            "Network round-trip time of the path's pings over the ping window (the responder's delay taken out), by percentile (50, 90, 99)",
            f.rtt.clone()
        );
        add!(
            "ping_responder_delay_seconds",
            "Median time the peer held the path's pings before answering, over the ping window",
            f.responder_delay.clone()
        );
        add!("ping_sent", "Pings sent on the path", f.sent.clone());
        add!(
            "ping_lost",
            "Pings of the path not answered within ping.timeout",
            f.lost.clone()
        );
        add!(
            "ping_device_rtt_seconds",
            "Network round-trip time of every ping the device sent and had answered, all its paths together",
            f.device_rtt.clone()
        );
        add!(
            "ping_answered",
            "Pings of other nodes this device answered",
            f.answered.clone()
        );
        add!(
            "ping_refused",
            "Packets this device's ping QP dropped unanswered and unmeasured: unknown key or source, wrong tag, replayed, over its source's rate, no matching ping",
            f.refused.clone()
        );
        add!(
            "ping_shed_paths",
            "Pinged paths whose ping series the series budget keeps off /metrics",
            f.shed.clone()
        );
        add!(
            "ping_timestamp_info",
            "The clock that stamps the device's pings: hardware (NIC completions) or software (CPU)",
            f.clock.clone()
        );
        f
    }
}

/// Every pinged path's latest figures, and the counts already shown of those on `/metrics` (so
/// that reports of totals become counter increments).
#[derive(Debug, Default)]
pub struct PingSeries {
    paths: BTreeMap<PathLabels, (Counts, Option<WindowSummary>)>,
    shown: BTreeMap<PathLabels, Counts>,
    devices: BTreeMap<String, (u64, u64)>,
    histograms_shown: bool,
}

impl PingSeries {
    /// Ping series on `/metrics` now (at most): the pinged paths' and the devices' histograms.
    pub fn series(&self) -> usize {
        let histograms = if self.histograms_shown {
            self.devices.len() * SERIES_PER_DEVICE_HISTOGRAM
        } else {
            0
        };
        self.shown.len() * SERIES_PER_PATH + histograms
    }

    /// Shows one engine's report within `room` series: the devices' histograms first, then the
    /// paths `preferred` says have their bursts on `/metrics`, then in label order; a path gone
    /// loses its series.
    pub fn apply(
        &mut self,
        f: &PingFamilies,
        reports: &PingReports<PathLabels>,
        room: usize,
        preferred: impl Fn(&PathLabels) -> bool,
    ) {
        self.count_device(f, reports);
        let room = self.histograms(f, reports, room);
        for report in &reports.paths {
            if report.gone {
                self.paths.remove(&report.path);
            } else {
                let figures = (report.counts, report.window);
                self.paths.insert(report.path.clone(), figures);
            }
        }
        let mut order: Vec<&PathLabels> = self.paths.keys().collect();
        order.sort_by_key(|p| !preferred(p));
        let fit: BTreeSet<PathLabels> = order
            .into_iter()
            .take(room / SERIES_PER_PATH)
            .cloned()
            .collect();
        let hidden: Vec<PathLabels> = self
            .shown
            .keys()
            .filter(|p| !fit.contains(*p))
            .cloned()
            .collect();
        for path in hidden {
            self.remove(f, &path);
        }
        for report in reports.paths.iter().filter(|r| fit.contains(&r.path)) {
            self.show(f, &report.path, report.counts, report.window);
        }
        f.shed
            .set(i64::try_from(self.paths.len() - fit.len()).unwrap_or(i64::MAX));
    }

    /// The devices' histograms take the room first, if it holds them all; otherwise they go
    /// (and start again from zero when they come back). Returns the room left for the paths.
    fn histograms(
        &mut self,
        f: &PingFamilies,
        reports: &PingReports<PathLabels>,
        room: usize,
    ) -> usize {
        let needed = self.devices.len() * SERIES_PER_DEVICE_HISTOGRAM;
        self.histograms_shown = room >= needed;
        if !self.histograms_shown {
            f.device_rtt.clear();
            return room;
        }
        let device = DeviceLabels {
            device: reports.device.clone(),
        };
        let histogram = f.device_rtt.get_or_create(&device);
        for rtt in &reports.rtts {
            histogram.observe(rtt.as_secs_f64());
        }
        room - needed
    }

    fn count_device(&mut self, f: &PingFamilies, reports: &PingReports<PathLabels>) {
        let device = DeviceLabels {
            device: reports.device.clone(),
        };
        let (answered, refused) = self.devices.entry(reports.device.clone()).or_default();
        f.answered
            .get_or_create(&device)
            .inc_by(reports.answered.saturating_sub(*answered));
        f.refused
            .get_or_create(&device)
            .inc_by(reports.refused.saturating_sub(*refused));
        (*answered, *refused) = (reports.answered, reports.refused);
        f.clock
            .get_or_create(&ClockLabels {
                device: reports.device.clone(),
                timestamp: reports.timestamps.label(),
            })
            .set(1);
    }

    fn show(
        &mut self,
        f: &PingFamilies,
        path: &PathLabels,
        counts: Counts,
        window: Option<WindowSummary>,
    ) {
        let shown = self.shown.entry(path.clone()).or_default();
        f.sent
            .get_or_create(path)
            .inc_by(counts.sent.saturating_sub(shown.sent));
        f.lost
            .get_or_create(path)
            .inc_by(counts.lost.saturating_sub(shown.lost));
        *shown = counts;
        match window {
            Some(w) => {
                let values = [w.rtt_p50, w.rtt_p90, w.rtt_p99];
                for (percentile, value) in PERCENTILES.into_iter().zip(values) {
                    f.rtt
                        .get_or_create(&percentile_labels(path, percentile))
                        .set(value.as_secs_f64());
                }
                f.responder_delay
                    .get_or_create(path)
                    .set(w.responder_p50.as_secs_f64());
            }
            None => remove_window(f, path),
        }
    }

    fn remove(&mut self, f: &PingFamilies, path: &PathLabels) {
        remove_window(f, path);
        f.sent.remove(path);
        f.lost.remove(path);
        self.shown.remove(path);
    }
}

/// An empty window (every ping lost, or none yet) has no quantiles: absent, not zero.
fn remove_window(f: &PingFamilies, path: &PathLabels) {
    for percentile in PERCENTILES {
        f.rtt.remove(&percentile_labels(path, percentile));
    }
    f.responder_delay.remove(path);
}

fn percentile_labels(path: &PathLabels, percentile: &'static str) -> PercentileLabels {
    PercentileLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        percentile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ping::delay::Source;
    use crate::ping::PingReport;
    use std::time::Duration;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    fn path() -> PathLabels {
        PathLabels {
            device: "rxe0".into(),
            peer: "node2".into(),
            peer_device: "rxe0".into(),
        }
    }

    fn report(
        sent: u64,
        lost: u64,
        window: Option<WindowSummary>,
        gone: bool,
    ) -> PingReports<PathLabels> {
        PingReports {
            device: "rxe0".into(),
            timestamps: Source::Software,
            answered: 7,
            refused: 1,
            rtts: vec![Duration::from_micros(30), Duration::from_millis(3)],
            paths: vec![PingReport {
                path: path(),
                counts: Counts {
                    sent,
                    lost,
                    ..Counts::default()
                },
                lost_in_a_row: 0,
                window,
                gone,
            }],
        }
    }

    #[test]
    fn reports_of_totals_show_as_counters_and_the_window_as_gauges() {
        let mut registry = Registry::default();
        let f = PingFamilies::register(&mut registry);
        let mut series = PingSeries::default();
        let ms = Duration::from_millis;
        let window = WindowSummary {
            samples: 10,
            rtt_min: ms(2),
            rtt_p50: ms(3),
            rtt_p90: ms(4),
            rtt_p99: ms(9),
            rtt_max: ms(11),
            responder_p50: Duration::from_micros(150),
        };
        series.apply(&f, &report(10, 0, Some(window), false), usize::MAX, |_| {
            true
        });
        series.apply(&f, &report(25, 2, Some(window), false), usize::MAX, |_| {
            true
        });
        let out = text(&registry);
        let path = r#"device="rxe0",peer="node2",peer_device="rxe0""#;
        for line in [
            format!("rdma_probe_ping_sent_total{{{path}}} 25"),
            format!("rdma_probe_ping_lost_total{{{path}}} 2"),
            format!("rdma_probe_ping_rtt_seconds{{{path},percentile=\"99\"}} 0.009"),
            format!("rdma_probe_ping_responder_delay_seconds{{{path}}} 0.00015"),
            r#"rdma_probe_ping_answered_total{device="rxe0"} 7"#.to_owned(),
            r#"rdma_probe_ping_timestamp_info{device="rxe0",timestamp="software"} 1"#.to_owned(),
            // Two reports of a 30 µs and a 3 ms RTT each.
            r#"rdma_probe_ping_device_rtt_seconds_count{device="rxe0"} 4"#.to_owned(),
            r#"rdma_probe_ping_device_rtt_seconds_bucket{le="0.00005",device="rxe0"} 2"#.to_owned(),
            r#"rdma_probe_ping_device_rtt_seconds_bucket{le="0.0025",device="rxe0"} 2"#.to_owned(),
            r#"rdma_probe_ping_device_rtt_seconds_bucket{le="0.005",device="rxe0"} 4"#.to_owned(),
        ] {
            assert!(out.contains(&line), "{line} missing from\n{out}");
        }
        // Every ping of the window lost: no percentile, but the counters stay.
        series.apply(&f, &report(30, 7, None, false), usize::MAX, |_| true);
        let out = text(&registry);
        assert!(!out.contains("rdma_probe_ping_rtt_seconds{"), "{out}");
        assert!(
            out.contains(&format!("rdma_probe_ping_lost_total{{{path}}} 7")),
            "{out}"
        );
        // A path no longer pinged loses every series.
        series.apply(&f, &report(30, 7, None, true), usize::MAX, |_| true);
        let out = text(&registry);
        assert!(!out.contains("peer=\"node2\""), "{out}");
    }

    #[test]
    fn pings_take_only_the_room_the_bursts_leave_preferring_paths_on_metrics() {
        let mut registry = Registry::default();
        let f = PingFamilies::register(&mut registry);
        let mut series = PingSeries::default();
        let paths: Vec<PathLabels> = ["a", "b", "c"]
            .iter()
            .map(|peer| PathLabels {
                peer: (*peer).into(),
                ..path()
            })
            .collect();
        let mut reports = report(5, 0, None, false);
        reports.paths = paths
            .iter()
            .map(|p| PingReport {
                path: p.clone(),
                counts: Counts {
                    sent: 5,
                    ..Counts::default()
                },
                lost_in_a_row: 0,
                window: None,
                gone: false,
            })
            .collect();
        let shown = |registry: &Registry| -> Vec<String> {
            text(registry)
                .lines()
                .filter(|l| l.starts_with("rdma_probe_ping_sent_total{"))
                .filter_map(|l| label_of(l, "peer"))
                .collect()
        };
        // Room for the device's histogram and two paths: "c" has its bursts on /metrics, so it
        // comes first, then "a".
        let histogram = SERIES_PER_DEVICE_HISTOGRAM;
        series.apply(&f, &reports, histogram + 2 * SERIES_PER_PATH + 5, |p| {
            p.peer == "c"
        });
        let mut got = shown(&registry);
        got.sort();
        assert_eq!(got, ["a", "c"]);
        assert_eq!(series.series(), histogram + 2 * SERIES_PER_PATH);
        assert!(text(&registry).contains("rdma_probe_ping_shed_paths 1"));
        // The bursts need the room: no ping series at all.
        series.apply(&f, &reports, 0, |p| p.peer == "c");
        assert!(shown(&registry).is_empty());
        assert!(!text(&registry).contains("device_rtt_seconds_count"));
        assert_eq!(series.series(), 0);
        // Room again: every path, and its counter starts over from what it counted.
        series.apply(&f, &reports, usize::MAX, |_| false);
        assert_eq!(shown(&registry).len(), 3);
        assert!(text(&registry).contains("rdma_probe_ping_shed_paths 0"));
        assert!(text(&registry).contains(r#"peer="a",peer_device="rxe0"} 5"#));
    }

    fn label_of(line: &str, name: &str) -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_owned())
    }
}
