//! The engine: drives one burst of RDMA WRITEs on a connected QP set, on the calling thread.
//!
//! It owns the clock and the verbs calls; every decision (how many WRs may go now, which are
//! signaled, how to wait, what the figures are) is asked of the pure pieces of this module's
//! parent. Callers run it on a dedicated OS thread, never on an async worker: a burst blocks.
//!
//! Every decision (what to post, what a completion retires, when to give up, how to wait) is
//! [`BurstRun`]'s; this file is the I/O loop around it.
//!
//! Waiting policy (CPU-frugal, docs/architecture.md): when nothing can be posted, the engine asks
//! [`WaitPolicy`](super::WaitPolicy): it spins only for waits under ~100 µs, sleeps through longer pacing gaps
//! (spinning the last ~50 µs for accuracy), and when completions are outstanding but not
//! arriving it polls ~200 µs, then arms the CQ and blocks on its completion channel. An unpaced
//! burst follows the same policy: with a full send window it blocks until the NIC completes a
//! WR, which on a real NIC happens within microseconds (so it mostly polls) and on a slow link
//! saves a core.
//!
//! Every QP's last WRITE carries an immediate value (the burst id): RC orders it after the QP's
//! other writes, so once the responder sees it, the QP's data has landed and can be verified.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::pacing::WaitAction;
use super::plan::BurstPlan;
use super::run::{Abandon, BurstRun, PlannedWrite};
use super::signal::WindowError;
use super::stats::BurstReport;
use crate::reason::ErrorReason;
use crate::verbs::{
    Completion, CompletionQueue, MemoryRegion, QueuePair, RemoteAddr, VerbsError, WriteRequest,
};

/// Completions taken per `ibv_poll_cq` call (perftest's `CTX_POLL_BATCH`).
const POLL_BATCH: usize = 16;

/// The longest single block on the completion channel, so the clock is re-checked.
const MAX_BLOCK: Duration = Duration::from_millis(100);

/// Why a burst failed.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error(
        "no completion for {0:?} with a signaled WRITE outstanding (completions stopped arriving)"
    )]
    Stalled(Duration),
    #[error(
        "burst did not complete within its deadline of {0:?} (the link is slower than the pace)"
    )]
    Deadline(Duration),
    #[error("completion bookkeeping failed: {0}")]
    Window(#[from] WindowError),
    #[error("burst setup: {0}")]
    Setup(String),
    /// The process is shutting down: the burst was cut short on purpose.
    #[error("burst stopped: the exporter is shutting down")]
    Stopped,
}

impl EngineError {
    pub fn reason(&self) -> ErrorReason {
        match self {
            EngineError::Verbs(e) => e.reason(),
            EngineError::Stalled(_) | EngineError::Deadline(_) => ErrorReason::Timeout,
            EngineError::Window(_) | EngineError::Stopped => ErrorReason::WcOther,
            EngineError::Setup(_) => ErrorReason::QpSetup,
        }
    }
}

impl From<Abandon> for EngineError {
    fn from(a: Abandon) -> Self {
        match a {
            Abandon::Stalled { timeout } => EngineError::Stalled(timeout),
            Abandon::Deadline { deadline } => EngineError::Deadline(deadline),
        }
    }
}

/// A failed burst: why, and the figures of what completed before it failed (a link slower than
/// the pace still yields its achieved bandwidth).
#[derive(Debug)]
pub struct BurstFailure {
    pub error: EngineError,
    pub partial: Option<Box<BurstReport>>,
}

impl<E: Into<EngineError>> From<E> for BurstFailure {
    fn from(e: E) -> Self {
        BurstFailure {
            error: e.into(),
            partial: None,
        }
    }
}

