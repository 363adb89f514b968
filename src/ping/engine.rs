//! The ping engine of one local device: a thread with one UD QP that both pings the device's
//! targets and answers the pings of other nodes' engines (docs/architecture.md, "Pings").
//!
//! - **Targets** come from burst sessions: a session's `SessionAccept` names the peer device's
//!   ping QP and the id of the key both ends derived from the control handshake; each burst
//!   confirms its path again ([`super::Pinger::confirm`]), and a path no burst confirmed for the
//!   schedule's `ttl` stops being pinged ([`super::schedule`]).
//! - **Answers**: a responder session registers the prober's ping QP and the session's key
//!   ([`super::Pinger::answer`]); a ping tagged with that key is answered twice (the ack at once, then
//!   how long the ping was held), anything else is counted as refused and dropped.
//! - **Event-driven**: the thread sleeps on the CQ's completion channel until a completion, the
//!   next due ping or report, or a command from a handle (a new target or key), which wakes it
//!   through a socket pair.
//! - **Timestamps**: the NIC's completion timestamps where the device has a completion clock
//!   (an extended CQ stamps every completion; the responder's second answer then waits for its
//!   ack's send completion), else the CPU's monotonic clock (a send stamped right after its post
//!   returns, a receive when its completion is polled): [`super::delay`].
//!
//! Every interval the engine hands the caller a [`PingReports`]: each target's counts and window;
//! and it names the targets that went silent to a watcher ([`super::Pinger::watch_silent`]), which
//! may learn them again.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::verbs::{
    AddressHandle, Completion, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
    RemoteAccess, Route, UdQueuePair, VerbsError, WcStatus, Woken, GRH_LEN,
};

use super::bucket::TokenBucket;
use super::delay::{responder_delay, Clock};
use super::packet::{Kind, Packet, PingKey, PACKET_LEN};
use super::path::{Answer, Counts, PathPings};
use super::pinger::{Command, PingReport, PingReports, PingSettings, PingTarget};
use super::receive::{from_source, received, Received, PING_RECEIVED, RECV_SLOT};
use super::replay::ReplayWindow;
use super::schedule::{PingSchedule, ScheduleSettings};

/// The Q_Key of every ping QP ("rdpa").
pub const PING_QKEY: u32 = 0x7264_7061;
/// Receive buffers kept posted; a burst of pings beyond them is dropped by the NIC (lost).
const RECVS: usize = 256;
/// Sends in flight at most (pings and answers); a ping due with none free waits its next turn.
const SENDS: usize = 256;
const POLL_BATCH: usize = 32;
/// The most probers' keys a device answers with; the one unused longest makes room.
const MAX_ANSWERERS: usize = 4096;
/// The most RTTs one report carries for the device's histogram; beyond, they are left out.
const MAX_REPORTED_RTTS: usize = 65_536;

/// What [`spawn`] started: the ping QP's number, and a seed that differs from node to node.
pub(super) struct Started {
    pub(super) qpn: u32,
    pub(super) seed: u64,
}

