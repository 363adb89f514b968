//! The channel against a scripted perftest server over an in-memory pipe: the full sequence as
//! `ib_write_bw`'s server runs it (it reads first, then writes), and servers that misbehave.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::channel::{Channel, ChannelError, Step};
use super::wire::{self, Key, Report, WireError};

const TIMEOUT: Duration = Duration::from_millis(300);

fn key(qpn: u32, gid: bool) -> Key {
    Key {
        lid: 0,
        out_reads: 1,
        qpn,
        psn: 0x1234,
        rkey: 0xabcd,
        vaddr: 0x7f00_0000_1000,
        gid: gid.then_some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]),
        srqn: 0,
    }
}

/// Reads exactly `n` bytes, as the server's single `read()` expects them.
async fn read(s: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).await.expect("server read");
    buf
}

/// The stock server's side of one uni-directional WRITE test with one QP; returns the report it
/// received.
async fn stock_server(mut s: DuplexStream, version: &str, gid: bool) -> Report {
    let version_msg = read(&mut s, 16).await;
    assert_eq!(&version_msg[..5], b"6.06\0");
    s.write_all(&wire::encode_version(version)).await.unwrap();
    for ours in [4096, 64] {
        read(&mut s, 4).await;
        s.write_all(&wire::encode_i32(ours)).await.unwrap();
    }
    let mtu = read(&mut s, 2).await;
    assert_eq!(mtu, b"5\0");
    s.write_all(&wire::encode_mtu(3)).await.unwrap();
    let size = Key::message_size(gid);
    // Round 1, round 2, barrier before and after the test.
    for _ in 0..4 {
        let client = Key::parse(&read(&mut s, size).await, gid).expect("client key parses");
        assert_eq!(client.qpn, 7);
        s.write_all(&key(0x99, gid).encode()).await.unwrap();
    }
    let mut fields = [[0u8; 8]; wire::REPORT_FIELDS];
    for field in &mut fields {
        field.copy_from_slice(&read(&mut s, 8).await);
        s.write_all(&[0xee; 8]).await.unwrap(); // its own, uninitialised
    }
    read(&mut s, size).await;
    s.write_all(&key(0x99, gid).encode()).await.unwrap();
    s.write_all(wire::DONE_MSG).await.unwrap();
    assert_eq!(read(&mut s, 5).await, wire::DONE_MSG);
    Report::decode(fields)
}

async fn client_run(s: DuplexStream, version: &str, gid: bool) -> Result<(), ChannelError> {
    let mut c = Channel::new(s, TIMEOUT, gid);
    let hello = c.hello(4096, 64).await?;
    assert_eq!(hello.version.text, version);
    assert_eq!(hello.cycle_buffer, 4096);
    assert_eq!(c.mtu(5).await?, 3, "the lower MTU");
    let ours = key(7, gid);
    let theirs = c.keys(Step::Keys(1), &ours).await?;
    assert_eq!(theirs.qpn, 0x99);
    assert_eq!(theirs.vaddr, 0x7f00_0000_1000);
    c.keys(Step::Keys(2), &ours).await?;
    c.keys(Step::StartBarrier, &ours).await?;
    c.keys(Step::EndBarrier, &ours).await?;
    c.report(&Report {
        size: 65536,
        iters: 500,
        bw_peak: 0.0,
        bw_avg: 812.5,
        msg_rate: 0.013,
    })
    .await?;
    c.close(&ours).await
}

#[tokio::test]
async fn full_sequence_with_and_without_gid() {
    for gid in [true, false] {
        let (a, b) = tokio::io::duplex(4096);
        let server = tokio::spawn(stock_server(b, "6.06", gid));
        client_run(a, "6.06", gid).await.expect("client completes");
        let report = server.await.expect("server completes");
        assert_eq!(report.size, 65536);
        assert_eq!(report.iters, 500);
        assert_eq!(report.bw_avg, 812.5);
    }
}

#[tokio::test]
async fn newer_server_without_negotiation_is_spoken_to() {
    let (a, b) = tokio::io::duplex(4096);
    let server = tokio::spawn(stock_server(b, "6.29", true));
    client_run(a, "6.29", true).await.expect("client completes");
    server.await.unwrap();
}

/// A server that answers the version with `version` and then waits.
async fn version_only(mut s: DuplexStream, version: &'static str) {
    read(&mut s, 16).await;
    s.write_all(&wire::encode_version(version)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn versions_we_cannot_speak_are_named() {
    for (version, want) in [
        ("6.28", "negotiates"),
        ("5.60", "older than 5.70"),
        ("hello", "not a perftest version"),
    ] {
        let (a, b) = tokio::io::duplex(4096);
        tokio::spawn(version_only(b, version));
        let e = Channel::new(a, TIMEOUT, true)
            .hello(4096, 64)
            .await
            .expect_err("refused");
        assert!(
            matches!(
                e,
                ChannelError::Wire {
                    step: Step::Version,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains(want), "{version}: {e}");
    }
}

#[tokio::test]
async fn a_silent_server_times_out_and_a_closing_one_is_named() {
    let (a, _b) = tokio::io::duplex(4096);
    let e = Channel::new(a, TIMEOUT, true)
        .hello(4096, 64)
        .await
        .expect_err("times out");
    assert!(
        matches!(
            e,
            ChannelError::Timeout {
                step: Step::Version,
                got: 0,
                expected: 16,
                ..
            }
        ),
        "{e}"
    );
    let (a, b) = tokio::io::duplex(4096);
    drop(b);
    let e = Channel::new(a, TIMEOUT, true)
        .hello(4096, 64)
        .await
        .expect_err("closed");
    assert!(
        matches!(e, ChannelError::Closed { .. } | ChannelError::Io { .. }),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_without_gid_keys_is_named() {
    // We expect GID keys; the server sends the 59-byte form and waits.
    let (a, mut b) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        read(&mut b, 108).await;
        b.write_all(&key(1, false).encode()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let e = Channel::new(a, TIMEOUT, true)
        .keys(Step::Keys(1), &key(7, true))
        .await
        .expect_err("short key");
    assert!(
        matches!(
            e,
            ChannelError::Timeout {
                got: 59,
                expected: 108,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("without a GID"), "{e}");
}

#[tokio::test]
async fn garbage_keys_and_mtus_are_protocol_errors() {
    let (a, mut b) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        read(&mut b, 2).await;
        b.write_all(b"x\0").await.unwrap();
    });
    let e = Channel::new(a, TIMEOUT, true)
        .mtu(5)
        .await
        .expect_err("bad mtu");
    assert!(
        matches!(
            e,
            ChannelError::Wire {
                source: WireError::BadMtu(_),
                ..
            }
        ),
        "{e}"
    );
    let (a, mut b) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        read(&mut b, 108).await;
        b.write_all(&[b'z'; 108]).await.unwrap();
    });
    let e = Channel::new(a, TIMEOUT, true)
        .keys(Step::Keys(1), &key(7, true))
        .await
        .expect_err("bad key");
    assert!(
        matches!(
            e,
            ChannelError::Wire {
                source: WireError::BadKey { .. },
                ..
            }
        ),
        "{e}"
    );
}
