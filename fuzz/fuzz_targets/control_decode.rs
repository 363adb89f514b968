//! Fuzz the control protocol decoder: it faces the network before authentication, so no input may
//! make it panic, over-read, or allocate on the strength of an untrusted length.
//!
//! Properties (the same as the proptest tests in `src/control/codec.rs`, for stable toolchains):
//! * `decode` returns, never panics;
//! * a decoded frame's consumed length lies within the input and the frame limit;
//! * `Ok(None)` ("need more bytes") only for inputs shorter than the frame limit;
//! * a decoded message re-encodes to a frame that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::control::codec::{decode, encode, HEADER_LEN, MAX_FRAME_LEN};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(Some((msg, used))) => {
            assert!(used >= HEADER_LEN && used <= data.len() && used <= MAX_FRAME_LEN);
            if let Ok(again) = encode(&msg) {
                let (back, _) = decode(&again)
                    .expect("our own frame must decode")
                    .expect("our own frame is complete");
                assert_eq!(back, msg);
            }
        }
        Ok(None) => assert!(data.len() < MAX_FRAME_LEN),
        Err(_) => {}
    }
});
