use super::handshake::designates;
use super::*;
use crate::control::auth::{AuthMode, OwnHello, Psk};
use crate::control::codec::{decode, encode_with_version, CodecError, PROTOCOL_VERSION};
use crate::control::message::Identity;
use crate::control::seal::SealError;
use tokio::net::TcpListener;

const DEADLINE: Duration = Duration::from_secs(5);

fn psk(key: &str) -> AuthMode {
    AuthMode::psk(Psk::from_bytes(key.as_bytes()).unwrap())
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// What the test responders say about themselves.
fn responder_identity() -> Identity {
    Identity {
        node: "node-secret-name".into(),
        labels: [("tor".to_owned(), "tor-7".to_owned())].into(),
        devices: vec![crate::control::message::IdentityDevice {
            name: "mlx5_3".into(),
            port: 1,
            rail: Some(3),
        }],
    }
}

/// Runs both handshakes over loopback and returns (client result, server result); the
/// server tells [`responder_identity`].
async fn handshake(
    client_auth: AuthMode,
    server_auth: AuthMode,
) -> (
    Result<Connection, ControlError>,
    Result<(Connection, String), ControlError>,
) {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        let identity = responder_identity();
        let node = server_handshake(&mut conn, &server_auth, Some(&identity), DEADLINE).await?;
        Ok((conn, node))
    });
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    let client = client_handshake(&mut conn, "node-a", &client_auth, DEADLINE)
        .await
        .map(|identity| {
            assert_eq!(identity, Some(responder_identity()));
            conn
        });
    (client, server.await.unwrap())
}

#[tokio::test]
async fn both_ends_turn_on_keepalive() {
    let (l, addr) = listener().await;
    let client = connect(&addr, DEADLINE).await.unwrap();
    let (accepted, _) = l.accept().await.unwrap();
    let server = Connection::new(accepted).unwrap();
    for conn in [&client, &server] {
        let sock = socket2::SockRef::from(&conn.stream);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), KEEPALIVE.idle);
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), KEEPALIVE.interval);
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), KEEPALIVE.retries);
    }
    assert_eq!(KEEPALIVE.detection_bound(), Duration::from_secs(11));
}

#[tokio::test]
async fn same_psk_authenticates_and_session_messages_flow() {
    let key = "a shared key of enough length, 32+";
    let (client, server) = handshake(psk(key), psk(key)).await;
    let mut client = client.unwrap();
    let (mut server, node) = server.unwrap();
    assert_eq!(node, "node-a");

    let serve = tokio::spawn(async move {
        match server.recv(DEADLINE).await.unwrap() {
            Message::BurstStart { burst_id, .. } => server
                .send(&Message::BurstReady { burst_id }, DEADLINE)
                .await
                .unwrap(),
            other => panic!("unexpected {other:?}"),
        }
        server
            .send(
                &Message::Error {
                    reason: ErrorReason::Validation,
                    message: "pattern mismatch".into(),
                },
                DEADLINE,
            )
            .await
            .unwrap();
        assert!(matches!(server.recv(DEADLINE).await, Ok(Message::Close)));
        assert!(matches!(
            server.recv(DEADLINE).await,
            Err(ControlError::Closed)
        ));
    });
    let reply = client
        .request(
            &Message::BurstStart {
                burst_id: 1,
                seed: 2,
                deadline_ms: None,
            },
            DEADLINE,
        )
        .await
        .unwrap();
    assert_eq!(reply, Message::BurstReady { burst_id: 1 });
    let err = client
        .recv(DEADLINE)
        .await
        .map(|m| ControlError::unexpected("x", m));
    let err = err.unwrap();
    assert_eq!(err.reason(), ErrorReason::Validation);
    client.send(&Message::Close, DEADLINE).await.unwrap();
    client.shutdown(DEADLINE).await.unwrap();
    serve.await.unwrap();
}

#[tokio::test]
async fn auth_none_on_both_sides_works() {
    let (client, server) = handshake(AuthMode::None, AuthMode::None).await;
    assert!(client.is_ok());
    assert!(server.is_ok());
}

