//! Fuzz the control messages from the typed side: build a message field by field, encode it,
//! decode it, and check that validation, escaping and framing agree.
//!
//! `control_decode` starts from bytes, and random bytes rarely get past the frame header and the
//! JSON syntax into the checks of `Message::validate`. Here every input is a message, with numbers
//! drawn near the limits the checks test (QP counts, 24-bit QPNs, MTUs, name lengths) and strings
//! drawn from the characters the text policy cares about. Properties:
//!
//! * `encode` succeeds exactly when `validate` does (or the frame is too large), and its frame is
//!   the header plus the serde JSON of the message;
//! * `decode(encode(m))` is `m` with its free text escaped, and decoding that again changes nothing;
//! * a message that fails `validate`, framed by a peer that skips the check, is rejected by
//!   `decode` with the same words;
//! * nothing that comes out of `decode`, message or error, contains an unsafe character;
//! * the array form of any message is malformed;
//! * a damaged frame decodes or fails, never panics.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::control::codec::{
    decode, encode, CodecError, HEADER_LEN, MAGIC, MAX_FRAME_LEN, PROTOCOL_VERSION,
};
use rdma_probe_exporter::control::message::{
    escape_unsafe_chars, is_unsafe_char, BurstOutcome, BurstResult, Identity, IdentityDevice,
    Message, PingEndpoint, QpEndpoint, RemoteRegion, SessionAccept, SessionRequest, MAX_IDENTITY_DEVICES,
    MAX_IDENTITY_LABELS, MAX_MESSAGE_SIZE, MAX_NAME_LEN, MAX_QPS, VALID_MTUS,
};
use rdma_probe_exporter::reason::ErrorReason;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(msg) = message(&mut u) {
        check(&msg, &mut u);
    }
});

/// Characters the text policy treats specially, and a few it must leave alone.
#[rustfmt::skip]
const TRICKY: &[char] = &[
    '\0', '\t', '\n', '\r', '\u{1b}', '[', '\u{7f}', '\u{85}', '\u{9b}', '\u{a0}', ' ', '\\', '"',
    '\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}', '\u{200e}', '\u{61c}', '\u{e9}', '\u{fffd}',
    '\u{10ffff}', 'a', '_', '-', '0',
];

/// Names as they occur (device, node and counter names).
const NAMES: &[&str] = &[
    "mlx5_0",
    "rxe0",
    "node-a",
    "gpu-node-17.rack3.example.com",
    "port_rcv_data",
    "np_cnp_sent",
];

fn message(u: &mut Unstructured) -> Result<Message> {
    Ok(match u.int_in_range(0..=12u8)? {
        0 => Message::Hello {
            node: name(u)?,
            target: name(u)?,
            client_nonce: u.arbitrary()?,
        },
        1 => Message::Challenge {
            server_nonce: u.arbitrary()?,
            server_proofs: {
                let n = u.int_in_range(0..=3usize)?;
                (0..n).map(|_| u.arbitrary()).collect::<Result<Vec<_>>>()?
            },
        },
        2 => Message::Authenticate {
            client_proof: u.arbitrary()?,
        },
        3 => Message::AuthOk {
            identity: if u.arbitrary()? {
                Some(identity(u)?)
            } else {
                None
            },
        },
        4 => Message::SessionRequest(session_request(u)?),
        5 => Message::SessionAccept(session_accept(u)?),
        6 => burst_start(u)?,
        7 => Message::BurstReady {
            burst_id: u.arbitrary()?,
        },
        8 => Message::Busy {
            retry_after_ms: u.arbitrary()?,
        },
        9 => Message::BurstEnd {
            burst_id: u.arbitrary()?,
            outcome: if u.arbitrary()? {
                BurstOutcome::Completed
            } else {
                BurstOutcome::Failed {
                    reason: reason(u)?,
                    detail: text(u)?,
                }
            },
            posted_per_qp: list(u, 70, |u| u.arbitrary())?,
        },
        10 => Message::BurstResult(BurstResult {
            burst_id: u.arbitrary()?,
            validated: u.arbitrary()?,
            detail: if u.arbitrary()? { Some(text(u)?) } else { None },
            counters: list(u, 8, |u| Ok((name(u)?, u.arbitrary()?)))?,
            verified_messages: u.arbitrary()?,
        }),
        11 => Message::Error {
            reason: reason(u)?,
            message: text(u)?,
        },
        _ => Message::Close,
    })
}

