//! The ping datagram: what a prober's UD SEND and a responder's two answers carry.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "RPNG"
//!      4     1  version (1)
//!      5     1  kind: 1 ping, 2 ack (sent as soon as the ping is received),
//!               3 delay (sent once the ack's send completed: the responder's delay)
//!      6     2  reserved, zero
//!      8     4  key id: which ping key (one per control session) tags the packet
//!     12     8  sequence number of the ping (the answers repeat it)
//!     20     8  responder delay in nanoseconds (delay only; zero otherwise)
//!     28     4  reserved, zero
//!     32    16  tag: HMAC-SHA256(ping key, bytes 0..32), first 16 bytes
//! ```
//!
//! Big-endian throughout. The tag binds every field, so a forged or altered packet is told from
//! a real one and dropped before anything is measured; a replayed one carries a sequence number
//! its receiver is not waiting for (see [`super::path`]). The key comes from the control
//! session's handshake ([`PingKey::derive`]); with `auth: none` there is no secret to derive one
//! from and [`PingKey::unauthenticated`] only catches accidental corruption, as the control
//! frames are then in clear too (docs/security.md).
//!
//! Pure: unit-tested here.

use std::fmt;

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;
use zeroize::Zeroizing;

/// Bytes of every ping packet (a UD SEND's payload; the receive buffer adds the 40-byte GRH).
pub const PACKET_LEN: usize = 48;
const MAGIC: &[u8; 4] = b"RPNG";
const VERSION: u8 = 1;
const TAGGED_LEN: usize = 32;
const TAG_LEN: usize = PACKET_LEN - TAGGED_LEN;
const PING_KEY_LABEL: &[u8] = b"rdma-probe v3 ping";

type HmacSha256 = Hmac<Sha256>;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The prober's ping.
    Ping,
    /// The responder's first answer, sent as soon as the ping's receive completed.
    Ack,
    /// The responder's second answer: how long it held the ping (its receive completion to the
    /// ack's send completion).
    Delay,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Ping => 1,
            Kind::Ack => 2,
            Kind::Delay => 3,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        match code {
            1 => Some(Kind::Ping),
            2 => Some(Kind::Ack),
            3 => Some(Kind::Delay),
            _ => None,
        }
    }
}

/// One ping packet, as sent or as received and verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub kind: Kind,
    pub key_id: u32,
    pub seq: u64,
    /// Nanoseconds the responder held the ping; zero unless `kind` is [`Kind::Delay`].
    pub responder_delay_ns: u64,
}

/// Why a received packet was dropped unmeasured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PacketError {
    #[error("{0} bytes, not the {PACKET_LEN} of a ping packet")]
    Length(usize),
    #[error("not a ping packet (bad magic)")]
    Magic,
    #[error("ping packet version {0}, not {VERSION}")]
    Version(u8),
    #[error("unknown ping packet kind {0}")]
    Kind(u8),
    #[error("reserved bytes of a ping packet are not zero")]
    Reserved,
    #[error("ping packet for key {0}, which this end does not hold")]
    UnknownKey(u32),
    #[error("ping packet with a wrong tag (forged or altered)")]
    Tag,
}

/// The key that tags one control session's pings, both directions.
#[derive(Clone)]
pub struct PingKey(Zeroizing<[u8; 32]>);

impl PingKey {
    /// The key both ends of a control session derive from the secret its handshake proved and
    /// the handshake's transcript (the frame keys' inputs, under a label of its own).
    pub fn derive(secret: &[u8], transcript: &[u8; 32]) -> PingKey {
        let hkdf = Hkdf::<Sha256>::new(Some(transcript), secret);
        let mut key = Zeroizing::new([0u8; 32]);
        // 32 bytes is far below HKDF-SHA256's limit of 255 * 32, so this cannot fail.
        hkdf.expand(PING_KEY_LABEL, key.as_mut())
            .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 length"));
        PingKey(key)
    }

    /// The key of a session without authentication (`auth: none`): public, so a tag only
    /// catches corruption.
    pub fn unauthenticated() -> PingKey {
        PingKey(Zeroizing::new([0u8; 32]))
    }

    fn mac(&self, tagged: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <HmacSha256 as hmac::KeyInit>::new_from_slice(self.0.as_ref())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(tagged);
        mac
    }
}

impl fmt::Debug for PingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PingKey(..)")
    }
}

impl Packet {
    /// The packet's bytes, tagged with `key`.
    pub fn encode(&self, key: &PingKey) -> [u8; PACKET_LEN] {
        let mut buf = [0u8; PACKET_LEN];
        buf[0..4].copy_from_slice(MAGIC);
        buf[4] = VERSION;
        buf[5] = self.kind.code();
        buf[8..12].copy_from_slice(&self.key_id.to_be_bytes());
        buf[12..20].copy_from_slice(&self.seq.to_be_bytes());
        buf[20..28].copy_from_slice(&self.responder_delay_ns.to_be_bytes());
        let tag = key.mac(&buf[..TAGGED_LEN]).finalize().into_bytes();
        buf[TAGGED_LEN..].copy_from_slice(&tag[..TAG_LEN]);
        buf
    }

