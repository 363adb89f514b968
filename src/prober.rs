//! The client side of a probe session: connect, authenticate, negotiate, set up the QPs, run
//! bursts through the engine, and keep the session warm for the next burst.
//!
//! Setup (control handshake + QP bring-up) is timed separately from the burst so a slow
//! handshake never reads as a slow link, and the session stays warm: a later burst costs its data,
//! not a handshake (docs/architecture.md, "One probe, end to end").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::IpNet;
use serde::Serialize;
use thiserror::Error;

use crate::burst::engine::{run_burst, BurstFailure, BurstTargets, BurstTiming, EngineError};
use crate::burst::run::burst_deadline;
use crate::burst::{pattern, BurstLength, BurstPlan, BurstReport, PlanError};
use crate::control::message::Identity;
use crate::control::{
    client_handshake, connect, AuthMode, BurstOutcome, Connection, ControlError, Message,
    QpEndpoint, SessionRequest,
};
use crate::cpu_time::process_cpu_seconds;
use crate::flow::{self, FlowLabels};
use crate::placement::{self, Placement};
use crate::port::{
    self, BurstEnd, BurstTraffic, CounterIncrease, CounterReader, CounterSnapshot, IncreaseStatus,
    OtherTraffic, Sysfs,
};
use crate::rdma_address::RdmaDestinations;
use crate::reason::ErrorReason;
use crate::session::{PathOptions, QpSet, QpSetShape};
use crate::units::{RateLimit, ResolveError};
use crate::verbs::{Context, LocalPort, PathMtu, RemoteAccess, RemoteAddr, VerbsError};

/// Default memory budget of a session's regions on each end (see
/// [`ProbeSettings::max_session_bytes`]).
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 64 << 20;

/// Everything one probe needs, validated by the caller (the CLI or the exporter's config).
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// The responder's control address, `HOST:PORT`.
    pub target: String,
    /// This node's name, sent in the handshake for the responder's logs and metrics.
    pub node_name: String,
    pub local: LocalPort,
    /// The rail whose device the responder should answer with (sent in `SessionRequest`);
    /// `None`: the responder's first device.
    pub rail: Option<u16>,
    pub message_size: u64,
    pub length: BurstLength,
    /// `None` runs unpaced (a capacity check).
    pub rate_limit: Option<RateLimit>,
    pub qps: u16,
    pub tx_depth: u32,
    /// `None` uses perftest's default (1 above 8 KiB, else 100).
    pub cq_mod: Option<u32>,
    pub post_list: u32,
    /// Upper bound for the path MTU in bytes; the path MTU is min(local, peer, this).
    pub mtu: Option<u32>,
    pub traffic_class: u8,
    pub service_level: u8,
    /// Local ACK timeout exponent (4.096 µs x 2^N; perftest's default 14 = 67 ms).
    pub qp_timeout: u8,
    pub auth: AuthMode,
    /// Deadline for every control exchange, and how long a burst may overrun its plan.
    pub timeout: Duration,
    /// Most memory the session's regions may take on each end: a burst whose messages fit is
    /// verified message by message, a longer one over its last messages (as many as fit).
    pub max_session_bytes: u64,
    /// Poll the CQ all through the burst as perftest does, instead of the CPU-frugal waits:
    /// for calibrating against perftest (docs/perftest.md, "Calibration").
    pub busy_poll: bool,
    /// Networks the responder's RDMA address may be in besides the address the control
    /// connection reached (`rdma_networks`; docs/security.md, "Where RDMA traffic goes").
    pub rdma_networks: Vec<IpNet>,
}

impl ProbeSettings {
    /// The QP path attributes these settings ask for.
    pub(crate) fn path_options(&self) -> PathOptions {
        PathOptions {
            mtu: self.mtu,
            gid_index: self.local.gid_index,
            traffic_class: self.traffic_class,
            service_level: self.service_level,
            qp_timeout: self.qp_timeout,
        }
    }
}

