//! The server side of probe sessions: authenticates probers, allocates a bounded MR and the QPs,
//! advertises keys, allows one active burst per device (others get `busy`), verifies the data
//! pattern after each burst, and releases everything on close, error or idle timeout.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::burst::pattern;
use crate::control::{
    server_handshake, AuthMode, BurstOutcome, BurstResult, Connection, ControlError, Message,
    RemoteRegion, SessionAccept, SessionRequest,
};
use crate::http::Readiness;
use crate::metrics::{ResponderMetrics, SessionResult};
use crate::prober::LocalPort;
use crate::reason::ErrorReason;
use crate::session::{PathOptions, QpSet, QpSetShape};
use crate::verbs::{wc_opcode, Completion, Context, VerbsError};

/// Limits and identity of a responder.
#[derive(Debug, Clone)]
pub struct ResponderSettings {
    pub node_name: String,
    pub local: LocalPort,
    pub auth: AuthMode,
    /// Concurrent sessions; more are refused with `limit`.
    pub max_sessions: usize,
    /// Total memory pinned (registered) across sessions.
    pub max_pinned_bytes: u64,
    /// A session with no message for this long is closed and its resources freed.
    pub idle_timeout: Duration,
    /// Deadline for every control exchange.
    pub io_timeout: Duration,
}

/// Why the responder could not run at all (per-session failures are logged, not returned).
#[derive(Debug, Error)]
pub enum ResponderError {
    #[error(transparent)]
    Device(#[from] VerbsError),
    #[error("accepting control connections: {0}")]
    Accept(#[source] std::io::Error),
}

/// State shared by all sessions of a responder.
struct Shared {
    settings: ResponderSettings,
    ctx: Context,
    /// At most one active burst per device; other probers get `busy` (brief §2).
    burst_slot: Arc<AtomicBool>,
    pinned: Arc<AtomicU64>,
    sessions: Arc<Semaphore>,
    metrics: ResponderMetrics,
}

impl Shared {
    fn count(&self, result: SessionResult) {
        self.metrics.session(self.ctx.device_name(), result);
    }
}

/// Serves probe sessions on `listener` until `shutdown` completes. Opens the device first, so a
/// node without RDMA fails here with `no_device` rather than at the first prober; `readiness`
/// turns true once it is open, false again at shutdown.
pub async fn run(
    listener: TcpListener,
    settings: ResponderSettings,
    metrics: ResponderMetrics,
    readiness: Readiness,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ResponderError> {
    let ctx = Context::open(settings.local.device.as_deref(), settings.local.port)?;
    if let Some(i) = settings.local.gid_index {
        ctx.gid(i)?;
    }
    readiness.set(true);
    tracing::info!(
        device = ctx.device_name(),
        port = ctx.port(),
        listen = ?listener.local_addr().ok(),
        "responder ready"
    );
    let shared = Arc::new(Shared {
        sessions: Arc::new(Semaphore::new(settings.max_sessions)),
        settings,
        ctx,
        burst_slot: Arc::new(AtomicBool::new(false)),
        pinned: Arc::new(AtomicU64::new(0)),
        metrics,
    });
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
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut conn = match Connection::new(stream) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot set up control connection");
                    return;
                }
            };
            let Ok(_permit) = Arc::clone(&shared.sessions).try_acquire_owned() else {
                tracing::warn!(%peer, "session refused: limit of {} sessions reached", shared.settings.max_sessions);
                shared.count(SessionResult::Limit);
                conn.send_error_best_effort(
                    ErrorReason::PeerError,
                    "responder at its session limit",
                )
                .await;
                return;
            };
            match serve(&mut conn, &shared).await {
                Ok(node) => tracing::info!(%peer, %node, "session closed"),
                Err(e) => {
                    tracing::warn!(%peer, reason = %e.reason, error = %e.message, "session ended");
                    if let Some(result) = e.refusal() {
                        shared.count(result);
                    }
                    conn.send_error_best_effort(e.reason, &e.message).await;
                }
            }
        });
    }
    readiness.set(false);
    tracing::info!("responder shutting down");
    Ok(())
}

