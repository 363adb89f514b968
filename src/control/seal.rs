//! Protection of the frames after the handshake: every frame is encrypted and authenticated
//! with a key derived from the handshake, so nobody on the management network can read the QP
//! numbers, rkeys and addresses of a session or forge, replay, reorder or drop a frame unseen.
//!
//! ```text
//! prk                = HKDF-Extract(salt = transcript, ikm = frame_secret)   (auth.rs)
//! prober_to_resp key = HKDF-Expand(prk, "rdma-probe v3 prober to responder", 32)
//! resp_to_prober key = HKDF-Expand(prk, "rdma-probe v3 responder to prober", 32)
//! frame n            = header(flags = PROTECTED, length = |ciphertext| + 16)
//!                      || ChaCha20-Poly1305(key, nonce = 0u32 || n as u64 BE, aad = header, json)
//! ```
//!
//! * The frame number `n` counts the frames one side sent on this connection, from 0, and is not
//!   on the wire: a replayed, reordered or dropped frame is opened under another number and
//!   fails authentication, and so does a frame reflected back to its sender (the two directions
//!   have different keys). Any failure closes the connection; there is no resynchronisation.
//! * The header is authenticated too (it is the AEAD's associated data), so a changed length,
//!   version or flag is caught as well as a changed payload.
//! * Fresh nonces on both sides of every handshake give every connection its own keys, so a
//!   frame recorded on one connection never opens on another.
//! * With `auth: none` there is no secret to derive keys from (anyone could compute them from
//!   the nonces they saw), so frames stay in clear: that mode gives up confidentiality and
//!   integrity along with authentication (docs/security.md).
//!
//! ChaCha20-Poly1305 (RFC 8439) and HKDF-SHA256 (RFC 5869) come from the RustCrypto crates; this
//! module only decides what goes in. Pure: unit-tested here, fuzzed by `control_sealed`.

use std::fmt;

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Nonce as AeadNonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;
use thiserror::Error;
use zeroize::Zeroizing;

use super::codec::{self, CodecError, FrameFlags, MAX_PAYLOAD_LEN};
use super::message::Message;

/// Bytes the authentication tag adds to every protected frame.
pub const TAG_LEN: usize = 16;
/// Largest JSON payload of a protected frame: the frame limit less the header and the tag.
pub const MAX_SEALED_JSON_LEN: usize = MAX_PAYLOAD_LEN - TAG_LEN;

const PROBER_TO_RESPONDER: &[u8] = b"rdma-probe v3 prober to responder";
const RESPONDER_TO_PROBER: &[u8] = b"rdma-probe v3 responder to prober";

/// Which end of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The client: sends `Hello`, probes.
    Prober,
    /// The server: answers `Hello`, serves sessions.
    Responder,
}

/// Why a frame could not be protected or opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealError {
    /// The frame's header or, once decrypted, its payload is not a valid frame or message.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The tag did not verify: the frame was changed, replayed, reordered, cut short, sent in
    /// the other direction, or comes from another connection (or another key).
    #[error(
        "control frame {frame} from the peer failed authentication (changed, replayed, reordered, \
         cut short or not from this connection): closing the connection"
    )]
    Forged { frame: u64 },
    /// A clear frame where the handshake agreed on protected ones.
    #[error(
        "control frame {frame} from the peer is not protected, but every frame after the \
         handshake must be: closing the connection"
    )]
    Clear { frame: u64 },
    /// 2^64 frames in one direction: never in practice, but the nonce must not repeat.
    #[error("control connection sent or received 2^64 frames; reconnect")]
    Exhausted,
}

/// The keys of one connection, one cipher per direction: what this side seals with and what it
/// opens with.
pub struct FrameKeys {
    pub sealer: Sealer,
    pub opener: Opener,
}

impl FrameKeys {
    /// The keys both ends derive from the secret of the key the handshake proved and the
    /// handshake's transcript (which covers both nonces); `role` says which direction this side
    /// sends in.
    pub fn derive(secret: &[u8], transcript: &[u8; 32], role: Role) -> FrameKeys {
        let hkdf = Hkdf::<Sha256>::new(Some(transcript), secret);
        let cipher = |label: &[u8]| {
            let mut key = Zeroizing::new([0u8; 32]);
            // 32 bytes is far below HKDF-SHA256's limit of 255 * 32, so this cannot fail.
            hkdf.expand(label, key.as_mut())
                .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 length"));
            ChaCha20Poly1305::new(key.as_ref().into())
        };
        let (send, receive) = match role {
            Role::Prober => (PROBER_TO_RESPONDER, RESPONDER_TO_PROBER),
            Role::Responder => (RESPONDER_TO_PROBER, PROBER_TO_RESPONDER),
        };
        FrameKeys {
            sealer: Sealer {
                cipher: cipher(send),
                next: 0,
            },
            opener: Opener {
                cipher: cipher(receive),
                next: 0,
            },
        }
    }
}