/// How long saying `Close` to a responder that is not asked for a session may take.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// `Err(no_device)` when the responder listed its devices and none is on `rail`: the session
/// request would be refused (the responder's rule), so it is not sent.
pub(crate) fn check_rail(identity: &Identity, rail: Option<u16>) -> Result<(), ProbeError> {
    match rail {
        Some(rail) if !identity.devices.is_empty() && !identity.serves_rail(rail) => {
            Err(ProbeError::new(
                ErrorReason::NoDevice,
                format!(
                    "peer {} has no device on rail {rail} (it serves {})",
                    identity.node,
                    identity.describe_devices()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Refuses to send to the RDMA address the responder gave unless it is the address the control
/// connection reached, or in `networks` (`rdma_address`): whoever answers the connection must not
/// choose where the bursts go.
fn check_responder_address(
    set: &QpSet,
    conn: &Connection,
    endpoints: &[QpEndpoint],
    networks: &[IpNet],
) -> Result<(), ProbeError> {
    let control_peer = conn.peer_addr().map(|a| a.ip()).ok_or_else(|| {
        ProbeError::new(
            ErrorReason::RdmaAddress,
            "the control connection's peer address is unknown",
        )
    })?;
    set.check_peer_addresses(endpoints, &RdmaDestinations::new(control_peer, networks))
        .map_err(|e| ProbeError::new(ErrorReason::RdmaAddress, e.to_string()))
}

/// Re-reads the port and refuses to set up a session on one that is not ACTIVE (`port_down`).
pub(crate) fn ensure_port_active(ctx: &mut Context) -> Result<(), ProbeError> {
    let state = ctx.refresh_port_info()?.state;
    if state.is_active() {
        return Ok(());
    }
    Err(ProbeError::new(
        ErrorReason::PortDown,
        format!("{} port {} is {state:?}", ctx.device_name(), ctx.port()),
    ))
}

/// The result of one probe, successful or not: what `probe --json` prints.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProbeOutcome {
    /// Paced, or unpaced to measure capacity (whether or not the burst ran).
    pub kind: BurstKind,
    /// The burst's figures; absent when the probe failed before the burst ran.
    #[serde(flatten)]
    pub report: Option<BurstReport>,
    /// What the burst aimed for: the rate limit, or the lower link rate of both ends when unpaced.
    pub target_bandwidth_bytes_per_second: Option<f64>,
    /// Control + QP setup time of the session this burst ran on.
    pub setup_seconds: Option<f64>,
    /// Whether the responder verified the data pattern after the burst.
    pub validated: bool,
    /// How many messages the responder checked, each at its own offset: every message when the
    /// burst fits the session's regions, else the last ones of each QP.
    pub verified_messages: Option<u64>,
    /// Whether this burst's session was set up for it (first burst, or a rebuild after a
    /// failure or after the responder closed an idle session): its setup cost is in
    /// `setup_seconds`.
    pub new_session: bool,
    pub device: Option<String>,
    pub peer_device: Option<String>,
    pub mtu: Option<u32>,
    pub message_size: u64,
    pub qps: u16,
    pub local_link_rate_bits_per_second: Option<u64>,
    pub peer_link_rate_bits_per_second: Option<u64>,
    /// The GRH flow label of each QP during the burst (empty without a GRH): a session moves its
    /// QPs to new labels after every burst (docs/architecture.md, "Every ECMP path").
    pub flow_labels: Vec<u32>,
    /// The RoCE v2 UDP source port of each QP, as the drivers derive it from the flow label.
    pub udp_source_ports: Vec<u16>,
    /// Increases of this node's allowlisted port counters during the burst (non-zero ones, by
    /// label; docs/metrics.md, "Port counters"). Port-level: other traffic counts too.
    pub local_counters: Vec<(String, u64)>,
    /// Port counter increases the responder saw during the burst.
    pub remote_counters: Vec<(String, u64)>,
    /// What this node's port sent and received during the completed burst beyond the burst
    /// itself (docs/metrics.md, "Other traffic"); absent when the port has no byte counters.
    pub local_other_traffic: Option<OtherTraffic>,
    /// The same for the responder's port, from the increases it returned.
    pub remote_other_traffic: Option<OtherTraffic>,
    /// Time from asking for a burst on a warm session to its first WRITE.
    pub burst_start_seconds: Option<f64>,
    /// Wall time the burst thread spent inside `ibv_post_send` (see `BurstTiming::posting`).
    pub post_seconds: Option<f64>,
    /// CPU the whole process used for this burst, from the request to the responder's result
    /// (control exchanges, burst thread, verification wait): what a running exporter pays per
    /// burst, without process start-up and session set-up.
    pub process_cpu_seconds: Option<f64>,
    /// Set when the burst did not run and that is not a failure (`busy`: the responder was
    /// serving another prober).
    pub deferred: Option<String>,
    pub error: Option<ErrorReason>,
    pub message: Option<String>,
    /// The version a stock `ib_write_bw` server announced (`probe --perftest` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perftest_server_version: Option<String>,
    /// What the responder said about itself in the handshake of this probe's session (or of the
    /// last one that got that far): its node name, labels and devices with their rails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_identity: Option<Identity>,
}

impl ProbeOutcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none() && self.deferred.is_none()
    }

    /// The outcome of a probe whose session could not be set up.
    pub fn failed(settings: &ProbeSettings, error: &ProbeError) -> ProbeOutcome {
        let mut outcome = ProbeOutcome {
            kind: BurstKind::of(settings.rate_limit.as_ref()),
            message_size: settings.message_size,
            qps: settings.qps,
            ..ProbeOutcome::default()
        };
        outcome.record_error(error);
        outcome
    }

    pub(crate) fn record_error(&mut self, error: &ProbeError) {
        match error {
            ProbeError::Busy { .. } => self.deferred = Some("busy".into()),
            ProbeError::SessionClosed => self.error = Some(ErrorReason::Connect),
            ProbeError::Failed { reason, .. } => self.error = Some(*reason),
        }
        self.message = Some(error.to_string());
    }
}

/// Why a probe did not produce a figure.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error("the responder is busy with another prober's burst (retry after {retry_after_ms} ms)")]
    Busy { retry_after_ms: u32 },
    /// The responder ended the warm session (its idle timeout) before this burst: not a link
    /// failure; the caller rebuilds the session and tries again.
    #[error("the responder closed the session before the burst")]
    SessionClosed,
    #[error("{message}")]
    Failed {
        reason: ErrorReason,
        message: String,
    },
}

impl ProbeError {
    fn new(reason: ErrorReason, message: impl Into<String>) -> Self {
        ProbeError::Failed {
            reason,
            message: message.into(),
        }
    }

    /// The failure reason; `None` for a deferred (busy) probe.
    pub fn reason(&self) -> Option<ErrorReason> {
        match self {
            ProbeError::Busy { .. } => None,
            ProbeError::SessionClosed => Some(ErrorReason::Connect),
            ProbeError::Failed { reason, .. } => Some(*reason),
        }
    }
}

impl From<ControlError> for ProbeError {
    fn from(e: ControlError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<VerbsError> for ProbeError {
    fn from(e: VerbsError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<EngineError> for ProbeError {
    fn from(e: EngineError) -> Self {
        ProbeError::new(e.reason(), e.to_string())
    }
}

impl From<PlanError> for ProbeError {
    fn from(e: PlanError) -> Self {
        ProbeError::new(ErrorReason::QpSetup, format!("invalid burst: {e}"))
    }
}

impl From<ResolveError> for ProbeError {
    fn from(e: ResolveError) -> Self {
        ProbeError::new(ErrorReason::QpSetup, format!("rate limit: {e}"))
    }
}

/// Runs one burst on a fresh session and closes it: what `probe` does.
pub async fn probe_once(settings: &ProbeSettings) -> ProbeOutcome {
    let mut warm = WarmSession::new(settings.clone());
    let outcome = warm.burst().await;
    warm.close().await;
    outcome
}

/// A session to one responder kept warm across bursts: built on the first burst, rebuilt after
/// a failure (an errored QP is never reused) and when the responder closed it while idle; a
/// rebuild is setup (`new_session`, `setup_seconds`), never a link failure.
pub struct WarmSession {
    settings: ProbeSettings,
    /// The local device and its burst thread, opened once (by the caller, or at the first
    /// burst) and shared by every session this builds.
    device: Option<(Context, BurstWorker)>,
    session: Option<Session>,
    /// What the responder said about itself at the last handshake that got that far.
    peer: Option<Identity>,
}

impl WarmSession {
    /// Opens the device named in `settings` at the first burst.
    pub fn new(settings: ProbeSettings) -> Self {
        WarmSession {
            settings,
            device: None,
            session: None,
            peer: None,
        }
    }

    /// Uses a device the caller already opened and its burst thread (a device worker's).
    pub fn on_device(ctx: Context, worker: BurstWorker, settings: ProbeSettings) -> Self {
        WarmSession {
            settings,
            device: Some((ctx, worker)),
            session: None,
            peer: None,
        }
    }

    /// Runs one burst as the settings describe it, (re)building the session first when needed.
    pub async fn burst(&mut self) -> ProbeOutcome {
        let request = BurstRequest::from(&self.settings);
        self.burst_with(&request).await
    }

    /// Runs one burst of `request` (e.g. paced now, unpaced for a capacity check later) on the
    /// warm session, (re)building it first when needed.
    pub async fn burst_with(&mut self, request: &BurstRequest) -> ProbeOutcome {
        let mut rebuilt_once = false;
        loop {
            let fresh = self.session.is_none();
            let mut session = match self.session.take() {
                Some(s) => s,
                None => match self.establish().await {
                    Ok(s) => s,
                    Err(e) => {
                        let mut outcome = ProbeOutcome::failed(&self.settings, &e);
                        outcome.kind = request.kind();
                        outcome.new_session = true;
                        outcome.peer_identity = self.peer.clone();
                        return outcome;
                    }
                },
            };
            let mut outcome = session.burst_with(request).await;
            outcome.new_session = fresh;
            outcome.peer_identity = self.peer.clone();
            let closed_by_responder = session.closed_by_responder;
            if session.is_usable() && !closed_by_responder {
                self.session = Some(session); // warm for the next burst
            } else {
                session.close().await;
            }
            if closed_by_responder && !fresh && !rebuilt_once {
                tracing::debug!(target = %self.settings.target, "the responder closed the idle session: rebuilding");
                rebuilt_once = true;
                continue;
            }
            return outcome;
        }
    }

    async fn establish(&mut self) -> Result<Session, ProbeError> {
        let (ctx, worker) = match &self.device {
            Some(device) => device.clone(),
            None => {
                // The local device first: a node without RDMA says so without touching the
                // network.
                let local = &self.settings.local;
                let ctx = Context::open(local.device.as_deref(), local.port)?;
                let worker = BurstWorker::start(device_placement(ctx.device_name()).await)?;
                self.device.insert((ctx, worker)).clone()
            }
        };
        Session::establish(ctx, worker, &self.settings, &mut self.peer).await
    }

    /// Says goodbye to the responder (best effort) and releases everything.
    pub async fn close(mut self) {
        if let Some(session) = self.session.take() {
            session.close().await;
        }
    }
}

/// What one burst of a warm session does; the session's shape (QPs, message size, tx depth,
/// signaling) is fixed when it is set up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstRequest {
    pub length: BurstLength,
    /// `None` runs unpaced (a capacity check).
    pub rate_limit: Option<RateLimit>,
}

impl BurstRequest {
    pub fn kind(&self) -> BurstKind {
        BurstKind::of(self.rate_limit.as_ref())
    }
}

/// Whether a burst was paced or measured the path's capacity, so that the two are never
/// compared with each other (docs/metrics.md, "Paced and capacity bursts").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BurstKind {
    /// Held to a rate limit: fails only when the path falls below the pace.
    #[default]
    Paced,
    /// Unpaced, aiming at the lower link rate of both ends: what the path can carry.
    Capacity,
}

impl BurstKind {
    /// The kind of a burst with this rate limit (`None`: unpaced).
    pub fn of(rate_limit: Option<&RateLimit>) -> Self {
        match rate_limit {
            Some(_) => BurstKind::Paced,
            None => BurstKind::Capacity,
        }
    }

    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BurstKind::Paced => "paced",
            BurstKind::Capacity => "capacity",
        }
    }
}

impl From<&ProbeSettings> for BurstRequest {
    fn from(settings: &ProbeSettings) -> Self {
        BurstRequest {
            length: settings.length,
            rate_limit: settings.rate_limit,
        }
    }
}

/// A warm session to one responder: control connection, connected QPs and registered memory,
/// reused burst after burst until a failure leaves the QPs in the error state.
pub struct Session {
    settings: ProbeSettings,
    conn: Connection,
    /// `None` while a burst runs on its thread, and after a failed burst (never reuse an errored
    /// QP: the next burst must rebuild the session).
    set: Option<QpSet>,
    remote: Vec<RemoteAddr>,
    device: String,
    peer_device: String,
    mtu: PathMtu,
    local_rate: Option<u64>,
    peer_rate: Option<u64>,
    setup: Duration,
    next_burst_id: u64,
    /// Seed of the pattern already in the local slots for the next burst.
    seed: u64,
    /// Message slots per QP on both ends (see `session`).
    slots: u64,
    /// The session's walk through flow labels, and how many bursts it has moved on.
    flows: FlowLabels,
    label_round: u64,
    worker: BurstWorker,
    /// The local port's allowlisted counters, read before and after each burst; `None` when
    /// sysfs has none for the port.
    counters: Option<CounterReader>,
    /// The responder ended the session before a burst (idle timeout): rebuild, not a failure.
    closed_by_responder: bool,
}

impl Session {
    /// Connects and authenticates, and brings up the QPs on `ctx` (the caller's open device)
    /// with the responder's. The port is re-read first: its state, MTU, rate and LID may have
    /// changed since the device was opened. The whole setup is timed (`setup_seconds`).
    ///
    /// What the responder says about itself in the handshake is kept in `peer` (also when the
    /// setup fails later); a responder that says it has no device on the rail asked for is not
    /// asked for a session (`no_device`, as it would answer).
    pub async fn establish(
        mut ctx: Context,
        worker: BurstWorker,
        settings: &ProbeSettings,
        peer: &mut Option<Identity>,
    ) -> Result<Session, ProbeError> {
        let started = Instant::now();
        ensure_port_active(&mut ctx)?;
        let path = settings.path_options();
        let shape = QpSetShape {
            qps: settings.qps,
            slot_bytes: settings.message_size,
            slots: wanted_slots(settings),
            send_depth: settings.tx_depth,
            recv_depth: 1,
            remote: RemoteAccess::None,
        };
        // Registering (pinning) a large region is a blocking system call; on the NIC's NUMA
        // node, so that the pages it pins are allocated there.
        let cpus = worker.placement().cpus().map(<[usize]>::to_vec);
        let mut set = tokio::task::spawn_blocking(move || {
            placement::with_cpus(cpus.as_deref(), || QpSet::create(ctx, shape, &path))
        })
        .await
        .map_err(|e| ProbeError::new(ErrorReason::QpSetup, format!("setup task: {e}")))??;
        let device = set.ctx.device_name().to_string();
        let local_rate = set.ctx.port_info().link_rate_bits_per_second;
        let counters = counter_reader(&device, set.ctx.port()).await;

        let mut conn = connect(&settings.target, settings.timeout).await?;
        let identity = client_handshake(
            &mut conn,
            &settings.node_name,
            &settings.auth,
            settings.timeout,
        )
        .await?;
        if let Some(identity) = identity {
            let on_rail = check_rail(&identity, settings.rail);
            *peer = Some(identity);
            if let Err(e) = on_rail {
                // An orderly end: the responder did nothing wrong.
                let _ = conn.send(&Message::Close, CLOSE_GRACE).await;
                let _ = conn.shutdown(CLOSE_GRACE).await;
                return Err(e);
            }
        }
        let request = Message::SessionRequest(SessionRequest {
            device: None,
            rail: settings.rail,
            qps: u32::from(settings.qps),
            message_size: settings.message_size,
            region_bytes: set.region_bytes(),
            endpoints: set.endpoints()?,
            mtu: set.path_mtu(u32::MAX, settings.mtu).bytes(),
            link_rate_bits_per_second: local_rate,
            traffic_class: settings.traffic_class,
            service_level: settings.service_level,
        });
        let accept = match conn.request(&request, settings.timeout).await? {
            Message::SessionAccept(a) => a,
            other => return Err(ControlError::unexpected("session_accept", other).into()),
        };
        if accept.regions.len() != usize::from(settings.qps)
            || accept.regions.iter().any(|r| r.len < settings.message_size)
        {
            return Err(ProbeError::new(
                ErrorReason::Protocol,
                "responder offered memory regions that do not fit the burst",
            ));
        }
        check_responder_address(&set, &conn, &accept.endpoints, &settings.rdma_networks)?;
        let mtu = set.path_mtu(accept.mtu, settings.mtu);
        let flows = FlowLabels::random();
        set.connect(
            &accept.endpoints,
            mtu,
            &path,
            true,
            &flows.for_burst(0, settings.qps),
        )?;
        let remote = accept
            .regions
            .iter()
            .map(|r| RemoteAddr {
                addr: r.addr,
                rkey: r.rkey,
            })
            .collect();
        // Both ends use the smaller number of slots.
        let granted =
            accept.regions.iter().map(|r| r.len).min().unwrap_or(0) / settings.message_size;
        let slots = set.slots().min(granted).max(1);
        let (set, seed) = prepare_pattern(set).await?;
        let setup = started.elapsed();
        tracing::debug!(target = %settings.target, peer_device = %accept.device, mtu = mtu.bytes(),
            setup_ms = setup.as_secs_f64() * 1e3, "session established");
        Ok(Session {
            settings: settings.clone(),
            conn,
            set: Some(set),
            remote,
            device,
            peer_device: accept.device,
            mtu,
            local_rate,
            peer_rate: accept.link_rate_bits_per_second,
            setup,
            next_burst_id: 1,
            seed,
            slots,
            flows,
            label_round: 0,
            worker,
            counters,
            closed_by_responder: false,
        })
    }

    /// Whether the session can run another burst (false after a failure: rebuild it).
    pub fn is_usable(&self) -> bool {
        self.set.is_some()
    }

    /// The lower link rate of both ends, in bytes per second, if both are known.
    pub fn link_rate_bytes_per_second(&self) -> Option<f64> {
        match (self.local_rate, self.peer_rate) {
            (Some(a), Some(b)) => Some(a.min(b) as f64 / 8.0),
            (Some(a), None) | (None, Some(a)) => Some(a as f64 / 8.0),
            (None, None) => None,
        }
    }

    /// Runs one burst as the settings describe it; see [`Session::burst_with`].
    pub async fn burst(&mut self) -> ProbeOutcome {
        let request = BurstRequest::from(&self.settings);
        self.burst_with(&request).await
    }

    /// Runs one burst of `request` and reports it; on failure the outcome carries the reason
    /// and the session is no longer usable.
    pub async fn burst_with(&mut self, request: &BurstRequest) -> ProbeOutcome {
        let mut outcome = ProbeOutcome {
            kind: request.kind(),
            setup_seconds: Some(self.setup.as_secs_f64()),
            device: Some(self.device.clone()),
            peer_device: Some(self.peer_device.clone()),
            mtu: Some(self.mtu.bytes()),
            message_size: self.settings.message_size,
            qps: self.settings.qps,
            local_link_rate_bits_per_second: self.local_rate,
            peer_link_rate_bits_per_second: self.peer_rate,
            ..ProbeOutcome::default()
        };
        let cpu_before = process_cpu_seconds();
        if let Err(e) = self.run_burst(request, &mut outcome).await {
            outcome.record_error(&e);
        }
        outcome.process_cpu_seconds = cpu_before
            .zip(process_cpu_seconds())
            .map(|(before, after)| (after - before).max(0.0));
        outcome
    }

    async fn run_burst(
        &mut self,
        request: &BurstRequest,
        outcome: &mut ProbeOutcome,
    ) -> Result<(), ProbeError> {
        let requested = Instant::now();
        let timeout = self.settings.timeout;
        let link = self.link_rate_bytes_per_second();
        let rate = match &request.rate_limit {
            Some(limit) => Some(limit.resolve(self.settings.message_size, link)?),
            None => None,
        };
        let mut builder = BurstPlan::builder(self.settings.message_size, request.length)
            .tx_depth(self.settings.tx_depth)
            .qps(self.settings.qps)
            .post_list(self.settings.post_list)
            .rate(rate)
            .busy_poll(self.settings.busy_poll);
        if let Some(cq_mod) = self.settings.cq_mod {
            builder = builder.cq_mod(cq_mod);
        }
        let plan = builder.build()?;
        outcome.target_bandwidth_bytes_per_second = rate.map(|r| r.bytes_per_second()).or(link);
        let deadline_ms = burst_deadline(&plan, timeout)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));

        let set = self.set.take().ok_or_else(|| {
            ProbeError::new(
                ErrorReason::QpSetup,
                "session is broken by an earlier failure",
            )
        })?;
        let burst_id = self.next_burst_id;
        self.next_burst_id += 1;
        outcome.flow_labels = set.flow_labels().to_vec();
        outcome.udp_source_ports = outcome
            .flow_labels
            .iter()
            .map(|&l| flow::udp_source_port(l))
            .collect();
        // Read before the responder is asked: no probe traffic flows until the burst starts.
        let counters_before = read_counters(self.counters.clone()).await;
        // Filled after the previous burst (off the path from request to first WRITE).
        let seed = self.seed;
        let start = Message::BurstStart {
            burst_id,
            seed,
            deadline_ms,
        };
        match self.conn.request(&start, timeout).await {
            Ok(Message::BurstReady { burst_id: id }) if id == burst_id => {}
            Ok(Message::Busy { retry_after_ms }) => {
                self.set = Some(set); // nothing was posted: the session stays warm
                return Err(ProbeError::Busy { retry_after_ms });
            }
            Ok(other) => return Err(ControlError::unexpected("burst_ready", other).into()),
            // Nothing was posted: the responder ended the session while it was idle.
            Err(ControlError::Closed | ControlError::Io(_)) => {
                self.closed_by_responder = true;
                return Err(ProbeError::SessionClosed);
            }
            Err(e) => return Err(e.into()),
        }

        // The burst runs on the session's own OS thread, which owns the QP set meanwhile.
        let (set, result) = self
            .worker
            .run(BurstJob {
                set,
                remote: self.remote.clone(),
                plan,
                imm: Some(burst_id as u32),
                timeout,
                slots: self.slots,
            })
            .await?;
        let counters_after = read_counters(self.counters.clone()).await;
        let local_increases = match (&counters_before, &counters_after) {
            (Some(before), Some(after)) => port::increases(before, after),
            _ => Vec::new(),
        };
        outcome.local_counters = port::nonzero_increases(counters_before, counters_after);
        let (report, timing) = match result {
            Ok(r) => r,
            Err(BurstFailure { error, partial }) => {
                // What completed before the failure is still a measurement (a link slower than
                // the pace gets its achieved bandwidth next to the error).
                outcome.report = partial.map(|r| *r);
                let failure = ProbeError::from(error);
                // The QPs are in the error state: drop them; tell the responder best effort.
                drop(set);
                let end = Message::BurstEnd {
                    burst_id,
                    outcome: BurstOutcome::Failed {
                        reason: failure.reason().unwrap_or(ErrorReason::WcOther),
                        detail: failure.to_string(),
                    },
                    posted_per_qp: Vec::new(),
                };
                let _ = self
                    .conn
                    .send(&end, timeout.min(Duration::from_secs(1)))
                    .await;
                return Err(failure);
            }
        };
        outcome.burst_start_seconds = timing
            .first_post_at
            .map(|t| t.saturating_duration_since(requested).as_secs_f64());
        outcome.post_seconds = Some(timing.posting.as_secs_f64());
        outcome.report = Some(report);
        let end = Message::BurstEnd {
            burst_id,
            outcome: BurstOutcome::Completed,
            posted_per_qp: timing.posted_per_qp,
        };
        // The next burst's pattern is written, and the QPs moved to the next burst's flow labels,
        // while the responder verifies this one.
        self.label_round += 1;
        let labels = self.flows.for_burst(self.label_round, self.settings.qps);
        let (prepared, reply) = tokio::join!(
            prepare_next_burst(set, labels),
            self.conn.request(&end, timeout)
        );
        let (set, seed) = prepared?;
        self.seed = seed;
        self.set = set;
        let result = match reply? {
            Message::BurstResult(r) if r.burst_id == burst_id => r,
            other => return Err(ControlError::unexpected("burst_result", other).into()),
        };
        self.record_other_traffic(outcome, &local_increases, &result.counters);
        outcome.remote_counters = result.counters;
        outcome.validated = result.validated;
        outcome.verified_messages = Some(result.verified_messages);
        if !result.validated {
            return Err(ProbeError::new(
                ErrorReason::Validation,
                format!(
                    "the responder found the written data corrupt: {}",
                    result.detail.unwrap_or_else(|| "no detail".into())
                ),
            ));
        }
        Ok(())
    }

    /// What both ends' ports carried during the completed burst beyond the burst itself
    /// (docs/metrics.md, "Other traffic"); the responder's from the increases it returned.
    fn record_other_traffic(
        &self,
        outcome: &mut ProbeOutcome,
        local: &[CounterIncrease],
        remote: &[(String, u64)],
    ) {
        let Some(messages) = outcome.report.as_ref().map(|r| r.messages) else {
            return;
        };
        let burst = BurstTraffic::of(messages, self.settings.message_size, self.mtu.bytes());
        let remote: Vec<CounterIncrease> = remote
            .iter()
            .filter_map(|(label, n)| {
                CounterIncrease::from_label(label, *n, IncreaseStatus::Counted)
            })
            .collect();
        let known = |t: OtherTraffic| (t != OtherTraffic::default()).then_some(t);
        outcome.local_other_traffic = known(port::other_traffic(local, burst, BurstEnd::Sender));
        outcome.remote_other_traffic =
            known(port::other_traffic(&remote, burst, BurstEnd::Receiver));
    }

    /// Says goodbye to the responder (best effort) and releases everything.
    pub async fn close(mut self) {
        let _ = self
            .conn
            .send(&Message::Close, Duration::from_millis(500))
            .await;
    }
}

