//! What one probe reports: [`ProbeOutcome`], what `probe --json` prints and the metrics record.

use serde::Serialize;

use crate::burst::BurstReport;
use crate::control::message::Identity;
use crate::ping::PingTarget;
use crate::port::OtherTraffic;
use crate::reason::ErrorReason;

use super::{BurstKind, ProbeError, ProbeSettings};

/// The result of one probe, successful or not: what `probe --json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProbeOutcome {
    /// Paced, or unpaced to measure capacity (whether or not the burst ran).
    pub kind: BurstKind,
    /// The burst's figures; absent when the probe failed before the burst ran.
    #[serde(flatten)]
    pub report: Option<BurstReport>,
    /// What the burst aimed for: the rate limit, or the lower link rate of both ends when unpaced.
    pub target_bandwidth_bytes_per_second: Option<f64>,
    /// Control + QP setup time of the session this burst ran on.
    pub setup_seconds: Option<f64>,
    /// Whether the responder verified the data pattern after the burst.
    pub validated: bool,
    /// How many messages the responder checked, each at its own offset: every message when the
    /// burst fits the session's regions, else the last ones of each QP.
    pub verified_messages: Option<u64>,
    /// Whether this burst's session was set up for it (first burst, or a rebuild after a
    /// failure or after the responder closed an idle session): its setup cost is in
    /// `setup_seconds`.
    pub new_session: bool,
    pub device: Option<String>,
    pub peer_device: Option<String>,
    pub mtu: Option<u32>,
    pub message_size: u64,
    pub qps: u16,
    pub local_link_rate_bits_per_second: Option<u64>,
    pub peer_link_rate_bits_per_second: Option<u64>,
    /// The GRH flow label of each QP during the burst (empty without a GRH): a session moves its
    /// QPs to new labels after every burst (docs/architecture.md, "Every ECMP path").
    pub flow_labels: Vec<u32>,
    /// The RoCE v2 UDP source port of each QP, as the drivers derive it from the flow label.
    pub udp_source_ports: Vec<u16>,
    /// Increases of this node's allowlisted port counters during the burst (non-zero ones, by
    /// label; docs/metrics.md, "Port counters"). Port-level: other traffic counts too.
    pub local_counters: Vec<(String, u64)>,
    /// Port counter increases the responder saw during the burst.
    pub remote_counters: Vec<(String, u64)>,
    /// What this node's port sent and received during the completed burst beyond the burst
    /// itself (docs/metrics.md, "Other traffic"); absent when the port has no byte counters.
    pub local_other_traffic: Option<OtherTraffic>,
    /// The same for the responder's port, from the increases it returned.
    pub remote_other_traffic: Option<OtherTraffic>,
    /// Where the path's pings go, as this burst's session learnt it (for the device's ping
    /// engine; not printed).
    #[serde(skip)]
    pub ping: Option<PingTarget>,
    /// Time from asking for a burst on a warm session to its first WRITE.
    pub burst_start_seconds: Option<f64>,
    /// Wall time the burst thread spent inside `ibv_post_send` (see `BurstTiming::posting`).
    pub post_seconds: Option<f64>,
    /// CPU the whole process used for this burst, from the request to the responder's result
    /// (control exchanges, burst thread, verification wait): what a running exporter pays per
    /// burst, without process start-up and session set-up.
    pub process_cpu_seconds: Option<f64>,
    /// Set when the burst did not run and that is not a failure (`busy`: the responder was
    /// serving another prober).
    pub deferred: Option<String>,
    pub error: Option<ErrorReason>,
    pub message: Option<String>,
    /// The version a stock `ib_write_bw` server announced (`probe --perftest` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perftest_server_version: Option<String>,
    /// What the responder said about itself in the handshake of this probe's session (or of the
    /// last one that got that far): its node name, labels and devices with their rails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_identity: Option<Identity>,
}

impl ProbeOutcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none() && self.deferred.is_none()
    }

    /// The outcome of a probe whose session could not be set up.
    pub fn failed(settings: &ProbeSettings, error: &ProbeError) -> ProbeOutcome {
        let mut outcome = ProbeOutcome {
            kind: BurstKind::of(settings.rate_limit.as_ref()),
            message_size: settings.message_size,
            qps: settings.qps,
            ..ProbeOutcome::default()
        };
        outcome.record_error(error);
        outcome
    }

    pub(crate) fn record_error(&mut self, error: &ProbeError) {
        match error {
            ProbeError::Busy { .. } => self.deferred = Some("busy".into()),
            ProbeError::SessionClosed => self.error = Some(ErrorReason::Connect),
            ProbeError::Failed { reason, .. } => self.error = Some(*reason),
        }
        self.message = Some(error.to_string());
    }
}
