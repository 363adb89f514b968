//! One warm session to a responder: [`Session::establish`] (connect, authenticate, set up the
//! QPs) and its bursts, each run on the device's burst thread and verified by the responder.

use std::time::{Duration, Instant};

use crate::burst::engine::BurstFailure;
use crate::burst::run::burst_deadline;
use crate::burst::{pattern, BurstPlan};
use crate::control::message::Identity;
use crate::control::{
    client_handshake, connect, BurstOutcome, Connection, ControlError, Message, SessionAccept,
    SessionRequest,
};
use crate::cpu_time::process_cpu_seconds;
use crate::flow::{self, FlowLabels};
use crate::ping::PingTarget;
use crate::placement;
use crate::port::{
    self, BurstEnd, BurstTraffic, CounterIncrease, CounterReader, IncreaseStatus, OtherTraffic,
};
use crate::reason::ErrorReason;
use crate::session::{QpSet, QpSetShape};
use crate::verbs::{Context, PathMtu, RemoteAccess, RemoteAddr, Route};

use super::checks::{check_rail, check_responder_address, ensure_port_active};
use super::slots::wanted_slots;
use super::{
    counter_reader, read_counters, BurstJob, BurstRequest, BurstWorker, ProbeError, ProbeOutcome,
    ProbeSettings,
};

/// How long saying `Close` to a responder that is not asked for a session may take.
const CLOSE_GRACE: Duration = Duration::from_millis(500);

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
    pub(super) closed_by_responder: bool,
    /// Where this path's pings go, when both ends run ping engines.
    ping: Option<PingTarget>,
}

/// Sets up a session to `settings`' responder only to learn where the path's pings go (and the
/// responder device), then closes it: `probe --ping`.
pub async fn learn_ping_target(
    ctx: Context,
    worker: BurstWorker,
    settings: &ProbeSettings,
    ping_qpn: u32,
) -> Result<(PingTarget, String), ProbeError> {
    let mut peer = None;
    let session = Session::establish(ctx, worker, settings, &mut peer, Some(ping_qpn)).await?;
    let found = session
        .ping
        .clone()
        .map(|t| (t, session.peer_device.clone()));
    session.close().await;
    found.ok_or_else(|| {
        ProbeError::new(
            ErrorReason::Protocol,
            "the responder answers no pings (a version without them, `ping.interval: off`, or a port without a GID)",
        )
    })
}

/// Where the path's pings go, from the responder's answer: its device's ping QP on the GID of
/// the session's QPs (already checked against `rdma_networks`), tagged with the session's key.
/// `None` when the responder runs no ping engine or the port has no GID.
fn ping_target(
    accept: &SessionAccept,
    set: &QpSet,
    conn: &Connection,
    traffic_class: u8,
) -> Option<PingTarget> {
    let endpoint = accept.ping?;
    Some(PingTarget {
        route: Route {
            port: set.ctx.port(),
            sgid_index: u8::try_from(set.sgid_index()?).ok()?,
            gid: accept.endpoints.first()?.gid,
            hop_limit: 64,
            traffic_class,
        },
        qpn: endpoint.qpn,
        key_id: endpoint.key_id,
        key: conn.ping_key()?.clone(),
        count: None,
    })
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
        ping_qpn: Option<u32>,
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
            ping_qpn,
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
        let ping = ping_target(&accept, &set, &conn, settings.traffic_class);
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
            ping,
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
            ping: self.ping.clone(),
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

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // A predictable seed weakens nothing but the stale-data check: never fail for it.
    let _ = getrandom::getrandom(&mut b);
    u64::from_le_bytes(b)
}
