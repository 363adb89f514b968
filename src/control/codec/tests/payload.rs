//! What a payload may be: only the documented object form, names without control characters,
//! free text and errors quoting the peer escaped.

use super::*;

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
