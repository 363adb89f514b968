//! The codec's tests: the fixtures other modules' tests share (every message, an identity, the
//! decode properties), and the frame tests; the payload, identity and property tests beside.

use super::*;
use crate::control::message::*;
use crate::reason::ErrorReason;
use proptest::prelude::*;
use serde::Deserialize;

mod identity;
mod payload;
mod properties;

pub(crate) use properties::{assert_printable, check_decode_properties};

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
            ping_qpn: Some(0x12),
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
            ping_qpn: None,
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
            ping: Some(PingEndpoint {
                qpn: 0x00ff_ffff,
                key_id: u32::MAX,
            }),
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

fn decode_payload(payload: &[u8]) -> Result<Message, CodecError> {
    decode(&frame(PROTOCOL_VERSION, 0, payload)).map(|m| m.expect("a whole frame").0)
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
    for qpn in [0, 0x0100_0000] {
        let mut bad = good.clone();
        bad.ping.as_mut().unwrap().qpn = qpn;
        assert!(
            encode(&Message::SessionAccept(bad)).is_err(),
            "ping qpn {qpn}"
        );
        let Message::SessionRequest(mut request) = all_messages()[4].clone() else {
            unreachable!()
        };
        request.ping_qpn = Some(qpn);
        assert!(
            encode(&Message::SessionRequest(request)).is_err(),
            "ping_qpn {qpn}"
        );
    }
    // A responder without pings leaves the field out, and an older prober's decoder is not
    // asked to know it.
    let mut plain = good.clone();
    plain.ping = None;
    let frame = encode(&Message::SessionAccept(plain.clone())).unwrap();
    assert!(!String::from_utf8_lossy(&frame).contains("ping"));
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