/// Where `device`'s work goes (a few sysfs reads, on a blocking thread), logged once per device.
pub async fn device_placement(device: &str) -> Placement {
    let name = device.to_owned();
    let placement =
        tokio::task::spawn_blocking(move || placement::for_device(&Sysfs::system(), &name))
            .await
            .unwrap_or(Placement::Anywhere(placement::Anywhere::NoNumaNode));
    match placement.cpus() {
        Some(_) => {
            tracing::info!(device, %placement, "burst thread and session memory on the NIC's NUMA node")
        }
        None => tracing::debug!(device, %placement, "burst thread and session memory not placed"),
    }
    placement
}

/// The allowlisted counter files of the session's port, found once per session (on a blocking
/// thread); `None`, logged, when sysfs has no such port. The device is one the exporter or the
/// CLI opened, so never an excluded one.
pub(crate) async fn counter_reader(device: &str, port: u8) -> Option<CounterReader> {
    let name = device.to_owned();
    let found = tokio::task::spawn_blocking(move || Sysfs::system().counter_reader(&name, port))
        .await
        .ok()?;
    match found {
        Ok(reader) => Some(reader),
        Err(e) => {
            tracing::debug!(device, port, error = %e, "no port counters for the session's port");
            None
        }
    }
}

/// The port's allowlisted counters now (a few small sysfs files, on a blocking thread); `None`
/// when the port has none. Shared with the responder, which reads its own around each burst.
pub(crate) async fn read_counters(reader: Option<CounterReader>) -> Option<CounterSnapshot> {
    let reader = reader?;
    tokio::task::spawn_blocking(move || reader.read())
        .await
        .ok()
}

