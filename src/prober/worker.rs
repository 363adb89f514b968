//! A device's burst thread: [`BurstWorker`] runs each burst's engine on its own OS thread, one
//! burst at a time per device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::burst::engine::{run_burst, BurstFailure, BurstTargets, BurstTiming};
use crate::burst::{BurstPlan, BurstReport};
use crate::placement::{self, Placement};
use crate::reason::ErrorReason;
use crate::session::QpSet;
use crate::verbs::RemoteAddr;

use super::ProbeError;

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
