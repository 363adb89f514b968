//! The engine: drives one burst of RDMA WRITEs on a connected QP set, on the calling thread.
//!
//! It owns the clock and the verbs calls; every decision (how many WRs may go now, which are
//! signaled, how to wait, what the figures are) is asked of the pure pieces of this module's
//! parent. Callers run it on a dedicated OS thread, never on an async worker: a burst blocks.
//!
//! Waiting policy (CPU-frugal, brief §4 and issue 4): when nothing can be posted, the engine asks
//! [`WaitPolicy`]: it spins only for waits under ~100 µs, sleeps through longer pacing gaps
//! (spinning the last ~50 µs for accuracy), and when completions are outstanding but not
//! arriving it polls ~200 µs, then arms the CQ and blocks on its completion channel. An unpaced
//! burst follows the same policy: with a full send window it blocks until the NIC completes a
//! WR, which on a real NIC happens within microseconds (so it mostly polls) and on a slow link
//! saves a core.
//!
//! Every QP's last WRITE carries an immediate value (the burst id): RC orders it after the QP's
//! other writes, so once the responder sees it, the QP's data has landed and can be verified.

use std::time::{Duration, Instant};

use thiserror::Error;

use super::pacing::{Completions, PaceDecision, WaitAction, WaitPolicy};
use super::plan::{BurstLength, BurstPlan};
use super::signal::{split_wr_id, wr_id, SendWindow, WindowError};
use super::stats::{BurstReport, BurstStats};
use crate::reason::ErrorReason;
use crate::verbs::{
    Completion, CompletionQueue, MemoryRegion, QueuePair, RemoteAddr, VerbsError, WriteRequest,
};

/// Completions taken per `ibv_poll_cq` call (perftest's `CTX_POLL_BATCH`).
const POLL_BATCH: usize = 16;

/// The longest single block on the completion channel, so the burst deadline is re-checked.
const MAX_BLOCK: Duration = Duration::from_millis(100);

/// Why a burst failed.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    #[error("burst did not complete within {0:?} (completions stopped arriving)")]
    Timeout(Duration),
    #[error("completion bookkeeping failed: {0}")]
    Window(#[from] WindowError),
    #[error("burst setup: {0}")]
    Setup(String),
}

impl EngineError {
    pub fn reason(&self) -> ErrorReason {
        match self {
            EngineError::Verbs(e) => e.reason(),
            EngineError::Timeout(_) => ErrorReason::Timeout,
            EngineError::Window(_) => ErrorReason::WcOther,
            EngineError::Setup(_) => ErrorReason::QpSetup,
        }
    }
}

/// What a burst runs on: connected QPs sharing one CQ, the local MR (one message-sized slot per
/// QP, at `slot * message_size`), and the peer's slot address per QP.
pub struct BurstTargets<'a> {
    pub qps: &'a mut [QueuePair],
    pub cq: &'a CompletionQueue,
    pub local: &'a MemoryRegion,
    pub remote: &'a [RemoteAddr],
}

/// How a burst went besides its figures.
#[derive(Debug, Clone, Copy)]
pub struct BurstTiming {
    /// When the first WRITE was posted (the warm-session start cost is this minus the request).
    pub first_post_at: Option<Instant>,
    /// Wall time spent inside `ibv_post_send`. Microseconds on a hardware NIC; on Soft-RoCE the
    /// kernel runs the emulated NIC's send processing in the posting thread ("utilize process
    /// context to do protocol processing", rxe_post_send), so this shows how much of the burst
    /// thread's CPU time is the emulated NIC's rather than the engine's.
    pub posting: Duration,
}