#[tokio::test]
async fn different_psk_fails_with_auth_on_both_sides() {
    for (c, s) in [
        (
            psk("the client's key, long enough, 32+ bytes"),
            psk("the server's key, long enough, 32+ bytes"),
        ),
        (
            AuthMode::None,
            psk("the server's key, long enough, 32+ bytes"),
        ),
        (
            psk("the client's key, long enough, 32+ bytes"),
            AuthMode::None,
        ),
    ] {
        let (client, server) = handshake(c, s).await;
        let client = client.unwrap_err();
        let server = server.unwrap_err();
        assert_eq!(client.reason(), ErrorReason::Auth, "client: {client}");
        assert_eq!(server.reason(), ErrorReason::Auth, "server: {server}");
    }
}

#[tokio::test]
async fn server_rejects_a_client_that_cannot_prove_the_key() {
    // A client that skips verifying the server and sends a bogus proof: the server must refuse
    // it, and say so with Error{auth}.
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        // Its identity goes only to a prober that proved the key.
        let identity = responder_identity();
        server_handshake(
            &mut conn,
            &psk("the server's key, long enough, 32+ bytes"),
            Some(&identity),
            DEADLINE,
        )
        .await
    });
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    conn.send(
        &Message::Hello {
            target: "node-b:18516".into(),
            node: "mallory".into(),
            client_nonce: [0; 32],
        },
        DEADLINE,
    )
    .await
    .unwrap();
    assert!(matches!(
        conn.recv(DEADLINE).await.unwrap(),
        Message::Challenge { .. }
    ));
    let err = conn
        .request(
            &Message::Authenticate {
                client_proof: [0; 32],
            },
            DEADLINE,
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Auth);
    let server = server.await.unwrap().unwrap_err();
    assert!(matches!(server, ControlError::Auth(_)), "{server}");
}

#[tokio::test]
async fn session_messages_before_auth_are_refused() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        server_handshake(&mut conn, &AuthMode::None, None, DEADLINE).await
    });
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    let err = conn
        .request(
            &Message::BurstStart {
                burst_id: 1,
                seed: 1,
                deadline_ms: None,
            },
            DEADLINE,
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Protocol, "{err}");
    let server = server.await.unwrap().unwrap_err();
    assert_eq!(server.reason(), ErrorReason::Protocol);
    assert!(server.to_string().contains("burst_start"), "{server}");
}

#[tokio::test]
async fn silent_server_times_out_within_the_deadline() {
    let (l, addr) = listener().await;
    // Accept and hold the connection without ever answering.
    let hold = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(s);
    });
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    let deadline = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = client_handshake(&mut conn, "node-a", &AuthMode::None, deadline)
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.reason(), ErrorReason::Timeout, "{err}");
    assert!(took >= deadline, "{took:?}");
    assert!(took < deadline + Duration::from_secs(1), "{took:?}");
    hold.abort();
}

#[tokio::test]
async fn silent_client_times_out_on_the_server() {
    let (l, addr) = listener().await;
    let client = tokio::spawn(async move {
        let conn = connect(&addr, DEADLINE).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        drop(conn);
    });
    let (s, _) = l.accept().await.unwrap();
    let mut conn = Connection::new(s).unwrap();
    let started = std::time::Instant::now();
    let err = server_handshake(&mut conn, &AuthMode::None, None, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Timeout);
    assert!(started.elapsed() < Duration::from_secs(2));
    client.abort();
}

