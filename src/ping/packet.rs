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

    /// Generated packets, keys and changes to their bytes, decoded as a receiver would. The
    /// fixed cases above pin one example of each refusal; these reach every check with
    /// arbitrary values, and a check is only reached when every one before it passed (right
    /// length, magic, version, ...), so the generator starts from valid packets and changes one
    /// thing. The run counts which check decided each case and fails if one was never reached.
    mod properties {
        use std::cell::RefCell;
        use std::collections::BTreeMap;
        use std::ops::Range;

        use proptest::collection::vec;
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        use super::super::*;

        fn packets() -> impl Strategy<Value = Packet> {
            let kind = prop_oneof![Just(Kind::Ping), Just(Kind::Ack), Just(Kind::Delay)];
            (kind, any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
                |(kind, key_id, seq, delay)| Packet {
                    kind,
                    key_id,
                    seq,
                    responder_delay_ns: if kind == Kind::Delay { delay } else { 0 },
                },
            )
        }

        fn keys() -> impl Strategy<Value = PingKey> {
            prop_oneof![
                4 => (vec(any::<u8>(), 0..48), any::<[u8; 32]>())
                    .prop_map(|(secret, transcript)| PingKey::derive(&secret, &transcript)),
                1 => Just(PingKey::unauthenticated()),
            ]
        }

        /// A field of the layout (module docs).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Field {
            Magic,
            Version,
            Kind,
            ReservedLow,
            KeyId,
            Seq,
            Delay,
            ReservedHigh,
            Tag,
        }

        const HEADER: [Field; 8] = [
            Field::Magic,
            Field::Version,
            Field::Kind,
            Field::ReservedLow,
            Field::KeyId,
            Field::Seq,
            Field::Delay,
            Field::ReservedHigh,
        ];

        impl Field {
            fn bytes(self) -> Range<usize> {
                match self {
                    Field::Magic => 0..4,
                    Field::Version => 4..5,
                    Field::Kind => 5..6,
                    Field::ReservedLow => 6..8,
                    Field::KeyId => 8..12,
                    Field::Seq => 12..20,
                    Field::Delay => 20..28,
                    Field::ReservedHigh => 28..32,
                    Field::Tag => 32..48,
                }
            }

            /// New bytes for the field: any, or near the valid ones (a version or kind of 0 to
            /// 4, bytes of 0 and 1), so valid and just-invalid values both come up often.
            fn values(self) -> BoxedStrategy<Vec<u8>> {
                let len = self.bytes().len();
                let near = match self {
                    Field::Version | Field::Kind => (0u8..=4).prop_map(|b| vec![b]).boxed(),
                    _ => vec(0u8..=1, len).boxed(),
                };
                prop_oneof![vec(any::<u8>(), len), near].boxed()
            }
        }

        /// What a case does to the valid packet's bytes.
        #[derive(Debug, Clone)]
        enum Change {
            None,
            /// Cut to, or padded with `fill` to, `len` bytes (never the packet's 48).
            Length {
                len: usize,
                fill: u8,
            },
            /// One field's bytes replaced, the tag left as it was: an altered packet.
            Altered(Field, Vec<u8>),
            /// One header field's bytes replaced and the packet tagged again with the right
            /// key: what only a holder of the key can send.
            Retagged(Field, Vec<u8>),
            /// Tagged with another session's key.
            OtherKey,
        }

        fn changes() -> impl Strategy<Value = Change> {
            let length = (0usize..=96)
                .prop_filter("not a packet's length", |len| *len != PACKET_LEN)
                .prop_flat_map(|len| {
                    any::<u8>().prop_map(move |fill| Change::Length { len, fill })
                });
            let mut all = HEADER.to_vec();
            all.push(Field::Tag);
            let altered = prop::sample::select(all)
                .prop_flat_map(|f| f.values().prop_map(move |v| Change::Altered(f, v)));
            let retagged = prop::sample::select(HEADER.to_vec())
                .prop_flat_map(|f| f.values().prop_map(move |v| Change::Retagged(f, v)));
            prop_oneof![
                1 => Just(Change::None),
                1 => length,
                9 => altered,
                8 => retagged,
                1 => Just(Change::OtherKey),
            ]
        }

        fn retag(buf: &mut [u8; PACKET_LEN], key: &PingKey) {
            let tag = key.mac(&buf[..TAGGED_LEN]).finalize().into_bytes();
            buf[TAGGED_LEN..].copy_from_slice(&tag[..TAG_LEN]);
        }

        fn be(v: &[u8]) -> u64 {
            v.iter().fold(0, |n, b| n << 8 | u64::from(*b))
        }

        /// What the layout says `change` to `packet` must decode to, the receiver holding only
        /// the packet's key id. Written from the module docs, check by check, not from the code.
        fn expected(packet: Packet, key: &PingKey, change: &Change) -> Result<Packet, PacketError> {
            let header = |field: Field, v: &[u8]| -> Option<PacketError> {
                match field {
                    Field::Magic if v != MAGIC => Some(PacketError::Magic),
                    Field::Version if v[0] != VERSION => Some(PacketError::Version(v[0])),
                    Field::Kind if Kind::from_code(v[0]).is_none() => Some(PacketError::Kind(v[0])),
                    Field::ReservedLow | Field::ReservedHigh if v.iter().any(|b| *b != 0) => {
                        Some(PacketError::Reserved)
                    }
                    Field::KeyId if be(v) != u64::from(packet.key_id) => {
                        Some(PacketError::UnknownKey(be(v) as u32))
                    }
                    _ => None,
                }
            };
            match change {
                Change::None => Ok(packet),
                Change::Length { len, .. } => Err(PacketError::Length(*len)),
                Change::OtherKey => Err(PacketError::Tag),
                Change::Altered(field, v) => {
                    let original = packet.encode(key);
                    if original[field.bytes()] == v[..] {
                        return Ok(packet);
                    }
                    // Any other change to the tagged bytes or the tag breaks the tag.
                    Err(header(*field, v).unwrap_or(PacketError::Tag))
                }
                Change::Retagged(field, v) => {
                    if let Some(refused) = header(*field, v) {
                        return Err(refused);
                    }
                    let mut new = packet;
                    match field {
                        Field::Kind => new.kind = Kind::from_code(v[0]).expect("checked above"),
                        Field::Seq => new.seq = be(v),
                        Field::Delay => new.responder_delay_ns = be(v),
                        _ => {}
                    }
                    if new.kind != Kind::Delay && new.responder_delay_ns != 0 {
                        return Err(PacketError::Reserved);
                    }
                    Ok(new)
                }
            }
        }

        fn apply(packet: Packet, key: &PingKey, change: &Change) -> Vec<u8> {
            let mut buf = packet.encode(key);
            match change {
                Change::None => {}
                Change::Length { len, fill } => {
                    let mut bytes = buf.to_vec();
                    bytes.resize(*len, *fill);
                    return bytes;
                }
                Change::Altered(field, v) => buf[field.bytes()].copy_from_slice(v),
                Change::Retagged(field, v) => {
                    buf[field.bytes()].copy_from_slice(v);
                    retag(&mut buf, key);
                }
                Change::OtherKey => {
                    let other = PingKey::derive(b"another session", &[0xa5; 32]);
                    buf = packet.encode(&other);
                }
            }
            buf.to_vec()
        }

        /// Which check decided a decode.
        fn outcome(result: &Result<Packet, PacketError>, buf: &[u8]) -> &'static str {
            match result {
                Ok(_) => "accepted",
                Err(PacketError::Length(_)) => "length",
                Err(PacketError::Magic) => "magic",
                Err(PacketError::Version(_)) => "version",
                Err(PacketError::Kind(_)) => "kind",
                // Reserved bytes all zero: the check after the tag (a delay on a ping or ack).
                Err(PacketError::Reserved) if buf[6..8] == [0, 0] && buf[28..32] == [0; 4] => {
                    "delay on a ping or ack, past the tag"
                }
                Err(PacketError::Reserved) => "reserved bytes",
                Err(PacketError::UnknownKey(_)) => "unknown key id",
                Err(PacketError::Tag) => "tag",
            }
        }

        #[test]
        fn a_changed_packet_decodes_as_the_layout_says_and_every_check_is_reached() {
            const CASES: u32 = 4_000;
            let mut runner = TestRunner::new(Config {
                cases: CASES,
                ..Config::default()
            });
            let reached: RefCell<BTreeMap<&'static str, u32>> = RefCell::default();
            runner
                .run(&(packets(), keys(), changes()), |(packet, key, change)| {
                    let buf = apply(packet, &key, &change);
                    let got = Packet::decode(&buf, |id| (id == packet.key_id).then_some(&key));
                    prop_assert_eq!(
                        &got,
                        &expected(packet, &key, &change),
                        "{:?} of {:?}",
                        change,
                        packet
                    );
                    // Whatever is accepted is exactly the tagged encoding of what it says.
                    if let Ok(accepted) = got {
                        prop_assert_eq!(&accepted.encode(&key)[..], &buf[..]);
                    }
                    *reached.borrow_mut().entry(outcome(&got, &buf)).or_default() += 1;
                    Ok(())
                })
                .unwrap();
            let reached = reached.into_inner();
            for check in [
                "accepted",
                "length",
                "magic",
                "version",
                "kind",
                "reserved bytes",
                "unknown key id",
                "tag",
                "delay on a ping or ack, past the tag",
            ] {
                let n = reached.get(check).copied().unwrap_or(0);
                assert!(
                    n >= CASES / 200,
                    "{check}: {n} of {CASES} cases ({reached:?})"
                );
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

            #[test]
            fn every_packet_round_trips_and_is_laid_out_as_documented(
                packet in packets(),
                key in keys(),
            ) {
                let buf = packet.encode(&key);
                prop_assert_eq!(Packet::decode(&buf, |id| (id == packet.key_id).then_some(&key)), Ok(packet));
                prop_assert_eq!(&buf[0..4], MAGIC);
                prop_assert_eq!(buf[4], VERSION);
                prop_assert_eq!(Kind::from_code(buf[5]), Some(packet.kind));
                prop_assert_eq!(be(&buf[8..12]), u64::from(packet.key_id));
                prop_assert_eq!(be(&buf[12..20]), packet.seq);
                prop_assert_eq!(be(&buf[20..28]), packet.responder_delay_ns);
                prop_assert_eq!(be(&buf[6..8]) | be(&buf[28..32]), 0);
            }

            /// A packet under another key (another session's, or the public one of `auth: none`)
            /// is refused at its tag, whatever it says.
            #[test]
            fn a_packet_under_another_key_is_refused_at_its_tag(
                packet in packets(),
                key in keys(),
                other in keys(),
            ) {
                prop_assume!(*key.0 != *other.0);
                let buf = packet.encode(&other);
                prop_assert_eq!(Packet::decode(&buf, |_| Some(&key)), Err(PacketError::Tag));
            }

            /// Any bytes at all: no panic, and nothing accepted but a genuine tagged packet.
            #[test]
            fn arbitrary_bytes_are_refused_unless_genuine(
                buf in prop_oneof![vec(any::<u8>(), 0..=96), vec(any::<u8>(), PACKET_LEN)],
                key in keys(),
            ) {
                if let Ok(accepted) = Packet::decode(&buf, |_| Some(&key)) {
                    prop_assert_eq!(&accepted.encode(&key)[..], &buf[..]);
                }
            }
        }
    }
}