    /// The packet in `buf` once its tag verified under the key `key_for` gives for its key id.
    pub fn decode<'k>(
        buf: &[u8],
        key_for: impl FnOnce(u32) -> Option<&'k PingKey>,
    ) -> Result<Packet, PacketError> {
        if buf.len() != PACKET_LEN {
            return Err(PacketError::Length(buf.len()));
        }
        if &buf[0..4] != MAGIC {
            return Err(PacketError::Magic);
        }
        if buf[4] != VERSION {
            return Err(PacketError::Version(buf[4]));
        }
        let kind = Kind::from_code(buf[5]).ok_or(PacketError::Kind(buf[5]))?;
        if buf[6..8] != [0, 0] || buf[28..32] != [0; 4] {
            return Err(PacketError::Reserved);
        }
        let key_id = u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes"));
        let key = key_for(key_id).ok_or(PacketError::UnknownKey(key_id))?;
        key.mac(&buf[..TAGGED_LEN])
            .verify_truncated_left(&buf[TAGGED_LEN..])
            .map_err(|_| PacketError::Tag)?;
        let seq = u64::from_be_bytes(buf[12..20].try_into().expect("8 bytes"));
        let responder_delay_ns = u64::from_be_bytes(buf[20..28].try_into().expect("8 bytes"));
        if kind != Kind::Delay && responder_delay_ns != 0 {
            return Err(PacketError::Reserved);
        }
        Ok(Packet {
            kind,
            key_id,
            seq,
            responder_delay_ns,
        })
    }

    /// The responder's first answer to this ping.
    pub fn ack(&self) -> Packet {
        Packet {
            kind: Kind::Ack,
            responder_delay_ns: 0,
            ..*self
        }
    }

    /// The responder's second answer to this ping: it held it `delay_ns`.
    pub fn delay(&self, delay_ns: u64) -> Packet {
        Packet {
            kind: Kind::Delay,
            responder_delay_ns: delay_ns,
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PingKey {
        PingKey::derive(b"a secret", &[7; 32])
    }

    fn ping() -> Packet {
        Packet {
            kind: Kind::Ping,
            key_id: 9,
            seq: 0x0102_0304_0506_0708,
            responder_delay_ns: 0,
        }
    }

    #[test]
    fn a_packet_round_trips_under_its_key() {
        let key = key();
        for packet in [ping(), ping().ack(), ping().delay(12_345)] {
            let buf = packet.encode(&key);
            assert_eq!(
                Packet::decode(&buf, |id| (id == 9).then_some(&key)),
                Ok(packet)
            );
        }
    }

    #[test]
    fn the_layout_is_as_documented() {
        let buf = ping().delay(0x1122).encode(&key());
        assert_eq!(&buf[0..8], b"RPNG\x01\x03\x00\x00");
        assert_eq!(&buf[8..12], &[0, 0, 0, 9]);
        assert_eq!(&buf[12..20], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&buf[20..28], &[0, 0, 0, 0, 0, 0, 0x11, 0x22]);
        assert_eq!(&buf[28..32], &[0; 4]);
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let key = key();
        let buf = ping().delay(77).encode(&key);
        for i in 0..PACKET_LEN {
            let mut bad = buf;
            bad[i] ^= 0x40;
            assert!(
                Packet::decode(&bad, |_| Some(&key)).is_err(),
                "byte {i} altered was accepted"
            );
        }
    }

    #[test]
    fn another_sessions_key_or_an_unknown_key_id_is_refused() {
        let buf = ping().encode(&key());
        let other = PingKey::derive(b"a secret", &[8; 32]);
        assert_eq!(
            Packet::decode(&buf, |_| Some(&other)),
            Err(PacketError::Tag)
        );
        assert_eq!(
            Packet::decode(&buf, |_| None),
            Err(PacketError::UnknownKey(9))
        );
        let open = PingKey::unauthenticated();
        assert_eq!(Packet::decode(&buf, |_| Some(&open)), Err(PacketError::Tag));
    }

    #[test]
    fn malformed_packets_get_their_reason() {
        let key = key();
        let buf = ping().encode(&key);
        let decode = |b: &[u8]| Packet::decode(b, |_| Some(&key));
        assert_eq!(decode(&buf[..47]), Err(PacketError::Length(47)));
        assert_eq!(decode(&[0; 49]), Err(PacketError::Length(49)));
        let mut bad = buf;
        bad[0] = b'X';
        assert_eq!(decode(&bad), Err(PacketError::Magic));
        let mut bad = buf;
        bad[4] = 2;
        assert_eq!(decode(&bad), Err(PacketError::Version(2)));
        let mut bad = buf;
        bad[5] = 0;
        assert_eq!(decode(&bad), Err(PacketError::Kind(0)));
        let mut bad = buf;
        bad[30] = 1;
        assert_eq!(decode(&bad), Err(PacketError::Reserved));
    }

    #[test]
    fn a_delay_on_a_ping_or_ack_is_refused_even_when_tagged() {
        let key = key();
        let forged = Packet {
            responder_delay_ns: 5,
            ..ping()
        };
        assert_eq!(
            Packet::decode(&forged.encode(&key), |_| Some(&key)),
            Err(PacketError::Reserved)
        );
    }

    #[test]
    fn the_key_is_derived_from_both_inputs() {
        let buf = ping().encode(&PingKey::derive(b"a secret", &[7; 32]));
        let again = PingKey::derive(b"a secret", &[7; 32]);
        assert!(Packet::decode(&buf, |_| Some(&again)).is_ok());
        let other_secret = PingKey::derive(b"another", &[7; 32]);
        assert!(Packet::decode(&buf, |_| Some(&other_secret)).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let key = key();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..=64 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let _ = Packet::decode(&buf, |_| Some(&key));
        }
    }
}