#[tokio::test]
async fn an_old_prober_gets_a_clear_error_on_both_sides() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        server_handshake(
            &mut conn,
            &psk("a shared key of enough length, 32+"),
            None,
            DEADLINE,
        )
        .await
    });
    // Act as a v1 prober (frames in clear after the handshake): raw stream, v1 frame.
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    let hello = Message::Hello {
        target: "node-b:18516".into(),
        node: "old-node".into(),
        client_nonce: [1; 32],
    };
    raw.write_all(&encode_with_version(&hello, 1).unwrap())
        .await
        .unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).await.unwrap();

    let server = server.await.unwrap().unwrap_err();
    assert_eq!(server.reason(), ErrorReason::Protocol);
    let ours = PROTOCOL_VERSION;
    assert!(
        server.to_string().contains(&format!(
            "peer speaks control protocol v1, we speak v{ours}: upgrade the older side"
        )),
        "{server}"
    );
    // The answer is a clear frame of our version that says the same; the v1 build's decoder
    // in turn reports both versions from its header.
    assert_eq!(reply[4..6], PROTOCOL_VERSION.to_be_bytes());
    match decode(&reply).unwrap().unwrap().0 {
        Message::Error { reason, message } => {
            assert_eq!(reason, ErrorReason::Protocol);
            assert!(message.contains(&format!(
                "peer speaks control protocol v1, we speak v{ours}"
            )));
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let old_view = codec::decode_with_version(&reply, 1).unwrap_err();
    assert!(old_view.to_string().contains(&format!(
        "peer speaks control protocol v{ours}, we speak v1"
    )));
}

#[tokio::test]
async fn client_reports_an_older_or_newer_server_clearly() {
    let ours = PROTOCOL_VERSION;
    for theirs in [ours - 1, ours + 1] {
        // The server answers in its own version: an older responder sends Error{protocol} in
        // a frame of its version when it reads our hello; a newer one whatever it sends.
        let (l, addr) = listener().await;
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await.unwrap();
            let answer = Message::Error {
                reason: ErrorReason::Protocol,
                message: format!("peer speaks control protocol v{ours}, we speak v{theirs}"),
            };
            s.write_all(&encode_with_version(&answer, theirs).unwrap())
                .await
                .unwrap();
            s
        });
        let mut conn = connect(&addr, DEADLINE).await.unwrap();
        let err = client_handshake(
            &mut conn,
            "node-a",
            &psk("a shared key of enough length, 32+"),
            DEADLINE,
        )
        .await
        .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::Protocol);
        let expected = format!("peer speaks control protocol v{theirs}, we speak v{ours}");
        assert!(err.to_string().contains(&expected), "{err}");
        drop(server.await.unwrap());
    }
}

/// A prober's connection meant for another node that comes back to this process's own
/// responder (redirected on the way) is refused, not answered with this node's identity;
/// the same prober reaching this node by its own address is served.
#[tokio::test]
async fn a_connection_redirected_back_to_its_own_node_is_refused() {
    for (target, refused) in [
        ("node-t:18516", true),
        ("192.0.2.12:18516", true),
        ("node-secret-name:18516", false),
        ("", false),
    ] {
        let (l, addr) = listener().await;
        let server = tokio::spawn(async move {
            let (stream, _) = l.accept().await.unwrap();
            let mut conn = Connection::new(stream).unwrap();
            let identity = responder_identity();
            server_handshake(&mut conn, &psk(KEY), Some(&identity), DEADLINE).await
        });
        let mut conn = connect(&addr, DEADLINE).await.unwrap();
        if !target.is_empty() {
            // What a redirect does: the prober dialed `target`, the bytes reach us.
            conn.target = target.into();
        }
        let client = client_handshake(&mut conn, "node-p", &psk(KEY), DEADLINE).await;
        let server = server.await.unwrap();
        if refused {
            let err = server.unwrap_err();
            assert!(matches!(err, ControlError::Redirected { .. }), "{err}");
            let err = client.unwrap_err();
            assert_eq!(err.reason(), ErrorReason::Protocol, "{err}");
            assert!(err.to_string().contains(target), "{err}");
        } else {
            assert_eq!(server.unwrap(), "node-p", "{target}");
            assert_eq!(client.unwrap().unwrap().node, "node-secret-name");
        }
    }
    // Another process's prober (its nonce is not ours) naming another target is no redirect
    // this responder can tell: served.
    assert!(!OwnHello::is_own(&[9; 32]));
    assert!(designates("[::1]:18516", None, None));
    assert!(designates(
        "10.0.0.1:18516",
        Some("10.0.0.1:40000".parse().unwrap()),
        None
    ));
    assert!(!designates(
        "10.0.0.2:18516",
        Some("10.0.0.1:40000".parse().unwrap()),
        Some("node-p")
    ));
}

/// What a man in the middle does to each frame the prober sends: given the frame's index
/// (0 `hello`, 1 `authenticate`, then the protected frames) and the frames seen so far,
/// the bytes to pass on in its place (none to drop it).
type Meddle = Box<dyn FnMut(usize, &[Vec<u8>]) -> Vec<u8> + Send>;

/// A TCP relay on loopback between a prober and `server`: the responder's bytes pass as they
/// are, the prober's frames through `meddle`. Returns the relay's address.
async fn relay(server: String, mut meddle: Meddle) -> String {
    let (l, addr) = listener().await;
    tokio::spawn(async move {
        let (client, _) = l.accept().await.unwrap();
        let upstream = TcpStream::connect(&server).await.unwrap();
        let (mut client_rx, mut client_tx) = client.into_split();
        let (mut up_rx, mut up_tx) = upstream.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut up_rx, &mut client_tx).await;
        });
        let mut pending = Vec::new();
        let mut frames: Vec<Vec<u8>> = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            // Whole frames by their header's length, whatever is inside.
            while pending.len() >= codec::HEADER_LEN {
                let len = u32::from_be_bytes(pending[8..12].try_into().unwrap()) as usize;
                if pending.len() < codec::HEADER_LEN + len {
                    break;
                }
                let frame: Vec<u8> = pending.drain(..codec::HEADER_LEN + len).collect();
                frames.push(frame);
                let out = meddle(frames.len() - 1, &frames);
                if up_tx.write_all(&out).await.is_err() {
                    return;
                }
            }
            match client_rx.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
        }
    });
    addr
}

