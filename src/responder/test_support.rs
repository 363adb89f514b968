//! Helpers shared by the responder's tests.

use std::time::{Duration, Instant};

use crate::config::Labels;
use crate::control::message::Identity as NodeIdentity;
use crate::control::{
    client_handshake, connect, AuthMode, Connection, ControlError, QpEndpoint, SessionRequest,
};
use crate::verbs::LocalPort;

use super::{ResponderSettings, ServedDevice};

pub(super) fn settings(max_sessions: usize, max_handshakes: usize) -> ResponderSettings {
    ResponderSettings {
        node_name: "responder".into(),
        labels: Labels::new(),
        devices: vec![ServedDevice {
            local: LocalPort {
                device: None,
                port: 1,
                gid_index: None,
            },
            rail: None,
        }],
        auth: AuthMode::None,
        max_sessions,
        max_pinned_bytes: 1 << 30,
        max_session_bytes: 64 << 20,
        max_handshakes,
        idle_timeout: Duration::from_secs(60),
        io_timeout: Duration::from_millis(800),
        rdma_networks: Vec::new(),
        pingers: Default::default(),
    }
}

/// Waits until `done` holds (a state the server reached: the signal a test synchronises
/// on, never a guessed sleep); fails after 5 s.
pub(super) async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "not within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A prober's connection to `addr` after its handshake as `node` (no key), and what the
/// handshake gave: the responder's identity, or the handshake's error.
pub(super) async fn hello(
    addr: &str,
    node: &str,
) -> (Connection, Result<Option<NodeIdentity>, ControlError>) {
    let mut conn = connect(addr, Duration::from_secs(2)).await.unwrap();
    let told = client_handshake(&mut conn, node, &AuthMode::None, Duration::from_secs(2)).await;
    (conn, told)
}

pub(super) fn request(qps: u32, message_size: u64, region_bytes: u64) -> SessionRequest {
    SessionRequest {
        device: None,
        rail: None,
        qps,
        message_size,
        region_bytes,
        endpoints: vec![
            QpEndpoint {
                qpn: 1,
                psn: 1,
                lid: 0,
                gid: [0; 16]
            };
            qps as usize
        ],
        mtu: 1024,
        link_rate_bits_per_second: None,
        traffic_class: 0,
        service_level: 0,
        ping_qpn: None,
    }
}