/// What a burst runs on: connected QPs sharing one CQ, the local MR (`slots` message-sized
/// slots per QP, QP `q`'s from `q * slots * message_size`), and the peer's region per QP (the
/// same number of slots).
pub struct BurstTargets<'a> {
    pub qps: &'a mut [QueuePair],
    pub cq: &'a CompletionQueue,
    pub local: &'a MemoryRegion,
    pub remote: &'a [RemoteAddr],
    pub slots: u64,
}

/// How a burst went besides its figures.
#[derive(Debug, Clone)]
pub struct BurstTiming {
    /// When the first WRITE was posted (the warm-session start cost is this minus the request).
    pub first_post_at: Option<Instant>,
    /// Wall time spent inside `ibv_post_send`. Microseconds on a hardware NIC; on Soft-RoCE the
    /// kernel runs the emulated NIC's send processing in the posting thread ("utilize process
    /// context to do protocol processing", rxe_post_send), so this shows how much of the burst
    /// thread's CPU time is the emulated NIC's rather than the engine's.
    pub posting: Duration,
    /// WRITEs posted per QP: the responder verifies the last `slots` of each.
    pub posted_per_qp: Vec<u64>,
}

/// Runs one burst. `imm` is the immediate value of each QP's final WRITE (`None`: a plain WRITE,
/// for a peer that posts no receive, such as a stock ib_write_bw server); `timeout` bounds a
/// stall, and with the planned length the whole burst (see [`BurstRun`]). Setting `stop` ends
/// the burst at its next check (at most [`MAX_BLOCK`] later) with [`EngineError::Stopped`].
pub fn run_burst(
    targets: BurstTargets<'_>,
    plan: &BurstPlan,
    imm: Option<u32>,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(BurstReport, BurstTiming), BurstFailure> {
    check_targets(&targets, plan)?;
    let mut engine = Engine {
        stop,
        run: BurstRun::new(plan, targets.slots, timeout),
        targets,
        message_size: plan.message_size(),
        imm,
        start: Instant::now(),
        first_post_at: None,
        posting: Duration::ZERO,
        planned: Vec::with_capacity(plan.post_list() as usize * usize::from(plan.qps())),
        chain: Vec::with_capacity(plan.post_list() as usize),
        wcs: [Completion::EMPTY; POLL_BATCH],
    };
    let cpu_start = thread_cpu_time();
    let result = engine.drive();
    if let (Some(a), Some(b)) = (cpu_start, thread_cpu_time()) {
        engine.run.set_cpu_seconds((b - a).max(0.0));
    }
    match result {
        Ok(()) => Ok((engine.run.report(), engine.timing())),
        Err(error) => Err(BurstFailure {
            error,
            partial: Some(engine.run.report())
                .filter(|r| r.messages > 0)
                .map(Box::new),
        }),
    }
}

fn check_targets(targets: &BurstTargets<'_>, plan: &BurstPlan) -> Result<(), EngineError> {
    let qps = usize::from(plan.qps());
    if u32::try_from(plan.message_size()).is_err() {
        return Err(EngineError::Setup(format!(
            "message size {} does not fit a WR",
            plan.message_size()
        )));
    }
    if targets.qps.len() != qps || targets.remote.len() != qps {
        return Err(EngineError::Setup(format!(
            "plan has {qps} QPs, targets have {} QPs and {} remote regions",
            targets.qps.len(),
            targets.remote.len()
        )));
    }
    let needed = plan
        .message_size()
        .saturating_mul(targets.slots.max(1))
        .saturating_mul(qps as u64);
    if (targets.local.len() as u64) < needed {
        return Err(EngineError::Setup(
            "local MR smaller than qps x slots x message size".into(),
        ));
    }
    Ok(())
}

/// The I/O side of one burst: the clock, the verbs calls, and the buffers they use.
struct Engine<'a> {
    stop: &'a AtomicBool,
    run: BurstRun,
    targets: BurstTargets<'a>,
    message_size: u64,
    imm: Option<u32>,
    start: Instant,
    first_post_at: Option<Instant>,
    posting: Duration,
    planned: Vec<PlannedWrite>,
    chain: Vec<WriteRequest>,
    wcs: [Completion; POLL_BATCH],
}

