//! The server side of probe sessions: authenticates probers, allocates a bounded MR and the QPs,
//! advertises keys, allows one active burst per device (others get `busy`), verifies the data
//! pattern after each burst, and releases everything on close, error or idle timeout.
//!
//! One process serves every configured device (one per rail): each session runs on the device
//! [`select_device`] picks for its request (the device it names, else the one on its rail, else
//! the first), and each device has its own burst claim. Pinned memory, sessions and handshakes
//! are limited process-wide (docs/architecture.md, "Responder admission").
//!
//! Admission is in two steps so that strangers cannot exhaust it: a connection first takes one
//! of a few handshake permits (held only while it authenticates, under the control timeout),
//! and only an authenticated prober takes a session permit. Sessions are served one handler per
//! control message (`SessionHandler`). Registering, checking and freeing memory runs on
//! blocking threads, never on the async workers, so one session's large region never stalls
//! another's timers.
//!
//! Here: the settings, [`run`] and the accept loop. `admission.rs` decides who gets a session,
//! `failure.rs` how a refusal is told, counted and logged, `served.rs` holds the devices and the
//! state sessions share, `select.rs` picks a request's device, `memory.rs` keeps the pinned
//! budget, `session.rs` serves one prober's session and `verify.rs` checks a burst's data.

mod admission;
mod failure;
mod memory;
mod select;
mod served;
mod session;
#[cfg(test)]
mod test_support;
mod verify;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;

use crate::config::Labels;
use crate::control::{AuthMode, Connection, Message};
use crate::metrics::probe::PathLabels;
use crate::metrics::ResponderMetrics;
use crate::ping::{PingReports, PingSettings, Pinger};
use crate::rdma_address::RdmaDestinations;
use crate::readiness::{Readiness, ReadinessCondition};
use crate::reason::ErrorReason;
use crate::verbs::{Context, LocalPort, VerbsError};

pub use admission::prober_share;
pub use select::{select_device, DeviceRail, SelectError};

use failure::SessionFailure;
use served::{open_devices, Shared};
use session::{SessionEnd, SessionHandler};

/// One device a responder serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedDevice {
    /// The device and port (`device: None`: the first device with an ACTIVE port), and the GID
    /// index its sessions use.
    pub local: LocalPort,
    /// The rail it is cabled to: a prober that asks for this rail gets this device.
    pub rail: Option<u16>,
}

/// Limits and identity of a responder.
#[derive(Debug, Clone)]
pub struct ResponderSettings {
    pub node_name: String,
    /// The node's static labels, told to authenticated probers with the node name and the
    /// devices served (docs/metrics.md, "Peer identity").
    pub labels: Labels,
    /// The devices served, at least one, each at most once and each rail at most once. The
    /// first answers probers that ask for neither a device nor a rail.
    pub devices: Vec<ServedDevice>,
    pub auth: AuthMode,
    /// Concurrent sessions; more are refused with `limit`. One prober address may hold at most
    /// [`prober_share`] of them.
    pub max_sessions: usize,
    /// Total memory pinned (registered) across sessions.
    pub max_pinned_bytes: u64,
    /// Most memory one session's regions may take: a burst whose messages fit is verified
    /// message by message, a longer one over its last messages (as many as fit).
    pub max_session_bytes: u64,
    /// Connections allowed in the authentication handshake at once; more are refused at once.
    pub max_handshakes: usize,
    /// A session with no message for this long is closed and its resources freed.
    pub idle_timeout: Duration,
    /// Deadline for every control exchange.
    pub io_timeout: Duration,
    /// Networks a prober's RDMA address may be in besides the address its control connection
    /// came from (`rdma_networks`; docs/security.md, "Where RDMA traffic goes").
    pub rdma_networks: Vec<IpNet>,
    /// The ping engines of the served devices, by device name: a session on a device that has
    /// one learns the prober's ping QP and answers its pings (docs/architecture.md, "Pings").
    pub pingers: BTreeMap<String, DevicePinger>,
}

