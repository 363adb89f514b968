//! The client side of a probe session: connect, authenticate, negotiate, set up the QPs, run
//! bursts through the engine, and keep the session warm for the next burst.
//!
//! Setup (control handshake + QP bring-up) is timed separately from the burst so a slow
//! handshake never reads as a slow link (brief §4, "Sessions stay warm").

use std::time::Duration;

use serde::Serialize;

use crate::burst::{BurstLength, BurstReport};
use crate::config::RateLimit;
use crate::control::AuthMode;
use crate::reason::ErrorReason;

/// Which local RDMA port a session uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    /// Device name (`mlx5_0`, `rxe0`); `None` picks the first device with an ACTIVE port.
    pub device: Option<String>,
    /// Port number, 1-based.
    pub port: u8,
    /// GID table index; `None` selects the global IPv4-mapped RoCE v2 GID (brief §3).
    pub gid_index: Option<u32>,
}

/// Everything one probe needs, validated by the caller (the CLI or the exporter's config).
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The responder's control address, `HOST:PORT`.
    pub target: String,
    /// This node's name, sent in the handshake for the responder's logs and metrics.
    pub node_name: String,
    pub local: LocalPort,
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
    pub auth: AuthMode,
    /// Deadline for every control exchange, and how long a burst may overrun its plan.
    pub timeout: Duration,
}

/// The result of one probe, successful or not: what `probe --json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProbeOutcome {
    /// The burst's figures; absent when the probe failed before the burst ran.
    #[serde(flatten)]
    pub report: Option<BurstReport>,
    /// What the burst aimed for: the rate limit, or the lower link rate of both ends when unpaced.
    pub target_bandwidth_bytes_per_second: Option<f64>,
    /// Control + QP setup time of the session this burst ran on.
    pub setup_seconds: Option<f64>,
    /// Whether the responder verified the data pattern after the burst.
    pub validated: bool,
    pub device: Option<String>,
    pub peer_device: Option<String>,
    pub mtu: Option<u32>,
    pub message_size: u64,
    pub qps: u16,
    pub local_link_rate_bits_per_second: Option<u64>,
    pub peer_link_rate_bits_per_second: Option<u64>,
    /// Port counter increases the responder saw during the burst.
    pub remote_counters: Vec<(String, u64)>,
    pub error: Option<ErrorReason>,
    pub message: Option<String>,
}

impl ProbeOutcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none()
    }
}
