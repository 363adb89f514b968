//! One authenticated prober's session: its handler per control message, its resources on the
//! device (QPs, region, pinned memory), and its bursts, one at a time per device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::control::{
    BurstOutcome, BurstResult, Connection, ControlError, Message, PingEndpoint, RemoteRegion,
    SessionAccept, SessionRequest,
};
use crate::metrics::probers::BurstEnded;
use crate::metrics::SessionResult;
use crate::ping::packet::PingKey;
use crate::placement;
use crate::port::{self, CounterReader, CounterSnapshot, Sysfs};
use crate::prober::read_counters;
use crate::rdma_address::RdmaDestinations;
use crate::reason::ErrorReason;
use crate::session::{PathOptions, QpSet, QpSetShape};
use crate::verbs::{RemoteAccess, Route};

use super::failure::{failure, SessionFailure};
use super::memory::{granted_slots, reserve_session_memory, PinnedReservation};
use super::served::{Served, Shared};
use super::verify::{check_regions, wait_closing_writes, Verdict};

/// The device's burst, claimed from `burst_start` to the burst's result.
struct BurstClaim(Arc<AtomicBool>);

impl BurstClaim {
    fn try_claim(claimed: &Arc<AtomicBool>) -> Option<Self> {
        claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| BurstClaim(Arc::clone(claimed)))
    }
}

impl Drop for BurstClaim {
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
    _claim: BurstClaim,
}

/// One session's resources on the responder.
pub(super) struct Active {
    set: QpSet,
    _pinned: PinnedReservation,
    burst: Option<RunningBurst>,
    /// The port's allowlisted counters, read around each burst; `None` when sysfs has none.
    counters: Option<CounterReader>,
}

/// How long a prober is told to wait when the device is busy.
const BUSY_RETRY_AFTER_MS: u32 = 200;

/// How a session ended without a failure.
pub(super) enum SessionEnd {
    ProberClosed,
    /// No message for the idle timeout between bursts: the responder frees the session and says
    /// `close`; the prober rebuilds it on its next burst.
    Idle,
}

/// Serves one authenticated prober: one handler per control message.
pub(super) struct SessionHandler {
    pub(super) shared: Arc<Shared>,
    pub(super) node: String,
    /// Where this prober's RDMA address may be: the address its connection came from, or
    /// `rdma_networks`.
    pub(super) destinations: RdmaDestinations,
    /// The device its session runs on, once its request chose one.
    pub(super) device: Option<Arc<Served>>,
    pub(super) active: Option<Active>,
}

impl SessionHandler {
    pub(super) fn device_name(&self) -> &str {
        self.device.as_deref().map_or("", Served::name)
    }

    /// Whether the prober got a session: before that, the connection is still being admitted.
    pub(super) fn has_session(&self) -> bool {
        self.active.is_some()
    }

    fn chosen_device(&self) -> Result<&Served, SessionFailure> {
        self.device
            .as_deref()
            .ok_or_else(|| failure(ErrorReason::Protocol, "burst before session"))
    }

    pub(super) async fn serve(
        &mut self,
        conn: &mut Connection,
    ) -> Result<SessionEnd, SessionFailure> {
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
                Message::SessionRequest(request) => self.on_session_request(conn, &request).await?,
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

    /// Counts how this prober's burst on its device ended (`rdma_probe_responder_probers`).
    fn burst_ended(&self, ended: BurstEnded) {
        self.shared
            .metrics
            .burst_ended(self.device_name(), &self.node, ended);
    }

    /// A burst under way when the session ended (no `burst_end` in time, the connection lost or
    /// refused mid-burst) failed.
    pub(super) fn count_unfinished_burst(&self) {
        if self.active.as_ref().is_some_and(|a| a.burst.is_some()) {
            self.burst_ended(BurstEnded::Failed);
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
        conn: &Connection,
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
        let ping_key = conn.ping_key().cloned();
        // Registering (pinning) a large region is a blocking system call.
        let (accept, active) = tokio::task::spawn_blocking(move || {
            open_session(
                &shared,
                &device,
                &request_copy,
                &destinations,
                pinned,
                ping_key,
            )
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
        let Some(claim) = BurstClaim::try_claim(&device.burst_claim) else {
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
            _claim: claim,
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
            self.burst_ended(BurstEnded::Failed);
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
        self.burst_ended(if verdict.detail.is_none() {
            BurstEnded::Completed
        } else {
            BurstEnded::Corrupt
        });
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

/// Where the prober's pings go on this device, once its ping engine was told to answer them
/// (back along the prober's GID, already checked against `rdma_networks`, in the prober's traffic
/// class): `None` when the device runs no ping engine, the prober sends no pings, or the port has
/// no GID (pings are datagrams with a GRH).
fn answer_pings(
    device: &Served,
    request: &SessionRequest,
    set: &QpSet,
    key: Option<PingKey>,
) -> Option<PingEndpoint> {
    let pinger = device.pinger.as_ref()?;
    let route = Route {
        port: set.ctx.port(),
        sgid_index: u8::try_from(set.sgid_index()?).ok()?,
        gid: request.endpoints.first()?.gid,
        hop_limit: 64,
        traffic_class: request.traffic_class,
    };
    let key_id = pinger.answer(route, request.ping_qpn?, key?);
    Some(PingEndpoint {
        qpn: pinger.qpn(),
        key_id,
    })
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
    ping_key: Option<PingKey>,
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
        ping: answer_pings(device, request, &set, ping_key),
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