/// A burst handed to the session's burst thread, with the QP set it runs on.
pub(crate) struct BurstJob {
    pub set: QpSet,
    pub remote: Vec<RemoteAddr>,
    pub plan: BurstPlan,
    /// The immediate of each QP's last WRITE; `None` for a peer that posts no receive.
    pub imm: Option<u32>,
    pub timeout: Duration,
    pub slots: u64,
}

pub(crate) type BurstDone = (QpSet, Result<(BurstReport, BurstTiming), BurstFailure>);

/// A device's dedicated OS thread for bursts (a burst blocks: never on an async worker). One per
/// local device, shared (cloned) by every session on it: bursts of one device run one at a time
/// by construction, and a warm burst does not pay for a thread start. The thread ends when the
/// last clone is dropped.
#[derive(Clone)]
pub struct BurstWorker {
    jobs: std::sync::mpsc::Sender<(BurstJob, tokio::sync::oneshot::Sender<BurstDone>)>,
    /// Where the device's work runs: the thread itself, and the registration of every session's
    /// memory (docs/architecture.md, "NUMA placement").
    placement: Placement,
    /// Set at shutdown: the running burst ends at its next check (within ~100 ms), and every
    /// later one fails at once.
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for BurstWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BurstWorker")
    }
}

impl BurstWorker {
    /// Starts the burst thread of a device placed at `placement` (its NIC's NUMA node, or
    /// anywhere: [`crate::placement::for_device`]).
    pub fn start(placement: Placement) -> Result<BurstWorker, ProbeError> {
        let (jobs, queue) =
            std::sync::mpsc::channel::<(BurstJob, tokio::sync::oneshot::Sender<BurstDone>)>();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let cpus = placement.cpus().map(<[usize]>::to_vec);
        std::thread::Builder::new()
            .name("rdma-burst".into())
            .spawn(move || {
                if let Some(cpus) = cpus {
                    if let Err(e) = placement::pin_current_thread(&cpus) {
                        tracing::warn!(error = %e, "the burst thread stays off its NIC's NUMA node");
                    }
                }
                for (mut job, reply) in queue {
                    let result = run_burst(
                        BurstTargets {
                            qps: &mut job.set.qps,
                            cq: &job.set.cq,
                            local: &job.set.mr,
                            remote: &job.remote,
                            slots: job.slots,
                        },
                        &job.plan,
                        job.imm,
                        job.timeout,
                        &stop_flag,
                    );
                    let _ = reply.send((job.set, result));
                }
            })
            .map_err(|e| ProbeError::new(ErrorReason::QpSetup, format!("burst thread: {e}")))?;
        Ok(BurstWorker {
            jobs,
            placement,
            stop,
        })
    }

