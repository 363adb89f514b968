//! The server side of probe sessions: authenticates probers, allocates a bounded MR and the QPs,
//! advertises keys, allows one active burst per device (others get `busy`), verifies the data
//! pattern after each burst, and releases everything on close, error or idle timeout.
//!
//! One process serves every configured device (one per rail): each session runs on the device
//! [`select_device`] picks for its request (the device it names, else the one on its rail, else
//! the first), and each device has its own burst slot. Pinned memory, sessions and handshakes
//! are limited process-wide (docs/architecture.md, "Responder admission").
//!
//! Admission is in two steps so that strangers cannot exhaust it: a connection first takes one
//! of a few handshake permits (held only while it authenticates, under the control timeout),
//! and only an authenticated prober takes a session permit. Sessions are served one handler per
//! control message (`SessionHandler`). Registering, checking and freeing memory runs on
//! blocking threads, never on the async workers, so one session's large region never stalls
//! another's timers.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::burst::pattern;
use crate::config::Labels;
use crate::control::message::{Identity as NodeIdentity, IdentityDevice};
use crate::control::{
    server_handshake, AuthMode, BurstOutcome, BurstResult, Connection, ControlError, Message,
    RemoteRegion, SessionAccept, SessionRequest,
};
use crate::metrics::{ResponderMetrics, SessionResult};
use crate::placement::{self, Placement};
use crate::port::{self, CounterReader, CounterSnapshot, Sysfs};
use crate::prober::read_counters;
use crate::rdma_address::RdmaDestinations;
use crate::readiness::{Readiness, ReadinessCondition};
use crate::reason::ErrorReason;
use crate::session::{PathOptions, QpSet, QpSetShape};
use crate::verbs::LocalPort;
use crate::verbs::{wc_opcode, Completion, Context, RemoteAccess, VerbsError};

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
}

/// The sessions one prober address may hold at once: half of `max_sessions` (rounded up), so
/// that one node, or one key holder, cannot take them all and keep the others out
/// (docs/security.md, "Responder admission").
pub fn prober_share(max_sessions: usize) -> usize {
    max_sessions.div_ceil(2).max(1)
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

/// What [`select_device`] knows of a served device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceRail<'a> {
    pub name: &'a str,
    pub rail: Option<u16>,
}

/// Why no served device fits a session request (sent to the prober as `no_device`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectError {
    #[error("device {wanted} is not served here; this responder serves {}", .served.join(", "))]
    NotServed { wanted: String, served: Vec<String> },
    #[error("no device on rail {rail}; {}", serves_rails(.rails))]
    NoRail { rail: u16, rails: Vec<u16> },
    #[error("this responder serves no device")]
    Empty,
}

fn serves_rails(rails: &[u16]) -> String {
    if rails.is_empty() {
        return "this responder's devices have no rail (ask without one)".to_owned();
    }
    let list: Vec<String> = rails.iter().map(u16::to_string).collect();
    let noun = if rails.len() == 1 { "rail" } else { "rails" };
    format!("this responder serves {noun} {}", list.join(", "))
}

/// The index in `served` of the device that answers a session request for `device` on `rail`:
/// the named device if it is served (a named device that is not is refused, whatever the rail);
/// else the device on `rail` (refused when no device is on it); else, when the request names
/// neither, the first device.
pub fn select_device(
    served: &[DeviceRail<'_>],
    device: Option<&str>,
    rail: Option<u16>,
) -> Result<usize, SelectError> {
    if served.is_empty() {
        return Err(SelectError::Empty);
    }
    if let Some(wanted) = device {
        return served.iter().position(|d| d.name == wanted).ok_or_else(|| {
            SelectError::NotServed {
                wanted: wanted.to_owned(),
                served: served.iter().map(|d| d.name.to_owned()).collect(),
            }
        });
    }
    if let Some(rail) = rail {
        return served
            .iter()
            .position(|d| d.rail == Some(rail))
            .ok_or_else(|| SelectError::NoRail {
                rail,
                rails: served.iter().filter_map(|d| d.rail).collect(),
            });
    }
    Ok(0)
}

/// A device being served: its context, and the state its sessions share.
struct Served {
    ctx: Context,
    rail: Option<u16>,
    gid_index: Option<u32>,
    /// At most one active burst on this device; other probers get `busy` (a burst on another
    /// device does not).
    burst_slot: Arc<AtomicBool>,
    /// Where the memory of its sessions is registered (docs/architecture.md, "NUMA placement").
    placement: Placement,
}

impl Served {
    fn name(&self) -> &str {
        self.ctx.device_name()
    }

    fn identity(&self) -> Identity<'_> {
        (self.name(), self.ctx.port(), self.rail)
    }
}

/// State shared by all sessions of a responder.
struct Shared {
    settings: ResponderSettings,
    /// In the order of `settings.devices`; never empty.
    devices: Vec<Arc<Served>>,
    pinned: Arc<AtomicU64>,
    admission: Admission,
    metrics: ResponderMetrics,
    refusals: RefusalLog,
}

impl Shared {
    fn new(
        settings: ResponderSettings,
        devices: Vec<Arc<Served>>,
        metrics: ResponderMetrics,
    ) -> Self {
        let identity = identity(&settings, &devices);
        Shared {
            admission: Admission::new(&settings, identity),
            settings,
            devices,
            pinned: Arc::new(AtomicU64::new(0)),
            metrics,
            refusals: RefusalLog::default(),
        }
    }

    /// Counts a session under its device, or under the first device when the session never got
    /// one (refused in the handshake or at a limit before it asked for a device).
    fn count(&self, device: Option<&Served>, result: SessionResult) {
        let name = device
            .or_else(|| self.devices.first().map(Arc::as_ref))
            .map_or("", Served::name);
        self.metrics.session(name, result);
    }

    /// The device that answers `request` ([`select_device`]).
    fn select(&self, request: &SessionRequest) -> Result<Arc<Served>, SessionFailure> {
        let served: Vec<DeviceRail<'_>> = self
            .devices
            .iter()
            .map(|d| DeviceRail {
                name: d.name(),
                rail: d.rail,
            })
            .collect();
        let chosen = select_device(&served, request.device.as_deref(), request.rail)
            .map_err(|e| failure(ErrorReason::NoDevice, e.to_string()))?;
        self.devices
            .get(chosen)
            .cloned()
            .ok_or_else(|| failure(ErrorReason::NoDevice, SelectError::Empty.to_string()))
    }
}

/// Opens every device of `devices` (the first failure is the error) and checks that no device
/// and no rail is served twice.
fn open_devices(devices: &[ServedDevice]) -> Result<Vec<Arc<Served>>, ResponderError> {
    if devices.is_empty() {
        return Err(ResponderError::NoDevices);
    }
    let mut served: Vec<Arc<Served>> = Vec::with_capacity(devices.len());
    for device in devices {
        let ctx = Context::open(device.local.device.as_deref(), device.local.port)?;
        if let Some(i) = device.local.gid_index {
            ctx.gid(i)?;
        }
        let placement = placement::for_device(&Sysfs::system(), ctx.device_name());
        if placement.cpus().is_some() {
            tracing::info!(device = ctx.device_name(), %placement, "session memory on the NIC's NUMA node");
        }
        let opened = Served {
            ctx,
            rail: device.rail,
            gid_index: device.local.gid_index,
            burst_slot: Arc::new(AtomicBool::new(false)),
            placement,
        };
        let known: Vec<_> = served.iter().map(|d| d.identity()).collect();
        check_distinct(&known, opened.identity())?;
        served.push(Arc::new(opened));
    }
    Ok(served)
}