/// Opens `device`'s `port`, creates the ping QP and starts the engine's thread, which takes
/// `commands` (a byte on `woken` wakes it for each) and hands `reports` its figures.
pub(super) fn spawn<K: Ord + Clone + Send + 'static>(
    device: &str,
    port: u8,
    settings: PingSettings,
    commands: Receiver<Command<K>>,
    woken: UnixStream,
    reports: Box<dyn FnMut(PingReports<K>) + Send>,
) -> Result<Started, VerbsError> {
    let ctx = Context::open(Some(device), port)?;
    let pd = ctx.alloc_pd()?;
    let (cq, clock) = completion_queue(&ctx)?;
    let mut qp = pd.create_ud_qp(&cq, RECVS.max(SENDS) as u32)?;
    qp.activate(port, 0, PING_QKEY, 0)?;
    let mr = pd.register(
        RECVS * RECV_SLOT + SENDS * PACKET_LEN,
        RemoteAccess::Receives,
    )?;
    for slot in 0..RECVS {
        post_recv_slot(&mut qp, &mr, slot)?;
    }
    let seed = u64::from(qp.qpn()) ^ (u64::from(std::process::id()) << 24);
    let qpn = qp.qpn();
    let name = ctx.device_name().to_owned();
    // The engine holds address handles in `Rc`s, so it is built on its own thread.
    std::thread::Builder::new()
        .name(format!("ping-{device}"))
        .spawn(move || {
            let schedule = ScheduleSettings {
                interval: settings.interval,
                min_gap: Duration::from_secs(1) / settings.max_rate.max(1),
                ttl: settings.ttl,
                max_targets: settings.max_paths,
            };
            Engine {
                started: Instant::now(),
                device: name,
                clock,
                settings,
                commands,
                woken,
                reports,
                watcher: None,
                pd,
                cq,
                qp,
                mr,
                free_sends: (0..SENDS).collect(),
                sending: (0..SENDS).map(|_| None).collect(),
                schedule: PingSchedule::new(schedule, seed),
                targets: BTreeMap::new(),
                answerers: HashMap::new(),
                answer_rates: HashMap::new(),
                gone: Vec::new(),
                rtts: Vec::new(),
                answered: 0,
                refused: 0,
                next_report: settings.interval,
                port,
                failed: None,
                recoveries: 0,
                last_recovery: None,
            }
            .run()
        })
        .map_err(|e| VerbsError::InvalidArgument(format!("starting the ping thread: {e}")))?;
    Ok(Started { qpn, seed })
}

/// The engine's CQ, room for every work request's completion twice over, and the clock that
/// stamps its completions: the NIC's where the device has one and its timestamped CQ can be
/// made, else the CPU's.
fn completion_queue(ctx: &Context) -> Result<(CompletionQueue, Clock), VerbsError> {
    let cqe = 2 * (RECVS + SENDS) as u32;
    let nic = ctx
        .completion_clock()
        .and_then(|c| Clock::hardware(c.khz, c.mask));
    if let Some(clock) = nic {
        match ctx.create_timestamped_cq(cqe) {
            Ok(cq) => return Ok((cq, clock)),
            Err(e) => {
                tracing::warn!(device = %ctx.device_name(), error = %e,
                    "no CQ with completion timestamps: pings are stamped by the CPU");
            }
        }
    }
    Ok((ctx.create_cq(cqe)?, Clock::software()))
}

/// Where a target's pings go, as the last burst session learnt it.
struct Peer {
    ah: Rc<AddressHandle>,
    route: Route,
    qpn: u32,
    key_id: u32,
    key: PingKey,
}

struct Target {
    peer: Peer,
    count: Option<u64>,
    /// The key of the session before, so answers to pings sent under it still count.
    previous: Option<(u32, PingKey)>,
    pings: PathPings,
}

/// A prober whose pings this device answers.
#[derive(Clone)]
struct Answerer {
    ah: Rc<AddressHandle>,
    qpn: u32,
    /// The prober's GID, which its pings' GRH must name as their source.
    gid: [u8; 16],
    key: PingKey,
    used: Duration,
    /// The sequence numbers answered under the key: each ping is answered once.
    answered: ReplayWindow,
}

/// A send in flight: its address handle lives until the send completed.
enum Sending<K> {
    Ping {
        path: K,
        seq: u64,
        /// CPU time right after the post returned: the software send timestamp.
        sent: u64,
        _ah: Rc<AddressHandle>,
    },
    /// An ack whose second answer (the delay) is posted at its send completion, on a NIC clock.
    Ack {
        to: Answerer,
        ping: Packet,
        /// The ping's receive completion, on the NIC's clock.
        received: u64,
    },
    Answer {
        _ah: Rc<AddressHandle>,
    },
}

