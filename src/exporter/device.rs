//! One worker per local device: it owns the device context, the device's burst thread and the
//! warm sessions of the device's paths, and runs the probes the service hands it, one at a time
//! (docs/architecture.md, "The exporter").

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch};

use super::paths::PathSpec;
use crate::config::{Device, PeerMode};
use crate::metrics::probe::PathLabels;
use crate::perftest::{probe_perftest_on, PerftestOptions};
use crate::prober::{
    device_placement, learn_ping_target, BurstRequest, BurstWorker, ProbeError, ProbeOutcome,
    ProbeSettings, WarmSession,
};
use crate::responder::DevicePinger;
use crate::schedule::PathKey;
use crate::verbs::Context;

/// How long closing the warm sessions may take at shutdown (a `Close` to each responder, best
/// effort): a dead peer must not hold the exit.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What the service asks of a device worker.
#[derive(Debug)]
pub enum DeviceCommand {
    /// Probe this path once with this burst; keep its session open for the next probe, or
    /// close it at once (when the responder would close it, idle, before the next probe
    /// anyway: its session permit and pinned memory are free for another prober meanwhile).
    Probe {
        spec: Box<PathSpec>,
        request: BurstRequest,
        keep_warm: bool,
    },
    /// After a reload: the device's paths are now these; close the sessions of the others and
    /// of those whose shape changed.
    Retain(Vec<PathSpec>),
}

/// A probe that ended (succeeded, failed or was deferred).
#[derive(Debug)]
pub struct ProbeFinished {
    pub key: PathKey,
    pub outcome: ProbeOutcome,
    pub at: SystemTime,
}

/// The local device, opened, and its burst thread.
pub struct DeviceWorker {
    ctx: Context,
    burst: BurstWorker,
    sessions: BTreeMap<PathKey, (PathSpec, WarmSession)>,
    /// The device's ping engine, and the paths it was told to ping: their labels, and the
    /// settings that reach their responder again when their pings go silent.
    pinger: Option<DevicePinger>,
    pinged: BTreeMap<PathKey, (PathLabels, ProbeSettings)>,
}

impl DeviceWorker {
    /// Opens the device and its port (and checks a configured GID index), and starts its burst
    /// thread.
    pub async fn open(
        device: &Device,
        pinger: Option<DevicePinger>,
    ) -> Result<DeviceWorker, ProbeError> {
        let ctx = Context::open(Some(&device.name), device.port)?;
        if let Some(index) = device.gid_index.index() {
            ctx.gid(index)?;
        }
        let placement = device_placement(&device.name).await;
        Ok(DeviceWorker {
            ctx,
            burst: BurstWorker::start(placement)?,
            sessions: BTreeMap::new(),
            pinger,
            pinged: BTreeMap::new(),
        })
    }

    pub fn name(&self) -> &str {
        self.ctx.device_name()
    }