/// Runs one burst. `imm` is the immediate value of each QP's final WRITE; `timeout` is how much
/// longer than planned the burst may take before it is abandoned as stalled.
pub fn run_burst(
    targets: BurstTargets<'_>,
    plan: &BurstPlan,
    imm: u32,
    timeout: Duration,
) -> Result<(BurstReport, BurstTiming), EngineError> {
    let qps = usize::from(plan.qps());
    let size = plan.message_size();
    let size32 = u32::try_from(size)
        .map_err(|_| EngineError::Setup(format!("message size {size} does not fit a WR")))?;
    if targets.qps.len() != qps || targets.remote.len() != qps {
        return Err(EngineError::Setup(format!(
            "plan has {qps} QPs, targets have {} QPs and {} remote slots",
            targets.qps.len(),
            targets.remote.len()
        )));
    }
    if (targets.local.len() as u64) < size * qps as u64 {
        return Err(EngineError::Setup(
            "local MR smaller than qps x message size".into(),
        ));
    }
    let duration = match plan.length() {
        BurstLength::Duration(d) => Some(d),
        _ => None,
    };
    let totals: Vec<u64> = (0..plan.qps())
        .map(|q| plan.messages_for_qp(q).unwrap_or(u64::MAX))
        .collect();
    // Only a burst with a planned length gets an overall deadline; an unpaced count burst takes
    // as long as the link needs, bounded by the stall check below.
    let deadline = plan_duration(plan, duration).map(|planned| planned + timeout);
    let mut windows: Vec<_> = (0..qps).map(|_| plan.send_window()).collect();
    let mut finished = vec![false; qps];
    let mut pacer = plan.pacer();
    let policy = WaitPolicy::default();
    let mut stats = BurstStats::new(plan.qps(), plan.stats_window());
    let post_list = plan.post_list() as u64;
    let mut chain: Vec<WriteRequest> = Vec::with_capacity(plan.post_list() as usize);
    let mut wcs = [Completion::EMPTY; POLL_BATCH];
    let mut next_qp = 0usize;
    let mut stopping = false;
    let mut first_post_at = None;
    let mut posting = Duration::ZERO;
    let cpu_start = thread_cpu_time();

    let start = Instant::now();
    if pacer.is_some() {
        // The bucket starts empty at t = 0: measure from there, not from the first post, or
        // N messages would be timed over N-1 pacing gaps (perftest's bias).
        stats.on_start(Duration::ZERO);
    }
    let mut last_progress = Duration::ZERO;
    let mut last_completion = Duration::ZERO;
    loop {
        let now = start.elapsed();
        if let Some(deadline) = deadline.filter(|&d| now > d) {
            return Err(EngineError::Timeout(deadline));
        }
        // A peer that vanished may leave WRs neither completed nor failed for a long time (the
        // transport retries first): a burst with outstanding WRs and no completion for
        // `timeout` is abandoned, whatever its planned length.
        let in_flight = windows.iter().any(|w| !w.is_drained());
        if in_flight && now.saturating_sub(last_completion) > timeout {
            return Err(EngineError::Timeout(timeout));
        }
        if let Some(d) = duration {
            stopping |= now >= d;
        }

        // --- post -------------------------------------------------------------------------
        let mut allowance = match pacer.as_mut().map(|p| p.poll(now)) {
            None => u64::MAX,
            Some(PaceDecision::Send(n)) => n,
            Some(PaceDecision::WaitUntil(_)) => 0,
        };
        let mut posted = 0u64;
        if !in_flight {
            last_completion = now; // the stall clock starts with the first WR in flight
        }
        for step in 0..qps {
            let q = (next_qp + step) % qps;
            if finished[q] {
                continue;
            }
            let window = &mut windows[q];
            let remaining = if stopping {
                1
            } else {
                totals[q] - window.posted()
            };
            // The final WR of a stopping duration burst is not paced: it only closes the burst.
            let paced_limit = if stopping { 1 } else { allowance };
            let n = post_list
                .min(remaining)
                .min(u64::from(window.room()))
                .min(paced_limit);
            if n == 0 {
                continue;
            }
            chain.clear();
            for k in 0..n {
                let is_last = stopping || remaining - k == 1;
                let wr = window.post(is_last)?;
                let mut req = WriteRequest::new(
                    wr_id(q as u16, wr.index),
                    q * size as usize,
                    size32,
                    targets.remote[q],
                )
                .signaled(wr.signaled);
                if is_last {
                    req = req.with_imm(imm);
                    finished[q] = true;
                }
                chain.push(req);
            }
            if first_post_at.is_none() {
                first_post_at = Some(Instant::now());
                if pacer.is_none() {
                    stats.on_first_post(start.elapsed());
                }
            }
            let before_post = Instant::now();
            targets.qps[q].post_writes(targets.local, &chain)?;
            posting += before_post.elapsed();
            if !stopping {
                allowance -= n.min(allowance);
                if let Some(p) = pacer.as_mut() {
                    p.consume(n);
                }
            }
            posted += n;
        }
        next_qp = (next_qp + 1) % qps;

        // --- complete -----------------------------------------------------------------------
        let polled = targets.cq.poll(&mut wcs)?;
        account(&wcs[..polled], &mut windows, &mut stats, start, size)?;
        if polled > 0 {
            last_completion = start.elapsed();
        }
        if finished.iter().all(|&f| f) && windows.iter().all(|w| w.is_drained()) {
            break;
        }
        if posted > 0 || polled > 0 {
            last_progress = start.elapsed();
            continue;
        }

        // --- wait ---------------------------------------------------------------------------
        let now = start.elapsed();
        let can_send = (0..qps).any(|q| !finished[q] && windows[q].room() > 0);
        let mut next_send_in = match (&pacer, can_send && !stopping) {
            (Some(p), true) => Some(p.next_due().saturating_sub(now)),
            _ => None,
        };
        if let (Some(d), false) = (duration, stopping) {
            let until_stop = d.saturating_sub(now);
            next_send_in = Some(next_send_in.map_or(until_stop, |s| s.min(until_stop)));
        }
        let outstanding = windows.iter().any(|w| w.signaled_outstanding() > 0);
        let completions = if outstanding {
            Completions::Outstanding {
                expected_in: None,
                waited: now.saturating_sub(last_progress),
            }
        } else {
            Completions::NoneOutstanding
        };
        match policy.decide(next_send_in, completions) {
            WaitAction::Spin => std::hint::spin_loop(),
            WaitAction::Sleep(d) => std::thread::sleep(d),
            WaitAction::Block { timeout: block_for } => {
                targets.cq.arm()?;
                // A completion may have arrived between the last poll and arming: take it
                // without blocking (the armed event then fires later and is simply consumed).
                let polled = targets.cq.poll(&mut wcs)?;
                if polled > 0 {
                    account(&wcs[..polled], &mut windows, &mut stats, start, size)?;
                    last_progress = start.elapsed();
                    last_completion = last_progress;
                    continue;
                }
                let stall_at = last_completion + timeout;
                let limit = deadline
                    .map_or(stall_at, |d| d.min(stall_at))
                    .saturating_sub(start.elapsed());
                let block = block_for.unwrap_or(MAX_BLOCK).min(MAX_BLOCK).min(limit);
                targets.cq.wait(block)?;
            }
        }
    }
    if let (Some(a), Some(b)) = (cpu_start, thread_cpu_time()) {
        stats.set_cpu_seconds((b - a).max(0.0));
    }
    Ok((
        stats.finish(),
        BurstTiming {
            first_post_at,
            posting,
        },
    ))
}