const KEY: &str = "a shared key of enough length, 32+";

/// A responder that authenticates one prober and then reads messages until an error, which
/// it returns with the messages it read before.
async fn reading_responder() -> (
    String,
    tokio::task::JoinHandle<(Vec<Message>, ControlError)>,
) {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        server_handshake(&mut conn, &psk(KEY), Some(&responder_identity()), DEADLINE)
            .await
            .unwrap();
        assert!(conn.is_protected());
        let mut read = Vec::new();
        loop {
            match conn.recv(DEADLINE).await {
                Ok(msg) => read.push(msg),
                Err(e) => {
                    conn.send_error_best_effort(e.reason(), &e.to_string())
                        .await;
                    return (read, e);
                }
            }
        }
    });
    (addr, server)
}

fn burst_start(burst_id: u64) -> Message {
    Message::BurstStart {
        burst_id,
        seed: 2,
        deadline_ms: None,
    }
}

/// Runs a prober through `meddle` against [`reading_responder`]: it authenticates, then sends
/// `burst_start` 1, 2 and 3 and closes. Returns what the responder read before its error,
/// and the error.
async fn meddled_session(meddle: Meddle) -> (Vec<Message>, ControlError) {
    let (server_addr, server) = reading_responder().await;
    let addr = relay(server_addr, meddle).await;
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    client_handshake(&mut conn, "node-a", &psk(KEY), DEADLINE)
        .await
        .unwrap();
    for id in 1..=3 {
        conn.send(&burst_start(id), DEADLINE).await.unwrap();
    }
    let _ = conn.shutdown(DEADLINE).await;
    tokio::time::timeout(DEADLINE, server)
        .await
        .unwrap()
        .unwrap()
}

fn assert_forged(err: &ControlError, frame: u64) {
    assert!(
        matches!(err, ControlError::Integrity(SealError::Forged { frame: f }) if *f == frame),
        "{err:?}"
    );
    assert_eq!(err.reason(), ErrorReason::Auth);
    assert!(err.to_string().contains("failed authentication"), "{err}");
}

#[tokio::test]
async fn an_untouched_session_reads_every_frame() {
    let (read, err) = meddled_session(Box::new(|i, frames| frames[i].clone())).await;
    assert_eq!(read, vec![burst_start(1), burst_start(2), burst_start(3)]);
    assert!(matches!(err, ControlError::Closed), "{err:?}");
}

#[tokio::test]
async fn a_changed_byte_closes_the_connection() {
    for at in [0, 11, 12, 20, usize::MAX] {
        let (read, err) = meddled_session(Box::new(move |i, frames| {
            let mut frame = frames[i].clone();
            if i == 3 {
                // Flags, length, ciphertext, tag; the header's length stays in range.
                let at = at.min(frame.len() - 1).max(7);
                frame[at] ^= if at == 11 { 0x01 } else { 0x80 };
            }
            frame
        }))
        .await;
        assert_eq!(read, vec![burst_start(1)], "byte {at}");
        match at {
            // The flags: a reserved bit is a framing error before any key is used.
            0 => assert_eq!(err.reason(), ErrorReason::Protocol, "{err}"),
            // A length one byte off: the tag is read from the wrong place.
            11 => assert!(
                matches!(err, ControlError::Integrity(_) | ControlError::Closed),
                "{err:?}"
            ),
            _ => assert_forged(&err, 1),
        }
    }
}

#[tokio::test]
async fn a_replayed_frame_closes_the_connection() {
    let (read, err) = meddled_session(Box::new(|i, frames| {
        // The prober's third protected frame is swapped for a copy of its first.
        frames[if i == 4 { 2 } else { i }].clone()
    }))
    .await;
    assert_eq!(read, vec![burst_start(1), burst_start(2)]);
    assert_forged(&err, 2);
}

