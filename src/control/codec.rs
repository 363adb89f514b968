//! Framing of control messages: pure encode/decode, no I/O, so it can be unit-tested and fuzzed.
//!
//! A frame is a fixed 12-byte header followed by the payload:
//!
//! ```text
//! offset  size  field
//!      0     4  magic  b"RPXC"           (rejects stray clients, e.g. HTTP, at the first bytes)
//!      4     2  protocol version, u16 BE (checked before anything else is interpreted)
//!      6     2  flags, u16 BE            (bit 0: protected; every other bit must be 0)
//!      8     4  payload length, u32 BE   (at most MAX_FRAME_LEN - HEADER_LEN)
//!     12     n  payload: the Message as JSON (see `message`), or, in a protected frame, that
//!               JSON encrypted and followed by its 16-byte tag (see `seal`)
//! ```
//!
//! The handshake's frames are clear; every frame after it is protected, unless both ends run
//! with `auth: none` (docs/security.md). This module handles the header and clear frames;
//! `seal` protects and opens the others with the same header checks.
//!
//! Why JSON for the payload: the messages are small and rare (a handful per burst, bursts are
//! seconds apart), so compactness buys nothing, while a readable payload makes packet captures and
//! interop work easy, and `serde_json` is already a dependency (a binary serde format would add one
//! more crate to audit in a decoder that faces the network). Why a binary header anyway: the
//! length and version must be readable before the payload is trusted, and a fixed-size header makes
//! "check the length before allocating" trivial.
//!
//! The decoder never panics and never allocates on the strength of the length field: a length above
//! the limit is an error as soon as the header is complete, and the payload is parsed in place from
//! the caller's buffer.
//!
//! What the decoder hands on is safe to print: the payload must be a JSON object (not the array
//! form serde would also take), names with control characters are refused, and such characters
//! are escaped in free text and in the decoder's own error texts, which quote the peer's bytes (an
//! unknown `type` or `reason`, a bad hex string). See "Text from the peer" in `message`.

use thiserror::Error;

use super::message::{escape_unsafe_chars, object_form, Message};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"RPXC";
/// The control protocol version this build speaks. Bump on any incompatible change.
pub const PROTOCOL_VERSION: u16 = 3;
/// Size of the fixed frame header.
pub const HEADER_LEN: usize = 12;
/// Largest frame (header + payload) either side sends or accepts. The biggest legitimate message,
/// a `SessionAccept` for 64 QPs, is about 10 KiB of JSON; the cap bounds what a peer can make us
/// buffer.
pub const MAX_FRAME_LEN: usize = 64 * 1024;
/// Largest payload that fits in a frame.
pub const MAX_PAYLOAD_LEN: usize = MAX_FRAME_LEN - HEADER_LEN;

/// Why bytes could not be turned into a message (or a message into a frame).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// The stream does not start with our magic: not a control-protocol peer (or out of sync).
    #[error(
        "not a control protocol frame (bad magic {found:02x?}, expected {MAGIC:02x?} \"RPXC\")"
    )]
    BadMagic { found: Vec<u8> },
    /// The peer runs an incompatible build; both versions are named so the operator knows which
    /// side to upgrade.
    #[error("peer speaks control protocol v{theirs}, we speak v{ours}: upgrade the older side")]
    UnsupportedVersion { ours: u16, theirs: u16 },
    /// The announced (or, on encode, the actual) frame is above [`MAX_FRAME_LEN`].
    #[error("control frame of {len} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge { len: u64, max: usize },
    /// The header was fine but the frame is not a valid message.
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// The flags field of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameFlags(u16);

impl FrameFlags {
    /// A frame of the handshake, or of a connection with `auth: none`: the payload is JSON.
    pub const CLEAR: FrameFlags = FrameFlags(0);
    /// A frame after the handshake: the payload is the encrypted JSON and its tag (`seal`).
    pub const PROTECTED: FrameFlags = FrameFlags(1);
    /// Every flag this version knows; any other bit is refused rather than ignored (a new flag
    /// would change how the payload is read, and needs a new protocol version anyway).
    const KNOWN: u16 = 1;

    pub fn contains(self, other: FrameFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// One whole frame found at the start of a buffer, its header checked, its payload not read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawFrame<'a> {
    /// The 12 header bytes (the associated data of a protected frame).
    pub header: &'a [u8],
    pub flags: FrameFlags,
    pub payload: &'a [u8],
    /// Header and payload: the bytes the frame takes in the stream.
    pub len: usize,
}

/// Encode `msg` as one clear frame of the current protocol version.
///
/// Fails if the message does not pass [`Message::validate`] (we never send what we would reject)
/// or if it does not fit in [`MAX_FRAME_LEN`].
pub fn encode(msg: &Message) -> Result<Vec<u8>, CodecError> {
    encode_with_version(msg, PROTOCOL_VERSION)
}

/// Encode with an explicit header version. Only tests need another version than ours (to act as an
/// old or future peer); production code uses [`encode`].
pub(crate) fn encode_with_version(msg: &Message, version: u16) -> Result<Vec<u8>, CodecError> {
    let json = message_json(msg)?;
    let mut frame = header_with_version(version, FrameFlags::CLEAR, json.len())?.to_vec();
    frame.extend_from_slice(&json);
    Ok(frame)
}

/// The payload of `msg`: its JSON, once it passed [`Message::validate`].
pub(crate) fn message_json(msg: &Message) -> Result<Vec<u8>, CodecError> {
    msg.validate().map_err(CodecError::Malformed)?;
    serde_json::to_vec(msg)
        .map_err(|e| CodecError::Malformed(format!("cannot serialize {}: {e}", msg.kind())))
}

/// The header of a frame of this version with `payload_len` bytes of payload.
pub(crate) fn header(
    flags: FrameFlags,
    payload_len: usize,
) -> Result<[u8; HEADER_LEN], CodecError> {
    header_with_version(PROTOCOL_VERSION, flags, payload_len)
}

fn header_with_version(
    version: u16,
    flags: FrameFlags,
    payload_len: usize,
) -> Result<[u8; HEADER_LEN], CodecError> {
    let too_large = || CodecError::FrameTooLarge {
        len: (HEADER_LEN as u64).saturating_add(payload_len as u64),
        max: MAX_FRAME_LEN,
    };
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(too_large());
    }
    let len = u32::try_from(payload_len).map_err(|_| too_large())?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&version.to_be_bytes());
    header[6..8].copy_from_slice(&flags.0.to_be_bytes());
    header[8..].copy_from_slice(&len.to_be_bytes());
    Ok(header)
}