impl Engine<'_> {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Posts, reaps and waits until the burst is done or abandoned.
    fn drive(&mut self) -> Result<(), EngineError> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(EngineError::Stopped);
            }
            self.run.check(self.now())?;
            let posted = self.post_round()?;
            let reaped = self.reap()?;
            if self.run.is_done() {
                return Ok(());
            }
            if posted == 0 && reaped == 0 {
                self.wait()?;
            }
        }
    }

    /// Posts what the run allows now, one chain per QP. Returns how many WRs.
    fn post_round(&mut self) -> Result<usize, EngineError> {
        self.planned.clear();
        let now = self.now();
        self.run.plan_round(now, &mut self.planned)?;
        let total = self.planned.len();
        let mut i = 0;
        while i < total {
            let qp = self.planned[i].qp;
            let end = i + self.planned[i..].iter().take_while(|w| w.qp == qp).count();
            self.post_chain(i..end)?;
            i = end;
        }
        Ok(total)
    }

    fn post_chain(&mut self, range: std::ops::Range<usize>) -> Result<(), EngineError> {
        let size = self.message_size;
        let slots = self.targets.slots.max(1);
        self.chain.clear();
        let mut qp = 0;
        for w in &self.planned[range] {
            qp = usize::from(w.qp);
            let local_slot = qp as u64 * slots + w.slot;
            let mut remote = self.targets.remote[qp];
            remote.addr += w.slot * size;
            let mut req = WriteRequest::new(
                w.wr_id,
                (local_slot * size) as usize,
                size as u32, // checked to fit in check_targets
                remote,
            )
            .signaled(w.signaled);
            if let (true, Some(imm)) = (w.last, self.imm) {
                req = req.with_imm(imm);
            }
            self.chain.push(req);
        }
        let before = Instant::now();
        self.first_post_at.get_or_insert(before);
        self.targets.qps[qp].post_writes(self.targets.local, &self.chain)?;
        self.posting += before.elapsed();
        Ok(())
    }

    /// Polls the CQ once and retires what it returned. Returns how many completions.
    fn reap(&mut self) -> Result<usize, EngineError> {
        let polled = self.targets.cq.poll(&mut self.wcs)?;
        let now = self.now();
        for wc in &self.wcs[..polled] {
            // A failed completion ends the burst with its status's reason; an out-of-order one
            // is a provider bug and must not be counted as data.
            wc.check()?;
            self.run.on_completion(now, wc.wr_id)?;
        }
        Ok(polled)
    }

    /// Waits as the run's policy says: spin, sleep through a pacing gap, or arm the CQ and
    /// block on its completion channel.
    fn wait(&mut self) -> Result<(), EngineError> {
        let (action, check_in) = self.run.wait_action(self.now());
        match action {
            WaitAction::Spin => std::hint::spin_loop(),
            WaitAction::Sleep(d) => std::thread::sleep(check_in.map_or(d, |c| d.min(c))),
            WaitAction::Block { timeout } => {
                self.targets.cq.arm()?;
                // A completion may have arrived between the last poll and arming: take it
                // without blocking (the armed event then fires later and is simply consumed).
                if self.reap()? > 0 {
                    return Ok(());
                }
                let block = timeout
                    .unwrap_or(MAX_BLOCK)
                    .min(MAX_BLOCK)
                    .min(check_in.unwrap_or(MAX_BLOCK));
                self.targets.cq.wait(block)?;
            }
        }
        Ok(())
    }

    fn timing(&self) -> BurstTiming {
        BurstTiming {
            first_post_at: self.first_post_at,
            posting: self.posting,
            posted_per_qp: self.run.posted_per_qp(),
        }
    }
}

/// CPU time of the calling thread (user + system), in seconds.
fn thread_cpu_time() -> Option<f64> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}