/// A device's ping engine as the exporter runs it (its paths named by their metric labels).
pub type DevicePinger = Pinger<PathLabels>;

/// A ping engine for each `(device, port)`, each handing its reports to what `reports` makes
/// for it. A device whose engine does not start is served (and probed) without pings, as the
/// log says.
pub fn start_pingers(
    devices: impl IntoIterator<Item = (String, u8)>,
    settings: PingSettings,
    mut reports: impl FnMut() -> Box<dyn FnMut(PingReports<PathLabels>) + Send>,
) -> BTreeMap<String, DevicePinger> {
    let mut pingers = BTreeMap::new();
    for (device, port) in devices {
        match Pinger::start(&device, port, settings, reports()) {
            Ok(pinger) => {
                pingers.insert(device, pinger);
            }
            Err(e) => {
                tracing::warn!(%device, error = %e, "no ping engine: the device sends and answers no pings");
            }
        }
    }
    pingers
}

/// The ping engines of a responder that only answers (the `responder` command): its devices by
/// name (the first with an ACTIVE port for one not named), keys kept for `key_ttl`.
pub fn answering_pingers(
    devices: &[ServedDevice],
    key_ttl: Duration,
) -> BTreeMap<String, DevicePinger> {
    let named = devices.iter().filter_map(|d| {
        let ctx = Context::open(d.local.device.as_deref(), d.local.port).ok()?;
        Some((ctx.device_name().to_owned(), d.local.port))
    });
    let settings = PingSettings {
        // Reports go nowhere: the interval only paces them.
        interval: Duration::from_secs(5),
        timeout: Duration::from_secs(1),
        window: Duration::from_secs(60),
        max_rate: 1,
        ttl: key_ttl,
        max_paths: 1,
    };
    start_pingers(named, settings, || Box::new(|_| {}))
}