/// Try to decode one clear frame from the start of `buf`.
///
/// * `Ok(Some((msg, consumed)))`: a complete, valid message; drop `consumed` bytes from the buffer.
/// * `Ok(None)`: `buf` is a valid prefix of a frame; read more bytes and call again.
/// * `Err(_)`: the stream is unusable (after a framing error there is no way to resynchronize);
///   the caller should report the error and close the connection.
///
/// Errors are reported as early as the bytes allow: a wrong magic at the first differing byte, a
/// wrong version or oversize length as soon as the header is complete (before waiting for, or
/// buffering, the payload). A protected frame is an error here: [`seal::Opener`] opens those.
///
/// [`seal::Opener`]: super::seal::Opener
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, CodecError> {
    decode_with_version(buf, PROTOCOL_VERSION)
}

/// [`decode`] as a peer speaking `ours` would; see [`encode_with_version`].
pub(crate) fn decode_with_version(
    buf: &[u8],
    ours: u16,
) -> Result<Option<(Message, usize)>, CodecError> {
    let Some(frame) = split_frame_with_version(buf, ours)? else {
        return Ok(None);
    };
    if frame.flags.contains(FrameFlags::PROTECTED) {
        return Err(CodecError::Malformed(
            "a protected frame where a clear one belongs (before the handshake finished, or \
             with auth: none)"
                .into(),
        ));
    }
    Ok(Some((parse_message(frame.payload)?, frame.len)))
}

/// The frame at the start of `buf`, its header checked (magic, version, flags, length);
/// `Ok(None)` while the buffer holds only part of it.
pub(crate) fn split_frame(buf: &[u8]) -> Result<Option<RawFrame<'_>>, CodecError> {
    split_frame_with_version(buf, PROTOCOL_VERSION)
}

fn split_frame_with_version(buf: &[u8], ours: u16) -> Result<Option<RawFrame<'_>>, CodecError> {
    let magic_seen = buf.len().min(MAGIC.len());
    if buf[..magic_seen] != MAGIC[..magic_seen] {
        return Err(CodecError::BadMagic {
            found: buf[..magic_seen].to_vec(),
        });
    }
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let version = u16::from_be_bytes([header[4], header[5]]);
    if version != ours {
        return Err(CodecError::UnsupportedVersion {
            ours,
            theirs: version,
        });
    }
    let flags = u16::from_be_bytes([header[6], header[7]]);
    if flags & !FrameFlags::KNOWN != 0 {
        return Err(CodecError::Malformed(format!(
            "reserved header flags set ({flags:#06x})"
        )));
    }
    let payload_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    // u32 -> usize is lossless on every platform we build for; compare in u64 to be sure.
    if u64::from(payload_len) > MAX_PAYLOAD_LEN as u64 {
        return Err(CodecError::FrameTooLarge {
            len: u64::from(payload_len) + HEADER_LEN as u64,
            max: MAX_FRAME_LEN,
        });
    }
    let len = HEADER_LEN + payload_len as usize;
    let Some(payload) = buf.get(HEADER_LEN..len) else {
        return Ok(None);
    };
    Ok(Some(RawFrame {
        header,
        flags: FrameFlags(flags),
        payload,
        len,
    }))
}

/// A payload as a message that passed [`Message::validate`], its free text escaped.
pub(crate) fn parse_message(payload: &[u8]) -> Result<Message, CodecError> {
    let mut msg = parse_payload(payload).map_err(|e| {
        CodecError::Malformed(format!(
            "invalid payload: {}",
            escape_unsafe_chars(&e.to_string())
        ))
    })?;
    msg.validate().map_err(CodecError::Malformed)?;
    msg.escape_free_text();
    Ok(msg)
}