/// One line per field, so a field added to the message is a one-line change here.
fn burst_start(u: &mut Unstructured) -> Result<Message> {
    Ok(Message::BurstStart {
        burst_id: u.arbitrary()?,
        seed: u.arbitrary()?,
        deadline_ms: u.arbitrary()?,
    })
}

fn session_request(u: &mut Unstructured) -> Result<SessionRequest> {
    let device = if u.arbitrary()? { Some(name(u)?) } else { None };
    let qps = qp_count(u)? as u32;
    let message_size = near(u, &[65536, 1, 0, MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE + 1])?;
    let region_bytes = near(
        u,
        &[
            message_size,
            message_size.saturating_sub(1),
            message_size.saturating_add(1),
            u64::MAX,
        ],
    )?;
    Ok(SessionRequest {
        device,
        rail: u.arbitrary()?,
        qps,
        message_size,
        region_bytes,
        endpoints: endpoints(u, qps as usize)?,
        mtu: mtu(u)?,
        link_rate_bits_per_second: u.arbitrary()?,
        traffic_class: u.arbitrary()?,
        service_level: near(u, &[0, 15, 16])?,
        ping_qpn: if u.arbitrary()? {
            Some(near(u, &[1, 0x00ff_ffff, 0, 0x0100_0000, u32::MAX])?)
        } else {
            None
        },
    })
}