struct Engine<K> {
    started: Instant,
    device: String,
    /// What stamps the completions (docs/architecture.md, "Pings").
    clock: Clock,
    settings: PingSettings,
    commands: Receiver<Command<K>>,
    /// Readable when a handle sent a command, or when the last handle is gone (end of file).
    woken: UnixStream,
    reports: Box<dyn FnMut(PingReports<K>) + Send>,
    /// Told the paths that went silent, to learn their targets again.
    watcher: Option<tokio::sync::mpsc::Sender<K>>,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: UdQueuePair,
    mr: MemoryRegion,
    free_sends: Vec<usize>,
    sending: Vec<Option<Sending<K>>>,
    schedule: PingSchedule<K>,
    targets: BTreeMap<K, Target>,
    answerers: HashMap<u32, Answerer>,
    /// How fast each source GID's pings are answered.
    answer_rates: HashMap<[u8; 16], TokenBucket>,
    /// Targets removed since the last report: reported once more, as gone.
    gone: Vec<(K, Counts)>,
    /// The network RTTs measured since the last report, of every path.
    rtts: Vec<Duration>,
    answered: u64,
    refused: u64,
    next_report: Duration,
    port: u8,
    /// The first failed completion of the batch being handled: the QP needs a reset.
    failed: Option<(WcStatus, &'static str)>,
    recoveries: u64,
    last_recovery: Option<Duration>,
}

/// Why the engine stopped on its own.
enum Stop {
    /// Every handle was dropped: the exporter is stopping.
    Dropped,
    Failed(VerbsError),
}

fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

/// Where a newly learnt path's sequence numbers start: the wall clock's nanoseconds (see
/// [`PathPings::new`]; pings are never a nanosecond apart, so a path learnt later starts above
/// every number an earlier one used).
fn first_seq() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, nanos)
}

/// Keeps a measured ping's network RTT for the device's histogram.
fn keep_rtt(rtts: &mut Vec<Duration>, answer: Answer) {
    if let Answer::Measured(delays) = answer {
        if rtts.len() < MAX_REPORTED_RTTS {
            rtts.push(delays.network_rtt);
        }
    }
}

fn recv_offset(slot: usize) -> usize {
    slot * RECV_SLOT
}

/// Posts receive slot `slot` of `mr` (the receive slots come first) to `qp`.
fn post_recv_slot(qp: &mut UdQueuePair, mr: &MemoryRegion, slot: usize) -> Result<(), VerbsError> {
    qp.post_recv(mr, recv_offset(slot), RECV_SLOT as u32, slot as u64)
}

fn send_offset(slot: usize) -> usize {
    RECVS * RECV_SLOT + slot * PACKET_LEN
}

impl<K: Ord + Clone> Engine<K> {
    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    fn run(mut self) {
        match self.serve() {
            Stop::Dropped => tracing::debug!(device = %self.device, "ping engine stopped"),
            Stop::Failed(e) => {
                tracing::error!(device = %self.device, error = %e, "ping engine failed: this device sends and answers no pings until the exporter restarts");
                let paths = std::mem::take(&mut self.targets);
                self.gone
                    .extend(paths.into_iter().map(|(k, t)| (k, t.pings.counts())));
                let now = self.now();
                self.report(now);
            }
        }
    }

    fn serve(&mut self) -> Stop {
        let mut completions = [Completion::EMPTY; POLL_BATCH];
        loop {
            if let Err(stop) = self.take_commands() {
                return stop;
            }
            let now = self.now();
            self.send_due(now);
            if now >= self.next_report {
                self.report(now);
            }
            let result = self.cq.poll(&mut completions).and_then(|n| {
                if n > 0 {
                    return Ok(n);
                }
                // Nothing: arm, look once more (a completion before arming raises no event),
                // then sleep.
                self.cq.arm()?;
                let n = self.cq.poll(&mut completions)?;
                if n == 0 {
                    let woken = self
                        .cq
                        .wait_or(Some(self.woken.as_fd()), self.sleep_for(now))?;
                    if woken == Woken::Other {
                        self.drain_wake_ups();
                    }
                }
                Ok(n)
            });
            match result {
                Ok(n) => {
                    for c in &completions[..n] {
                        if let Err(e) = self.on_completion(c) {
                            return Stop::Failed(e);
                        }
                    }
                    if let Some(failed) = self.failed.take() {
                        if let Err(e) = self.recover(failed) {
                            // A port that is down, say: try again (a second later) until it
                            // comes back; no ping goes out meanwhile.
                            tracing::debug!(device = %self.device, error = %e, "ping QP not brought up again yet");
                            self.failed = Some(failed);
                        }
                    }
                }
                Err(e) => return Stop::Failed(e),
            }
        }
    }

