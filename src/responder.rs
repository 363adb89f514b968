//! The server side of probe sessions: authenticates probers, allocates a bounded MR and the QPs,
//! advertises keys, allows one active burst per device (others get `busy`), verifies the data
//! pattern after each burst, and releases everything on close, error or idle timeout.

use std::time::Duration;

use crate::control::AuthMode;
use crate::prober::LocalPort;

/// Limits and identity of a responder.
#[derive(Debug, Clone)]
pub struct ResponderSettings {
    pub node_name: String,
    pub local: LocalPort,
    pub auth: AuthMode,
    /// Concurrent sessions; more are refused with `limit`.
    pub max_sessions: usize,
    /// Total memory pinned (registered) across sessions.
    pub max_pinned_bytes: u64,
    /// A session with no message for this long is closed and its resources freed.
    pub idle_timeout: Duration,
    /// Deadline for every control exchange.
    pub io_timeout: Duration,
}