/// A served device's name, port and rail.
type Identity<'a> = (&'a str, u8, Option<u16>);

/// `Err` when `new` is a device (and port) or a rail that `served` already has. A device named
/// twice, or the default device (the first with an ACTIVE port) next to the same device named,
/// would be two entries for one device; a rail twice would make rail matching ambiguous.
fn check_distinct(served: &[Identity<'_>], new: Identity<'_>) -> Result<(), ResponderError> {
    let (name, port, rail) = new;
    for &(old_name, old_port, old_rail) in served {
        if (old_name, old_port) == (name, port) {
            return Err(ResponderError::DuplicateDevice {
                device: name.to_owned(),
                port,
            });
        }
        if let Some(rail) = rail.filter(|_| old_rail == rail) {
            return Err(ResponderError::DuplicateRail {
                rail,
                first: old_name.to_owned(),
                second: name.to_owned(),
            });
        }
    }
    Ok(())
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
    let devices = open_devices(&settings.devices)?;
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
/// however many a client opens (see [`Admission`]).
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

/// What this responder tells a prober that proved the key: its node name, labels and devices
/// with their rails, within the protocol's limits (what does not fit is logged and left out). A
/// node name the protocol does not take leaves the identity out altogether.
fn identity(settings: &ResponderSettings, devices: &[Arc<Served>]) -> Option<NodeIdentity> {
    let served = devices.iter().map(|d| IdentityDevice {
        name: d.name().to_owned(),
        port: d.ctx.port(),
        rail: d.rail,
    });
    let (identity, left_out) = NodeIdentity::bounded(&settings.node_name, &settings.labels, served);
    for what in left_out {
        tracing::warn!(left_out = %what, "not told to probers in this node's identity");
    }
    match identity.validate() {
        Ok(()) => Some(identity),
        Err(e) => {
            tracing::warn!(error = %e, "probers are not told this node's identity");
            None
        }
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

/// Who gets a session: a connection authenticates in one of a few handshake slots, under the
/// control timeout; only then does it take a session permit. Unauthenticated clients therefore
/// never hold sessions. When every slot is taken, a new connection takes the oldest one's slot
/// and that one is refused: connections held open without finishing their handshake (silent,
/// slow, truncated) cannot keep a prober out, whose handshake takes a round trip or two.
///
/// Every connection served holds a connection permit for its life: the handshakes and sessions,
/// plus [`REFUSALS_IN_FLIGHT`] for connections on their way out (a refused handshake sending
/// its `Error`, a session freeing its memory). Past them a connection is refused at accept.
struct Admission {
    auth: AuthMode,
    /// Sent in `AuthOk`, to authenticated probers only.
    identity: Option<NodeIdentity>,
    io_timeout: Duration,
    connections: Arc<Semaphore>,
    max_connections: usize,
    handshakes: Arc<HandshakeSlots>,
    sessions: Arc<Semaphore>,
    max_sessions: usize,
    /// The sessions each prober address holds now.
    per_prober: Arc<ProberSessions>,
}

/// Connections beyond the handshakes and sessions that may be finishing a refusal or a session's
/// teardown at once.
const REFUSALS_IN_FLIGHT: usize = 64;

impl Admission {
    fn new(settings: &ResponderSettings, identity: Option<NodeIdentity>) -> Self {
        let max_handshakes = settings.max_handshakes.max(1);
        let max_connections = max_handshakes
            .saturating_add(settings.max_sessions)
            .saturating_add(REFUSALS_IN_FLIGHT);
        Admission {
            auth: settings.auth.clone(),
            identity,
            io_timeout: settings.io_timeout,
            connections: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            handshakes: Arc::new(HandshakeSlots::new(max_handshakes)),
            sessions: Arc::new(Semaphore::new(settings.max_sessions)),
            max_sessions: settings.max_sessions,
            per_prober: Arc::new(ProberSessions::new(prober_share(settings.max_sessions))),
        }
    }

    /// The permit a new connection is served under, or its refusal when `max_connections` are
    /// served already.
    fn connection_permit(&self) -> Result<OwnedSemaphorePermit, SessionFailure> {
        Arc::clone(&self.connections)
            .try_acquire_owned()
            .map_err(|_| SessionFailure {
                refusal: Some(SessionResult::ConnectionLimit),
                ..failure(
                    ErrorReason::PeerError,
                    format!(
                        "responder has {} control connections open",
                        self.max_connections
                    ),
                )
            })
    }

    /// Authenticates the prober in `handshake` (given up when the handshake ends) and returns
    /// its node name and the permit held for its session. `prober` is the address the
    /// connection came from: it may hold its share of the sessions, no more.
    async fn admit(
        &self,
        conn: &mut Connection,
        mut handshake: HandshakeSlot,
        prober: std::net::IpAddr,
    ) -> Result<(String, SessionPermit), SessionFailure> {
        let node = tokio::select! {
            authenticated = server_handshake(conn, &self.auth, self.identity.as_ref(), self.io_timeout) => authenticated?,
            () = handshake.given_way() => {
                return Err(SessionFailure {
                    refusal: Some(SessionResult::HandshakeLimit),
                    ..failure(
                        ErrorReason::PeerError,
                        format!(
                            "responder has {} handshakes in progress; the oldest, this one, \
                             gave way to a newer connection",
                            self.handshakes.max
                        ),
                    )
                })
            }
        };
        drop(handshake);
        let Ok(session) = Arc::clone(&self.sessions).try_acquire_owned() else {
            return Err(SessionFailure {
                refusal: Some(SessionResult::Limit),
                ..failure(
                    ErrorReason::PeerError,
                    format!("responder at its session limit ({})", self.max_sessions),
                )
            });
        };
        let Some(share) = self.per_prober.take(prober) else {
            return Err(SessionFailure {
                refusal: Some(SessionResult::Limit),
                ..failure(
                    ErrorReason::PeerError,
                    format!(
                        "this prober's address holds its share of the responder's sessions ({} of {})",
                        self.per_prober.max, self.max_sessions
                    ),
                )
            });
        };
        Ok((
            node,
            SessionPermit {
                _session: session,
                _share: share,
            },
        ))
    }
}

/// What an admitted prober holds for its session: a place under `max_sessions` and one of its
/// address's share; both are given back when dropped.
#[derive(Debug)]
struct SessionPermit {
    _session: OwnedSemaphorePermit,
    _share: ProberShare,
}

/// The sessions each prober address holds, at most `max` each.
#[derive(Debug)]
struct ProberSessions {
    max: usize,
    held: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

/// One session of a prober address's share, given back when dropped.
#[derive(Debug)]
struct ProberShare {
    prober: std::net::IpAddr,
    sessions: Arc<ProberSessions>,
}

impl ProberSessions {
    fn new(max: usize) -> Self {
        ProberSessions {
            max,
            held: std::sync::Mutex::default(),
        }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more session for `prober`, unless it holds its share already.
    fn take(self: &Arc<Self>, prober: std::net::IpAddr) -> Option<ProberShare> {
        let prober = prober.to_canonical();
        let mut held = self.lock();
        let n = held.entry(prober).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(ProberShare {
            prober,
            sessions: Arc::clone(self),
        })
    }

    #[cfg(test)]
    fn held_by(&self, prober: std::net::IpAddr) -> usize {
        self.lock()
            .get(&prober.to_canonical())
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for ProberShare {
    fn drop(&mut self) {
        let mut held = self.sessions.lock();
        if let Some(n) = held.get_mut(&self.prober) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.prober);
            }
        }
    }
}

/// The handshakes in progress, oldest first: at most `max`.
struct HandshakeSlots {
    max: usize,
    held: std::sync::Mutex<HeldSlots>,
}

#[derive(Default)]
struct HeldSlots {
    next_id: u64,
    /// Each slot's id and the sender that tells its connection to give way, oldest first.
    by_age: std::collections::VecDeque<(u64, tokio::sync::oneshot::Sender<()>)>,
}

/// One connection's place among the handshakes in progress, given up when dropped.
struct HandshakeSlot {
    id: u64,
    slots: Arc<HandshakeSlots>,
    give_way: tokio::sync::oneshot::Receiver<()>,
}

impl HandshakeSlots {
    fn new(max: usize) -> Self {
        HandshakeSlots {
            max: max.max(1),
            held: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldSlots> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection, the oldest connection giving way when all are taken.
    fn take(self: &Arc<Self>) -> HandshakeSlot {
        let (tell, give_way) = tokio::sync::oneshot::channel();
        let mut held = self.lock();
        while held.by_age.len() >= self.max {
            if let Some((_, oldest)) = held.by_age.pop_front() {
                let _ = oldest.send(());
            }
        }
        let id = held.next_id;
        held.next_id += 1;
        held.by_age.push_back((id, tell));
        HandshakeSlot {
            id,
            slots: Arc::clone(self),
            give_way,
        }
    }

    #[cfg(test)]
    fn in_progress(&self) -> usize {
        self.lock().by_age.len()
    }
}

impl HandshakeSlot {
    /// Completes when a newer connection took this slot.
    async fn given_way(&mut self) {
        // The sender is dropped without a word only with this slot itself.
        let _ = (&mut self.give_way).await;
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.slots.lock().by_age.retain(|(id, _)| *id != self.id);
    }
}

/// A session failure, as sent back to the prober.
#[derive(Debug)]
struct SessionFailure {
    reason: ErrorReason,
    message: String,
    /// How `rdma_probe_responder_sessions_total` counts a refusal the reason alone does not tell
    /// (limits are sent as `peer_error`).
    refusal: Option<SessionResult>,
}

impl SessionFailure {
    /// How `rdma_probe_responder_sessions_total` counts this failure, if it is a refusal.
    fn refusal(&self) -> Option<SessionResult> {
        match self.reason {
            _ if self.refusal.is_some() => self.refusal,
            ErrorReason::Auth => Some(SessionResult::Auth),
            ErrorReason::Protocol => Some(SessionResult::Protocol),
            ErrorReason::RdmaAddress => Some(SessionResult::RdmaAddress),
            _ => None,
        }
    }

    /// [`SessionFailure::refusal`] for a connection that has no session yet: there a timeout
    /// (a silent, slow or stalled client) and a closed or reset connection (a port scan, a
    /// truncated frame) are refusals too, each under its own result.
    fn refusal_before_session(&self) -> Option<SessionResult> {
        self.refusal().or(match self.reason {
            ErrorReason::Timeout => Some(SessionResult::Timeout),
            ErrorReason::Connect => Some(SessionResult::Closed),
            _ => None,
        })
    }
}

/// How many refusals are logged: at most one a second, with the number left out since, so that a
/// flood of hostile connections costs the log a line a second, not a line a connection (the
/// counters count every one).
#[derive(Debug, Default)]
struct RefusalLog {
    state: std::sync::Mutex<RefusalLogState>,
}

#[derive(Debug, Default)]
struct RefusalLogState {
    last: Option<Instant>,
    /// Refusals not logged since `last`.
    left_out: u64,
}

impl RefusalLog {
    const EVERY: Duration = Duration::from_secs(1);

    fn log(&self, peer: std::net::SocketAddr, refused: &SessionFailure) {
        let Some(left_out) = self.admit_line(Instant::now()) else {
            return;
        };
        tracing::warn!(%peer, reason = %refused.reason, error = %refused.message,
            refusals_not_logged = left_out, "connection refused");
    }

    /// `Some(refusals left out since the last line)` when a line is due at `now`.
    fn admit_line(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = state
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= Self::EVERY);
        if !due {
            state.left_out += 1;
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.left_out))
    }
}

impl From<ControlError> for SessionFailure {
    fn from(e: ControlError) -> Self {
        failure(e.reason(), e.to_string())
    }
}

impl From<VerbsError> for SessionFailure {
    fn from(e: VerbsError) -> Self {
        failure(e.reason(), e.to_string())
    }
}

fn failure(reason: ErrorReason, message: impl Into<String>) -> SessionFailure {
    SessionFailure {
        reason,
        message: message.into(),
        refusal: None,
    }
}

/// Memory pinned for one session, returned to the budget when dropped.
struct PinnedReservation {
    pinned: Arc<AtomicU64>,
    bytes: u64,
}

impl PinnedReservation {
    fn take(pinned: &Arc<AtomicU64>, bytes: u64, limit: u64) -> Option<Self> {
        pinned
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            })
            .ok()?;
        Some(PinnedReservation {
            pinned: Arc::clone(pinned),
            bytes,
        })
    }
}

impl Drop for PinnedReservation {
    fn drop(&mut self) {
        self.pinned.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A device's burst slot, held from `burst_start` to the burst's result.
struct BurstSlot(Arc<AtomicBool>);

impl BurstSlot {
    fn try_take(slot: &Arc<AtomicBool>) -> Option<Self> {
        slot.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| BurstSlot(Arc::clone(slot)))
    }
}

impl Drop for BurstSlot {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The burst in progress on a session.
struct RunningBurst {
    id: u64,
    seed: u64,
    /// The port's allowlisted counters when the burst was asked for.
    counters_before: Option<CounterSnapshot>,
    /// How long to wait for its `burst_end`: the prober's own deadline plus the control timeout,
    /// or (unpaced, no deadline) the idle timeout; never less than the idle timeout.
    wait_for_end: Duration,
    _slot: BurstSlot,
}

/// One session's resources on the responder.
struct Active {
    set: QpSet,
    _pinned: PinnedReservation,
    burst: Option<RunningBurst>,
    /// The port's allowlisted counters, read around each burst; `None` when sysfs has none.
    counters: Option<CounterReader>,
}

/// How long a prober is told to wait when the device is busy.
const BUSY_RETRY_AFTER_MS: u32 = 200;

/// How a session ended without a failure.
enum SessionEnd {
    ProberClosed,
    /// No message for the idle timeout between bursts: the responder frees the session and says
    /// `close`; the prober rebuilds it on its next burst.
    Idle,
}

/// Serves one authenticated prober: one handler per control message.
struct SessionHandler {
    shared: Arc<Shared>,
    node: String,
    /// Where this prober's RDMA address may be: the address its connection came from, or
    /// `rdma_networks`.
    destinations: RdmaDestinations,
    /// The device its session runs on, once its request chose one.
    device: Option<Arc<Served>>,
    active: Option<Active>,
}

impl SessionHandler {
    fn device_name(&self) -> &str {
        self.device.as_deref().map_or("", Served::name)
    }

    /// Whether the prober got a session: before that, the connection is still being admitted.
    fn has_session(&self) -> bool {
        self.active.is_some()
    }

    fn chosen_device(&self) -> Result<&Served, SessionFailure> {
        self.device
            .as_deref()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst before session"))
    }

    async fn serve(&mut self, conn: &mut Connection) -> Result<SessionEnd, SessionFailure> {
        loop {
            let wait = self.wait_for_next_message();
            let msg = match conn.recv(wait).await {
                Ok(m) => m,
                Err(ControlError::Timeout { .. }) => return self.on_silence(wait),
                Err(ControlError::Closed) if self.has_session() => {
                    return Ok(SessionEnd::ProberClosed)
                }
                Err(e) => return Err(e.into()),
            };
            let reply = match msg {
                Message::SessionRequest(request) => self.on_session_request(&request).await?,
                Message::BurstStart {
                    burst_id,
                    seed,
                    deadline_ms,
                } => {
                    let reader = self.active.as_ref().and_then(|a| a.counters.clone());
                    let before = read_counters(reader).await;
                    self.on_burst_start(burst_id, seed, deadline_ms, before)?
                }
                Message::BurstEnd {
                    burst_id,
                    outcome,
                    posted_per_qp,
                } => match self.on_burst_end(burst_id, outcome, posted_per_qp).await? {
                    Some(reply) => reply,
                    None => return Ok(SessionEnd::ProberClosed),
                },
                Message::Close => return Ok(SessionEnd::ProberClosed),
                other => {
                    return Err(failure(
                        ErrorReason::Protocol,
                        format!("unexpected {} message", other.kind()),
                    ))
                }
            };
            conn.send(&reply, self.shared.settings.io_timeout).await?;
        }
    }

    /// Before the session the control timeout (a prober asks for its session right after the
    /// handshake; a client that does not holds a session permit for nothing); between bursts
    /// the idle timeout; during one, long enough for the burst the prober announced (the
    /// control channel is silent while it runs).
    fn wait_for_next_message(&self) -> Duration {
        let Some(active) = &self.active else {
            return self.shared.settings.io_timeout;
        };
        active
            .burst
            .as_ref()
            .map_or(self.shared.settings.idle_timeout, |b| b.wait_for_end)
    }

    fn on_silence(&self, waited: Duration) -> Result<SessionEnd, SessionFailure> {
        if !self.has_session() {
            return Err(failure(
                ErrorReason::Timeout,
                format!("no session request {waited:?} after the handshake"),
            ));
        }
        let in_burst = self.active.as_ref().is_some_and(|a| a.burst.is_some());
        if in_burst {
            Err(failure(
                ErrorReason::Timeout,
                format!("no burst_end {waited:?} after burst_start"),
            ))
        } else {
            Ok(SessionEnd::Idle)
        }
    }

    async fn on_session_request(
        &mut self,
        request: &SessionRequest,
    ) -> Result<Message, SessionFailure> {
        if self.active.is_some() {
            return Err(failure(ErrorReason::Protocol, "session already set up"));
        }
        // The memory is reserved before anything else, so a request beyond the limits costs no
        // device query, allocation or verbs call.
        let pinned = reserve_session_memory(&self.shared, request)?;
        let device = self.shared.select(request)?;
        self.device = Some(Arc::clone(&device));
        let shared = Arc::clone(&self.shared);
        let request_copy = request.clone();
        let destinations = self.destinations.clone();
        // Registering (pinning) a large region is a blocking system call.
        let (accept, active) = tokio::task::spawn_blocking(move || {
            open_session(&shared, &device, &request_copy, &destinations, pinned)
        })
        .await
        .map_err(|e| failure(ErrorReason::QpSetup, format!("session setup task: {e}")))??;
        tracing::info!(node = %self.node, device = self.device_name(), rail = ?request.rail,
            qps = request.qps, message_size = request.message_size, slots = active.set.slots(),
            "session set up");
        self.shared
            .count(self.device.as_deref(), SessionResult::Accepted);
        self.active = Some(active);
        Ok(Message::SessionAccept(accept))
    }

    fn on_burst_start(
        &mut self,
        burst_id: u64,
        seed: u64,
        deadline_ms: Option<u64>,
        counters_before: Option<CounterSnapshot>,
    ) -> Result<Message, SessionFailure> {
        let settings = &self.shared.settings;
        let state = self
            .active
            .as_mut()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst_start before session"))?;
        if state.burst.is_some() {
            return Err(failure(ErrorReason::Protocol, "burst_start during a burst"));
        }
        let device = self
            .device
            .as_deref()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst_start before session"))?;
        let Some(slot) = BurstSlot::try_take(&device.burst_slot) else {
            self.shared.count(Some(device), SessionResult::Busy);
            return Ok(Message::Busy {
                retry_after_ms: BUSY_RETRY_AFTER_MS,
            });
        };
        // No zeroing: every burst has a fresh seed, so data left from an earlier burst (a lost
        // WRITE) does not verify.
        for qp in &mut state.set.qps {
            qp.post_recv(burst_id)?;
        }
        let wait_for_end = deadline_ms
            .map(|ms| Duration::from_millis(ms).saturating_add(settings.io_timeout))
            .map_or(settings.idle_timeout, |d| d.max(settings.idle_timeout));
        state.burst = Some(RunningBurst {
            id: burst_id,
            seed,
            counters_before,
            wait_for_end,
            _slot: slot,
        });
        Ok(Message::BurstReady { burst_id })
    }

    /// `None` when the prober reported a failed burst: the session ends (its QPs are in the
    /// error state on both ends; the prober rebuilds on its next burst).
    async fn on_burst_end(
        &mut self,
        burst_id: u64,
        outcome: BurstOutcome,
        posted_per_qp: Vec<u64>,
    ) -> Result<Option<Message>, SessionFailure> {
        let state = self
            .active
            .as_mut()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst_end before session"))?;
        let Some(mut burst) = state.burst.take() else {
            return Err(failure(
                ErrorReason::Protocol,
                "burst_end without burst_start",
            ));
        };
        if burst.id != burst_id {
            return Err(failure(
                ErrorReason::Protocol,
                "burst_end for another burst",
            ));
        }
        if let BurstOutcome::Failed { reason, detail } = outcome {
            tracing::info!(node = %self.node, %reason, %detail, "prober reported a failed burst");
            return Ok(None);
        }
        // The prober saw every completion: the burst's traffic is over.
        let counters_before = burst.counters_before.take();
        let counters_after = read_counters(state.counters.clone()).await;
        let counters = port::nonzero_increases(counters_before, counters_after);
        let verdict = self.verify(burst, posted_per_qp).await?;
        let device = self.chosen_device()?.name();
        self.shared
            .metrics
            .verified_messages(device, verdict.verified_messages);
        if let Some(d) = &verdict.detail {
            tracing::warn!(node = %self.node, burst_id, detail = %d, "burst data did not verify");
            self.shared.metrics.validation_failure(device, &self.node);
        }
        Ok(Some(Message::BurstResult(BurstResult {
            burst_id,
            validated: verdict.detail.is_none(),
            detail: verdict.detail,
            counters,
            verified_messages: verdict.verified_messages,
        })))
    }

    /// Waits for the closing writes, then checks the data on a blocking thread.
    async fn verify(
        &mut self,
        burst: RunningBurst,
        posted_per_qp: Vec<u64>,
    ) -> Result<Verdict, SessionFailure> {
        let io_timeout = self.shared.settings.io_timeout;
        let state = self
            .active
            .as_mut()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst_end before session"))?;
        if let Err(detail) = wait_closing_writes(&mut state.set, burst.id, io_timeout).await {
            return Ok(Verdict {
                verified_messages: 0,
                detail: Some(detail),
            });
        }
        let active = self.active.take().expect("checked above");
        let (active, verdict) = tokio::task::spawn_blocking(move || {
            let verdict = check_regions(&active.set, burst.seed, &posted_per_qp);
            (active, verdict)
        })
        .await
        .map_err(|e| failure(ErrorReason::Validation, format!("verification task: {e}")))?;
        self.active = Some(active);
        Ok(verdict)
    }
}

/// What the responder found in the regions after a burst.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    verified_messages: u64,
    /// What did not verify; `None` when everything checked did.
    detail: Option<String>,
}

/// Allocates the session's MR and QPs, connects them to the prober's (RTR only: the responder
/// never sends), and builds the answer. Re-reads the port first: its state, MTU, rate and LID
/// may have changed since the responder started.
fn open_session(
    shared: &Shared,
    device: &Served,
    request: &SessionRequest,
    destinations: &RdmaDestinations,
    pinned: PinnedReservation,
) -> Result<(SessionAccept, Active), SessionFailure> {
    let settings = &shared.settings;
    let mut ctx = device.ctx.clone();
    let state = ctx.refresh_port_info()?.state;
    if !state.is_active() {
        return Err(failure(
            ErrorReason::PortDown,
            format!("{} port {} is {state:?}", ctx.device_name(), ctx.port()),
        ));
    }
    let qps =
        u16::try_from(request.qps).map_err(|_| failure(ErrorReason::Protocol, "too many QPs"))?;
    let slots = granted_slots(request, settings.max_session_bytes);
    let path = PathOptions {
        mtu: None,
        gid_index: device.gid_index,
        // The responder sends only ACKs; they travel in the prober's class (see SessionRequest).
        traffic_class: request.traffic_class,
        service_level: request.service_level,
        qp_timeout: 14, // unused: the responder never sends
    };
    let shape = QpSetShape {
        qps,
        slot_bytes: request.message_size,
        slots,
        send_depth: 1,
        recv_depth: 1,
        remote: RemoteAccess::Write,
    };
    let mut set =
        placement::with_cpus(device.placement.cpus(), || QpSet::create(ctx, shape, &path))?;
    set.check_peer_addresses(&request.endpoints, destinations)
        .map_err(|e| failure(ErrorReason::RdmaAddress, e.to_string()))?;
    let mtu = set.path_mtu(request.mtu, None);
    set.connect(&request.endpoints, mtu, &path, false, &[])?;
    let regions = (0..usize::from(qps))
        .map(|q| RemoteRegion {
            addr: set.region_addr(q),
            rkey: set.mr.rkey(),
            len: set.region_bytes(),
        })
        .collect();
    let accept = SessionAccept {
        device: set.ctx.device_name().to_string(),
        endpoints: set.endpoints()?,
        regions,
        mtu: mtu.bytes(),
        link_rate_bits_per_second: set.ctx.port_info().link_rate_bits_per_second,
    };
    let counters = match Sysfs::system().counter_reader(set.ctx.device_name(), set.ctx.port()) {
        Ok(reader) => Some(reader),
        Err(e) => {
            tracing::debug!(error = %e, "no port counters for the session's port");
            None
        }
    };
    Ok((
        accept,
        Active {
            set,
            _pinned: pinned,
            burst: None,
            counters,
        },
    ))
}

/// Reserves the memory `request` would pin within `max_pinned_bytes`, or refuses it as `limit`.
fn reserve_session_memory(
    shared: &Shared,
    request: &SessionRequest,
) -> Result<PinnedReservation, SessionFailure> {
    let settings = &shared.settings;
    let bytes = session_bytes(request, settings.max_session_bytes);
    PinnedReservation::take(&shared.pinned, bytes, settings.max_pinned_bytes).ok_or_else(|| {
        SessionFailure {
            refusal: Some(SessionResult::Limit),
            ..failure(
                ErrorReason::PeerError,
                format!(
                    "responder pinned-memory limit: {bytes} more bytes would exceed {}",
                    settings.max_pinned_bytes
                ),
            )
        }
    })
}

/// The memory a session for `request` pins: its granted slots of one message on each QP.
fn session_bytes(request: &SessionRequest, max_session_bytes: u64) -> u64 {
    request
        .message_size
        .saturating_mul(granted_slots(request, max_session_bytes))
        .saturating_mul(u64::from(request.qps))
}

/// Slots per QP the responder grants: what the prober asked for (`region_bytes` per QP), within
/// the per-session memory budget, and at least one.
fn granted_slots(request: &SessionRequest, max_session_bytes: u64) -> u64 {
    let size = request.message_size.max(1);
    let asked = request.region_bytes / size;
    let affordable = max_session_bytes / size.saturating_mul(u64::from(request.qps.max(1)));
    asked.min(affordable).max(1)
}

/// Waits for every QP's closing WRITE WITH IMMEDIATE (RC orders it after the QP's data).
/// `Err` says what did not arrive or was wrong.
async fn wait_closing_writes(
    set: &mut QpSet,
    burst_id: u64,
    deadline: Duration,
) -> Result<(), String> {
    // `&mut`: a shared borrow held across an await would need `QpSet: Sync`, which verbs handles
    // are not; exclusive access only needs `Send`.
    let qps = set.qps.len();
    let until = Instant::now() + deadline;
    let mut seen = 0usize;
    let mut wcs = [Completion::EMPTY; 16];
    while seen < qps {
        let n = set.cq.poll(&mut wcs).map_err(|e| e.to_string())?;
        for wc in &wcs[..n] {
            wc.check().map_err(|e| format!("closing write: {e}"))?;
            if wc.opcode != wc_opcode::RECV_RDMA_WITH_IMM || wc.imm != Some(burst_id as u32) {
                return Err(format!(
                    "closing write carried {:?} (opcode {}), expected burst id {}",
                    wc.imm, wc.opcode, burst_id as u32
                ));
            }
            seen += 1;
        }
        if seen < qps {
            if Instant::now() >= until {
                return Err(format!("only {seen} of {qps} closing writes arrived"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

/// Checks each QP's slots that the burst wrote: all of them when the QP posted no more messages
/// than it has slots, else every slot (holding the last `slots` messages). Slot `k` of QP `q`
/// holds the pattern of stream `q` at offset `k * slot_bytes`.
fn check_regions(set: &QpSet, seed: u64, posted_per_qp: &[u64]) -> Verdict {
    let regions: Vec<&[u8]> = (0..set.qps.len()).map(|q| set.region(q)).collect();
    check_slots(&regions, set.slot_bytes(), seed, posted_per_qp)
}

/// [`check_regions`] on plain memory: `regions[q]` is QP `q`'s slots.
fn check_slots(regions: &[&[u8]], slot_bytes: u64, seed: u64, posted_per_qp: &[u64]) -> Verdict {
    let mut verified = 0;
    for (q, region) in regions.iter().enumerate() {
        let slots = region.len() as u64 / slot_bytes.max(1);
        let posted = posted_per_qp.get(q).copied().unwrap_or(slots);
        let written = posted.min(slots);
        let bytes = (written * slot_bytes) as usize; // within the region, which is in memory
        if let Err(m) = pattern::verify(seed, q as u32, &region[..bytes]) {
            return Verdict {
                verified_messages: verified,
                detail: Some(format!(
                    "QP {q}, message slot {} (byte {} of the message): expected {:#04x}, found {:#04x}",
                    m.offset as u64 / slot_bytes,
                    m.offset as u64 % slot_bytes,
                    m.expected,
                    m.found
                )),
            };
        }
        verified += written;
    }
    Verdict {
        verified_messages: verified,
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{client_handshake, connect, QpEndpoint};
    use crate::verbs::LocalPort;

    fn settings(max_sessions: usize, max_handshakes: usize) -> ResponderSettings {
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
        }
    }

    /// Waits until `done` holds (a state the server reached: the signal a test synchronises
    /// on, never a guessed sleep); fails after 5 s.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "not within 5 s: {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Accepts connections on loopback and admits each; returns the listener's address, a
    /// channel of admission results (the permits are held until the receiver drops them) and
    /// the handshake slots (how many connections are in their handshake).
    async fn admitting(
        admission: Admission,
    ) -> (
        String,
        tokio::sync::mpsc::UnboundedReceiver<Result<(String, SessionPermit), SessionFailure>>,
        Arc<HandshakeSlots>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let admission = Arc::new(admission);
        let slots = Arc::clone(&admission.handshakes);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = listener.accept().await.unwrap();
                let admission = Arc::clone(&admission);
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut conn = Connection::new(stream).unwrap();
                    let slot = admission.handshakes.take();
                    let result = admission.admit(&mut conn, slot, peer.ip()).await;
                    if let Err(e) = &result {
                        conn.send_error_best_effort(e.reason, &e.message).await;
                    }
                    let _ = tx.send(result);
                });
            }
        });
        (addr, rx, slots)
    }

    /// A prober's connection to `addr` after its handshake as `node` (no key), and what the
    /// handshake gave: the responder's identity, or the handshake's error.
    async fn hello(
        addr: &str,
        node: &str,
    ) -> (Connection, Result<Option<NodeIdentity>, ControlError>) {
        let mut conn = connect(addr, Duration::from_secs(2)).await.unwrap();
        let told = client_handshake(&mut conn, node, &AuthMode::None, Duration::from_secs(2)).await;
        (conn, told)
    }

    #[tokio::test]
    async fn silent_strangers_cannot_take_the_only_session() {
        let (addr, mut results, slots) = admitting(Admission::new(&settings(1, 4), None)).await;
        // Three connections that never say hello hold handshake permits, not the session.
        let mut strangers = Vec::new();
        for _ in 0..3 {
            strangers.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
        }
        until("the strangers in their handshakes", || {
            slots.in_progress() == 3
        })
        .await;
        let (_prober, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let admitted = results
            .recv()
            .await
            .unwrap()
            .expect("the prober is admitted");
        assert_eq!(admitted.0, "node-a");
        // The strangers time out in the handshake, refused as timeouts, not as sessions.
        for _ in 0..3 {
            let e = results.recv().await.unwrap().unwrap_err();
            assert_eq!(e.reason, ErrorReason::Timeout, "{}", e.message);
        }
        drop(strangers);
    }

    #[tokio::test]
    async fn past_the_handshake_cap_the_oldest_gives_way_to_a_prober() {
        let (addr, mut results, slots) = admitting(Admission::new(&settings(16, 2), None)).await;
        let _a = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("a in its handshake", || slots.in_progress() == 1).await;
        let _b = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("a and b in their handshakes", || slots.in_progress() == 2).await;
        let started = Instant::now();
        let (_third, handshake) = hello(&addr, "node-c").await;
        handshake.unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        let mut refused = None;
        let mut admitted = None;
        for _ in 0..2 {
            match results.recv().await.unwrap() {
                Ok(a) => admitted = Some(a),
                Err(e) => refused = Some(e),
            }
        }
        assert_eq!(admitted.unwrap().0, "node-c");
        let refused = refused.unwrap();
        assert_eq!(refused.refusal(), Some(SessionResult::HandshakeLimit));
        assert!(refused.message.contains("gave way"), "{}", refused.message);
    }

    #[test]
    fn handshake_slots_hold_at_most_max_and_the_oldest_gives_way() {
        let slots = Arc::new(HandshakeSlots::new(2));
        let mut first = slots.take();
        let mut second = slots.take();
        assert_eq!(slots.in_progress(), 2);
        let third = slots.take();
        assert_eq!(slots.in_progress(), 2);
        assert!(first.give_way.try_recv().is_ok());
        assert!(second.give_way.try_recv().is_err());
        drop(first);
        assert_eq!(slots.in_progress(), 2);
        drop(second);
        drop(third);
        assert_eq!(slots.in_progress(), 0);
    }

    #[test]
    fn connections_past_the_cap_are_refused_as_connection_limit() {
        let admission = Admission::new(&settings(3, 2), None);
        let held: Vec<_> = (0..2 + 3 + REFUSALS_IN_FLIGHT)
            .map(|_| admission.connection_permit().unwrap())
            .collect();
        let refused = admission.connection_permit().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::ConnectionLimit));
        drop(held);
        assert!(admission.connection_permit().is_ok());
    }

    fn told() -> NodeIdentity {
        NodeIdentity {
            node: "responder".into(),
            labels: [("tor".to_owned(), "t1".to_owned())].into(),
            devices: vec![IdentityDevice {
                name: "mlx5_0".into(),
                port: 1,
                rail: Some(0),
            }],
        }
    }

    #[tokio::test]
    async fn an_admitted_prober_learns_the_responders_identity() {
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), Some(told()))).await;
        let (_prober, identity) = hello(&addr, "node-a").await;
        let identity = identity.unwrap();
        assert_eq!(identity, Some(told()));
        assert_eq!(results.recv().await.unwrap().unwrap().0, "node-a");
        // A responder without one (a node name the protocol does not take) tells nothing.
        let (addr, _results, _) = admitting(Admission::new(&settings(1, 4), None)).await;
        let (_prober, identity) = hello(&addr, "node-a").await;
        let identity = identity.unwrap();
        assert_eq!(identity, None);
    }

    #[tokio::test]
    async fn a_prober_past_the_session_limit_learned_the_identity_but_gets_no_session() {
        // The identity comes with AuthOk, before the session permit: a prober refused at the
        // limit has proved the key all the same.
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), Some(told()))).await;
        let (_first, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let _held = results.recv().await.unwrap().unwrap();
        let (mut second, told_second) = hello(&addr, "node-b").await;
        let told_second = told_second.unwrap();
        assert_eq!(told_second, Some(told()));
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
        let said = second.recv(Duration::from_secs(2)).await.unwrap();
        assert!(
            matches!(&said, Message::Error { message, .. } if message.contains("session limit")),
            "{said:?}"
        );
    }

    #[test]
    fn the_identity_keeps_what_the_protocol_takes_and_says_what_it_left_out() {
        let mut labels: Labels = (0..40)
            .map(|i| (format!("l{i:02}"), "v".to_owned()))
            .collect();
        labels.insert("empty".into(), String::new());
        let devices = (0..34).map(|i| IdentityDevice {
            name: format!("mlx5_{i}"),
            port: 1,
            rail: Some(i),
        });
        let (identity, left_out) = NodeIdentity::bounded("node-a", &labels, devices);
        assert!(identity.validate().is_ok());
        assert_eq!(identity.labels.len(), 32);
        assert_eq!(identity.devices.len(), 32);
        assert_eq!(left_out.len(), 1 + 8 + 2, "{left_out:?}");
        assert!(
            left_out[0].contains("labels.empty is empty"),
            "{left_out:?}"
        );
        assert!(
            left_out.iter().any(|w| w.contains("device mlx5_33")),
            "{left_out:?}"
        );
        let (identity, _) = NodeIdentity::bounded("node a", &Labels::new(), []);
        assert!(identity.validate().is_err());
    }

    /// [`hello`] from source address `from` (any 127.0.0.0/8 address works on loopback).
    async fn hello_from(
        addr: &str,
        from: std::net::Ipv4Addr,
        node: &str,
    ) -> (Connection, Result<Option<NodeIdentity>, ControlError>) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((from, 0).into()).unwrap();
        let stream = socket.connect(addr.parse().unwrap()).await.unwrap();
        let mut conn = Connection::new(stream).unwrap();
        let told = client_handshake(&mut conn, node, &AuthMode::None, Duration::from_secs(2)).await;
        (conn, told)
    }

    #[tokio::test]
    async fn one_prober_address_holds_half_the_sessions_and_another_still_gets_in() {
        assert_eq!(
            [1, 2, 3, 4, 16].map(prober_share),
            [1, 1, 2, 2, 8],
            "half of max_sessions, rounded up, at least one"
        );
        let (addr, mut results, _) = admitting(Admission::new(&settings(4, 8), None)).await;
        let greedy = std::net::Ipv4Addr::new(127, 0, 0, 1);
        let mut held = Vec::new();
        for name in ["greedy-1", "greedy-2"] {
            let (conn, handshake) = hello_from(&addr, greedy, name).await;
            handshake.unwrap();
            held.push((conn, results.recv().await.unwrap().unwrap()));
        }
        // Another node name from the same address changes nothing: the share is per address.
        let (mut third, handshake) = hello_from(&addr, greedy, "greedy-3").await;
        handshake.unwrap();
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
        let said = third.recv(Duration::from_secs(2)).await.unwrap();
        assert!(
            matches!(&said, Message::Error { message, .. } if message.contains("share") && message.contains("2 of 4")),
            "{said:?}"
        );
        // Two sessions are free, and another prober's address takes one.
        let (_other, handshake) =
            hello_from(&addr, std::net::Ipv4Addr::new(127, 0, 0, 2), "other").await;
        handshake.unwrap();
        let admitted = results
            .recv()
            .await
            .unwrap()
            .expect("another prober gets in");
        assert_eq!(admitted.0, "other");
        // A session that ends gives its place back to its address.
        held.pop();
        let (_again, handshake) = hello_from(&addr, greedy, "greedy-4").await;
        handshake.unwrap();
        results
            .recv()
            .await
            .unwrap()
            .expect("the freed place is taken again");
    }

    #[test]
    fn a_prober_share_is_given_back_when_its_session_ends() {
        let sessions = Arc::new(ProberSessions::new(1));
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: std::net::IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let first = sessions.take(a).expect("the first");
        assert!(
            sessions.take(mapped).is_none(),
            "the same address over IPv6"
        );
        assert_eq!(sessions.held_by(a), 1);
        drop(first);
        assert_eq!(sessions.held_by(a), 0);
        assert!(sessions.take(a).is_some());
    }

    #[tokio::test]
    async fn past_the_session_limit_an_authenticated_prober_is_refused_as_limit() {
        let (addr, mut results, _) = admitting(Admission::new(&settings(1, 4), None)).await;
        let (_first, handshake) = hello(&addr, "node-a").await;
        handshake.unwrap();
        let _held = results.recv().await.unwrap().unwrap();
        let (_second, _) = hello(&addr, "node-b").await;
        let refused = results.recv().await.unwrap().unwrap_err();
        assert_eq!(refused.refusal(), Some(SessionResult::Limit));
    }

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
        let slots = &shared.admission.handshakes;
        let mut oldest = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("the oldest in its handshake", || slots.in_progress() == 1).await;
        let _newer = tokio::net::TcpStream::connect(&addr).await.unwrap();
        until("both in their handshakes", || slots.in_progress() == 2).await;
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

    #[test]
    fn refusals_are_logged_once_a_second_with_the_number_left_out() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit_line(t0), Some(0));
        assert_eq!(log.admit_line(t0 + Duration::from_millis(500)), None);
        assert_eq!(log.admit_line(t0 + Duration::from_millis(900)), None);
        assert_eq!(log.admit_line(t0 + Duration::from_secs(1)), Some(2));
        assert_eq!(log.admit_line(t0 + Duration::from_secs(3)), Some(0));
    }

    #[test]
    fn only_before_a_session_are_timeouts_and_closes_refusals() {
        let timeout = failure(ErrorReason::Timeout, "no burst_end");
        assert_eq!(timeout.refusal(), None);
        assert_eq!(
            timeout.refusal_before_session(),
            Some(SessionResult::Timeout)
        );
        let closed = failure(ErrorReason::Connect, "reset");
        assert_eq!(closed.refusal(), None);
        assert_eq!(closed.refusal_before_session(), Some(SessionResult::Closed));
        let auth = failure(ErrorReason::Auth, "bad proof");
        assert_eq!(auth.refusal_before_session(), Some(SessionResult::Auth));
    }

    fn request(qps: u32, message_size: u64, region_bytes: u64) -> SessionRequest {
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
        }
    }

    fn served<'a>(devices: &[(&'a str, Option<u16>)]) -> Vec<DeviceRail<'a>> {
        devices
            .iter()
            .map(|&(name, rail)| DeviceRail { name, rail })
            .collect()
    }

    #[test]
    fn a_named_device_is_used_if_served_and_refused_if_not() {
        let two = served(&[("mlx5_0", Some(0)), ("mlx5_1", Some(1))]);
        assert_eq!(select_device(&two, Some("mlx5_1"), None), Ok(1));
        // The name wins over the rail.
        assert_eq!(select_device(&two, Some("mlx5_1"), Some(0)), Ok(1));
        let e = select_device(&two, Some("mlx5_7"), Some(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device mlx5_7 is not served here; this responder serves mlx5_0, mlx5_1"
        );
    }

    #[test]
    fn a_rail_picks_the_device_on_it_and_a_rail_nobody_serves_is_refused() {
        let two = served(&[("mlx5_0", Some(0)), ("mlx5_1", Some(1))]);
        assert_eq!(select_device(&two, None, Some(0)), Ok(0));
        assert_eq!(select_device(&two, None, Some(1)), Ok(1));
        let e = select_device(&two, None, Some(3)).unwrap_err();
        assert_eq!(
            e,
            SelectError::NoRail {
                rail: 3,
                rails: vec![0, 1]
            }
        );
        assert_eq!(
            e.to_string(),
            "no device on rail 3; this responder serves rails 0, 1"
        );
        let one = served(&[("rxe0", Some(2))]);
        assert_eq!(
            select_device(&one, None, Some(0)).unwrap_err().to_string(),
            "no device on rail 0; this responder serves rail 2"
        );
        let no_rails = served(&[("rxe0", None)]);
        assert_eq!(
            select_device(&no_rails, None, Some(0))
                .unwrap_err()
                .to_string(),
            "no device on rail 0; this responder's devices have no rail (ask without one)"
        );
    }

    #[test]
    fn neither_device_nor_rail_gets_the_first_device() {
        let two = served(&[("rxe1", Some(5)), ("rxe0", Some(4))]);
        assert_eq!(select_device(&two, None, None), Ok(0));
        assert_eq!(select_device(&served(&[("rxe0", None)]), None, None), Ok(0));
        assert_eq!(select_device(&[], None, None), Err(SelectError::Empty));
        assert_eq!(
            select_device(&[], Some("rxe0"), Some(1)),
            Err(SelectError::Empty)
        );
    }

    #[test]
    fn a_device_or_rail_is_served_once() {
        let served = [("mlx5_0", 1, Some(0)), ("mlx5_1", 1, Some(1))];
        assert!(check_distinct(&served, ("mlx5_2", 1, Some(2))).is_ok());
        // Another port of a served device is another device.
        assert!(check_distinct(&served, ("mlx5_0", 2, Some(2))).is_ok());
        let e = check_distinct(&served, ("mlx5_1", 1, Some(2))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device mlx5_1 port 1 is listed twice; serve each device once"
        );
        let e = check_distinct(&served, ("mlx5_2", 1, Some(0))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rail 0 is given to both mlx5_0 and mlx5_2; each rail has one device"
        );
        // Devices without rails do not collide on "no rail".
        let plain = [("rxe0", 1, None)];
        assert!(check_distinct(&plain, ("rxe1", 1, None)).is_ok());
    }

    /// What the responder's memory holds after a burst: the last write to each slot.
    fn written(seed: u64, qp: u32, slots: usize, size: usize) -> Vec<u8> {
        let mut region = vec![0u8; slots * size];
        pattern::fill(seed, qp, &mut region);
        region
    }

    #[test]
    fn every_message_is_checked_at_its_own_offset() {
        let (size, seed) = (4096usize, 42);
        let good = written(seed, 0, 8, size);
        let verdict = check_slots(&[&good], size as u64, seed, &[8]);
        assert_eq!(
            verdict,
            Verdict {
                verified_messages: 8,
                detail: None
            }
        );
        // One intermediate WRITE lost: its slot still holds the previous burst's data.
        let mut lost = good.clone();
        pattern::fill(seed - 1, 0, &mut lost[3 * size..4 * size]);
        let verdict = check_slots(&[&lost], size as u64, seed, &[8]);
        assert_eq!(verdict.verified_messages, 0);
        let detail = verdict.detail.unwrap();
        assert!(detail.contains("message slot 3"), "{detail}");
        // A message written into the wrong slot does not verify either.
        let mut misplaced = good.clone();
        misplaced.copy_within(0..size, 5 * size);
        assert!(check_slots(&[&misplaced], size as u64, seed, &[8])
            .detail
            .is_some());
    }

    #[test]
    fn a_burst_longer_than_its_slots_is_checked_over_its_last_messages() {
        let (size, seed) = (1024usize, 7);
        let regions = [written(seed, 0, 4, size), written(seed, 1, 4, size)];
        let views: Vec<&[u8]> = regions.iter().map(Vec::as_slice).collect();
        // QP 0 posted 100 (the last 4 are checked), QP 1 only 2 (slots 2 and 3 never written).
        let verdict = check_slots(&views, size as u64, seed, &[100, 2]);
        assert_eq!(
            verdict,
            Verdict {
                verified_messages: 6,
                detail: None
            }
        );
    }

    #[test]
    fn pinned_memory_is_bounded_across_sessions_and_returned_when_they_end() {
        let pinned = Arc::new(AtomicU64::new(0));
        let first = PinnedReservation::take(&pinned, 600, 1000).unwrap();
        assert!(PinnedReservation::take(&pinned, 401, 1000).is_none());
        let second = PinnedReservation::take(&pinned, 400, 1000).unwrap();
        assert_eq!(pinned.load(Ordering::Acquire), 1000);
        assert!(PinnedReservation::take(&pinned, 1, 1000).is_none());
        drop(first);
        assert_eq!(pinned.load(Ordering::Acquire), 400);
        assert!(PinnedReservation::take(&pinned, 600, 1000).is_some());
        drop(second);
        assert_eq!(pinned.load(Ordering::Acquire), 0);
        // A request that would overflow the counter is refused, not wrapped.
        let _held = PinnedReservation::take(&pinned, 1, u64::MAX).unwrap();
        assert!(PinnedReservation::take(&pinned, u64::MAX, u64::MAX).is_none());
    }

    #[test]
    fn slots_follow_the_request_within_the_session_budget() {
        // 200 messages of 64 KiB on one QP fit a 64 MiB budget: one slot each.
        assert_eq!(
            granted_slots(&request(1, 65536, 200 * 65536), 64 << 20),
            200
        );
        // 4 QPs x 1000 slots x 64 KiB do not: 64 MiB / (4 x 64 KiB) = 256 each.
        assert_eq!(
            granted_slots(&request(4, 65536, 1000 * 65536), 64 << 20),
            256
        );
        // A message larger than the budget still gets its one slot.
        assert_eq!(granted_slots(&request(1, 1 << 30, 1 << 30), 64 << 20), 1);
    }
}
