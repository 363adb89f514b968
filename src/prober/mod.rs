//! The client side of a probe session: connect, authenticate, negotiate, set up the QPs, run
//! bursts through the engine, and keep the session warm for the next burst.
//!
//! Setup (control handshake + QP bring-up) is timed separately from the burst so a slow
//! handshake never reads as a slow link, and the session stays warm: a later burst costs its data,
//! not a handshake (docs/architecture.md, "One probe, end to end").
//!
//! Here: the settings, the error and [`probe_once`]. [`Session`] (`session.rs`) sets up one
//! session and runs its bursts on the device's [`BurstWorker`] (`worker.rs`); [`WarmSession`]
//! (`warm.rs`) keeps one warm across bursts. `checks.rs` holds what is checked before a session,
//! `slots.rs` the memory it asks for, `sysfs.rs` the reads off the async workers, `outcome.rs`
//! and `request.rs` what a burst is asked for and what a probe reports.

mod checks;
mod outcome;
mod request;
mod session;
mod slots;
mod sysfs;
mod warm;
mod worker;

use std::time::Duration;

use ipnet::IpNet;
use thiserror::Error;

use crate::burst::engine::EngineError;
use crate::burst::{BurstLength, PlanError};
use crate::control::{AuthMode, ControlError};
use crate::reason::ErrorReason;
use crate::session::PathOptions;
use crate::units::{RateLimit, ResolveError};
use crate::verbs::{LocalPort, VerbsError};

pub(crate) use checks::ensure_port_active;
pub use outcome::ProbeOutcome;
pub use request::{BurstKind, BurstRequest};
pub use session::{learn_ping_target, Session};
pub use slots::session_region_bytes;
pub use sysfs::device_placement;
pub(crate) use sysfs::{counter_reader, read_counters};
pub use warm::WarmSession;
pub(crate) use worker::BurstJob;
pub use worker::BurstWorker;

/// Default memory budget of a session's regions on each end (see
/// [`ProbeSettings::max_session_bytes`]).
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 64 << 20;

/// Everything one probe needs, validated by the caller (the CLI or the exporter's config).
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The responder's control address, `HOST:PORT`.
    pub target: String,
    /// This node's name, sent in the handshake for the responder's logs and metrics.
    pub node_name: String,
    pub local: LocalPort,
    /// The rail whose device the responder should answer with (sent in `SessionRequest`);
    /// `None`: the responder's first device.
    pub rail: Option<u16>,
    pub message_size: u64,
    pub length: BurstLength,
    /// `None` runs unpaced (a capacity check).
    pub rate_limit: Option<RateLimit>,
    pub qps: u16,
    pub tx_depth: u32,
    /// `None` uses perftest's default (1 above 8 KiB, else 100).
    pub cq_mod: Option<u32>,
    pub post_list: u32,
    /// Upper bound for the path MTU in bytes; the path MTU is min(local, peer, this).
    pub mtu: Option<u32>,
    pub traffic_class: u8,
    pub service_level: u8,
    /// Local ACK timeout exponent (4.096 µs x 2^N; perftest's default 14 = 67 ms).
    pub qp_timeout: u8,
    pub auth: AuthMode,
    /// Deadline for every control exchange, and how long a burst may overrun its plan.
    pub timeout: Duration,
    /// Most memory the session's regions may take on each end: a burst whose messages fit is
    /// verified message by message, a longer one over its last messages (as many as fit).
    pub max_session_bytes: u64,
    /// Poll the CQ all through the burst as perftest does, instead of the CPU-frugal waits:
    /// for calibrating against perftest (docs/perftest.md, "Calibration").
    pub busy_poll: bool,
    /// Networks the responder's RDMA address may be in besides the address the control
    /// connection reached (`rdma_networks`; docs/security.md, "Where RDMA traffic goes").
    pub rdma_networks: Vec<IpNet>,
}

impl ProbeSettings {
    /// The QP path attributes these settings ask for.
    pub(crate) fn path_options(&self) -> PathOptions {
        PathOptions {
            mtu: self.mtu,
            gid_index: self.local.gid_index,
            traffic_class: self.traffic_class,
            service_level: self.service_level,
            qp_timeout: self.qp_timeout,
        }
    }
}

/// Why a probe did not produce a figure.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("the responder is busy with another prober's burst (retry after {retry_after_ms} ms)")]
    Busy { retry_after_ms: u32 },
    /// The responder ended the warm session (its idle timeout) before this burst: not a link
    /// failure; the caller rebuilds the session and tries again.
    #[error("the responder closed the session before the burst")]
    SessionClosed,
    #[error("{message}")]
    Failed {
        reason: ErrorReason,
        message: String,
    },
}

impl ProbeError {
    fn new(reason: ErrorReason, message: impl Into<String>) -> Self {
        ProbeError::Failed {
            reason,
            message: message.into(),
        }
    }

    /// The failure reason; `None` for a deferred (busy) probe.
    pub fn reason(&self) -> Option<ErrorReason> {
        match self {
            ProbeError::Busy { .. } => None,
            ProbeError::SessionClosed => Some(ErrorReason::Connect),
            ProbeError::Failed { reason, .. } => Some(*reason),
        }
    }
}

impl From<ControlError> for ProbeError {
    fn from(e: ControlError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<VerbsError> for ProbeError {
    fn from(e: VerbsError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<EngineError> for ProbeError {
    fn from(e: EngineError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<PlanError> for ProbeError {
    fn from(e: PlanError) -> Self {
        ProbeError::new(ErrorReason::QpSetup, format!("invalid burst: {e}"))
    }
}

impl From<ResolveError> for ProbeError {
    fn from(e: ResolveError) -> Self {
        ProbeError::new(ErrorReason::QpSetup, format!("rate limit: {e}"))
    }
}

/// Runs one burst on a fresh session and closes it: what `probe` does.
pub async fn probe_once(settings: &ProbeSettings) -> ProbeOutcome {
    let mut warm = WarmSession::new(settings.clone());
    let outcome = warm.burst().await;
    warm.close().await;
    outcome
}