/// The payload as a message in its documented form: one JSON object and nothing after it.
fn parse_payload(payload: &[u8]) -> Result<Message, serde_json::Error> {
    let mut json = serde_json::Deserializer::from_slice(payload);
    let msg = object_form::deserialize(&mut json)?;
    json.end()?;
    Ok(msg)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::control::message::*;
    use crate::reason::ErrorReason;
    use proptest::prelude::*;
    use serde::Deserialize;

    fn ep(i: u32) -> QpEndpoint {
        QpEndpoint {
            qpn: 0x11 + i,
            psn: 0xabcdef - i,
            lid: 0,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, i as u8],
        }
    }

    /// One of every message kind (and every outcome), so a new variant without a round trip test
    /// shows up as a missing entry here.
    pub(crate) fn all_messages() -> Vec<Message> {
        vec![
            Message::Hello {
                node: "node-a".into(),
                target: "node-b:18516".into(),
                client_nonce: [7; 32],
            },
            Message::Challenge {
                server_nonce: [1; 32],
                server_proofs: vec![[0xfe; 32], [0xef; 32]],
            },
            Message::Authenticate {
                client_proof: [0x5a; 32],
            },
            Message::AuthOk {
                identity: Some(identity()),
            },
            Message::SessionRequest(SessionRequest {
                device: Some("mlx5_0".into()),
                rail: Some(3),
                qps: 2,
                message_size: 65536,
                region_bytes: 1 << 20,
                endpoints: vec![ep(0), ep(1)],
                mtu: 4096,
                link_rate_bits_per_second: Some(200_000_000_000),
                traffic_class: 106,
                service_level: 3,
            }),
            Message::SessionRequest(SessionRequest {
                device: None,
                rail: None,
                qps: 1,
                message_size: 1,
                region_bytes: 1,
                endpoints: vec![ep(9)],
                mtu: 1024,
                link_rate_bits_per_second: None,
                traffic_class: 0,
                service_level: 0,
            }),
            Message::SessionAccept(SessionAccept {
                device: "mlx5_1".into(),
                endpoints: vec![ep(3)],
                regions: vec![RemoteRegion {
                    addr: u64::MAX - 4095,
                    rkey: u32::MAX,
                    len: 1 << 20,
                }],
                mtu: 2048,
                link_rate_bits_per_second: Some(100_000_000_000),
            }),
            Message::BurstStart {
                burst_id: u64::MAX,
                seed: 0x0123_4567_89ab_cdef,
                deadline_ms: None,
            },
            Message::BurstReady { burst_id: 3 },
            Message::Busy {
                retry_after_ms: 250,
            },
            Message::BurstEnd {
                burst_id: 3,
                outcome: BurstOutcome::Completed,
                posted_per_qp: vec![128, 127],
            },
            Message::BurstEnd {
                burst_id: 4,
                outcome: BurstOutcome::Failed {
                    reason: ErrorReason::WcRetryExceeded,
                    detail: "transport retry counter exceeded".into(),
                },
                posted_per_qp: vec![],
            },
            Message::BurstResult(BurstResult {
                burst_id: 3,
                validated: true,
                detail: None,
                counters: vec![("port_rcv_data".into(), 123), ("np_cnp_sent".into(), 0)],
                verified_messages: 255,
            }),
            Message::BurstResult(BurstResult {
                burst_id: 4,
                validated: false,
                detail: Some("byte 17 of region 0: \"x\" \u{e9}".into()),
                counters: vec![],
                verified_messages: 0,
            }),
            Message::Error {
                reason: ErrorReason::Auth,
                message: "authentication failed".into(),
            },
            Message::Close,
            Message::AuthOk { identity: None },
        ]
    }

    /// A responder's identity with every field set.
    pub(crate) fn identity() -> Identity {
        Identity {
            node: "gpu-b07".into(),
            labels: [
                ("rack".to_owned(), "r 12".to_owned()),
                ("tor".to_owned(), "tor-b".to_owned()),
            ]
            .into(),
            devices: vec![
                IdentityDevice {
                    name: "mlx5_0".into(),
                    port: 1,
                    rail: Some(0),
                },
                IdentityDevice {
                    name: "rxe0".into(),
                    port: 2,
                    rail: None,
                },
            ],
        }
    }

    fn frame(version: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&version.to_be_bytes());
        f.extend_from_slice(&flags.to_be_bytes());
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn every_message_round_trips() {
        for msg in all_messages() {
            let bytes = encode(&msg).unwrap();
            assert!(bytes.len() <= MAX_FRAME_LEN);
            assert_eq!(&bytes[..4], b"RPXC");
            let (back, used) = decode(&bytes).unwrap().unwrap();
            assert_eq!(back, msg);
            assert_eq!(used, bytes.len());
        }
    }

    #[test]
    fn payload_is_tagged_json_with_hex_bytes() {
        let bytes = encode(&Message::Hello {
            node: "n".into(),
            target: "t:1".into(),
            client_nonce: [0xab; 32],
        })
        .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes[HEADER_LEN..]).unwrap();
        assert_eq!(json["type"], "hello");
        assert_eq!(json["client_nonce"], "ab".repeat(32));
    }

    #[test]
    fn every_prefix_asks_for_more() {
        for msg in all_messages() {
            let bytes = encode(&msg).unwrap();
            for cut in 0..bytes.len() {
                assert_eq!(
                    decode(&bytes[..cut]),
                    Ok(None),
                    "{} cut at {cut}",
                    msg.kind()
                );
            }
        }
    }

    #[test]
    fn back_to_back_frames_decode_one_at_a_time() {
        let msgs = all_messages();
        let mut stream = Vec::new();
        for m in &msgs {
            stream.extend(encode(m).unwrap());
        }
        let mut at = 0;
        for m in &msgs {
            let (back, used) = decode(&stream[at..]).unwrap().unwrap();
            assert_eq!(&back, m);
            at += used;
        }
        assert_eq!(at, stream.len());
    }

    #[test]
    fn bad_magic_is_reported_at_the_first_wrong_byte() {
        assert!(matches!(
            decode(b"GET / HTTP/1.1\r\n"),
            Err(CodecError::BadMagic { .. })
        ));
        assert!(matches!(decode(b"G"), Err(CodecError::BadMagic { .. })));
        assert!(matches!(decode(b"RPX!"), Err(CodecError::BadMagic { .. })));
        assert_eq!(decode(b"RPX"), Ok(None));
    }

    #[test]
    fn version_mismatch_names_both_versions() {
        let (ours, theirs) = (PROTOCOL_VERSION, PROTOCOL_VERSION + 1);
        let bytes = encode_with_version(&Message::Close, theirs).unwrap();
        let err = decode(&bytes).unwrap_err();
        assert_eq!(err, CodecError::UnsupportedVersion { ours, theirs });
        assert!(err.to_string().contains(&format!(
            "peer speaks control protocol v{theirs}, we speak v{ours}"
        )));
        // Detected from the header alone, without waiting for the payload.
        assert!(matches!(
            decode(&bytes[..HEADER_LEN]),
            Err(CodecError::UnsupportedVersion { .. })
        ));
        // And the other way round: a v1 build (before frames were protected) reading ours.
        let frame = encode(&Message::Close).unwrap();
        let err = decode_with_version(&frame, 1).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "peer speaks control protocol v{ours}, we speak v1"
            )),
            "{err}"
        );
    }

    #[test]
    fn oversize_length_is_rejected_from_the_header_alone() {
        // Only the 12 header bytes exist: the decoder must not wait for (or allocate) 4 GiB.
        let mut header = frame(PROTOCOL_VERSION, 0, b"");
        header[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode(&header),
            Err(CodecError::FrameTooLarge {
                len: u64::from(u32::MAX) + HEADER_LEN as u64,
                max: MAX_FRAME_LEN
            })
        );
        header[8..12].copy_from_slice(&((MAX_PAYLOAD_LEN + 1) as u32).to_be_bytes());
        assert!(matches!(
            decode(&header),
            Err(CodecError::FrameTooLarge { .. })
        ));
        // Exactly at the limit is allowed (it only needs more bytes).
        header[8..12].copy_from_slice(&(MAX_PAYLOAD_LEN as u32).to_be_bytes());
        assert_eq!(decode(&header), Ok(None));
    }

    #[test]
    fn oversize_message_is_not_encoded() {
        let msg = Message::Error {
            reason: ErrorReason::PeerError,
            message: "x".repeat(MAX_FRAME_LEN),
        };
        assert!(matches!(
            encode(&msg),
            Err(CodecError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn reserved_flags_are_rejected() {
        for flags in [2u16, 0x8000, 0x0103] {
            let mut bytes = encode(&Message::Close).unwrap();
            bytes[6..8].copy_from_slice(&flags.to_be_bytes());
            assert!(
                matches!(decode(&bytes), Err(CodecError::Malformed(m)) if m.contains("reserved")),
                "{flags:#x}"
            );
        }
    }

    #[test]
    fn unknown_kind_and_garbage_payloads_are_malformed() {
        for payload in [
            &br#"{"type":"launch_missiles"}"#[..],
            br#"{"no_type":1}"#,
            br#"[]"#,
            b"",
            b"\xff\xfe",
            br#"{"type":"hello","node":"a","client_nonce":"zz"}"#,
            br#"{"type":"hello","node":"a","client_nonce":"abab"}"#,
            br#"{"type":"burst_ready","burst_id":-1}"#,
            br#"{"type":"burst_ready","burst_id":18446744073709551616}"#,
            br#"{"type":"error","reason":"not_a_reason","message":""}"#,
            br#"{"type":"close"} trailing"#,
        ] {
            let err = decode(&frame(PROTOCOL_VERSION, 0, payload)).unwrap_err();
            assert!(
                matches!(err, CodecError::Malformed(_)),
                "{payload:?}: {err:?}"
            );
        }
    }

    #[test]
    fn unknown_fields_are_ignored_for_forward_compatibility() {
        let bytes = frame(
            PROTOCOL_VERSION,
            0,
            br#"{"type":"burst_ready","burst_id":5,"added_in_v1_1":true}"#,
        );
        assert_eq!(
            decode(&bytes).unwrap().unwrap().0,
            Message::BurstReady { burst_id: 5 }
        );
    }

    #[test]
    fn session_request_without_traffic_class_decodes_as_class_zero() {
        let Message::SessionRequest(mut request) = all_messages()[4].clone() else {
            unreachable!()
        };
        let mut json = serde_json::to_value(Message::SessionRequest(request.clone())).unwrap();
        // Internally tagged: the request's fields sit beside "type".
        let fields = json.as_object_mut().expect("a JSON object");
        assert!(fields.remove("traffic_class").is_some());
        assert!(fields.remove("service_level").is_some());
        let payload = serde_json::to_vec(&json).unwrap();
        let (decoded, _) = decode(&frame(PROTOCOL_VERSION, 0, &payload))
            .unwrap()
            .expect("a whole frame");
        (request.traffic_class, request.service_level) = (0, 0);
        assert_eq!(decoded, Message::SessionRequest(request));
    }

    #[test]
    fn session_request_without_rail_decodes_as_none() {
        let Message::SessionRequest(mut request) = all_messages()[4].clone() else {
            unreachable!()
        };
        assert_eq!(request.rail, Some(3));
        let mut json = serde_json::to_value(Message::SessionRequest(request.clone())).unwrap();
        assert_eq!(json["rail"], 3);
        let fields = json.as_object_mut().expect("a JSON object");
        assert!(fields.remove("rail").is_some());
        let payload = serde_json::to_vec(&json).unwrap();
        let (decoded, _) = decode(&frame(PROTOCOL_VERSION, 0, &payload))
            .unwrap()
            .expect("a whole frame");
        request.rail = None;
        assert_eq!(decoded, Message::SessionRequest(request.clone()));
        // Without a rail the field is not sent at all, so older responders see what they knew.
        let bytes = encode(&Message::SessionRequest(request)).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes[HEADER_LEN..]).unwrap();
        assert!(json.get("rail").is_none(), "{json}");
    }

    #[test]
    fn session_request_rail_round_trips() {
        for rail in [Some(0), Some(7), Some(u16::MAX), None] {
            let Message::SessionRequest(mut request) = all_messages()[5].clone() else {
                unreachable!()
            };
            request.rail = rail;
            let msg = Message::SessionRequest(request);
            let (back, _) = decode(&encode(&msg).unwrap()).unwrap().unwrap();
            assert_eq!(back, msg);
        }
    }

    #[test]
    fn invalid_sessions_are_rejected_on_decode_and_encode() {
        let Message::SessionRequest(good) = all_messages()[4].clone() else {
            unreachable!()
        };
        type Mutation = (&'static str, fn(&mut SessionRequest));
        let cases: Vec<Mutation> = vec![
            ("qps 0", |r| {
                r.qps = 0;
                r.endpoints.clear();
            }),
            ("qps too many", |r| {
                r.qps = MAX_QPS + 1;
                r.endpoints = vec![ep(0); (MAX_QPS + 1) as usize];
            }),
            ("endpoint count", |r| r.qps = 3),
            ("message size 0", |r| r.message_size = 0),
            ("region too small", |r| r.region_bytes = r.message_size - 1),
            ("mtu", |r| r.mtu = 1500),
            ("service level 5 bits", |r| r.service_level = 16),
            ("qpn 25 bits", |r| r.endpoints[0].qpn = 1 << 24),
            ("psn 25 bits", |r| r.endpoints[1].psn = u32::MAX),
            ("empty device", |r| r.device = Some(String::new())),
            ("control char", |r| r.device = Some("mlx5_0\n".into())),
        ];
        for (what, mutate) in cases {
            let mut bad = good.clone();
            mutate(&mut bad);
            let msg = Message::SessionRequest(bad);
            assert!(
                matches!(encode(&msg), Err(CodecError::Malformed(_))),
                "encode accepted {what}"
            );
            let payload = serde_json::to_vec(&msg).unwrap();
            assert!(
                matches!(
                    decode(&frame(PROTOCOL_VERSION, 0, &payload)),
                    Err(CodecError::Malformed(_))
                ),
                "decode accepted {what}"
            );
        }

        let Message::SessionAccept(good) = all_messages()[6].clone() else {
            unreachable!()
        };
        let mut bad = good.clone();
        bad.regions.clear();
        assert!(encode(&Message::SessionAccept(bad)).is_err());
        let mut bad = good.clone();
        bad.regions[0].len = 0;
        assert!(encode(&Message::SessionAccept(bad)).is_err());
        let mut bad = good;
        bad.endpoints.clear();
        bad.regions.clear();
        assert!(encode(&Message::SessionAccept(bad)).is_err());
        assert!(encode(&Message::Hello {
            node: String::new(),
            target: "t:1".into(),
            client_nonce: [0; 32]
        })
        .is_err());
    }

    /// Mutations of valid frames: the inputs a fuzzer reaches first, and the ones most likely to get
    /// past the header checks into the payload parser.
    fn mutated_frame() -> impl Strategy<Value = Vec<u8>> {
        let msgs = all_messages();
        (
            0..msgs.len(),
            proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..4), 0..8),
        )
            .prop_map(move |(i, edits)| {
                let mut bytes = encode(&msgs[i]).unwrap();
                for (pos, byte, op) in edits {
                    if bytes.is_empty() {
                        bytes.push(byte);
                        continue;
                    }
                    let pos = pos % bytes.len();
                    match op {
                        0 => bytes[pos] = byte,
                        1 => bytes.insert(pos, byte),
                        2 => {
                            bytes.remove(pos);
                        }
                        _ => bytes.truncate(pos),
                    }
                }
                bytes
            })
    }

    /// Checks shared by the property tests and the corpus replay (and mirrored by the cargo-fuzz
    /// target): no panic, a consumed count within the buffer, a decoded message that re-encodes to
    /// itself, and nothing unsafe to print, neither in the message nor in the error.
    pub(crate) fn check_decode_properties(data: &[u8]) {
        match decode(data) {
            Ok(Some((msg, used))) => {
                assert!(used >= HEADER_LEN && used <= data.len() && used <= MAX_FRAME_LEN);
                assert_printable(&msg);
                if let Ok(again) = encode(&msg) {
                    assert_eq!(decode(&again).unwrap().unwrap().0, msg);
                }
            }
            Ok(None) => assert!(data.len() < MAX_FRAME_LEN),
            Err(e) => {
                let text = e.to_string();
                assert!(!text.chars().any(is_unsafe_char), "{text:?}");
            }
        }
    }

    /// Every string anywhere in `msg`, names and free text alike, is free of unsafe characters:
    /// checked on the JSON form so that a string field added later is covered without a change
    /// here.
    pub(crate) fn assert_printable(msg: &Message) {
        fn walk(value: &serde_json::Value) {
            match value {
                serde_json::Value::String(s) => {
                    assert!(!s.chars().any(is_unsafe_char), "{s:?}")
                }
                serde_json::Value::Array(items) => items.iter().for_each(walk),
                serde_json::Value::Object(fields) => fields.values().for_each(walk),
                _ => {}
            }
        }
        walk(&serde_json::to_value(msg).unwrap());
    }

    fn decode_payload(payload: &[u8]) -> Result<Message, CodecError> {
        decode(&frame(PROTOCOL_VERSION, 0, payload)).map(|m| m.expect("a whole frame").0)
    }

    #[test]
    fn array_form_payloads_are_malformed() {
        for payload in [
            &br#"["burst_start",7,42]"#[..],
            br#"["close"]"#,
            br#"["auth_ok"]"#,
            br#"["burst_ready",3]"#,
            br#"["busy",250]"#,
            br#"["error","auth","x"]"#,
            br#" ["close"]"#,
            br#"["hello","node-a","0707070707070707070707070707070707070707070707070707070707070707"]"#,
        ] {
            let err = decode_payload(payload).unwrap_err();
            assert!(
                matches!(&err, CodecError::Malformed(m) if m.contains("invalid type: sequence")),
                "{}: {err:?}",
                String::from_utf8_lossy(payload)
            );
        }
        // The object form of the same messages still decodes.
        assert!(matches!(
            decode_payload(br#"{"type":"burst_start","burst_id":7,"seed":42}"#),
            Ok(Message::BurstStart {
                burst_id: 7,
                seed: 42,
                ..
            })
        ));
        assert_eq!(decode_payload(br#"{"type":"close"}"#), Ok(Message::Close));
    }

    #[test]
    fn array_form_nested_values_are_malformed() {
        let gid = format!("\"{}\"", "00".repeat(16));
        for payload in [
            r#"{"type":"burst_end","burst_id":3,"outcome":["completed"]}"#.to_owned(),
            r#"{"type":"burst_end","burst_id":3,"outcome":["failed","auth","x"]}"#.to_owned(),
            format!(
                r#"{{"type":"session_request","device":null,"qps":1,"message_size":1,
                "region_bytes":1,"endpoints":[[17,5,0,{gid}]],"mtu":1024,
                "link_rate_bits_per_second":null}}"#
            ),
            format!(
                r#"{{"type":"session_accept","device":"mlx5_1",
                "endpoints":[{{"qpn":17,"psn":5,"lid":0,"gid":{gid}}}],"regions":[[4096,1,4096]],
                "mtu":1024,"link_rate_bits_per_second":null}}"#
            ),
        ] {
            let err = decode_payload(payload.as_bytes()).unwrap_err();
            assert!(
                matches!(&err, CodecError::Malformed(m) if m.contains("invalid type: sequence")),
                "{payload}: {err:?}"
            );
        }
        // The object forms of the same values decode.
        let ok = decode_payload(
            br#"{"type":"burst_end","burst_id":3,"outcome":{"status":"failed","reason":"auth"}}"#,
        )
        .unwrap();
        assert_eq!(
            ok,
            Message::BurstEnd {
                burst_id: 3,
                outcome: BurstOutcome::Failed {
                    reason: ErrorReason::Auth,
                    detail: String::new()
                },
                posted_per_qp: vec![],
            }
        );
        let accept = format!(
            r#"{{"type":"session_accept","device":"mlx5_1",
            "endpoints":[{{"qpn":17,"psn":5,"lid":0,"gid":{gid}}}],
            "regions":[{{"addr":4096,"rkey":1,"len":4096}}],
            "mtu":1024,"link_rate_bits_per_second":null}}"#
        );
        assert!(matches!(
            decode_payload(accept.as_bytes()),
            Ok(Message::SessionAccept(_))
        ));
    }

    #[test]
    fn duplicate_fields_stay_malformed() {
        for payload in [
            &br#"{"type":"burst_ready","burst_id":1,"burst_id":2}"#[..],
            br#"{"type":"burst_end","burst_id":1,"outcome":{"status":"completed","status":"completed"}}"#,
            br#"{"type":"burst_end","burst_id":1,"outcome":{"status":"failed","reason":"auth","reason":"timeout"}}"#,
        ] {
            assert!(
                matches!(decode_payload(payload), Err(CodecError::Malformed(_))),
                "{}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    /// What a hostile peer would put in free text: a screen clear, a cursor move, a forged log
    /// line, a NUL, DEL, a C1 CSI, a right-to-left override and a line separator.
    const HOSTILE: &str =
        "ok\u{1b}[2J\u{1b}[1;1H\r\nlevel=info msg=fine\0\u{7f}\u{9b}31m\u{202e}gnp\u{2028}end";
    const HOSTILE_ESCAPED: &str = r"ok\u{1b}[2J\u{1b}[1;1H\u{d}\u{a}level=info msg=fine\u{0}\u{7f}\u{9b}31m\u{202e}gnp\u{2028}end";

    #[test]
    fn free_text_from_the_peer_is_escaped() {
        let cases = [
            (
                Message::Error {
                    reason: ErrorReason::Auth,
                    message: HOSTILE.into(),
                },
                Message::Error {
                    reason: ErrorReason::Auth,
                    message: HOSTILE_ESCAPED.into(),
                },
            ),
            (
                Message::BurstEnd {
                    burst_id: 1,
                    outcome: BurstOutcome::Failed {
                        reason: ErrorReason::WcFlush,
                        detail: HOSTILE.into(),
                    },
                    posted_per_qp: vec![],
                },
                Message::BurstEnd {
                    burst_id: 1,
                    outcome: BurstOutcome::Failed {
                        reason: ErrorReason::WcFlush,
                        detail: HOSTILE_ESCAPED.into(),
                    },
                    posted_per_qp: vec![],
                },
            ),
            (
                Message::BurstResult(BurstResult {
                    burst_id: 1,
                    validated: false,
                    detail: Some(HOSTILE.into()),
                    counters: vec![("port_rcv_data".into(), 1)],
                    verified_messages: 0,
                }),
                Message::BurstResult(BurstResult {
                    burst_id: 1,
                    validated: false,
                    detail: Some(HOSTILE_ESCAPED.into()),
                    counters: vec![("port_rcv_data".into(), 1)],
                    verified_messages: 0,
                }),
            ),
        ];
        for (sent, expected) in cases {
            // We send free text as it is: escaping is the receiver's job.
            let bytes = encode(&sent).unwrap();
            let (got, _) = decode(&bytes).unwrap().unwrap();
            assert_eq!(got, expected);
            assert_printable(&got);
            // Escaping twice changes nothing, so a relayed message stays the same.
            assert_eq!(decode(&encode(&got).unwrap()).unwrap().unwrap().0, got);
        }
    }

    #[test]
    fn names_with_control_characters_or_whitespace_are_rejected() {
        let result = |name: &str| {
            Message::BurstResult(BurstResult {
                burst_id: 1,
                validated: true,
                detail: None,
                counters: vec![("port_rcv_data".into(), 1), (name.into(), 2)],
                verified_messages: 0,
            })
        };
        let hello = |name: &str| Message::Hello {
            node: name.into(),
            target: "t:1".into(),
            client_nonce: [7; 32],
        };
        let Message::SessionAccept(good_accept) = all_messages()[6].clone() else {
            unreachable!()
        };
        let accept = |name: &str| {
            Message::SessionAccept(SessionAccept {
                device: name.into(),
                ..good_accept.clone()
            })
        };
        type Build<'a> = &'a dyn Fn(&str) -> Message;
        let builders: [(&str, Build); 3] = [
            ("burst_result.counters[1]", &result),
            ("hello.node", &hello),
            ("session_accept.device", &accept),
        ];
        for (field, build) in builders {
            assert!(encode(&build("port_xmit_wait.2-a")).is_ok());
            for (bad, shown) in [
                ("\u{1b}[31mred", "\\u{1b}"),
                ("a\rb", "\\u{d}"),
                ("a\0", "\\u{0}"),
                ("a b", "\\u{20}"),
                ("a\u{a0}b", "\\u{a0}"),
                ("a\u{202e}b", "\\u{202e}"),
                ("a\u{2028}b", "\\u{2028}"),
                ("", "empty"),
                (&"x".repeat(MAX_NAME_LEN + 1), "bytes long"),
            ] {
                let msg = build(bad);
                let Err(CodecError::Malformed(why)) = encode(&msg) else {
                    panic!("encode accepted {field} {bad:?}");
                };
                assert!(why.starts_with(field) && why.contains(shown), "{why}");
                assert!(!why.chars().any(is_unsafe_char), "{why:?}");
                let payload = serde_json::to_vec(&msg).unwrap();
                assert_eq!(
                    decode_payload(&payload),
                    Err(CodecError::Malformed(why)),
                    "decode of {field} {bad:?}"
                );
            }
        }
    }

    #[test]
    fn auth_ok_without_identity_is_the_bare_message() {
        // What a responder from before identities sends, and what one without an identity sends:
        // the same bytes.
        let bytes = encode(&Message::AuthOk { identity: None }).unwrap();
        assert_eq!(&bytes[HEADER_LEN..], br#"{"type":"auth_ok"}"#);
        assert_eq!(
            decode_payload(br#"{"type":"auth_ok"}"#),
            Ok(Message::AuthOk { identity: None })
        );
        assert_eq!(
            decode_payload(br#"{"type":"auth_ok","identity":null}"#),
            Ok(Message::AuthOk { identity: None })
        );
    }

    #[test]
    fn a_prober_from_before_identities_ignores_one() {
        // The message set as it was, with a bare `auth_ok`: it reads the new message as before,
        // so telling the identity needs no new protocol version.
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Before {
            AuthOk,
        }
        let bytes = encode(&Message::AuthOk {
            identity: Some(identity()),
        })
        .unwrap();
        let before: Before = serde_json::from_slice(&bytes[HEADER_LEN..]).unwrap();
        assert_eq!(before, Before::AuthOk);
    }

    #[test]
    fn identity_fields_that_are_absent_are_empty() {
        let msg = decode_payload(br#"{"type":"auth_ok","identity":{"node":"n1"}}"#).unwrap();
        let Message::AuthOk {
            identity: Some(identity),
        } = msg
        else {
            panic!("{msg:?}")
        };
        assert_eq!(identity.node, "n1");
        assert!(identity.labels.is_empty() && identity.devices.is_empty());
        assert!(!identity.serves_rail(0));
    }

    #[test]
    fn identity_rails_and_devices_read_as_the_responder_serves_them() {
        let id = identity();
        assert!(id.serves_rail(0));
        assert!(!id.serves_rail(1));
        assert_eq!(id.describe_devices(), "mlx5_0 (rail 0), rxe0 (no rail)");
    }

    /// The largest identity the limits allow: every label and device at its longest, in 4-byte
    /// characters where the value allows them.
    fn largest_identity() -> Identity {
        let name = |i: usize| format!("{}{i:02}", "l".repeat(MAX_NAME_LEN - 2));
        Identity {
            node: "n".repeat(MAX_NAME_LEN),
            labels: (0..MAX_IDENTITY_LABELS)
                .map(|i| (name(i), "\u{1f600}".repeat(MAX_LABEL_VALUE_CHARS)))
                .collect(),
            devices: (0..MAX_IDENTITY_DEVICES)
                .map(|i| IdentityDevice {
                    name: name(i),
                    port: u8::MAX,
                    rail: Some(u16::MAX - i as u16),
                })
                .collect(),
        }
    }

    #[test]
    fn the_largest_identity_fits_a_protected_frame() {
        let msg = Message::AuthOk {
            identity: Some(largest_identity()),
        };
        let json = message_json(&msg).unwrap();
        // A protected frame adds the 16-byte tag to the payload.
        assert!(
            json.len() + 16 <= MAX_PAYLOAD_LEN,
            "{} bytes of JSON",
            json.len()
        );
        let (back, _) = decode(&encode(&msg).unwrap()).unwrap().unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn identities_beyond_the_limits_or_with_bad_values_are_refused() {
        type Spoil = fn(&mut Identity);
        let cases: [(&str, Spoil); 15] = [
            ("labels has 33 entries, at most 32", |id| {
                id.labels.insert("one_more".into(), "x".into());
            }),
            ("devices has 33 entries, at most 32", |id| {
                id.devices.push(id.devices[0].clone());
            }),
            ("identity.node is empty", |id| id.node.clear()),
            ("identity.node contains \\u{20}", |id| {
                id.node = "a b".into()
            }),
            ("identity.node is 256 bytes long", |id| {
                id.node = "n".repeat(MAX_NAME_LEN + 1)
            }),
            ("devices[3].name contains \\u{1b}", |id| {
                id.devices[3].name = "mlx\u{1b}[2J".into()
            }),
            ("devices[0].port is 0", |id| id.devices[0].port = 0),
            ("is not a valid label name", |id| {
                id.labels.clear();
                id.labels.insert("9lives".into(), "x".into());
            }),
            ("is not a valid label name", |id| {
                id.labels.clear();
                id.labels
                    .insert("a\u{202e}\u{2028}b\u{1b}".into(), "x".into());
            }),
            ("is not a valid label name", |id| {
                id.labels.clear();
                id.labels.insert("a b=c".into(), "x".into());
            }),
            ("a label the exporter sets itself", |id| {
                id.labels.clear();
                id.labels.insert("peer_node".into(), "someone-else".into());
            }),
            ("starts with __", |id| {
                id.labels.clear();
                id.labels.insert("__name__".into(), "x".into());
            }),
            ("labels.tor is empty", |id| {
                id.labels.clear();
                id.labels.insert("tor".into(), String::new());
            }),
            ("labels.tor contains \\u{a}", |id| {
                id.labels.clear();
                id.labels.insert("tor".into(), "t1\nlevel=error".into());
            }),
            ("labels.tor is longer than 253 characters", |id| {
                id.labels.clear();
                id.labels.insert("tor".into(), "t".repeat(254));
            }),
        ];
        for (expected, spoil) in cases {
            let mut id = largest_identity();
            id.labels = (0..MAX_IDENTITY_LABELS)
                .map(|i| (format!("l{i}"), "v".to_owned()))
                .collect();
            spoil(&mut id);
            let msg = Message::AuthOk { identity: Some(id) };
            let Err(CodecError::Malformed(why)) = encode(&msg) else {
                panic!("encode accepted an identity with {expected}");
            };
            assert!(why.contains(expected), "{expected}: {why}");
            assert!(!why.chars().any(is_unsafe_char), "{why:?}");
            let payload = serde_json::to_vec(&msg).unwrap();
            assert_eq!(
                decode_payload(&payload),
                Err(CodecError::Malformed(why)),
                "decode of {expected}"
            );
        }
    }

    #[test]
    fn identity_in_other_forms_is_malformed() {
        for payload in [
            // An array where an object belongs, at each level.
            &br#"{"type":"auth_ok","identity":["n1",{},[]]}"#[..],
            br#"{"type":"auth_ok","identity":{"node":"n1","devices":[["mlx5_0",1,0]]}}"#,
            br#"{"type":"auth_ok","identity":{"node":"n1","labels":[["tor","t1"]]}}"#,
            // A label twice: which value would count?
            br#"{"type":"auth_ok","identity":{"node":"n1","labels":{"tor":"a","tor":"b"}}}"#,
            // Values of the wrong type or range.
            br#"{"type":"auth_ok","identity":{"node":"n1","labels":{"tor":7}}}"#,
            br#"{"type":"auth_ok","identity":{"node":"n1","devices":[{"name":"d","port":256}]}}"#,
            br#"{"type":"auth_ok","identity":{"node":"n1","devices":[{"name":"d","port":1,"rail":-1}]}}"#,
            br#"{"type":"auth_ok","identity":"n1"}"#,
        ] {
            let err = decode_payload(payload).unwrap_err();
            assert!(
                matches!(&err, CodecError::Malformed(_)),
                "{}: {err:?}",
                String::from_utf8_lossy(payload)
            );
            assert!(!err.to_string().chars().any(is_unsafe_char), "{err:?}");
        }
    }

    #[test]
    fn errors_quoting_the_peer_are_escaped() {
        let bad_nonce = format!(r#"\u001b[2J{}"#, "a".repeat(60));
        for payload in [
            r#"{"type":"\u001b[2J\r\nlevel=error"}"#.to_owned(),
            r#"{"type":"error","reason":"\u001b]0;pwned\u0007","message":""}"#.to_owned(),
            format!(r#"{{"type":"hello","node":"a","client_nonce":"{bad_nonce}"}}"#),
            r#"{"type":"burst_end","burst_id":1,"outcome":{"status":"\u001b[2J"}}"#.to_owned(),
            "{\"type\":\"close\"}\u{1b}[2J".to_owned(),
        ] {
            let err = decode_payload(payload.as_bytes()).unwrap_err().to_string();
            assert!(!err.chars().any(is_unsafe_char), "{payload}: {err:?}");
            assert!(err.contains("\\u{1b}") || err.contains("trailing"), "{err}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            check_decode_properties(&data);
        }

        #[test]
        fn random_payloads_behind_a_valid_header_never_panic(
            payload in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            check_decode_properties(&frame(PROTOCOL_VERSION, 0, &payload));
        }

        #[test]
        fn json_like_payloads_never_panic(payload in r#"\{("[a-z_]{1,12}":("[a-z0-9]{0,64}"|-?[0-9]{1,21}|null|true|\[\]|\{\}),?){0,6}\}"#) {
            check_decode_properties(&frame(PROTOCOL_VERSION, 0, payload.as_bytes()));
        }

        #[test]
        fn mutated_frames_never_panic(data in mutated_frame()) {
            check_decode_properties(&data);
        }

        #[test]
        fn arbitrary_split_points_give_the_same_messages(cut in 0usize..4096) {
            // A stream decoded incrementally, in two reads split anywhere, yields the same messages.
            let msgs = all_messages();
            let stream: Vec<u8> = msgs.iter().flat_map(|m| encode(m).unwrap()).collect();
            let cut = cut % (stream.len() + 1);
            let mut buf = stream[..cut].to_vec();
            let mut rest = &stream[cut..];
            let mut out = Vec::new();
            loop {
                match decode(&buf).unwrap() {
                    Some((m, used)) => {
                        out.push(m);
                        buf.drain(..used);
                    }
                    None if rest.is_empty() => break,
                    None => {
                        buf.extend_from_slice(rest);
                        rest = &[];
                    }
                }
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(out, msgs);
        }
    }
}