#[tokio::test]
async fn reordered_frames_close_the_connection() {
    let (read, err) = meddled_session(Box::new(|i, frames| match i {
        // Hold the first protected frame back and send it after the second.
        2 => Vec::new(),
        3 => [frames[3].clone(), frames[2].clone()].concat(),
        _ => frames[i].clone(),
    }))
    .await;
    assert_eq!(read, vec![]);
    assert_forged(&err, 0);
}

#[tokio::test]
async fn a_dropped_frame_closes_the_connection() {
    let (read, err) = meddled_session(Box::new(|i, frames| {
        if i == 3 {
            Vec::new()
        } else {
            frames[i].clone()
        }
    }))
    .await;
    assert_eq!(read, vec![burst_start(1)]);
    assert_forged(&err, 1);
}

#[tokio::test]
async fn a_truncated_frame_closes_the_connection() {
    // Cut short with its length rewritten to match: the tag no longer verifies.
    let (read, err) = meddled_session(Box::new(|i, frames| {
        let mut frame = frames[i].clone();
        if i == 2 {
            frame.truncate(frame.len() - 5);
            let len = (frame.len() - codec::HEADER_LEN) as u32;
            frame[8..12].copy_from_slice(&len.to_be_bytes());
        }
        frame
    }))
    .await;
    assert_eq!(read, vec![]);
    assert_forged(&err, 0);
    // Cut short and the connection closed: the frame never counts.
    let (read, err) = meddled_session(Box::new(|i, frames| match i {
        0 | 1 => frames[i].clone(),
        2 => frames[2][..frames[2].len() - 5].to_vec(),
        _ => Vec::new(),
    }))
    .await;
    assert_eq!(read, vec![]);
    assert!(matches!(err, ControlError::Closed), "{err:?}");
}

#[tokio::test]
async fn an_injected_clear_frame_closes_the_connection() {
    let (read, err) = meddled_session(Box::new(|i, frames| {
        if i == 3 {
            codec::encode(&Message::Close).unwrap()
        } else {
            frames[i].clone()
        }
    }))
    .await;
    assert_eq!(read, vec![burst_start(1)]);
    assert!(
        matches!(err, ControlError::Integrity(SealError::Clear { frame: 1 })),
        "{err:?}"
    );
    assert_eq!(err.reason(), ErrorReason::Auth);
}

#[tokio::test]
async fn nothing_after_the_handshake_is_readable_on_the_wire() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = std::sync::Arc::clone(&seen);
    let (read, _) = meddled_session(Box::new(move |i, frames| {
        record.lock().unwrap().extend_from_slice(&frames[i]);
        frames[i].clone()
    }))
    .await;
    assert_eq!(read.len(), 3);
    let wire = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert!(
        wire.contains("\"type\":\"hello\""),
        "the handshake is clear"
    );
    assert!(!wire.contains("burst_start"), "{wire}");
    assert!(!wire.contains("seed"), "{wire}");
    // The responder's identity travels in the sealed AuthOk.
    assert!(!wire.contains("auth_ok"), "{wire}");
    assert!(!wire.contains("node-secret-name"), "{wire}");
    assert!(!wire.contains("tor-7"), "{wire}");
}

#[tokio::test]
async fn a_responder_that_tells_nothing_gives_no_identity() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        server_handshake(&mut conn, &psk(KEY), None, DEADLINE).await
    });
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    let identity = client_handshake(&mut conn, "node-a", &psk(KEY), DEADLINE)
        .await
        .unwrap();
    assert_eq!(identity, None);
    assert_eq!(server.await.unwrap().unwrap(), "node-a");
}

#[tokio::test]
async fn the_responder_says_why_and_the_prober_reads_it() {
    // The responder answers a forged frame with a protected Error{auth}: its own sealer is
    // still in step, so the prober learns why the connection ends.
    let (server_addr, server) = reading_responder().await;
    let addr = relay(
        server_addr,
        Box::new(|i, frames| {
            let mut frame = frames[i].clone();
            if i == 2 {
                let last = frame.len() - 1;
                frame[last] ^= 1;
            }
            frame
        }),
    )
    .await;
    let mut conn = connect(&addr, DEADLINE).await.unwrap();
    client_handshake(&mut conn, "node-a", &psk(KEY), DEADLINE)
        .await
        .unwrap();
    let err = conn.request(&burst_start(1), DEADLINE).await.unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Auth, "{err}");
    assert!(err.to_string().contains("failed authentication"), "{err}");
    let (_, server_err) = server.await.unwrap();
    assert_forged(&server_err, 0);
}