/// Why the responder could not run at all (per-session failures are logged, not returned).
#[derive(Debug, Error)]
pub enum ResponderError {
    #[error(transparent)]
    Device(#[from] VerbsError),
    #[error("no device to serve")]
    NoDevices,
    #[error("device {device} port {port} is listed twice; serve each device once")]
    DuplicateDevice { device: String, port: u8 },
    #[error("rail {rail} is given to both {first} and {second}; each rail has one device")]
    DuplicateRail {
        rail: u16,
        first: String,
        second: String,
    },
    #[error("accepting control connections: {0}")]
    Accept(#[source] std::io::Error),
}

/// How often the port state is re-read for readiness.
const PORT_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Serves probe sessions on `listener` until `shutdown` completes. Opens every device first, so
/// a node without RDMA (or without one of the devices) fails here with that device's error
/// rather than at the first prober. Registers one readiness condition per device,
/// "device NAME port N": true while the device is open and its port ACTIVE, false again at
/// shutdown.
pub async fn run(
    listener: TcpListener,
    settings: ResponderSettings,
    metrics: ResponderMetrics,
    readiness: Readiness,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ResponderError> {
    let devices = open_devices(&settings.devices, &settings.pingers)?;
    // Dropping the set (however `run` ends) stops the watchers.
    let mut port_watches = tokio::task::JoinSet::new();
    let mut conditions = Vec::with_capacity(devices.len());
    for device in &devices {
        let ready = readiness.condition(format!(
            "device {} port {}",
            device.name(),
            device.ctx.port()
        ));
        // Opening checked that the port is ACTIVE.
        ready.set(true);
        port_watches.spawn(watch_port(device.ctx.clone(), ready.clone()));
        conditions.push(ready);
        tracing::info!(
            device = device.name(),
            port = device.ctx.port(),
            rail = device.rail,
            "serving device"
        );
    }
    tracing::info!(
        devices = devices.len(),
        listen = ?listener.local_addr().ok(),
        "responder ready"
    );
    let shared = Arc::new(Shared::new(settings, devices, metrics));
    accept_loop(&listener, &shared, shutdown).await;
    port_watches.abort_all();
    for ready in &conditions {
        ready.set_not_ready("the responder is shutting down");
    }
    tracing::info!("responder shutting down");
    Ok(())
}

/// Connections the kernel queues for the control port before the responder accepts them. The
/// usual 128 overflows in a burst of connections (a flood, or every node of a large cluster at
/// once): with SYN cookies the kernel then drops connections the client believes established,
/// and a prober among them waits for its handshake deadline. The kernel caps it at
/// `net.core.somaxconn` (4096 on current kernels).
pub const CONTROL_BACKLOG: u32 = 1024;

/// Binds the control port with [`CONTROL_BACKLOG`].
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(CONTROL_BACKLOG)
}

/// Serves the control protocol on `listener` with no device until `shutdown` completes: the
/// connection limit, the handshake, its deadlines and every check of a session request up to
/// the limits run as in [`run`], and a request that passes them all is refused with
/// `no_device`. This is the responder as a hostile client meets it, on a host without RDMA
/// (tests/hostile.rs runs its attacks against it); the node serves no probe with it.
pub async fn run_without_devices(
    listener: TcpListener,
    settings: ResponderSettings,
    metrics: ResponderMetrics,
    shutdown: impl Future<Output = ()>,
) {
    let shared = Arc::new(Shared::new(settings, Vec::new(), metrics));
    accept_loop(&listener, &shared, shutdown).await;
}

/// Accepts connections until `shutdown` completes. Each connection served holds a connection
/// permit for its life; beyond them it is refused here, with one write that never waits and no
/// task, so the connections (tasks, descriptors, buffers) the responder holds stay bounded
/// however many a client opens (see [`Admission`](admission::Admission)).
async fn accept_loop(
    listener: &TcpListener,
    shared: &Arc<Shared>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving, but do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        match shared.admission.connection_permit() {
            Ok(permit) => {
                tokio::spawn(serve_connection(Arc::clone(shared), stream, peer, permit));
            }
            Err(refused) => refuse_at_once(shared, &stream, peer, &refused),
        }
    }
}

/// Tells a connection refused at accept why, with one non-blocking write of a clear `Error`
/// frame (a hundred bytes fit any socket buffer; if not, the client learns it from the close),
/// and counts it. The stream is closed when the caller drops it.
fn refuse_at_once(
    shared: &Shared,
    stream: &TcpStream,
    peer: std::net::SocketAddr,
    refused: &SessionFailure,
) {
    if let Some(result) = refused.refusal() {
        shared.count(None, result);
    }
    shared.refusals.log(peer, refused);
    let msg = Message::Error {
        reason: refused.reason,
        message: refused.message.clone(),
    };
    if let Ok(frame) = crate::control::encode(&msg) {
        let _ = stream.try_write(&frame);
    }
}

/// Keeps `ready` equal to "the port is ACTIVE": a responder whose port went down cannot serve a
/// burst, and a Kubernetes readiness probe should say so.
async fn watch_port(mut ctx: Context, ready: ReadinessCondition) {
    let mut was_active = true;
    loop {
        tokio::time::sleep(PORT_CHECK_INTERVAL).await;
        let active = match ctx.refresh_port_info() {
            Ok(info) if info.state.is_active() => {
                ready.set(true);
                true
            }
            Ok(info) => {
                ready.set_not_ready(format!("port is {}, not active", info.state));
                false
            }
            Err(e) => {
                tracing::warn!(device = ctx.device_name(), error = %e, "cannot read the port state");
                ready.set_not_ready(format!("cannot read the port state: {e}"));
                false
            }
        };
        if active != was_active {
            tracing::warn!(
                device = ctx.device_name(),
                port = ctx.port(),
                active,
                "port state changed"
            );
            was_active = active;
        }
    }
}

/// One control connection: admission, handshake, then the session. `_connection` is held until
/// the connection is closed and its session's memory freed.
async fn serve_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    _connection: OwnedSemaphorePermit,
) {
    let mut conn = match Connection::new(stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "cannot set up control connection");
            return;
        }
    };
    let handshake = shared.admission.handshakes.take();
    let (node, _permit) = match shared
        .admission
        .admit(&mut conn, handshake, peer.ip())
        .await
    {
        Ok(admitted) => admitted,
        Err(e) => {
            if let Some(result) = e.refusal_before_session() {
                shared.count(None, result);
            }
            shared.refusals.log(peer, &e);
            tell_why(&mut conn, &e).await;
            return;
        }
    };
    let mut handler = SessionHandler {
        shared: Arc::clone(&shared),
        node: node.clone(),
        destinations: RdmaDestinations::new(peer.ip(), &shared.settings.rdma_networks),
        device: None,
        active: None,
    };
    match handler.serve(&mut conn).await {
        Ok(SessionEnd::ProberClosed) => tracing::info!(%peer, %node, "session closed"),
        Ok(SessionEnd::Idle) => {
            tracing::info!(%peer, %node, "idle session closed (the prober rebuilds it when it needs it)");
            let _ = conn.send(&Message::Close, Duration::from_millis(500)).await;
        }
        Err(e) => {
            tracing::warn!(%peer, %node, device = handler.device_name(), reason = %e.reason,
                error = %e.message, "session ended");
            let refusal = if handler.has_session() {
                e.refusal()
            } else {
                e.refusal_before_session()
            };
            if let Some(result) = refusal {
                shared.count(handler.device.as_deref(), result);
            }
            tell_why(&mut conn, &e).await;
        }
    }
    handler.count_unfinished_burst();
    // The session's memory is deregistered here, off the async workers.
    if let Some(active) = handler.active.take() {
        let _ = tokio::task::spawn_blocking(move || drop(active)).await;
    }
}

