//! Property tests: no input makes the decoder panic, and what it decodes re-encodes to itself;
//! also what the corpus replay and the fuzz targets check.

use super::*;

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