    /// Where this device's work runs.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Ends the running burst of this device (and fails every later one at once): for a
    /// shutdown that must not wait out a long or stalled burst.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub(crate) async fn run(&self, job: BurstJob) -> Result<BurstDone, ProbeError> {
        let (reply, done) = tokio::sync::oneshot::channel();
        let lost = || ProbeError::new(ErrorReason::WcOther, "burst thread ended without a result");
        self.jobs.send((job, reply)).map_err(|_| lost())?;
        done.await.map_err(|_| lost())
    }
}

/// Gets the set ready for the next burst, on a blocking thread: a fresh pattern, and the QPs on
/// the next flow labels. QPs that could not be moved are dropped (the session is rebuilt at the
/// next burst, `None`); that is not this burst's failure.
async fn prepare_next_burst(
    set: QpSet,
    labels: Vec<u32>,
) -> Result<(Option<QpSet>, u64), ProbeError> {
    let (mut set, seed) = prepare_pattern(set).await?;
    let moved = tokio::task::spawn_blocking(move || {
        let moved = set.set_flow_labels(&labels);
        (set, moved)
    })
    .await
    .map_err(|e| ProbeError::new(ErrorReason::QpSetup, format!("flow label task: {e}")))?;
    match moved {
        (set, Ok(())) => Ok((Some(set), seed)),
        (_, Err(e)) => {
            tracing::warn!(error = %e, "could not move the QPs to new flow labels: the session is rebuilt before the next burst");
            Ok((None, seed))
        }
    }
}

