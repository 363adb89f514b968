//! The metric families of the metric contract (docs/metrics.md) and the standard process
//! metrics, registered once at start-up in one registry that `/metrics` encodes at each scrape.
//!
//! Handles ([`ResponderMetrics`]) are cheap clones of atomic counters, so the parts that count
//! never wait on a scrape. Series are created on first use, never pre-created per reason.

pub mod budget;
pub mod discovery;
pub mod ping;
pub mod port;
pub mod probe;
pub mod probers;
pub mod process;

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use thiserror::Error;

/// The two text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0: what Prometheus asks for first.
    OpenMetrics,
    /// The classic Prometheus text format (0.0.4), for `curl`, `promtool check metrics` and
    /// older scrapers: counter families carry their `_total` name, no `# UNIT` or `# EOF`.
    PrometheusText,
}

impl Format {
    /// OpenMetrics only when the `Accept` header names it, as the Go client does.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Every metric name this crate defines starts with this.
pub const PREFIX: &str = "rdma_probe";

#[derive(Debug, Error)]
#[error("encoding the metrics failed")]
pub struct EncodeError;

/// The registry and the handles that feed it.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub responder: ResponderMetrics,
    /// The exporter's probe families (absent in a responder-only process, which probes
    /// nothing); written only by a [`probe::ProbeRecorder`].
    pub probes: Option<probe::ProbeFamilies>,
    /// The discovery families (registered with the probe families, in the exporter).
    pub discovery: discovery::DiscoveryMetrics,
}

impl Metrics {
    /// The responder's and the process's families.
    pub fn new() -> Self {
        Self::build(false)
    }

    /// Also the probe families, for the exporter (`run`).
    pub fn for_exporter() -> Self {
        Self::build(true)
    }

    /// The exporter's registry and the recorder that owns its probe families.
    pub fn with_recorder() -> (Self, probe::ProbeRecorder) {
        let mut registry = Registry::default();
        let families = probe::ProbeFamilies::register(&mut registry);
        let metrics = Self::build_into(registry, Some(families.clone()));
        (metrics, probe::ProbeRecorder::new(families))
    }

    fn build(with_probes: bool) -> Self {
        let mut registry = Registry::default();
        let probes = with_probes.then(|| probe::ProbeFamilies::register(&mut registry));
        Self::build_into(registry, probes)
    }

    fn build_into(mut registry: Registry, probes: Option<probe::ProbeFamilies>) -> Self {
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register(
            format!("{PREFIX}_build_info"),
            "Build of the running exporter; always 1",
            build_info,
        );
        let responder = ResponderMetrics::default();
        registry.register(
            format!("{PREFIX}_responder_sessions"),
            "Probe sessions the responder accepted, and requests it refused by reason \
             (busy counts refused burst requests)",
            responder.sessions.clone(),
        );
        registry.register(
            format!("{PREFIX}_responder_validation_failures"),
            "Bursts whose data did not verify on the responder",
            responder.validation_failures.clone(),
        );
        registry.register(
            format!("{PREFIX}_responder_last_validation_failure_timestamp_seconds"),
            "Unix time of the last burst from this prober whose data did not verify on the \
             responder",
            responder.last_validation_failure.clone(),
        );
        registry.register(
            format!("{PREFIX}_responder_verified_messages"),
            "Messages whose data the responder checked at their own offset after a burst",
            responder.verified_messages.clone(),
        );
        let discovery = discovery::DiscoveryMetrics::default();
        if probes.is_some() {
            discovery.register(&mut registry);
        }
        registry.register_collector(Box::new(probers::ProbersCollector(
            responder.probers.clone(),
        )));
        registry.register_collector(Box::new(process::ProcessCollector));
        Metrics {
            registry: Arc::new(registry),
            responder,
            probes,
            discovery,
        }
    }

