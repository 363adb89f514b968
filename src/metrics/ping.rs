//! The ping families (docs/metrics.md, "Pings"): per path, the RTT quantiles of the window, the
//! responder's delay, pings sent and lost; per device, pings answered and refused and which clock
//! stamps them. Written only by the recorder, from the ping engines' reports.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::probe::PathLabels;
use super::PREFIX;
use crate::ping::path::Counts;
use crate::ping::PingReports;

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuantileLabels {
    device: String,
    peer: String,
    peer_device: String,
    quantile: &'static str,
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

const QUANTILES: [&str; 3] = ["0.5", "0.9", "0.99"];

/// The ping families, registered once.
#[derive(Debug, Clone, Default)]
pub struct PingFamilies {
    rtt: Family<QuantileLabels, FloatGauge>,
    responder_delay: Family<PathLabels, FloatGauge>,
    sent: Family<PathLabels, Counter>,
    lost: Family<PathLabels, Counter>,
    answered: Family<DeviceLabels, Counter>,
    refused: Family<DeviceLabels, Counter>,
    clock: Family<ClockLabels, Gauge>,
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
            "Network round-trip time of the path's pings over the ping window (the responder's delay taken out), by quantile",
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
            "ping_answered",
            "Pings of other nodes this device answered",
            f.answered.clone()
        );
        add!(
            "ping_refused",
            "Packets this device's ping QP dropped unanswered and unmeasured: unknown key, wrong tag, no matching ping",
            f.refused.clone()
        );
        add!(
            "ping_timestamp_info",
            "The clock that stamps the device's pings: hardware (NIC completions) or software (CPU)",
            f.clock.clone()
        );
        f
    }
}

/// The counts already shown, so that reports of totals become counter increments.
#[derive(Debug, Default)]
pub struct PingSeries {
    paths: BTreeMap<PathLabels, Counts>,
    devices: BTreeMap<String, (u64, u64)>,
}

impl PingSeries {
    /// Shows one engine's report: every path's figures; a path gone loses its series.
    pub fn apply(&mut self, f: &PingFamilies, reports: &PingReports<PathLabels>) {
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
        for report in &reports.paths {
            let path = &report.path;
            if report.gone {
                self.remove(f, path);
                continue;
            }
            let shown = self.paths.entry(path.clone()).or_default();
            f.sent
                .get_or_create(path)
                .inc_by(report.counts.sent.saturating_sub(shown.sent));
            f.lost
                .get_or_create(path)
                .inc_by(report.counts.lost.saturating_sub(shown.lost));
            *shown = report.counts;
            match &report.window {
                Some(w) => {
                    let values = [w.rtt_p50, w.rtt_p90, w.rtt_p99];
                    for (quantile, value) in QUANTILES.into_iter().zip(values) {
                        f.rtt
                            .get_or_create(&quantile_labels(path, quantile))
                            .set(value.as_secs_f64());
                    }
                    f.responder_delay
                        .get_or_create(path)
                        .set(w.responder_p50.as_secs_f64());
                }
                None => self.remove_window(f, path),
            }
        }
    }

    /// An empty window (every ping lost, or none yet) has no quantiles: absent, not zero.
    fn remove_window(&self, f: &PingFamilies, path: &PathLabels) {
        for quantile in QUANTILES {
            f.rtt.remove(&quantile_labels(path, quantile));
        }
        f.responder_delay.remove(path);
    }

    fn remove(&mut self, f: &PingFamilies, path: &PathLabels) {
        self.remove_window(f, path);
        f.sent.remove(path);
        f.lost.remove(path);
        self.paths.remove(path);
    }
}

fn quantile_labels(path: &PathLabels, quantile: &'static str) -> QuantileLabels {
    QuantileLabels {
        device: path.device.clone(),
        peer: path.peer.clone(),
        peer_device: path.peer_device.clone(),
        quantile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ping::delay::Source;
    use crate::ping::path::WindowSummary;
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
            paths: vec![PingReport {
                path: path(),
                counts: Counts {
                    sent,
                    lost,
                    ..Counts::default()
                },
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
            rtt_p50: ms(3),
            rtt_p90: ms(4),
            rtt_p99: ms(9),
            responder_p50: Duration::from_micros(150),
        };
        series.apply(&f, &report(10, 0, Some(window), false));
        series.apply(&f, &report(25, 2, Some(window), false));
        let out = text(&registry);
        let path = r#"device="rxe0",peer="node2",peer_device="rxe0""#;
        for line in [
            format!("rdma_probe_ping_sent_total{{{path}}} 25"),
            format!("rdma_probe_ping_lost_total{{{path}}} 2"),
            format!("rdma_probe_ping_rtt_seconds{{{path},quantile=\"0.99\"}} 0.009"),
            format!("rdma_probe_ping_responder_delay_seconds{{{path}}} 0.00015"),
            r#"rdma_probe_ping_answered_total{device="rxe0"} 7"#.to_owned(),
            r#"rdma_probe_ping_timestamp_info{device="rxe0",timestamp="software"} 1"#.to_owned(),
        ] {
            assert!(out.contains(&line), "{line} missing from\n{out}");
        }
        // Every ping of the window lost: no quantile, but the counters stay.
        series.apply(&f, &report(30, 7, None, false));
        let out = text(&registry);
        assert!(!out.contains("rdma_probe_ping_rtt_seconds{"), "{out}");
        assert!(
            out.contains(&format!("rdma_probe_ping_lost_total{{{path}}} 7")),
            "{out}"
        );
        // A path no longer pinged loses every series.
        series.apply(&f, &report(30, 7, None, true));
        let out = text(&registry);
        assert!(!out.contains("peer=\"node2\""), "{out}");
    }
}