/// Retires polled completions from their QP's window and feeds the statistics. A failed
/// completion ends the burst with its status's reason; an out-of-order one is a provider bug
/// (lab-notes.md) and must not be counted as data.
fn account(
    wcs: &[Completion],
    windows: &mut [SendWindow],
    stats: &mut BurstStats,
    start: Instant,
    size: u64,
) -> Result<(), EngineError> {
    for wc in wcs {
        wc.check()?;
        let (q, index) = split_wr_id(wc.wr_id);
        let window = windows
            .get_mut(usize::from(q))
            .ok_or(WindowError::UnexpectedCompletion {
                wr_index: index,
                expected: None,
            })?;
        let covered = window.on_completion(index)?;
        stats.on_completion(q, start.elapsed(), covered, covered * size);
    }
    Ok(())
}

/// How long the burst should take if all goes to plan: the duration, or the messages at the
/// rate limit; `None` for unpaced count bursts, whose length only the link decides.
fn plan_duration(plan: &BurstPlan, duration: Option<Duration>) -> Option<Duration> {
    if duration.is_some() {
        return duration;
    }
    match (plan.rate(), plan.total_messages()) {
        (Some(rate), Some(total)) => Some(
            Duration::try_from_secs_f64(total as f64 / rate.messages_per_second())
                .unwrap_or(Duration::MAX / 4),
        ),
        _ => None,
    }
}

/// CPU time of the calling thread (user + system), in seconds.
fn thread_cpu_time() -> Option<f64> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}