    fn sleep_for(&self, now: Duration) -> Duration {
        let wake = self
            .schedule
            .wake_at()
            .unwrap_or(Duration::MAX)
            .min(self.next_report);
        wake.saturating_sub(now)
    }

    /// Reads the wake-up bytes; the commands themselves are taken at the top of the loop (and an
    /// end of file there means every handle is gone).
    fn drain_wake_ups(&mut self) {
        let mut bytes = [0u8; 64];
        while matches!((&self.woken).read(&mut bytes), Ok(n) if n > 0) {}
    }

    fn take_commands(&mut self) -> Result<(), Stop> {
        loop {
            match self.commands.try_recv() {
                Ok(command) => self.apply(command),
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(Stop::Dropped),
            }
        }
    }

    fn apply(&mut self, command: Command<K>) {
        let now = self.now();
        match command {
            Command::Confirm(path, target) => self.confirm(now, path, target),
            Command::Retain(paths) => {
                let keep: std::collections::BTreeSet<K> = paths.into_iter().collect();
                for path in self.schedule.retain(|k| keep.contains(k)) {
                    self.forget(path);
                }
            }
            Command::Watch(watcher) => self.watcher = Some(watcher),
            Command::Answer {
                key_id,
                route,
                qpn,
                key,
            } => match self.pd.create_ah(&route) {
                Ok(ah) => {
                    if self.answerers.len() >= MAX_ANSWERERS {
                        let oldest = self.answerers.iter().min_by_key(|(_, a)| a.used);
                        if let Some(id) = oldest.map(|(id, _)| *id) {
                            self.answerers.remove(&id);
                        }
                    }
                    // A key id is never registered twice (each session has its own).
                    let answerer = Answerer {
                        ah: Rc::new(ah),
                        qpn,
                        gid: route.gid,
                        key,
                        used: now,
                        answered: ReplayWindow::default(),
                    };
                    self.answerers.insert(key_id, answerer);
                    // The rates of sources no key is registered for any more go.
                    if self.answer_rates.len() > MAX_ANSWERERS {
                        let sources: std::collections::HashSet<[u8; 16]> =
                            self.answerers.values().map(|a| a.gid).collect();
                        self.answer_rates.retain(|gid, _| sources.contains(gid));
                    }
                }
                Err(e) => {
                    tracing::warn!(device = %self.device, error = %e, "no address handle back to a prober: its pings go unanswered");
                }
            },
        }
    }

    fn confirm(&mut self, now: Duration, path: K, target: PingTarget) {
        if let Some(evicted) = self.schedule.confirm(now, path.clone()) {
            self.forget(evicted);
        }
        // The same peer and key: nothing to learn. The same route: its address handle serves.
        let ah = match self.targets.get(&path).map(|t| &t.peer) {
            Some(p)
                if p.route == target.route && (p.qpn, p.key_id) == (target.qpn, target.key_id) =>
            {
                return
            }
            Some(p) if p.route == target.route => Some(Rc::clone(&p.ah)),
            _ => None,
        };
        let ah = match ah {
            Some(ah) => ah,
            None => match self.pd.create_ah(&target.route) {
                Ok(ah) => Rc::new(ah),
                Err(e) => {
                    tracing::warn!(device = %self.device, error = %e, "no address handle to a ping target: not pinged");
                    self.schedule.remove(&path);
                    return;
                }
            },
        };
        let peer = Peer {
            ah,
            route: target.route,
            qpn: target.qpn,
            key_id: target.key_id,
            key: target.key,
        };
        match self.targets.get_mut(&path) {
            Some(t) => {
                let old = std::mem::replace(&mut t.peer, peer);
                t.previous = Some((old.key_id, old.key));
                t.count = target.count;
            }
            None => {
                let pings = PathPings::new(
                    self.clock,
                    self.settings.timeout,
                    self.settings.window,
                    first_seq(),
                );
                self.targets.insert(
                    path,
                    Target {
                        peer,
                        count: target.count,
                        previous: None,
                        pings,
                    },
                );
            }
        }
    }

