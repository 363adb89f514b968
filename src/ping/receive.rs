//! What the ping engine's receives hold and what a receive completion means: every slot takes
//! the longest UD datagram, and only a QP the device holds in the error state is reset
//! (docs/security.md, "What the pre-shared key protects").

use super::packet::PACKET_LEN;
use crate::verbs::{WcStatus, GRH_LEN};

/// The longest datagram a UD QP can receive: one packet of the largest MTU InfiniBand and RoCE
/// have. A receive slot takes it whole behind its GRH, so nothing a host on the fabric sends to
/// the ping QP, with the key or without it, is too long for a slot (docs/security.md, "What the
/// pre-shared key protects").
const MAX_DATAGRAM: usize = 4096;
/// A receive slot: the GRH and any datagram.
pub(super) const RECV_SLOT: usize = GRH_LEN + MAX_DATAGRAM;
/// A ping packet as a receive holds it: its GRH, then the packet.
const PING_RECEIVED: usize = GRH_LEN + PACKET_LEN;
// 4096 bytes: the largest path MTU (IBV_MTU_4096), so the longest payload of a UD datagram.
const _: () = assert!(RECV_SLOT >= GRH_LEN + 4096 && PING_RECEIVED <= RECV_SLOT);

/// What a receive completion brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Received {
    /// A datagram of a ping packet's length: read, and its slot posted again.
    Packet,
    /// Anything else the QP took, or a receive that completed in error while the QP stayed up
    /// (what a host without the key can cause): counted refused, its slot posted again.
    Refused,
    /// The QP is in the error state (its receives flushed): reset and brought up again.
    QpFailed,
}

/// Classifies a receive completion of `status` and `byte_len`; `qp_in_error` asks the device,
/// only for an error that is not a flush.
pub(super) fn received(
    status: WcStatus,
    byte_len: u32,
    qp_in_error: impl FnOnce() -> bool,
) -> Received {
    if status.is_success() {
        if byte_len as usize == PING_RECEIVED {
            Received::Packet
        } else {
            Received::Refused
        }
    } else if status != WcStatus::WrFlushErr && !qp_in_error() {
        Received::Refused
    } else {
        Received::QpFailed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_is_a_packet_only_at_a_ping_packets_length() {
        let up = || false;
        assert_eq!(
            received(WcStatus::Success, PING_RECEIVED as u32, up),
            Received::Packet
        );
        // A host without the key sending what it likes: refused, the QP untouched.
        for len in [0, GRH_LEN, PING_RECEIVED - 1, PING_RECEIVED + 1, RECV_SLOT] {
            assert_eq!(
                received(WcStatus::Success, len as u32, up),
                Received::Refused,
                "{len}"
            );
        }
    }

    #[test]
    fn only_a_qp_in_the_error_state_is_reset() {
        // A receive that completed in error on a QP still up (a datagram longer than its
        // slot, say) is refused and its slot posted again: resetting there would drop every
        // ping in flight for what one stranger sent.
        assert_eq!(
            received(WcStatus::LocLenErr, 0, || false),
            Received::Refused
        );
        assert_eq!(
            received(WcStatus::LocLenErr, 0, || true),
            Received::QpFailed
        );
        // A flush means the QP is down: no need to ask.
        assert_eq!(
            received(WcStatus::WrFlushErr, 0, || panic!("asked")),
            Received::QpFailed
        );
        // A success never asks either.
        received(WcStatus::Success, 0, || panic!("asked"));
    }
}