impl fmt::Debug for FrameKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameKeys")
            .field("sealer", &self.sealer)
            .field("opener", &self.opener)
            .finish()
    }
}

/// Protects the frames one side sends.
pub struct Sealer {
    cipher: ChaCha20Poly1305,
    /// The number of the next frame.
    next: u64,
}

/// Opens the frames one side receives.
pub struct Opener {
    cipher: ChaCha20Poly1305,
    /// The number the next frame must have been sealed under.
    next: u64,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealer {{ key: <redacted>, next: {} }}", self.next)
    }
}

impl fmt::Debug for Opener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opener {{ key: <redacted>, next: {} }}", self.next)
    }
}

/// The AEAD nonce of frame `n`: 4 zero bytes and `n` big-endian. Each key seals one direction
/// only, so the number alone never repeats under a key.
fn aead_nonce(n: u64) -> AeadNonce {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&n.to_be_bytes());
    nonce.into()
}

impl Sealer {
    /// `msg` as the next protected frame. Fails, with nothing consumed, if the message is
    /// invalid or too large (our own mistake: the connection stays usable).
    pub fn seal(&mut self, msg: &Message) -> Result<Vec<u8>, SealError> {
        self.seal_payload(&codec::message_json(msg)?)
    }

    /// `json` as the next protected frame, as it is: [`seal`](Self::seal) after the message
    /// checks, and what the `control_sealed` fuzz target uses to act as a peer that holds the
    /// key and sends anything.
    pub fn seal_payload(&mut self, json: &[u8]) -> Result<Vec<u8>, SealError> {
        let n = self.next;
        let next = n.checked_add(1).ok_or(SealError::Exhausted)?;
        if json.len() > MAX_SEALED_JSON_LEN {
            return Err(CodecError::FrameTooLarge {
                len: (codec::HEADER_LEN + json.len() + TAG_LEN) as u64,
                max: codec::MAX_FRAME_LEN,
            }
            .into());
        }
        let header = codec::header(FrameFlags::PROTECTED, json.len() + TAG_LEN)?;
        let mut frame = Vec::with_capacity(codec::HEADER_LEN + json.len() + TAG_LEN);
        frame.extend_from_slice(&header);
        frame.extend_from_slice(json);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&aead_nonce(n), &header, &mut frame[codec::HEADER_LEN..])
            // Only a buffer beyond the cipher's 256 GiB limit fails, far above a frame.
            .map_err(|_| CodecError::Malformed("cannot encrypt the frame".into()))?;
        frame.extend_from_slice(&tag);
        self.next = next;
        Ok(frame)
    }
}