    fn forget(&mut self, path: K) {
        self.schedule.remove(&path);
        if let Some(target) = self.targets.remove(&path) {
            self.gone.push((path, target.pings.counts()));
        }
    }

    fn send_due(&mut self, now: Duration) {
        if self.failed.is_some() {
            // The QP is down: nothing is sent until it is brought up again.
            return;
        }
        while let Some(path) = self.schedule.next_due(now) {
            let Some(slot) = self.free_sends.pop() else {
                return;
            };
            let Some(target) = self.targets.get_mut(&path) else {
                self.free_sends.push(slot);
                continue;
            };
            if target
                .count
                .is_some_and(|n| target.pings.counts().sent >= n)
            {
                // All its pings sent: reported until it is removed, never due again.
                self.free_sends.push(slot);
                self.schedule.remove(&path);
                continue;
            }
            let seq = target.pings.on_posted(now, nanos(now));
            let packet = Packet {
                kind: Kind::Ping,
                key_id: target.peer.key_id,
                seq,
                responder_delay_ns: 0,
            };
            let at = send_offset(slot);
            self.mr.as_mut_slice()[at..at + PACKET_LEN]
                .copy_from_slice(&packet.encode(&target.peer.key));
            let posted = self.qp.post_send(
                &self.mr,
                (at, PACKET_LEN as u32),
                &target.peer.ah,
                (target.peer.qpn, PING_QKEY),
                (RECVS + slot) as u64,
            );
            match posted {
                Ok(()) => {
                    let sent = nanos(self.started.elapsed());
                    self.sending[slot] = Some(Sending::Ping {
                        path,
                        seq,
                        sent,
                        _ah: Rc::clone(&target.peer.ah),
                    });
                }
                Err(e) => {
                    target.pings.cancel(seq);
                    self.free_sends.push(slot);
                    tracing::warn!(device = %self.device, error = %e, "a ping was not sent");
                }
            }
        }
    }

    fn on_completion(&mut self, c: &Completion) -> Result<(), VerbsError> {
        let now = self.now();
        let slot = c.wr_id as usize;
        if slot >= RECVS {
            if !c.status.is_success() {
                // The QP is in the error state now: every receive posted to it would complete
                // at once, flushed. Brought up again after this batch.
                self.failed.get_or_insert((c.status, "send"));
                return Ok(());
            }
            return self.on_sent(slot - RECVS, c.timestamp, now);
        }
        // A device that cannot say is taken to have failed the QP: a reset is always safe.
        let qp = &self.qp;
        match received(c.status, c.byte_len, || qp.in_error_state().unwrap_or(true)) {
            Received::QpFailed => {
                self.failed.get_or_insert((c.status, "receive"));
                Ok(())
            }
            Received::Refused => {
                self.refused += 1;
                self.post_recv(slot)
            }
            Received::Packet => {
                let at = recv_offset(slot);
                let mut datagram = [0u8; PING_RECEIVED];
                datagram.copy_from_slice(&self.mr.as_slice()[at..at + PING_RECEIVED]);
                let (grh, bytes) = datagram.split_at(GRH_LEN);
                self.post_recv(slot)?;
                let stamp = self.clock.stamp(c.timestamp, nanos(now));
                if bytes[5] == 1 {
                    self.answer(bytes, grh, c.src_qp, stamp, now)
                } else {
                    self.take_answer(bytes, c.src_qp, stamp, now);
                    Ok(())
                }
            }
        }
    }

