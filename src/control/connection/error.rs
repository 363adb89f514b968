//! The error type of the control connection and its handshakes.

use std::io;
use std::time::Duration;

use thiserror::Error;

use crate::control::codec::CodecError;
use crate::control::message::Message;
use crate::control::seal::SealError;
use crate::reason::ErrorReason;

/// Why a control exchange failed. [`ControlError::reason`] gives the metric label.
#[derive(Debug, Error)]
pub enum ControlError {
    /// Could not open the TCP connection (refused, unreachable, name did not resolve).
    #[error("cannot connect to control port {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// The deadline passed while `during` was in progress.
    #[error("control connection timed out after {after:?} while {during}")]
    Timeout {
        during: &'static str,
        after: Duration,
    },
    /// The peer closed the connection (EOF) where a message was expected.
    #[error("control connection closed by peer")]
    Closed,
    /// Reading or writing the socket failed (reset, broken pipe, ...).
    #[error("control connection I/O error: {0}")]
    Io(#[source] io::Error),
    /// The peer sent bytes that are not a valid frame/message, or speaks another version.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A frame after the handshake failed authentication, or was not protected: changed,
    /// replayed, reordered, dropped or injected on the way (or a bug). The connection is closed.
    #[error(transparent)]
    Integrity(SealError),
    /// The peer sent a valid message that makes no sense at this point of the protocol.
    #[error("unexpected control message {got:?}, expected {expected}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    /// The peer failed our authentication check.
    #[error("authentication failed: {0}")]
    Auth(&'static str),
    /// This process's own prober reached this responder through a connection meant for another
    /// address: refused, so that it does not take the peer for this node.
    #[error(
        "a connection meant for {target} came back to the node that opened it (redirected on \
         the way?): refused"
    )]
    Redirected { target: String },
    /// No nonce could be drawn from the operating system.
    #[error("cannot generate a nonce: {0}")]
    Random(getrandom::Error),
    /// The peer reported a failure with an `Error` message.
    #[error("peer reported {reason}: {message}")]
    Peer {
        reason: ErrorReason,
        message: String,
    },
    /// An earlier error left the stream out of sync; drop this connection.
    #[error("control connection unusable after an earlier error")]
    Broken,
}

impl ControlError {
    /// The `reason` label this failure is counted under.
    ///
    /// Losing an established connection (EOF, reset) counts as `connect`: from the prober's point
    /// of view the peer became unreachable, which is what that label means. A frame that fails
    /// authentication after the handshake counts as `auth`, like a failed handshake: in both the
    /// peer (or whoever wrote the bytes) could not prove the key. A peer's `Error` keeps
    /// the peer's reason (an auth refusal is `auth` on both ends), except `connect`, which a peer
    /// cannot meaningfully report about us and becomes `peer_error`.
    pub fn reason(&self) -> ErrorReason {
        match self {
            ControlError::Connect { .. } | ControlError::Closed | ControlError::Io(_) => {
                ErrorReason::Connect
            }
            ControlError::Timeout { .. } => ErrorReason::Timeout,
            ControlError::Codec(_)
            | ControlError::Unexpected { .. }
            | ControlError::Broken
            | ControlError::Redirected { .. } => ErrorReason::Protocol,
            ControlError::Auth(_) | ControlError::Random(_) | ControlError::Integrity(_) => {
                ErrorReason::Auth
            }
            ControlError::Peer { reason, .. } => match reason {
                ErrorReason::Connect => ErrorReason::PeerError,
                other => *other,
            },
        }
    }

    /// The error for receiving `got` while waiting for `expected`: a peer `Error` becomes
    /// [`ControlError::Peer`], `Close` becomes [`ControlError::Closed`], anything else
    /// [`ControlError::Unexpected`].
    pub fn unexpected(expected: &'static str, got: Message) -> ControlError {
        match got {
            Message::Error { reason, message } => ControlError::Peer { reason, message },
            Message::Close => ControlError::Closed,
            other => ControlError::Unexpected {
                expected,
                got: other.kind(),
            },
        }
    }
}

impl From<SealError> for ControlError {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Codec(e) => ControlError::Codec(e),
            other => ControlError::Integrity(other),
        }
    }
}
