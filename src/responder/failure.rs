//! How a session fails or is refused: what the prober is told, how the refusal is counted, and
//! how often refusals are logged.

use std::time::{Duration, Instant};

use crate::control::ControlError;
use crate::metrics::SessionResult;
use crate::reason::ErrorReason;
use crate::verbs::VerbsError;

/// A session failure, as sent back to the prober.
#[derive(Debug)]
pub(super) struct SessionFailure {
    pub(super) reason: ErrorReason,
    pub(super) message: String,
    /// How `rdma_probe_responder_sessions_total` counts a refusal the reason alone does not tell
    /// (limits are sent as `peer_error`).
    pub(super) refusal: Option<SessionResult>,
}

impl SessionFailure {
    /// How `rdma_probe_responder_sessions_total` counts this failure, if it is a refusal.
    pub(super) fn refusal(&self) -> Option<SessionResult> {
        match self.reason {
            _ if self.refusal.is_some() => self.refusal,
            ErrorReason::Auth => Some(SessionResult::Auth),
            ErrorReason::Protocol => Some(SessionResult::Protocol),
            ErrorReason::RdmaAddress => Some(SessionResult::RdmaAddress),
            _ => None,
        }
    }

    /// [`SessionFailure::refusal`] for a connection that has no session yet: there a timeout
    /// (a silent, slow or stalled client) and a closed or reset connection (a port scan, a
    /// truncated frame) are refusals too, each under its own result.
    pub(super) fn refusal_before_session(&self) -> Option<SessionResult> {
        self.refusal().or(match self.reason {
            ErrorReason::Timeout => Some(SessionResult::Timeout),
            ErrorReason::Connect => Some(SessionResult::Closed),
            _ => None,
        })
    }
}

/// How many refusals are logged: at most one a second, with the number left out since, so that a
/// flood of hostile connections costs the log a line a second, not a line a connection (the
/// counters count every one).
#[derive(Debug, Default)]
pub(super) struct RefusalLog {
    state: std::sync::Mutex<RefusalLogState>,
}

#[derive(Debug, Default)]
struct RefusalLogState {
    last: Option<Instant>,
    /// Refusals not logged since `last`.
    left_out: u64,
}

impl RefusalLog {
    const EVERY: Duration = Duration::from_secs(1);

    pub(super) fn log(&self, peer: std::net::SocketAddr, refused: &SessionFailure) {
        let Some(left_out) = self.admit_line(Instant::now()) else {
            return;
        };
        tracing::warn!(%peer, reason = %refused.reason, error = %refused.message,
            refusals_not_logged = left_out, "connection refused");
    }

    /// `Some(refusals left out since the last line)` when a line is due at `now`.
    fn admit_line(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = state
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= Self::EVERY);
        if !due {
            state.left_out += 1;
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.left_out))
    }
}

impl From<ControlError> for SessionFailure {
    fn from(e: ControlError) -> Self {
        failure(e.reason(), e.to_string())
    }
}

impl From<VerbsError> for SessionFailure {
    fn from(e: VerbsError) -> Self {
        failure(e.reason(), e.to_string())
    }
}

pub(super) fn failure(reason: ErrorReason, message: impl Into<String>) -> SessionFailure {
    SessionFailure {
        reason,
        message: message.into(),
        refusal: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_once_a_second_with_the_number_left_out() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit_line(t0), Some(0));
        assert_eq!(log.admit_line(t0 + Duration::from_millis(500)), None);
        assert_eq!(log.admit_line(t0 + Duration::from_millis(900)), None);
        assert_eq!(log.admit_line(t0 + Duration::from_secs(1)), Some(2));
        assert_eq!(log.admit_line(t0 + Duration::from_secs(3)), Some(0));
    }

    #[test]
    fn only_before_a_session_are_timeouts_and_closes_refusals() {
        let timeout = failure(ErrorReason::Timeout, "no burst_end");
        assert_eq!(timeout.refusal(), None);
        assert_eq!(
            timeout.refusal_before_session(),
            Some(SessionResult::Timeout)
        );
        let closed = failure(ErrorReason::Connect, "reset");
        assert_eq!(closed.refusal(), None);
        assert_eq!(closed.refusal_before_session(), Some(SessionResult::Closed));
        let auth = failure(ErrorReason::Auth, "bad proof");
        assert_eq!(auth.refusal_before_session(), Some(SessionResult::Auth));
    }
}