    /// Posts receive slot `slot` again.
    fn post_recv(&mut self, slot: usize) -> Result<(), VerbsError> {
        post_recv_slot(&mut self.qp, &self.mr, slot)
    }

    /// Resets the QP that went into the error state and brings it up again, same QP number:
    /// the sends in flight are gone (their pings are lost at their timeout), every receive is
    /// posted again. Twice within a second, it first waits a second, so a QP that keeps failing
    /// does not spin.
    fn recover(&mut self, (status, on): (WcStatus, &'static str)) -> Result<(), VerbsError> {
        let now = self.now();
        self.recoveries += 1;
        // Once a minute at most: a port that stays down fails the QP every second.
        if self
            .last_recovery
            .is_none_or(|t| now.saturating_sub(t) >= Duration::from_secs(60))
        {
            tracing::warn!(device = %self.device, ?status, on, recoveries = self.recoveries,
                "ping QP in the error state: reset and brought up again");
        }
        if self
            .last_recovery
            .is_some_and(|t| now.saturating_sub(t) < Duration::from_secs(1))
        {
            std::thread::sleep(Duration::from_secs(1));
        }
        self.last_recovery = Some(now);
        self.qp.reset()?;
        let mut stale = [Completion::EMPTY; POLL_BATCH];
        while self.cq.poll(&mut stale)? > 0 {}
        for (slot, sending) in self.sending.iter_mut().enumerate() {
            if sending.take().is_some() {
                self.free_sends.push(slot);
            }
        }
        self.qp.activate(self.port, 0, PING_QKEY, 0)?;
        for slot in 0..RECVS {
            self.post_recv(slot)?;
        }
        Ok(())
    }

    /// A send completed (at `completed` on the NIC's clock, where it stamps completions).
    fn on_sent(
        &mut self,
        slot: usize,
        completed: Option<u64>,
        now: Duration,
    ) -> Result<(), VerbsError> {
        let Some(sending) = self.sending.get_mut(slot).and_then(Option::take) else {
            return Ok(());
        };
        self.free_sends.push(slot);
        match sending {
            Sending::Ping {
                path, seq, sent, ..
            } => {
                if let Some(target) = self.targets.get_mut(&path) {
                    let sent = self.clock.stamp(completed, sent);
                    let answer = target.pings.on_send_completed(now, seq, sent);
                    keep_rtt(&mut self.rtts, answer);
                }
            }
            Sending::Ack { to, ping, received } => {
                let acked = self.clock.stamp(completed, nanos(now));
                let delay = ping.delay(responder_delay(&self.clock, received, acked));
                self.post_answer(&delay, &to, None)?;
            }
            Sending::Answer { .. } => {}
        }
        Ok(())
    }

    /// A ping from another node, received at `received` (on the engine's clock) with the GRH
    /// `grh`: answered twice, or refused. It must come from the QP and GID its key was
    /// registered with (checked first: no HMAC is computed for a datagram from elsewhere), be
    /// tagged with that key, not have been answered before, and its source be within its rate
    /// ([`super::bucket`]; docs/security.md, "What the pre-shared key protects").
    fn answer(
        &mut self,
        bytes: &[u8],
        grh: &[u8],
        src_qp: u32,
        received: u64,
        now: Duration,
    ) -> Result<(), VerbsError> {
        let key_id = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Some(answerer) = self
            .answerers
            .get_mut(&key_id)
            .filter(|a| src_qp == a.qpn && from_source(grh, &a.gid))
        else {
            self.refused += 1;
            return Ok(());
        };
        let ping = match Packet::decode(bytes, |_| Some(&answerer.key)) {
            Ok(p) if p.kind == Kind::Ping && answerer.answered.accept(p.seq) => p,
            _ => {
                self.refused += 1;
                return Ok(());
            }
        };
        let rate = self
            .answer_rates
            .entry(answerer.gid)
            .or_insert_with(|| TokenBucket::new(now));
        if !rate.take(now) {
            self.refused += 1;
            return Ok(());
        }
        answerer.used = now;
        let to = answerer.clone();
        if self.clock.delay_waits_for_send_completion() {
            // The delay answer goes at the ack's send completion (`on_sent`).
            let waiting = Sending::Ack {
                to: to.clone(),
                ping,
                received,
            };
            if !self.post_answer(&ping.ack(), &to, Some(waiting))? {
                return Ok(());
            }
        } else {
            if !self.post_answer(&ping.ack(), &to, None)? {
                return Ok(());
            }
            let acked = nanos(self.started.elapsed());
            let delay = ping.delay(responder_delay(&self.clock, received, acked));
            self.post_answer(&delay, &to, None)?;
        }
        self.answered += 1;
        Ok(())
    }

    /// Posts one answer to `to`, in flight as `sending` (by default a plain answer); `false`
    /// when no send buffer was free (the ping is left unanswered).
    fn post_answer(
        &mut self,
        packet: &Packet,
        to: &Answerer,
        sending: Option<Sending<K>>,
    ) -> Result<bool, VerbsError> {
        let Some(slot) = self.free_sends.pop() else {
            return Ok(false);
        };
        let at = send_offset(slot);
        self.mr.as_mut_slice()[at..at + PACKET_LEN].copy_from_slice(&packet.encode(&to.key));
        if let Err(e) = self.qp.post_send(
            &self.mr,
            (at, PACKET_LEN as u32),
            &to.ah,
            (to.qpn, PING_QKEY),
            (RECVS + slot) as u64,
        ) {
            self.free_sends.push(slot);
            return Err(e);
        }
        let sending = sending.unwrap_or_else(|| Sending::Answer {
            _ah: Rc::clone(&to.ah),
        });
        self.sending[slot] = Some(sending);
        Ok(true)
    }

    /// An answer to one of this device's pings, received at `received` (on the engine's clock):
    /// given to its path, or refused.
    fn take_answer(&mut self, bytes: &[u8], src_qp: u32, received: u64, now: Duration) {
        let key_id = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let done = nanos(self.started.elapsed());
        for target in self.targets.values_mut() {
            if target.peer.qpn != src_qp {
                continue;
            }
            let key = if target.peer.key_id == key_id {
                &target.peer.key
            } else {
                match &target.previous {
                    Some((id, key)) if *id == key_id => key,
                    _ => continue,
                }
            };
            if let Ok(packet) = Packet::decode(bytes, |_| Some(key)) {
                if packet.kind != Kind::Ping {
                    let answer = target.pings.on_answer(now, &packet, received, done);
                    keep_rtt(&mut self.rtts, answer);
                    return;
                }
            }
        }
        self.refused += 1;
    }

    fn report(&mut self, now: Duration) {
        for path in self.schedule.expire(now) {
            self.forget(path);
        }
        let ttl = self.settings.ttl;
        self.answerers
            .retain(|_, a| now.saturating_sub(a.used) < ttl);
        let mut paths: Vec<PingReport<K>> = self
            .gone
            .drain(..)
            .map(|(path, counts)| PingReport {
                path,
                counts,
                lost_in_a_row: 0,
                window: None,
                gone: true,
            })
            .collect();
        for (path, target) in &mut self.targets {
            target.pings.expire(now);
            if target.pings.relearn_due() {
                if let Some(watcher) = &self.watcher {
                    // Full or gone: the path is named again after more losses.
                    drop(watcher.try_send(path.clone()));
                }
            }
            paths.push(PingReport {
                path: path.clone(),
                counts: target.pings.counts(),
                lost_in_a_row: target.pings.lost_in_a_row(),
                window: target.pings.summary(),
                gone: false,
            });
        }
        (self.reports)(PingReports {
            device: self.device.clone(),
            timestamps: self.clock.source(),
            answered: self.answered,
            refused: self.refused,
            rtts: std::mem::take(&mut self.rtts),
            paths,
        });
        self.next_report = now + self.settings.interval;
    }
}