impl Opener {
    /// Try to open one protected frame from the start of `buf`; the same contract as
    /// [`codec::decode`]: `Ok(None)` asks for more bytes, and after an `Err` the stream is
    /// unusable.
    pub fn open(&mut self, buf: &[u8]) -> Result<Option<(Message, usize)>, SealError> {
        let Some(frame) = codec::split_frame(buf)? else {
            return Ok(None);
        };
        let n = self.next;
        if !frame.flags.contains(FrameFlags::PROTECTED) {
            return Err(SealError::Clear { frame: n });
        }
        let next = n.checked_add(1).ok_or(SealError::Exhausted)?;
        let Some(split) = frame.payload.len().checked_sub(TAG_LEN) else {
            return Err(SealError::Forged { frame: n });
        };
        let (ciphertext, tag) = frame.payload.split_at(split);
        let mut json = ciphertext.to_vec();
        self.cipher
            .decrypt_in_place_detached(
                &aead_nonce(n),
                frame.header,
                &mut json,
                Tag::from_slice(tag),
            )
            .map_err(|_| SealError::Forged { frame: n })?;
        self.next = next;
        let msg = codec::parse_message(&json)?;
        Ok(Some((msg, frame.len)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::control::codec::tests::all_messages;
    use crate::control::codec::{decode, encode, HEADER_LEN};

    pub(crate) const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    /// A handshake transcript (auth.rs), for the tests.
    const TRANSCRIPT: [u8; 32] = [1; 32];

    /// Both ends of one connection: (prober, responder).
    pub(crate) fn pair(key: &[u8]) -> (FrameKeys, FrameKeys) {
        (
            FrameKeys::derive(key, &TRANSCRIPT, Role::Prober),
            FrameKeys::derive(key, &TRANSCRIPT, Role::Responder),
        )
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The secret and transcript of the `control_sealed` fuzz target
    /// (fuzz/fuzz_targets/control_sealed.rs has the same).
    pub(crate) const FUZZ_KEY: &[u8] = b"rdma-probe fuzz key of 32 bytes!";
    pub(crate) const FUZZ_TRANSCRIPT: [u8; 32] = [0x11; 32];
    /// Most frames one fuzz input is read as.
    const FUZZ_FRAMES: usize = 16;

    /// The responder's end and the prober's end of the fuzz target's connection.
    fn fuzz_keys() -> (FrameKeys, FrameKeys) {
        (
            FrameKeys::derive(FUZZ_KEY, &FUZZ_TRANSCRIPT, Role::Responder),
            FrameKeys::derive(FUZZ_KEY, &FUZZ_TRANSCRIPT, Role::Prober),
        )
    }

    /// The checks of the `control_sealed` fuzz target, also run on its corpus by `cargo test`.
    /// The first byte picks what the rest is:
    ///
    /// * even: bytes from the network (what anyone on the path can send): opened frame by frame
    ///   until the opener wants more or fails; a frame that opens lies within the input, its
    ///   message is printable, and after an error nothing more is read;
    /// * odd: the JSON a peer holding the key sends: sealed as the next frame and opened, it
    ///   gives exactly what a clear frame of the same JSON decodes to (the protection is
    ///   transparent), and never a panic.
    pub(crate) fn check_sealed_properties(data: &[u8]) {
        let Some((&mode, rest)) = data.split_first() else {
            return;
        };
        let (mut responder, mut prober) = fuzz_keys();
        if mode % 2 == 0 {
            let mut at = 0;
            for _ in 0..FUZZ_FRAMES {
                match responder.opener.open(&rest[at..]) {
                    Ok(Some((msg, used))) => {
                        assert!(used > HEADER_LEN + TAG_LEN - 1 && at + used <= rest.len());
                        crate::control::codec::tests::assert_printable(&msg);
                        at += used;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let text = e.to_string();
                        assert!(!text.chars().any(crate::control::message::is_unsafe_char));
                        break;
                    }
                }
            }
        } else {
            let sealed = match prober.sealer.seal_payload(rest) {
                Ok(frame) => frame,
                Err(e) => {
                    assert!(rest.len() > MAX_SEALED_JSON_LEN, "{e}");
                    return;
                }
            };
            let mut clear = codec::header(FrameFlags::CLEAR, rest.len())
                .expect("fits")
                .to_vec();
            clear.extend_from_slice(rest);
            let opened = responder.opener.open(&sealed);
            match decode(&clear) {
                Ok(Some((msg, _))) => {
                    assert_eq!(opened, Ok(Some((msg, sealed.len()))));
                }
                Ok(None) => unreachable!("a whole clear frame"),
                Err(e) => assert_eq!(opened, Err(SealError::Codec(e))),
            }
        }
    }

    /// Seeds of `control_sealed`: the sample messages sealed as one stream and one by one
    /// (network mode), and as JSON (peer mode).
    pub(crate) fn sealed_seeds() -> Vec<(String, Vec<u8>)> {
        let messages = all_messages();
        let (_, mut stream_keys) = fuzz_keys();
        let mut stream = vec![0u8];
        for msg in &messages {
            stream.extend(stream_keys.sealer.seal(msg).unwrap());
        }
        let mut seeds = vec![("00-stream.bin".to_owned(), stream)];
        for (i, msg) in messages.iter().enumerate() {
            let (_, mut keys) = fuzz_keys();
            let mut one = vec![0u8];
            one.extend(keys.sealer.seal(msg).unwrap());
            seeds.push((format!("{:02}-sealed-{}.bin", i + 1, msg.kind()), one));
            let mut json = vec![1u8];
            json.extend(codec::message_json(msg).unwrap());
            seeds.push((format!("{:02}-json-{}.bin", i + 1, msg.kind()), json));
        }
        seeds
    }

    #[test]
    fn the_fuzz_checks_hold_for_the_seeds_and_damaged_ones() {
        for (name, seed) in sealed_seeds() {
            check_sealed_properties(&seed);
            for cut in [1, seed.len() / 2, seed.len() - 1] {
                check_sealed_properties(&seed[..cut]);
            }
            let mut flipped = seed.clone();
            let last = flipped.len() - 1;
            flipped[last] ^= 1;
            check_sealed_properties(&flipped);
            assert!(!name.is_empty());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]

        #[test]
        fn random_inputs_pass_the_fuzz_checks(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            check_sealed_properties(&data);
        }

        #[test]
        fn json_like_payloads_from_a_key_holder_pass_the_fuzz_checks(payload in r#"\{("[a-z_]{1,12}":("[a-z0-9]{0,64}"|-?[0-9]{1,21}|null|true|\[\]|\{\}),?){0,6}\}"#) {
            let mut data = vec![1u8];
            data.extend_from_slice(payload.as_bytes());
            check_sealed_properties(&data);
        }
    }

    #[test]
    fn every_message_round_trips_in_both_directions() {
        let (mut prober, mut responder) = pair(KEY);
        for msg in all_messages() {
            let frame = prober.sealer.seal(&msg).unwrap();
            assert_eq!(frame[..4], *b"RPXC");
            assert_eq!(frame[6..8], [0, 1], "the protected flag");
            let (back, used) = responder.opener.open(&frame).unwrap().unwrap();
            assert_eq!((back, used), (msg.clone(), frame.len()));
            let frame = responder.sealer.seal(&msg).unwrap();
            assert_eq!(prober.opener.open(&frame).unwrap().unwrap().0, msg);
        }
    }

    #[test]
    fn nothing_of_the_message_is_readable() {
        let (mut prober, _) = pair(KEY);
        let accept = all_messages()
            .into_iter()
            .find(|m| m.kind() == "session_accept")
            .unwrap();
        let clear = encode(&accept).unwrap();
        let sealed = prober.sealer.seal(&accept).unwrap();
        assert_eq!(sealed.len(), clear.len() + TAG_LEN);
        let text = String::from_utf8_lossy(&sealed);
        for needle in ["session_accept", "rkey", "addr", "mlx5_1", "4294967295"] {
            assert!(!text.contains(needle), "{needle} visible in {text:?}");
        }
    }

    #[test]
    fn every_changed_byte_is_caught() {
        let (mut prober, _) = pair(KEY);
        let frame = prober
            .sealer
            .seal(&Message::BurstReady { burst_id: 7 })
            .unwrap();
        for i in 0..frame.len() {
            let mut bad = frame.clone();
            bad[i] ^= 0x40;
            let (_, mut responder) = pair(KEY);
            match responder.opener.open(&bad) {
                Err(SealError::Forged { frame: 0 }) => {}
                // The magic, the version and the flags are checked before the tag.
                Err(SealError::Codec(_)) if i < 8 => {}
                // A longer length only waits for bytes that never come.
                Ok(None) if (8..12).contains(&i) => {}
                Err(SealError::Codec(CodecError::FrameTooLarge { .. })) if (8..12).contains(&i) => {
                }
                other => panic!("byte {i}: {other:?}"),
            }
        }
    }

    #[test]
    fn replayed_reordered_and_dropped_frames_fail() {
        let (mut prober, _) = pair(KEY);
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| {
                prober
                    .sealer
                    .seal(&Message::BurstReady { burst_id: i })
                    .unwrap()
            })
            .collect();
        // Replayed: the first frame twice.
        let (_, mut r) = pair(KEY);
        assert!(r.opener.open(&frames[0]).unwrap().is_some());
        assert_eq!(
            r.opener.open(&frames[0]),
            Err(SealError::Forged { frame: 1 })
        );
        // Reordered: the second before the first.
        let (_, mut r) = pair(KEY);
        assert_eq!(
            r.opener.open(&frames[1]),
            Err(SealError::Forged { frame: 0 })
        );
        // Dropped: the third right after the first.
        let (_, mut r) = pair(KEY);
        assert!(r.opener.open(&frames[0]).unwrap().is_some());
        assert_eq!(
            r.opener.open(&frames[2]),
            Err(SealError::Forged { frame: 1 })
        );
    }

    #[test]
    fn reflected_and_foreign_frames_fail() {
        let (mut prober, _) = pair(KEY);
        let frame = prober.sealer.seal(&Message::Close).unwrap();
        // Back to its sender: the other direction's key.
        assert_eq!(
            prober.opener.open(&frame),
            Err(SealError::Forged { frame: 0 })
        );
        // Another key, or the same key on another connection (other nonces).
        let (_, mut other_key) = pair(b"another key of at least sixteen bytes");
        assert!(matches!(
            other_key.opener.open(&frame),
            Err(SealError::Forged { .. })
        ));
        let mut other_connection = FrameKeys::derive(KEY, &[3; 32], Role::Responder);
        assert!(matches!(
            other_connection.opener.open(&frame),
            Err(SealError::Forged { .. })
        ));
    }

    #[test]
    fn cut_short_frames_wait_or_fail() {
        let (mut prober, _) = pair(KEY);
        let frame = prober
            .sealer
            .seal(&Message::BurstReady { burst_id: 1 })
            .unwrap();
        // A prefix asks for more bytes.
        for cut in 0..frame.len() {
            let (_, mut r) = pair(KEY);
            assert_eq!(r.opener.open(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        // Cut short with the length rewritten to match: the tag is gone or moved.
        for drop in 1..=frame.len() - HEADER_LEN {
            let mut short = frame[..frame.len() - drop].to_vec();
            let len = (short.len() - HEADER_LEN) as u32;
            short[8..12].copy_from_slice(&len.to_be_bytes());
            let (_, mut r) = pair(KEY);
            assert_eq!(
                r.opener.open(&short),
                Err(SealError::Forged { frame: 0 }),
                "{drop} bytes dropped"
            );
        }
    }

    #[test]
    fn clear_frames_are_refused_after_the_handshake() {
        let (_, mut r) = pair(KEY);
        let clear = encode(&Message::Close).unwrap();
        assert_eq!(r.opener.open(&clear), Err(SealError::Clear { frame: 0 }));
        // And a protected frame is not a clear one.
        let (mut p, _) = pair(KEY);
        let sealed = p.sealer.seal(&Message::Close).unwrap();
        assert!(
            matches!(decode(&sealed), Err(CodecError::Malformed(m)) if m.contains("protected"))
        );
    }

    #[test]
    fn oversize_messages_are_not_sealed_and_cost_no_frame_number() {
        let (mut p, mut r) = pair(KEY);
        let big = Message::Error {
            reason: crate::reason::ErrorReason::PeerError,
            message: "x".repeat(MAX_SEALED_JSON_LEN),
        };
        assert!(matches!(
            p.sealer.seal(&big),
            Err(SealError::Codec(CodecError::FrameTooLarge { .. }))
        ));
        let frame = p.sealer.seal(&Message::Close).unwrap();
        assert_eq!(r.opener.open(&frame).unwrap().unwrap().0, Message::Close);
    }

    #[test]
    fn the_largest_sealed_frame_is_within_the_frame_limit() {
        let (mut p, mut r) = pair(KEY);
        // `{"type":"error","reason":"peer_error","message":""}` is 50 bytes of JSON.
        let overhead = codec::message_json(&Message::Error {
            reason: crate::reason::ErrorReason::PeerError,
            message: String::new(),
        })
        .unwrap()
        .len();
        let msg = Message::Error {
            reason: crate::reason::ErrorReason::PeerError,
            message: "x".repeat(MAX_SEALED_JSON_LEN - overhead),
        };
        let frame = p.sealer.seal(&msg).unwrap();
        assert_eq!(frame.len(), codec::MAX_FRAME_LEN);
        assert_eq!(r.opener.open(&frame).unwrap().unwrap().0, msg);
    }

    #[test]
    fn keys_are_redacted_in_debug_output() {
        let (p, _) = pair(KEY);
        let text = format!("{p:?}");
        assert!(text.contains("<redacted>"), "{text}");
        assert!(!text.contains("0123"), "{text}");
    }

    #[test]
    fn the_first_frame_matches_an_independent_implementation() {
        // Computed with Python's `cryptography` (HKDF, ChaCha20Poly1305) from the construction
        // in the module docs, so another implementation can check itself against these bytes.
        let (mut p, mut r) = pair(KEY);
        let frame = p.sealer.seal(&Message::Close).unwrap();
        assert_eq!(hex(&frame), EXPECTED_CLOSE_FRAME);
        let frame = r.sealer.seal(&Message::AuthOk { identity: None }).unwrap();
        assert_eq!(hex(&frame), EXPECTED_AUTH_OK_FRAME);
    }

    const EXPECTED_CLOSE_FRAME: &str = "525058430003000100000020\
        644a2884903555665b030427066f0c0e3555b4ff861e2bf42d4c7a4cb8340d1f";
    const EXPECTED_AUTH_OK_FRAME: &str = "525058430003000100000022\
        8e18d9f2157605f52fd82104676f88d7d8532e3e05e953d28f9268c0ffb1244a9ce2";
}