/// Writes a fresh seeded pattern into every local region (slot `k` of QP `q` holds stream `q`
/// at offset `k * message_size`), on a blocking thread: the regions can be large.
async fn prepare_pattern(mut set: QpSet) -> Result<(QpSet, u64), ProbeError> {
    tokio::task::spawn_blocking(move || {
        let seed = random_seed();
        for q in 0..set.qps.len() {
            pattern::fill(seed, q as u32, set.region_mut(q));
        }
        (set, seed)
    })
    .await
    .map_err(|e| ProbeError::new(ErrorReason::QpSetup, format!("pattern task: {e}")))
}

/// The most memory a session with these settings registers (pins) on the prober's side: its
/// QPs' slots of one message each. The responder registers at most the same.
pub fn session_region_bytes(settings: &ProbeSettings) -> u64 {
    wanted_slots(settings)
        .saturating_mul(settings.message_size.max(1))
        .saturating_mul(u64::from(settings.qps.max(1)))
}

/// Message slots per QP to ask for: one per message of the burst (every message verified) when
/// its message count is known — a count or bytes burst, or a duration burst at an absolute rate
/// (with a little room for the pacer's allowance) — else as many as the memory budget allows;
/// never more than the budget, and at least one. Sizing by the plan keeps a paced exporter's
/// sessions small: 500 ms at 20 Mb/s is 20 slots of 64 KiB, not the 64 MiB budget.
fn wanted_slots(settings: &ProbeSettings) -> u64 {
    let size = settings.message_size.max(1);
    let qps = u64::from(settings.qps.max(1));
    let affordable = settings.max_session_bytes / size.saturating_mul(qps);
    let needed = planned_messages(settings).map_or(u64::MAX, |total| total.div_ceil(qps));
    affordable.min(needed).max(1)
}