    /// The text exposition of every registered family, as served on `/metrics`.
    pub fn encode(&self, format: Format) -> Result<String, EncodeError> {
        let mut text = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .map_err(|_| EncodeError)?;
        Ok(match format {
            Format::OpenMetrics => text,
            Format::PrometheusText => openmetrics_to_prometheus_text(&text),
        })
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Rewrites OpenMetrics text into the classic format: in OpenMetrics a counter family is named
/// without `_total` (its sample keeps it); the classic parsers want the family named as the
/// sample, and know neither `# UNIT` nor `# EOF`.
pub fn openmetrics_to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|kind| {
            let rest = line.strip_prefix(kind)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{kind}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

/// How the responder answered a prober (`result` label of `rdma_probe_responder_sessions_total`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum SessionResult {
    Accepted,
    /// A burst request while the device served another prober's burst.
    Busy,
    Auth,
    /// The session limit or the pinned-memory budget.
    Limit,
    /// A connection still in the authentication handshake when `max_handshakes` newer ones
    /// arrived (it gave way to them).
    HandshakeLimit,
    Protocol,
    /// Too many control connections open at once: refused at accept, before any read.
    ConnectionLimit,
    /// No complete handshake, or no session request after it, within the control timeout
    /// (silent, slow or stalled clients).
    Timeout,
    /// The client closed or reset the connection before it had a session (port scans, truncated
    /// frames).
    Closed,
    /// The prober's RDMA address (its GID) was neither where its connection came from nor in
    /// `rdma_networks`.
    RdmaAddress,
}

impl SessionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionResult::Accepted => "accepted",
            SessionResult::Busy => "busy",
            SessionResult::Auth => "auth",
            SessionResult::Limit => "limit",
            SessionResult::HandshakeLimit => "handshake_limit",
            SessionResult::Protocol => "protocol",
            SessionResult::ConnectionLimit => "connection_limit",
            SessionResult::Timeout => "timeout",
            SessionResult::Closed => "closed",
            SessionResult::RdmaAddress => "rdma_address",
        }
    }
}

impl EncodeLabelValue for SessionResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabels {
    device: String,
    result: SessionResult,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ValidationLabels {
    device: String,
    peer: String,
}

/// Most distinct `peer` values of `rdma_probe_responder_validation_failures_total` (and of its
/// last-failure timestamp gauge): the value is
/// the prober's node name, which any key holder chooses (and with `auth: none`, anyone), so the
/// series it makes are capped; the failures of probers beyond the cap count under
/// [`OTHER_PEERS`].
pub const MAX_VALIDATION_PEERS: usize = 256;
/// The `peer` label of the validation failures of probers beyond [`MAX_VALIDATION_PEERS`].
pub const OTHER_PEERS: &str = "other";

/// The responder's counters.
#[derive(Debug, Clone, Default)]
pub struct ResponderMetrics {
    sessions: Family<SessionLabels, Counter>,
    validation_failures: Family<ValidationLabels, Counter>,
    /// The `peer` values `validation_failures` has, at most [`MAX_VALIDATION_PEERS`].
    validation_peers: Arc<Mutex<std::collections::HashSet<String>>>,
    last_validation_failure: Family<ValidationLabels, Gauge<f64, AtomicU64>>,
    verified_messages: Family<DeviceLabels, Counter>,
    /// Each served device's probers and how their last burst ended.
    probers: Arc<Mutex<probers::ProberTally>>,
}

impl ResponderMetrics {
    pub fn session(&self, device: &str, result: SessionResult) {
        self.sessions
            .get_or_create(&SessionLabels {
                device: device.to_owned(),
                result,
            })
            .inc();
    }

    /// A burst of `peer` that did not verify on `device`; `peer` becomes [`OTHER_PEERS`] once
    /// [`MAX_VALIDATION_PEERS`] other probers have a series.
    pub fn validation_failure(&self, device: &str, peer: &str) {
        let peer = {
            let mut seen = self
                .validation_peers
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if seen.contains(peer) || seen.len() < MAX_VALIDATION_PEERS {
                seen.insert(peer.to_owned());
                peer
            } else {
                OTHER_PEERS
            }
        };
        let labels = ValidationLabels {
            device: device.to_owned(),
            peer: peer.to_owned(),
        };
        self.validation_failures.get_or_create(&labels).inc();
        self.last_validation_failure
            .get_or_create(&labels)
            .set(probe::unix_now().as_secs_f64());
    }

    /// `prober`'s burst on `device` ended `ended`, now.
    pub fn burst_ended(&self, device: &str, prober: &str, ended: probers::BurstEnded) {
        let now = probe::unix_now().as_secs_f64();
        self.probers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(device, prober, ended, now);
    }

    /// How long a prober counts after its last burst (`judge.responder_window`).
    pub fn set_prober_window(&self, seconds: f64) {
        self.probers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_window(seconds);
    }