    /// Runs commands until `stop` turns true or the service drops its sender; then ends the
    /// running burst (within ~100 ms), closes every session and releases the device.
    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<DeviceCommand>,
        finished: mpsc::Sender<ProbeFinished>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut silent = self.pinger.as_ref().map(DevicePinger::watch_silent);
        loop {
            let command = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                Some(path) = next_silent(&mut silent) => {
                    self.relearn(path);
                    continue;
                }
                command = commands.recv() => match command {
                    Some(c) => c,
                    None => break,
                },
            };
            match command {
                DeviceCommand::Probe {
                    spec,
                    request,
                    keep_warm,
                } => {
                    let key = spec.key.clone();
                    let settings = spec.settings.clone();
                    tracing::debug!(path = %key, paced = request.rate_limit.is_some(), "probe started");
                    let outcome = tokio::select! {
                        biased;
                        _ = stop.wait_for(|s| *s) => {
                            tracing::info!(path = %key, "shutting down: ending the running probe");
                            break;
                        }
                        outcome = self.probe(*spec, &request) => outcome,
                    };
                    let mut outcome = outcome;
                    self.ping(&key, settings, &mut outcome);
                    tracing::debug!(
                        path = %key,
                        ran = outcome.report.is_some(),
                        deferred = outcome.deferred.as_deref().unwrap_or(""),
                        "probe ended"
                    );
                    if !keep_warm {
                        if let Some((_, warm)) = self.sessions.remove(&key) {
                            warm.close().await;
                        }
                    }
                    let done = ProbeFinished {
                        key,
                        outcome,
                        at: SystemTime::now(),
                    };
                    if finished.send(done).await.is_err() {
                        break;
                    }
                }
                DeviceCommand::Retain(specs) => self.retain(specs).await,
            }
        }
        self.shut_down().await;
    }

    async fn probe(&mut self, spec: PathSpec, request: &BurstRequest) -> ProbeOutcome {
        if spec.mode == PeerMode::Perftest {
            let (ctx, burst) = (self.ctx.clone(), self.burst.clone());
            return probe_perftest_peer(ctx, burst, &spec, request).await;
        }
        let key = spec.key.clone();
        let ping_qpn = self.pinger.as_ref().map(DevicePinger::qpn);
        let (_, warm) = self.sessions.entry(key).or_insert_with(|| {
            let warm =
                WarmSession::on_device(self.ctx.clone(), self.burst.clone(), spec.settings.clone());
            let warm = match ping_qpn {
                Some(qpn) => warm.with_pings(qpn),
                None => warm,
            };
            (spec, warm)
        });
        warm.burst_with(request).await
    }

    /// Tells the ping engine where `key`'s pings go, as the probe's session learnt it.
    fn ping(&mut self, key: &PathKey, settings: ProbeSettings, outcome: &mut ProbeOutcome) {
        let (Some(pinger), Some(target), Some(peer_device)) =
            (&self.pinger, outcome.ping.take(), &outcome.peer_device)
        else {
            return;
        };
        let labels = PathLabels {
            device: key.device.clone(),
            peer: key.peer.clone(),
            peer_device: peer_device.clone(),
        };
        if let Some((old, _)) = self.pinged.insert(key.clone(), (labels.clone(), settings)) {
            if old != labels {
                // The peer answers from another device now: the old series go.
                pinger.retain(self.pinged_labels());
            }
        }
        pinger.confirm(labels, target);
    }

    fn pinged_labels(&self) -> Vec<PathLabels> {
        self.pinged.values().map(|(l, _)| l.clone()).collect()
    }

    /// A pinged path went silent: its peer may have restarted with a new ping QP and keys, which
    /// the next burst would tell, but bursts are rare. A session without a burst learns them now
    /// (in the background: a dead peer must not hold the device's probes); docs/architecture.md,
    /// "Pings".
    fn relearn(&self, path: PathLabels) {
        let (Some(pinger), Some((_, settings))) = (
            self.pinger.clone(),
            self.pinged.values().find(|(l, _)| *l == path).cloned(),
        ) else {
            return;
        };
        let (ctx, burst) = (self.ctx.clone(), self.burst.clone());
        tokio::spawn(async move {
            let learnt = learn_ping_target(ctx, burst, &settings, pinger.qpn()).await;
            match learnt {
                Ok((target, peer_device)) if peer_device == path.peer_device => {
                    tracing::info!(device = %path.device, peer = %path.peer, peer_device = %path.peer_device, "pings unanswered: their target learnt again");
                    pinger.confirm(path, target);
                }
                Ok((_, peer_device)) => {
                    tracing::debug!(device = %path.device, peer = %path.peer, %peer_device, "pings unanswered, and the peer answers from another device now: its next burst moves the path");
                }
                Err(e) => {
                    tracing::debug!(device = %path.device, peer = %path.peer, error = %e, "pings unanswered, and their target could not be learnt again");
                }
            }
        });
    }

    async fn retain(&mut self, specs: Vec<PathSpec>) {
        let wanted: BTreeMap<PathKey, PathSpec> =
            specs.into_iter().map(|s| (s.key.clone(), s)).collect();
        if let Some(pinger) = &self.pinger {
            self.pinged.retain(|key, _| wanted.contains_key(key));
            pinger.retain(self.pinged_labels());
        }
        let stale: Vec<PathKey> = self
            .sessions
            .iter()
            .filter(|(key, (spec, _))| wanted.get(*key).is_none_or(|new| !spec.same_session(new)))
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some((_, warm)) = self.sessions.remove(&key) {
                tracing::debug!(path = %key, "closing the session of a path the reload changed or removed");
                warm.close().await;
            }
        }
    }

    async fn shut_down(mut self) {
        self.burst.stop();
        let sessions = std::mem::take(&mut self.sessions);
        let close_all = async {
            for (_, (_, warm)) in sessions {
                warm.close().await;
            }
        };
        if tokio::time::timeout(CLOSE_GRACE, close_all).await.is_err() {
            tracing::debug!(
                device = self.name(),
                "sessions not closed in time: dropping them"
            );
        }
        tracing::debug!(device = self.name(), "device worker stopped");
    }
}

/// The next path the ping engine names as silent; never, without a ping engine.
async fn next_silent(silent: &mut Option<mpsc::Receiver<PathLabels>>) -> Option<PathLabels> {
    match silent {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A stock `ib_write_bw` server serves one client and exits: a fresh session per probe, on the
/// worker's device and burst thread. The server's report is sent in its default unit (MiB/s);
/// the exporter's figures do not depend on it (docs/perftest.md).
async fn probe_perftest_peer(
    ctx: Context,
    burst: BurstWorker,
    spec: &PathSpec,
    request: &BurstRequest,
) -> ProbeOutcome {
    let mut settings = spec.settings.clone();
    settings.length = request.length;
    settings.rate_limit = request.rate_limit;
    probe_perftest_on(ctx, &burst, &settings, &PerftestOptions::default()).await
}