/// How many messages the settings' burst sends, when that is known before the session exists.
fn planned_messages(settings: &ProbeSettings) -> Option<u64> {
    let size = settings.message_size.max(1);
    if let Some(total) = settings.length.total_messages(size) {
        return Some(total);
    }
    let BurstLength::Duration(duration) = settings.length else {
        return None;
    };
    // A percentage needs the link rate of both ends, known only after the handshake.
    let rate = settings.rate_limit?.resolve(size, None).ok()?;
    let messages = (duration.as_secs_f64() * rate.messages_per_second()).ceil();
    // The pacer may run up to its allowance ahead (at least one message), and duration mode
    // posts one more signaled WRITE at the end.
    Some((messages * 1.01).ceil() as u64 + 2)
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // A predictable seed weakens nothing but the stale-data check: never fail for it.
    let _ = getrandom::getrandom(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::message::IdentityDevice;

    #[test]
    fn a_session_is_asked_for_only_on_a_rail_the_peer_has() {
        let device = |name: &str, rail| IdentityDevice {
            name: name.into(),
            port: 1,
            rail,
        };
        let peer = Identity {
            node: "gpu-b07".into(),
            labels: Default::default(),
            devices: vec![device("mlx5_0", Some(0)), device("mlx5_1", Some(1))],
        };
        assert!(check_rail(&peer, Some(1)).is_ok());
        assert!(check_rail(&peer, None).is_ok(), "no rail: its first device");
        let e = check_rail(&peer, Some(5)).unwrap_err();
        assert_eq!(e.reason(), Some(ErrorReason::NoDevice));
        assert_eq!(
            e.to_string(),
            "peer gpu-b07 has no device on rail 5 (it serves mlx5_0 (rail 0), mlx5_1 (rail 1))"
        );
        // A responder that lists no devices leaves the choice to its answer.
        let silent = Identity {
            devices: Vec::new(),
            ..peer
        };
        assert!(check_rail(&silent, Some(5)).is_ok());
    }

    fn settings(length: BurstLength, rate_limit: Option<RateLimit>) -> ProbeSettings {
        ProbeSettings {
            target: "192.0.2.12:18516".into(),
            node_name: "node1".into(),
            local: LocalPort {
                device: None,
                port: 1,
                gid_index: None,
            },
            rail: None,
            message_size: 65536,
            length,
            rate_limit,
            qps: 1,
            tx_depth: 128,
            cq_mod: None,
            post_list: 1,
            mtu: None,
            traffic_class: 0,
            service_level: 0,
            qp_timeout: 14,
            auth: AuthMode::None,
            timeout: Duration::from_secs(10),
            max_session_bytes: DEFAULT_MAX_SESSION_BYTES,
            busy_poll: false,
            rdma_networks: Vec::new(),
        }
    }

    #[test]
    fn session_memory_follows_the_planned_burst() {
        let half_second = BurstLength::Duration(Duration::from_millis(500));
        // 500 ms at 20 Mb/s = 19.07 messages of 64 KiB: 20, plus room.
        let paced = settings(half_second, Some(RateLimit::BitsPerSecond(20e6)));
        assert_eq!(wanted_slots(&paced), 23);
        // A count: one slot per message, split over the QPs.
        let mut count = settings(BurstLength::Messages(300), None);
        assert_eq!(wanted_slots(&count), 300);
        count.qps = 4;
        assert_eq!(wanted_slots(&count), 75);
        // Unknown in advance (unpaced, or a percentage of a link not known yet): the budget.
        let budget = DEFAULT_MAX_SESSION_BYTES / 65536;
        assert_eq!(wanted_slots(&settings(half_second, None)), budget);
        let percent = settings(half_second, Some(RateLimit::PercentOfLink(25.0)));
        assert_eq!(wanted_slots(&percent), budget);
        // Never more than the budget, never none.
        let huge = settings(BurstLength::Messages(1 << 40), None);
        assert_eq!(wanted_slots(&huge), budget);
        let mut tiny = settings(BurstLength::Messages(10), None);
        tiny.max_session_bytes = 1;
        assert_eq!(wanted_slots(&tiny), 1);
    }
}