    pub fn verified_messages(&self, device: &str, messages: u64) {
        self.verified_messages
            .get_or_create(&DeviceLabels {
                device: device.to_owned(),
            })
            .inc_by(messages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(text: &'a str, series: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn counters_appear_once_used_with_their_labels() {
        let metrics = Metrics::new();
        let before = metrics.encode(Format::OpenMetrics).unwrap();
        assert!(!before.contains("rdma_probe_responder_sessions_total{"));
        metrics.responder.session("rxe0", SessionResult::Accepted);
        metrics.responder.session("rxe0", SessionResult::Accepted);
        metrics.responder.session("rxe0", SessionResult::Busy);
        metrics.responder.validation_failure("rxe0", "node-a");
        let text = metrics.encode(Format::OpenMetrics).unwrap();
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_responder_sessions_total{device="rxe0",result="accepted"}"#
            ),
            Some("2")
        );
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_responder_sessions_total{device="rxe0",result="busy"}"#
            ),
            Some("1")
        );
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_responder_validation_failures_total{device="rxe0",peer="node-a"}"#
            ),
            Some("1")
        );
        assert!(text.ends_with("# EOF\n"));
    }

    /// A validation failure also leaves its time, which alerts read instead of the counter's
    /// increase (no new alert after a scrape gap).
    #[test]
    fn a_validation_failure_leaves_its_time() {
        let metrics = Metrics::new();
        let name = "rdma_probe_responder_last_validation_failure_timestamp_seconds";
        assert!(!metrics
            .encode(Format::PrometheusText)
            .unwrap()
            .contains(name));
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        metrics.responder.validation_failure("rxe0", "node-a");
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let at: f64 = sample(&text, &format!(r#"{name}{{device="rxe0",peer="node-a"}}"#))
            .unwrap_or_else(|| panic!("{text}"))
            .parse()
            .unwrap();
        assert!((before..before + 60.0).contains(&at), "{at} {before}");
    }

    #[test]
    fn build_info_and_process_cpu_are_always_there() {
        let text = Metrics::new().encode(Format::OpenMetrics).unwrap();
        let version = format!(
            r#"rdma_probe_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(sample(&text, &version), Some("1"));
        let cpu: f64 = sample(&text, "process_cpu_seconds_total")
            .expect("process_cpu_seconds_total in the scrape")
            .parse()
            .unwrap();
        assert!(cpu > 0.0, "a running test process has used CPU: {cpu}");
        for name in [
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
            "process_threads",
        ] {
            assert!(
                sample(&text, name).is_some(),
                "{name} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn classic_text_names_counter_families_like_their_samples() {
        let metrics = Metrics::new();
        metrics.responder.session("rxe0", SessionResult::Auth);
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(text.contains("# TYPE rdma_probe_responder_sessions_total counter\n"));
        assert!(text.contains("# HELP rdma_probe_responder_sessions_total Probe sessions"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
        assert!(text.contains("# TYPE rdma_probe_build_info gauge\n"));
        assert!(
            !text.contains("# UNIT") && !text.contains("# EOF"),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_responder_sessions_total{device="rxe0",result="auth"}"#
            ),
            Some("1")
        );
    }

    #[test]
    fn format_follows_the_accept_header() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("*/*")), Format::PrometheusText);
        assert_eq!(Format::from_accept(None), Format::PrometheusText);
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = Metrics::new();
        metrics
            .responder
            .validation_failure("rxe0", "evil\"peer\\\nname");
        let text = metrics.encode(Format::OpenMetrics).unwrap();
        assert!(
            text.contains(r#"peer="evil\"peer\\\nname""#),
            "label value not escaped:\n{text}"
        );
    }

    #[test]
    fn validation_failures_keep_at_most_the_capped_number_of_peers() {
        let metrics = Metrics::new();
        // Every prober may say any node name: a flood of names makes at most the capped number of
        // series, and the rest count under `other`; a prober already counted keeps its own.
        for i in 0..MAX_VALIDATION_PEERS + 50 {
            metrics
                .responder
                .validation_failure("rxe0", &format!("node-{i}"));
        }
        metrics.responder.validation_failure("rxe0", "node-0");
        let text = metrics.encode(Format::OpenMetrics).unwrap();
        let series = text
            .lines()
            .filter(|l| l.starts_with("rdma_probe_responder_validation_failures_total{"))
            .count();
        assert_eq!(series, MAX_VALIDATION_PEERS + 1, "{text}");
        let other = format!(
            r#"rdma_probe_responder_validation_failures_total{{device="rxe0",peer="{OTHER_PEERS}"}}"#
        );
        assert_eq!(sample(&text, &other), Some("50"));
        assert_eq!(
            sample(
                &text,
                r#"rdma_probe_responder_validation_failures_total{device="rxe0",peer="node-0"}"#
            ),
            Some("2")
        );
    }
}