/// Sends the prober the failure that ends its connection, unless the failure is that the
/// connection is gone (closed or reset: nobody reads it).
async fn tell_why(conn: &mut Connection, failure: &SessionFailure) {
    if failure.reason != ErrorReason::Connect {
        conn.send_error_best_effort(failure.reason, &failure.message)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{client_handshake, connect, SessionRequest};
    use std::time::Instant;
    use test_support::{hello, request, settings, until};

    /// A device-less responder on loopback with `io_timeout` (as [`run_without_devices`]);
    /// returns its address, metrics and state.
    async fn control_plane(
        max_sessions: usize,
        max_handshakes: usize,
        io_timeout: Duration,
    ) -> (String, crate::metrics::Metrics, Arc<Shared>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let metrics = crate::metrics::Metrics::new();
        let settings = ResponderSettings {
            devices: Vec::new(),
            io_timeout,
            ..settings(max_sessions, max_handshakes)
        };
        let shared = Arc::new(Shared::new(settings, Vec::new(), metrics.responder.clone()));
        let serving = Arc::clone(&shared);
        tokio::spawn(async move {
            accept_loop(&listener, &serving, std::future::pending()).await;
        });
        (addr, metrics, shared)
    }

    /// `rdma_probe_responder_sessions_total{result}` of a device-less responder (0 if absent).
    fn refusals(metrics: &crate::metrics::Metrics, result: &str) -> u64 {
        let text = metrics
            .encode(crate::metrics::Format::PrometheusText)
            .unwrap();
        let series =
            format!(r#"rdma_probe_responder_sessions_total{{device="",result="{result}"}} "#);
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    /// Waits until the server closes `stream`, discarding what it sent; returns how long it took.
    async fn closed_after(stream: &mut tokio::net::TcpStream) -> Duration {
        use tokio::io::AsyncReadExt;
        let started = Instant::now();
        let mut sink = [0u8; 1024];
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
        started.elapsed()
    }

    #[tokio::test]
    async fn silent_connections_past_the_cap_give_way_and_are_told_why() {
        let (addr, metrics, shared) = control_plane(4, 2, Duration::from_secs(5)).await;
        let handshakes = &shared.admission.handshakes;
        let mut oldest = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("the oldest in its handshake", || {
            handshakes.in_progress() == 1
        })
        .await;
        let _newer = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("both in their handshakes", || handshakes.in_progress() == 2).await;
        let (_prober, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let mut told = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut oldest, &mut told)
            .await
            .unwrap();
        let (reply, _) = crate::control::decode(&told).unwrap().unwrap();
        assert!(
            matches!(&reply, Message::Error { reason: ErrorReason::PeerError, message }
                if message.contains("gave way")),
            "{reply:?}"
        );
        assert_eq!(refusals(&metrics, "handshake_limit"), 1);
    }

    #[tokio::test]
    async fn silence_and_an_early_close_before_a_session_are_refusals() {
        use tokio::io::AsyncWriteExt;
        let deadline = Duration::from_millis(300);
        let (addr, metrics, _) = control_plane(4, 4, deadline).await;
        // Silent: closed at the handshake deadline.
        let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let waited = closed_after(&mut silent).await;
        assert!(waited >= deadline - Duration::from_millis(50), "{waited:?}");
        assert!(waited < deadline * 4, "{waited:?}");
        // A truncated frame, then EOF.
        let mut truncated = tokio::net::TcpStream::connect(&addr).await.unwrap();
        truncated.write_all(b"RPXC\x00\x02").await.unwrap();
        truncated.shutdown().await.unwrap();
        closed_after(&mut truncated).await;
        // Authenticated, then no session request: closed at the same deadline.
        let mut idle = connect(&addr, Duration::from_secs(2)).await.unwrap();
        client_handshake(&mut idle, "node-a", &AuthMode::None, Duration::from_secs(2))
            .await
            .unwrap();
        let reply = idle.recv(Duration::from_secs(2)).await.unwrap();
        assert!(
            matches!(&reply, Message::Error { reason: ErrorReason::Timeout, message }
                if message.contains("no session request")),
            "{reply:?}"
        );
        // A refusal is counted before its connection is told or closed: what each client saw
        // above is the signal that its refusal was counted.
        assert_eq!(refusals(&metrics, "timeout"), 2);
        assert_eq!(refusals(&metrics, "closed"), 1);
    }

    #[tokio::test]
    async fn requests_beyond_the_limits_are_refused_before_any_device_is_used() {
        let (addr, metrics, _) = control_plane(4, 4, Duration::from_secs(2)).await;
        let ask = |request: SessionRequest| {
            let addr = addr.clone();
            async move {
                let mut conn = connect(&addr, Duration::from_secs(2)).await.unwrap();
                client_handshake(&mut conn, "node-a", &AuthMode::None, Duration::from_secs(2))
                    .await
                    .unwrap();
                conn.request(&Message::SessionRequest(request), Duration::from_secs(2))
                    .await
                    .unwrap_err()
            }
        };
        // 2 GiB in one message: beyond the 1 GiB pinned budget, whatever the device.
        let err = ask(request(1, 1 << 31, 1 << 31)).await;
        assert!(err.to_string().contains("pinned-memory limit"), "{err}");
        // 64 QPs of 16 MiB messages: one slot each is 1 GiB, within the budget.
        let err = ask(request(64, 16 << 20, u64::MAX)).await;
        assert_eq!(err.reason(), ErrorReason::NoDevice, "{err}");
        // Both requests were answered, and the responder counts a session or a refusal before it
        // answers: nothing more is counted for them after this point.
        assert_eq!(refusals(&metrics, "limit"), 1);
        assert_eq!(refusals(&metrics, "accepted"), 0);
    }
}
