//! Fuzz the protected frame layer (`src/control/seal.rs`): after the handshake every frame a
//! responder reads goes through it, whether it comes from the prober or from someone on the path.
//!
//! The first byte picks what the rest is (the same checks as `check_sealed_properties` in
//! `src/control/seal.rs`, which `cargo test` runs on the seeds):
//! * even: bytes from the network, opened frame by frame under a fixed key until the opener wants
//!   more or fails: never a panic, a frame that opens lies within the input and its message is
//!   printable, and error texts are printable;
//! * odd: the JSON a peer holding the key sends, sealed as the next frame and opened: exactly
//!   what a clear frame of the same JSON decodes to.
//!
//! Seeds: `fuzz/seeds/control_sealed/`, the sample messages sealed under this key (one stream,
//! and one by one) and as JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::control::codec::{decode, HEADER_LEN, MAGIC, PROTOCOL_VERSION};
use rdma_probe_exporter::control::message::is_unsafe_char;
use rdma_probe_exporter::control::seal::{
    FrameKeys, Role, SealError, MAX_SEALED_JSON_LEN, TAG_LEN,
};
use serde_json::Value;

const KEY: &[u8] = b"rdma-probe fuzz key of 32 bytes!";
const TRANSCRIPT: [u8; 32] = [0x11; 32];
const FRAMES: usize = 16;

fn assert_printable(value: &Value) {
    match value {
        Value::String(s) => assert!(!s.chars().any(is_unsafe_char), "{s:?}"),
        Value::Array(items) => items.iter().for_each(assert_printable),
        Value::Object(fields) => fields.values().for_each(assert_printable),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut responder = FrameKeys::derive(KEY, &TRANSCRIPT, Role::Responder);
    let mut prober = FrameKeys::derive(KEY, &TRANSCRIPT, Role::Prober);
    if mode % 2 == 0 {
        let mut at = 0;
        for _ in 0..FRAMES {
            match responder.opener.open(&rest[at..]) {
                Ok(Some((msg, used))) => {
                    assert!(used >= HEADER_LEN + TAG_LEN && at + used <= rest.len());
                    assert_printable(&serde_json::to_value(&msg).unwrap());
                    at += used;
                }
                Ok(None) => break,
                Err(e) => {
                    let text = e.to_string();
                    assert!(!text.chars().any(is_unsafe_char), "{text:?}");
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
        let mut clear = MAGIC.to_vec();
        clear.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        clear.extend_from_slice(&0u16.to_be_bytes());
        clear.extend_from_slice(&(rest.len() as u32).to_be_bytes());
        clear.extend_from_slice(rest);
        let opened = responder.opener.open(&sealed);
        match decode(&clear) {
            Ok(Some((msg, _))) => assert_eq!(opened, Ok(Some((msg, sealed.len())))),
            Ok(None) => unreachable!("a whole clear frame"),
            Err(e) => assert_eq!(opened, Err(SealError::Codec(e))),
        }
    }
});