/// A session failure, as sent back to the prober.
#[derive(Debug)]
struct SessionFailure {
    reason: ErrorReason,
    message: String,
    /// The responder's pinned-memory budget refused the session (sent as `peer_error`).
    over_limit: bool,
}

impl SessionFailure {
    /// How `rdma_probe_responder_sessions_total` counts this failure, if it is a refusal.
    fn refusal(&self) -> Option<SessionResult> {
        match self.reason {
            _ if self.over_limit => Some(SessionResult::Limit),
            ErrorReason::Auth => Some(SessionResult::Auth),
            ErrorReason::Protocol => Some(SessionResult::Protocol),
            _ => None,
        }
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
        over_limit: false,
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

/// The device's burst slot, held from `burst_start` to the burst's result.
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

/// One session's resources on the responder.
struct Active {
    set: QpSet,
    _pinned: PinnedReservation,
    /// The burst in progress: (id, seed, slot).
    burst: Option<(u64, u64, BurstSlot)>,
}

/// How long a prober is told to wait when the device is busy.
const BUSY_RETRY_AFTER_MS: u32 = 200;

/// Serves one authenticated control connection until the prober closes it. Returns the peer's
/// node name.
async fn serve(conn: &mut Connection, shared: &Shared) -> Result<String, SessionFailure> {
    let settings = &shared.settings;
    let node = server_handshake(conn, &settings.auth, settings.io_timeout).await?;
    let mut active: Option<Active> = None;
    loop {
        let msg = match conn.recv(settings.idle_timeout).await {
            Ok(m) => m,
            Err(ControlError::Timeout { .. }) => {
                return Err(failure(ErrorReason::Timeout, "session idle timeout"));
            }
            Err(ControlError::Closed) => return Ok(node),
            Err(e) => return Err(e.into()),
        };
        match msg {
            Message::SessionRequest(request) => {
                if active.is_some() {
                    return Err(failure(ErrorReason::Protocol, "session already set up"));
                }
                let (accept, state) = open_session(shared, &request)?;
                conn.send(&Message::SessionAccept(accept), settings.io_timeout)
                    .await?;
                tracing::info!(%node, qps = request.qps, message_size = request.message_size, "session set up");
                shared.count(SessionResult::Accepted);
                active = Some(state);
            }
            Message::BurstStart { burst_id, seed } => {
                let state = active
                    .as_mut()
                    .ok_or_else(|| failure(ErrorReason::Protocol, "burst_start before session"))?;
                let Some(slot) = BurstSlot::try_take(&shared.burst_slot) else {
                    shared.count(SessionResult::Busy);
                    conn.send(
                        &Message::Busy {
                            retry_after_ms: BUSY_RETRY_AFTER_MS,
                        },
                        settings.io_timeout,
                    )
                    .await?;
                    continue;
                };
                for q in 0..state.set.qps.len() {
                    // Stale data from an earlier burst must not pass verification.
                    state.set.slot_mut(q).fill(0);
                    state.set.qps[q].post_recv(burst_id)?;
                }
                state.burst = Some((burst_id, seed, slot));
                conn.send(&Message::BurstReady { burst_id }, settings.io_timeout)
                    .await?;
            }
            Message::BurstEnd { burst_id, outcome } => {
                let state = active
                    .as_mut()
                    .ok_or_else(|| failure(ErrorReason::Protocol, "burst_end before session"))?;
                let Some((id, seed, _slot)) = state.burst.take() else {
                    return Err(failure(
                        ErrorReason::Protocol,
                        "burst_end without burst_start",
                    ));
                };
                if id != burst_id {
                    return Err(failure(
                        ErrorReason::Protocol,
                        "burst_end for another burst",
                    ));
                }
                if let BurstOutcome::Failed { reason, detail } = outcome {
                    // The QPs are in the error state on both ends: drop the session's resources;
                    // the prober rebuilds on its next burst.
                    tracing::info!(%node, %reason, %detail, "prober reported a failed burst");
                    return Ok(node);
                }
                let result =
                    verify_burst(&mut state.set, burst_id, seed, settings.io_timeout).await;
                let validated = result.is_ok();
                let detail = result.err();
                if let Some(d) = &detail {
                    tracing::warn!(%node, burst_id, detail = %d, "burst data did not verify");
                    shared
                        .metrics
                        .validation_failure(shared.ctx.device_name(), &node);
                }
                conn.send(
                    &Message::BurstResult(BurstResult {
                        burst_id,
                        validated,
                        detail,
                        counters: Vec::new(),
                    }),
                    settings.io_timeout,
                )
                .await?;
            }
            Message::Close => return Ok(node),
            other => {
                return Err(failure(
                    ErrorReason::Protocol,
                    format!("unexpected {} message", other.kind()),
                ))
            }
        }
    }
}

/// Allocates the session's MR and QPs, connects them to the prober's (RTR only: the responder
/// never sends), and builds the answer.
fn open_session(
    shared: &Shared,
    request: &SessionRequest,
) -> Result<(SessionAccept, Active), SessionFailure> {
    let settings = &shared.settings;
    if let Some(want) = &request.device {
        if want != shared.ctx.device_name() {
            return Err(failure(
                ErrorReason::NoDevice,
                format!(
                    "this responder serves {}, not {want}",
                    shared.ctx.device_name()
                ),
            ));
        }
    }
    let qps =
        u16::try_from(request.qps).map_err(|_| failure(ErrorReason::Protocol, "too many QPs"))?;
    let bytes = request.message_size.saturating_mul(u64::from(qps));
    let pinned = PinnedReservation::take(&shared.pinned, bytes, settings.max_pinned_bytes)
        .ok_or_else(|| SessionFailure {
            over_limit: true,
            ..failure(
                ErrorReason::PeerError,
                format!(
                    "responder pinned-memory limit: {bytes} more bytes would exceed {}",
                    settings.max_pinned_bytes
                ),
            )
        })?;
    let path = PathOptions {
        mtu: None,
        gid_index: settings.local.gid_index,
        // The responder sends only ACKs; they travel in the prober's class (see SessionRequest).
        traffic_class: request.traffic_class,
        service_level: request.service_level,
        qp_timeout: 14, // unused: the responder never sends
    };
    let shape = QpSetShape {
        qps,
        slot_bytes: request.message_size,
        send_depth: 1,
        recv_depth: 1,
    };
    let mut set = QpSet::create(shared.ctx.clone(), shape, &path)?;
    let mtu = set.path_mtu(request.mtu, None);
    set.connect(&request.endpoints, mtu, &path, false)?;
    let regions = (0..usize::from(qps))
        .map(|q| RemoteRegion {
            addr: set.slot_addr(q),
            rkey: set.mr.rkey(),
            len: set.slot_bytes(),
        })
        .collect();
    let accept = SessionAccept {
        device: set.ctx.device_name().to_string(),
        endpoints: set.endpoints()?,
        regions,
        mtu: mtu.bytes(),
        link_rate_bits_per_second: set.ctx.port_info().link_rate_bits_per_second,
    };
    Ok((
        accept,
        Active {
            set,
            _pinned: pinned,
            burst: None,
        },
    ))
}

/// Waits for every QP's closing WRITE WITH IMMEDIATE (RC orders it after the QP's data) and
/// checks the written pattern. `Err` carries what did not verify.
async fn verify_burst(
    set: &mut QpSet,
    burst_id: u64,
    seed: u64,
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
    for q in 0..qps {
        pattern::verify(seed, q as u32, set.slot(q)).map_err(|m| format!("QP {q}: {m}"))?;
    }
    Ok(())
}
