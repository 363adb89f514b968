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
pub(super) const PING_RECEIVED: usize = GRH_LEN + PACKET_LEN;
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

/// Whether a received datagram's GRH (the first [`GRH_LEN`] bytes of its slot) names `gid` as
/// its source. RoCE v2 over IPv4 (an IPv4-mapped GID, `::ffff:a.b.c.d`) leaves the packet's IPv4
/// header in the GRH's last 20 bytes, its source address at 12..16 of them; InfiniBand and RoCE
/// over IPv6 leave the GRH or IPv6 header, its source GID at bytes 8..24. Every ping carries a
/// GRH (its address handle is global).
pub(super) fn from_source(grh: &[u8], gid: &[u8; 16]) -> bool {
    const IPV4_MAPPED: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    if gid[..12] == IPV4_MAPPED {
        grh.get(32..36) == Some(&gid[12..])
    } else {
        grh.get(8..24) == Some(&gid[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_read_where_each_kind_of_header_keeps_it() {
        // 192.0.2.11 as an IPv4-mapped GID, and an IPv4 header from it in the GRH's last 20
        // bytes (version 4, 20 bytes; source at 12..16, destination 192.0.2.12 at 16..20).
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 11];
        let mut grh = [0u8; GRH_LEN];
        grh[20] = 0x45;
        grh[32..36].copy_from_slice(&[192, 0, 2, 11]);
        grh[36..40].copy_from_slice(&[192, 0, 2, 12]);
        assert!(from_source(&grh, &v4));
        let mut other = v4;
        other[15] = 13;
        assert!(!from_source(&grh, &other), "another host");
        grh[32..36].copy_from_slice(&[192, 0, 2, 12]);
        assert!(
            !from_source(&grh, &v4),
            "the destination's address is not the source"
        );
        // An InfiniBand or RoCE v6 GID: the GRH's (or IPv6 header's) source GID, bytes 8..24.
        let v6 = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ];
        let mut grh = [0u8; GRH_LEN];
        grh[0] = 0x60;
        grh[8..24].copy_from_slice(&v6);
        assert!(from_source(&grh, &v6));
        grh[24..40].copy_from_slice(&v6);
        grh[8] = 0;
        assert!(!from_source(&grh, &v6), "only the destination names it");
        assert!(!from_source(&[], &v6), "no GRH");
    }

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
