//! Why a probe failed: the closed set of `reason` label values of the metric contract
//! (docs/metrics.md, "Error reasons").
//!
//! One enum shared by every module so that a failure detected anywhere (a completion status in
//! `verbs`, a refused handshake in `control`, a validation mismatch reported by the responder) ends
//! up as exactly one, bounded label value.

use serde::{Deserialize, Serialize};

/// A failure reason; `as_str` is the metric label and the `error` field of `probe --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorReason {
    Connect,
    Timeout,
    Auth,
    Protocol,
    NoDevice,
    PortDown,
    QpSetup,
    WcRetryExceeded,
    WcRnrRetryExceeded,
    WcRemoteAccess,
    WcRemoteOperation,
    WcLocalProtection,
    WcFlush,
    WcOther,
    Validation,
    PeerError,
    /// The peer's RDMA address (its GID) is not where this node may send (docs/security.md).
    RdmaAddress,
}

impl ErrorReason {
    /// Every reason, for documentation and tests (metrics pre-create nothing per reason).
    pub const ALL: [ErrorReason; 17] = [
        ErrorReason::Connect,
        ErrorReason::Timeout,
        ErrorReason::Auth,
        ErrorReason::Protocol,
        ErrorReason::NoDevice,
        ErrorReason::PortDown,
        ErrorReason::QpSetup,
        ErrorReason::WcRetryExceeded,
        ErrorReason::WcRnrRetryExceeded,
        ErrorReason::WcRemoteAccess,
        ErrorReason::WcRemoteOperation,
        ErrorReason::WcLocalProtection,
        ErrorReason::WcFlush,
        ErrorReason::WcOther,
        ErrorReason::Validation,
        ErrorReason::PeerError,
        ErrorReason::RdmaAddress,
    ];

    /// The label value, as written in the metric contract.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Connect => "connect",
            ErrorReason::Timeout => "timeout",
            ErrorReason::Auth => "auth",
            ErrorReason::Protocol => "protocol",
            ErrorReason::NoDevice => "no_device",
            ErrorReason::PortDown => "port_down",
            ErrorReason::QpSetup => "qp_setup",
            ErrorReason::WcRetryExceeded => "wc_retry_exceeded",
            ErrorReason::WcRnrRetryExceeded => "wc_rnr_retry_exceeded",
            ErrorReason::WcRemoteAccess => "wc_remote_access",
            ErrorReason::WcRemoteOperation => "wc_remote_operation",
            ErrorReason::WcLocalProtection => "wc_local_protection",
            ErrorReason::WcFlush => "wc_flush",
            ErrorReason::WcOther => "wc_other",
            ErrorReason::Validation => "validation",
            ErrorReason::PeerError => "peer_error",
            ErrorReason::RdmaAddress => "rdma_address",
        }
    }
}

impl std::fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_label() {
        for reason in ErrorReason::ALL {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
        }
    }
}
