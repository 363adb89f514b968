//! Fuzz the control protocol decoder: it faces the network before authentication, so no input may
//! make it panic, over-read, or allocate on the strength of an untrusted length.
//!
//! Properties (the same as the proptest tests in `src/control/codec/tests/properties.rs`, for
//! stable toolchains):
//! * `decode` returns, never panics;
//! * a decoded frame's consumed length lies within the input and the frame limit;
//! * `Ok(None)` ("need more bytes") only for inputs shorter than the frame limit;
//! * a decoded message re-encodes to a frame that decodes to the same message;
//! * no string in a decoded message, and no error text, carries a character that is unsafe to
//!   print (see "Text from the peer" in `src/control/message.rs`).
//!
//! Seeds: `fuzz/seeds/control_decode/`, one valid frame per message kind; `scripts/fuzz` passes
//! them, with the dictionary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::control::codec::{decode, encode, HEADER_LEN, MAX_FRAME_LEN};
use rdma_probe_exporter::control::message::is_unsafe_char;
use serde_json::Value;

fn assert_printable(value: &Value) {
    match value {
        Value::String(s) => assert!(!s.chars().any(is_unsafe_char), "{s:?}"),
        Value::Array(items) => items.iter().for_each(assert_printable),
        Value::Object(fields) => fields.values().for_each(assert_printable),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(Some((msg, used))) => {
            assert!(used >= HEADER_LEN && used <= data.len() && used <= MAX_FRAME_LEN);
            assert_printable(&serde_json::to_value(&msg).unwrap());
            if let Ok(again) = encode(&msg) {
                let (back, _) = decode(&again)
                    .expect("our own frame must decode")
                    .expect("our own frame is complete");
                assert_eq!(back, msg);
            }
        }
        Ok(None) => assert!(data.len() < MAX_FRAME_LEN),
        Err(e) => {
            let text = e.to_string();
            assert!(!text.chars().any(is_unsafe_char), "{text:?}");
        }
    }
});