fn session_accept(u: &mut Unstructured) -> Result<SessionAccept> {
    let device = name(u)?;
    let n = qp_count(u)?;
    let endpoints = endpoints(u, n)?;
    let regions = if u.ratio(7, 8)? {
        n
    } else {
        u.int_in_range(0..=n + 1)?
    };
    let regions = (0..regions)
        .map(|_| {
            Ok(RemoteRegion {
                addr: u.arbitrary()?,
                rkey: u.arbitrary()?,
                len: near(u, &[1 << 20, 1, 0, u64::MAX])?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(SessionAccept {
        device,
        endpoints,
        regions,
        mtu: mtu(u)?,
        link_rate_bits_per_second: u.arbitrary()?,
        ping: if u.arbitrary()? {
            Some(PingEndpoint {
                qpn: near(u, &[1, 0x00ff_ffff, 0, 0x0100_0000, u32::MAX])?,
                key_id: u.arbitrary()?,
            })
        } else {
            None
        },
    })
}

/// A responder's identity: label and device counts around their limits, label names from the
/// ones the config allows and the reserved ones, values of any text.
fn identity(u: &mut Unstructured) -> Result<Identity> {
    const LABEL_NAMES: &[&str] = &["tor", "rack", "peer_node", "peer", "__name__", "9x", "a b"];
    let labels = u.int_in_range(0..=MAX_IDENTITY_LABELS + 1)?;
    let labels = (0..labels)
        .map(|i| {
            let name = match u.int_in_range(0..=3u8)? {
                0 => u.choose(LABEL_NAMES)?.to_string(),
                1 => text(u)?,
                _ => format!("label_{i}"),
            };
            let value = if u.ratio(3, 4)? {
                name_or_text(u)?
            } else {
                text(u)?
            };
            Ok((name, value))
        })
        .collect::<Result<_>>()?;
    Ok(Identity {
        node: name(u)?,
        labels,
        devices: list(u, MAX_IDENTITY_DEVICES + 1, |u| {
            Ok(IdentityDevice {
                name: name(u)?,
                port: near(u, &[1, 0, u8::MAX])?,
                rail: u.arbitrary()?,
            })
        })?,
    })
}

fn name_or_text(u: &mut Unstructured) -> Result<String> {
    if u.arbitrary()? {
        name(u)
    } else {
        text(u)
    }
}

/// A QP count at or around the limits, never one that would allocate much.
fn qp_count(u: &mut Unstructured) -> Result<usize> {
    let max = MAX_QPS as usize;
    if u.ratio(3, 4)? {
        Ok(*u.choose(&[1, 2, 0, max - 1, max, max + 1])?)
    } else {
        u.int_in_range(0..=max + 1)
    }
}

/// Usually `n` endpoints (so the count check passes and the later checks are reached), sometimes
/// one more or less.
fn endpoints(u: &mut Unstructured, n: usize) -> Result<Vec<QpEndpoint>> {
    let n = match u.int_in_range(0..=7u8)? {
        6 => n.saturating_sub(1),
        7 => n + 1,
        _ => n,
    }
    .min(MAX_QPS as usize + 2);
    let limits = [1, 0, (1 << 24) - 1, 1 << 24, u32::MAX];
    (0..n)
        .map(|_| {
            Ok(QpEndpoint {
                qpn: near(u, &limits)?,
                psn: near(u, &limits)?,
                lid: u.arbitrary()?,
                gid: u.arbitrary()?,
            })
        })
        .collect()
}

fn mtu(u: &mut Unstructured) -> Result<u32> {
    if u.ratio(7, 8)? {
        Ok(*u.choose(&VALID_MTUS)?)
    } else {
        near(u, &[0, 1500, 4097, 9000])
    }
}

fn reason(u: &mut Unstructured) -> Result<ErrorReason> {
    Ok(*u.choose(&ErrorReason::ALL)?)
}

/// A value from `special` (the edges a check tests) most of the time, else any value. An input
/// that runs out of bytes gets the first, so the lists start with a valid value: the checks after
/// it are reached.
fn near<T: Copy + for<'a> libfuzzer_sys::arbitrary::Arbitrary<'a>>(
    u: &mut Unstructured,
    special: &[T],
) -> Result<T> {
    if u.ratio(3, 4)? {
        Ok(*u.choose(special)?)
    } else {
        u.arbitrary()
    }
}

fn list<T>(
    u: &mut Unstructured,
    max: usize,
    mut item: impl FnMut(&mut Unstructured) -> Result<T>,
) -> Result<Vec<T>> {
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| item(u)).collect()
}

fn char_(u: &mut Unstructured) -> Result<char> {
    if u.ratio(1, 2)? {
        Ok(*u.choose(TRICKY)?)
    } else {
        u.arbitrary()
    }
}

fn text(u: &mut Unstructured) -> Result<String> {
    let n = u.int_in_range(0..=64usize)?;
    (0..n).map(|_| char_(u)).collect()
}

/// Mostly a real name (also when the input runs out), sometimes with one tricky character in it,
/// at the length limit, or any text at all.
fn name(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=5u8)? {
        5 => text(u)?,
        4 => "x".repeat(u.int_in_range(MAX_NAME_LEN - 1..=MAX_NAME_LEN + 1)?),
        3 => {
            let mut name = u.choose(NAMES)?.to_string();
            let at = u.int_in_range(0..=name.len())?;
            if name.is_char_boundary(at) {
                name.insert(at, char_(u)?);
            }
            name
        }
        _ => u.choose(NAMES)?.to_string(),
    })
}

/// What `decode` must make of `msg`: the same message with its free text escaped. Written out
/// per variant, independently of the decoder's own escaping, and without a catch-all arm, so a
/// new message kind does not compile here until someone decides what of it is free text.
fn expected_after_decode(msg: &Message) -> Message {
    let mut msg = msg.clone();
    let escape = |text: &mut String| *text = escape_unsafe_chars(text).into_owned();
    match &mut msg {
        Message::Error { message, .. } => escape(message),
        Message::BurstEnd {
            outcome: BurstOutcome::Failed { detail, .. },
            ..
        } => escape(detail),
        Message::BurstResult(BurstResult { detail, .. }) => detail.iter_mut().for_each(escape),
        Message::Hello { .. }
        | Message::Challenge { .. }
        | Message::Authenticate { .. }
        | Message::AuthOk { .. }
        | Message::SessionRequest(_)
        | Message::SessionAccept(_)
        | Message::BurstStart { .. }
        | Message::BurstReady { .. }
        | Message::Busy { .. }
        | Message::BurstEnd {
            outcome: BurstOutcome::Completed,
            ..
        }
        | Message::Close => {}
    }
    msg
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = MAGIC.to_vec();
    f.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    f.extend_from_slice(&0u16.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn assert_printable_text(text: &str) {
    assert!(!text.chars().any(is_unsafe_char), "unsafe text {text:?}");
}

/// Every string anywhere in the message, whatever field it is in.
fn assert_printable(msg: &Message) {
    fn walk(value: &Value) {
        match value {
            Value::String(s) => assert_printable_text(s),
            Value::Array(items) => items.iter().for_each(walk),
            Value::Object(fields) => fields.values().for_each(walk),
            _ => {}
        }
    }
    walk(&serde_json::to_value(msg).expect("a message serializes"));
}

/// Decoding arbitrary bytes: no panic, and nothing unsafe comes out.
fn check_decode(data: &[u8]) {
    match decode(data) {
        Ok(Some((msg, used))) => {
            assert!(used >= HEADER_LEN && used <= data.len());
            assert_printable(&msg);
        }
        Ok(None) => {}
        Err(e) => assert_printable_text(&e.to_string()),
    }
}

fn check(msg: &Message, u: &mut Unstructured) {
    let valid = msg.validate();
    let payload = serde_json::to_vec(msg).expect("a message serializes");
    // What a peer that does not validate would send.
    let unchecked = frame(&payload);
    match encode(msg) {
        Ok(mut bytes) => {
            assert!(valid.is_ok(), "encoded an invalid message: {valid:?}");
            assert_eq!(bytes, unchecked);
            let (back, used) = decode(&bytes)
                .expect("our own frame decodes")
                .expect("our own frame is complete");
            assert_eq!(used, bytes.len());
            assert_eq!(back, expected_after_decode(msg));
            assert_printable(&back);
            // Escaping twice changes nothing: a decoded message re-encodes to itself.
            if let Ok(again) = encode(&back) {
                assert_eq!(decode(&again).unwrap().unwrap().0, back);
            }
            for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, bytes.len() - 1] {
                assert_eq!(decode(&bytes[..cut]), Ok(None), "cut at {cut}");
            }
            // Damage the frame a little: whatever happens, no panic and nothing unsafe.
            if let Ok(edits) = u.int_in_range(1..=4u8) {
                for _ in 0..edits {
                    let (Ok(at), Ok(byte)) = (u.choose_index(bytes.len()), u.arbitrary::<u8>())
                    else {
                        break;
                    };
                    bytes[at] = byte;
                }
                check_decode(&bytes);
            }
        }
        Err(CodecError::FrameTooLarge { .. }) => {
            assert!(valid.is_ok(), "size checked before validity: {valid:?}");
            assert!(unchecked.len() > MAX_FRAME_LEN);
        }
        Err(CodecError::Malformed(why)) => {
            assert_eq!(valid, Err(why.clone()));
            assert_printable_text(&why);
            if unchecked.len() <= MAX_FRAME_LEN {
                assert_eq!(decode(&unchecked), Err(CodecError::Malformed(why)));
            }
        }
        Err(other) => panic!("encode failed with {other:?}"),
    }
    // The array form of the message, fields in any order, never decodes.
    let Value::Object(mut fields) = serde_json::to_value(msg).expect("a message serializes") else {
        panic!("a message serializes to a JSON object");
    };
    let kind = fields.remove("type").expect("a tagged message");
    let array = Value::Array(
        std::iter::once(kind)
            .chain(fields.into_iter().map(|(_, v)| v))
            .collect(),
    );
    let array = frame(&serde_json::to_vec(&array).unwrap());
    if array.len() <= MAX_FRAME_LEN {
        let result = decode(&array);
        assert!(
            matches!(result, Err(CodecError::Malformed(_))),
            "array form decoded: {result:?}"
        );
    }
}