#[tokio::test]
async fn auth_none_leaves_frames_clear_and_psk_protects_them() {
    let (client, server) = handshake(AuthMode::None, AuthMode::None).await;
    assert!(!client.unwrap().is_protected());
    assert!(!server.unwrap().0.is_protected());
    let (client, server) = handshake(psk(KEY), psk(KEY)).await;
    assert!(client.unwrap().is_protected());
    assert!(server.unwrap().0.is_protected());
}

#[tokio::test]
async fn a_prober_with_either_key_of_a_rollover_is_served() {
    use crate::control::auth::Keys;
    let key = |k: &str| Psk::from_bytes(k.as_bytes()).unwrap();
    let (old, new, other) = (
        "the old key, long enough, 32+ bytes",
        "the new key, long enough, 32+ bytes",
        "neither key, long enough, 32+ bytes",
    );
    let both = || AuthMode::Psk(Keys::new(key(new), Some(key(old))));
    for (prober, ok) in [
        (psk(old), true),
        (psk(new), true),
        (both(), true),
        (psk(other), false),
    ] {
        let (client, server) = handshake(prober, both()).await;
        if ok {
            let mut client = client.unwrap();
            let (mut server, _) = server.unwrap();
            client.send(&burst_start(9), DEADLINE).await.unwrap();
            assert_eq!(server.recv(DEADLINE).await.unwrap(), burst_start(9));
        } else {
            assert_eq!(client.unwrap_err().reason(), ErrorReason::Auth);
            assert_eq!(server.unwrap_err().reason(), ErrorReason::Auth);
        }
    }
}

#[tokio::test]
async fn garbage_and_oversize_frames_break_the_connection() {
    let (l, addr) = listener().await;
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let mut conn = Connection::new(s).unwrap();
        let first = conn.recv(DEADLINE).await;
        let second = conn.recv(DEADLINE).await;
        (first, second)
    });
    let mut raw = TcpStream::connect(&addr).await.unwrap();
    // A header announcing a 4 GiB payload: rejected from the header, nothing buffered.
    let mut header = b"RPXC".to_vec();
    header.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0xff, 0xff, 0xff, 0xff]);
    raw.write_all(&header).await.unwrap();
    let (first, second) = server.await.unwrap();
    assert!(matches!(
        first,
        Err(ControlError::Codec(CodecError::FrameTooLarge { .. }))
    ));
    assert!(matches!(second, Err(ControlError::Broken)));
}

#[tokio::test]
async fn receive_timeout_keeps_partial_frames() {
    let (l, addr) = listener().await;
    let mut raw_client = TcpStream::connect(&addr).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    let mut conn = Connection::new(s).unwrap();
    let frame = codec::encode(&Message::BurstReady { burst_id: 9 }).unwrap();
    raw_client.write_all(&frame[..5]).await.unwrap();
    let err = conn.recv(Duration::from_millis(100)).await.unwrap_err();
    assert!(matches!(err, ControlError::Timeout { .. }));
    raw_client.write_all(&frame[5..]).await.unwrap();
    assert_eq!(
        conn.recv(DEADLINE).await.unwrap(),
        Message::BurstReady { burst_id: 9 }
    );
}

#[tokio::test]
async fn connect_failures_are_connect_errors() {
    // Bind then drop to get a loopback port with (almost certainly) nobody listening.
    let (l, addr) = listener().await;
    drop(l);
    let err = connect(&addr, DEADLINE).await.unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Connect, "{err}");
    assert!(err.to_string().contains(&addr));
    let err = connect("not an address", DEADLINE).await.unwrap_err();
    assert_eq!(err.reason(), ErrorReason::Connect, "{err}");
}

#[test]
fn peer_reasons_map_to_labels() {
    let peer = |reason| ControlError::Peer {
        reason,
        message: String::new(),
    };
    assert_eq!(peer(ErrorReason::Auth).reason(), ErrorReason::Auth);
    assert_eq!(peer(ErrorReason::QpSetup).reason(), ErrorReason::QpSetup);
    assert_eq!(peer(ErrorReason::Connect).reason(), ErrorReason::PeerError);
    assert_eq!(ControlError::Closed.reason(), ErrorReason::Connect);
    assert_eq!(ControlError::Broken.reason(), ErrorReason::Protocol);
}
