//! The responder's identity in `AuthOk`: optional, bounded, and refused in any other form.

use super::*;

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
