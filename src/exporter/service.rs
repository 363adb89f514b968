//! The service loop: one task owns the scheduler, the path table and the config; device workers
//! run the probes it dispatches and send back what happened; the recorder owns the metrics
//! (docs/architecture.md, "The exporter").

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use tokio::sync::{mpsc, watch};

use super::device::{DeviceCommand, ProbeFinished};
use super::identity::{configured_node, peer_info_labels, PeerIdentities, Unmatched};
use super::paths::{own_labels, path_specs, selector, PathSpec};
use crate::config::{Config, Device, Limits};
use crate::control::message::Identity;
use crate::control::AuthMode;
use crate::discovery::{self, DiscoveredPeer};
use crate::judge::Criteria;
use crate::metrics::probe::{
    DeferReason, DeviceScheduleFigures, InfoLabels, PathLabels, ProbeEvent, ProbeRecord,
};
use crate::metrics::{probers, ResponderMetrics};
use crate::reload::ReloadRequest;
use crate::schedule::{
    fit_plans, Attempt, Dispatch, Outcome, OutcomeKind, PathKey, Role, Rotation, ScheduleConfig,
    Scheduler, Selected, Selector,
};

/// The `peer_device` label of a path whose peer has not answered yet (down since this exporter
/// started): replaced by the peer's device at its first answer.
pub const UNKNOWN_PEER_DEVICE: &str = "unknown";

/// How soon the service looks at the wall clock again when a round timer fired early.
const ROUND_RECHECK: Duration = Duration::from_millis(100);

/// The state the service loop owns.
pub struct Service {
    config_path: PathBuf,
    config: Config,
    /// The local devices, opened at start; a reload cannot change them.
    devices: Vec<Device>,
    auth: AuthMode,
    /// The limits the exporter started with (its memory check and responder use them); a reload
    /// cannot change them.
    limits: Limits,
    scheduler: Scheduler,
    /// Which paths each round (docs/scale.md, "Selection"), and the sampled paths still waiting
    /// for their probe.
    selector: Selector,
    rotation: Rotation,
    /// The round the current selection is of (the wall clock's, shared by every node).
    round: u64,
    specs: BTreeMap<PathKey, PathSpec>,
    /// Regular (not busy-retry) probes dispatched per path: every `unpaced_every`-th is unpaced.
    regular_probes: BTreeMap<PathKey, u64>,
    /// The device each peer answered with, per path (the `peer_device` label).
    peer_devices: BTreeMap<PathKey, String>,
    /// Paths whose last probe failed: failures are logged when they start and end, not each time.
    failing: BTreeSet<PathKey>,
    /// What each peer said about itself in the handshake (docs/metrics.md, "Peer identity").
    identities: PeerIdentities,
    /// Paths of the selection left out of the schedule by what their peer said, and why.
    unmatched: BTreeMap<PathKey, Unmatched>,
    /// Unmatched paths already logged: each is logged once, and again only after its peer
    /// answered it in between.
    announced: BTreeSet<PathKey>,
    workers: BTreeMap<String, mpsc::Sender<DeviceCommand>>,
    events: mpsc::Sender<ProbeEvent>,
    responder_metrics: ResponderMetrics,
    /// Scheduler time is measured from here (tokio's clock, so tests can run it paused).
    epoch: Instant,
    /// The peers discovery found last (before the merge with the config's peers), and where
    /// the next set comes from.
    discovered: Vec<DiscoveredPeer>,
    discovery: Option<watch::Receiver<Vec<DiscoveredPeer>>>,
}

/// What the service is started with.
pub struct ServiceParts {
    pub config_path: PathBuf,
    pub config: Config,
    pub devices: Vec<Device>,
    pub auth: AuthMode,
    pub scheduler: Scheduler,
    pub workers: BTreeMap<String, mpsc::Sender<DeviceCommand>>,
    pub events: mpsc::Sender<ProbeEvent>,
    /// The responder's families: its count of probers follows `judge.responder_window`.
    pub responder_metrics: ResponderMetrics,
}

impl Service {
    /// Takes the initial config: paths, info metrics, `config_reload_success` 1.
    pub async fn start(parts: ServiceParts) -> Service {
        let selector = selector(&parts.config, &parts.devices);
        let mut service = Service {
            config_path: parts.config_path,
            config: parts.config.clone(),
            devices: parts.devices,
            auth: parts.auth,
            limits: *parts.config.limits(),
            scheduler: parts.scheduler,
            selector,
            rotation: Rotation::new(),
            round: 0,
            specs: BTreeMap::new(),
            regular_probes: BTreeMap::new(),
            peer_devices: BTreeMap::new(),
            failing: BTreeSet::new(),
            identities: PeerIdentities::default(),
            unmatched: BTreeMap::new(),
            announced: BTreeSet::new(),
            workers: parts.workers,
            events: parts.events,
            responder_metrics: parts.responder_metrics,
            epoch: Instant::now(),
            discovered: Vec::new(),
            discovery: None,
        };
        if let Err(e) = service.apply(parts.config).await {
            // The scheduler refused a path the config validation let through: run with none.
            tracing::error!(error = %e, "the config's paths cannot be scheduled");
        }
        service.loaded(true).await;
        service
    }

    /// Takes discovered peers from `peers` (the discovery task's current set) as candidates
    /// besides the config's.
    pub fn with_discovery(mut self, peers: watch::Receiver<Vec<DiscoveredPeer>>) -> Service {
        self.discovery = Some(peers);
        self
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Dispatches due probes, applies results and reloads until `shutdown` resolves.
    pub async fn run(
        mut self,
        mut finished: mpsc::Receiver<ProbeFinished>,
        mut reloads: mpsc::Receiver<ReloadRequest>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut discovery = self.discovery.take();
        loop {
            self.dispatch_due().await;
            let wake = self.scheduler.wait_until().map(|t| self.epoch + t);
            let sleep = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let next_round = self.next_round_at();
            let round_ends = async move {
                match next_round {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let recheck = self.next_recheck_at();
            let recheck_due = async move {
                match recheck {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(done) = finished.recv() => self.on_finished(done).await,
                Some(request) = reloads.recv() => {
                    let result = self.reload().await;
                    if let Some(reply) = request.reply {
                        let _ = reply.send(result);
                    }
                }
                peers = discovery_changed(&mut discovery) => self.on_discovered(peers).await,
                () = round_ends => self.next_round().await,
                () = recheck_due => self.recheck().await,
                () = sleep => {}
            }
        }
    }

    /// When the next round starts (by the wall clock), for a rotating selection; `None` for a
    /// full mesh, whose selection never changes.
    fn next_round_at(&self) -> Option<Instant> {
        if self.selector.is_full_mesh() {
            return None;
        }
        let start = self.selector.round_start(self.round.saturating_add(1));
        let until = start.saturating_sub(unix_time(SystemTime::now()));
        // Tokio's clock and the wall clock may disagree by a little: look again shortly rather
        // than spin until the wall clock reaches the round.
        Some(Instant::now() + until.max(ROUND_RECHECK))
    }

    /// When what a peer said about a missing rail lapses, so its left-out paths are tried again
    /// ([`super::identity::RECHECK`]).
    fn next_recheck_at(&self) -> Option<Instant> {
        let peers = self.unmatched.keys().map(|k| k.peer.as_str());
        self.identities
            .next_recheck(peers, self.now())
            .map(|at| self.epoch + at)
    }

    /// Puts the paths back whose peer's word has lapsed: their next probe asks it again.
    async fn recheck(&mut self) {
        if let Err(e) = self.select_paths().await {
            tracing::error!(error = %e, "the rechecked paths cannot be scheduled: keeping the previous ones");
        }
    }

    /// A new round: the next sampled paths replace those that were probed.
    async fn next_round(&mut self) {
        if self.selector.round_at(unix_time(SystemTime::now())) == self.round {
            return;
        }
        if let Err(e) = self.select_paths().await {
            tracing::error!(error = %e, "the new round's paths cannot be scheduled: keeping the previous ones");
        }
    }

    async fn dispatch_due(&mut self) {
        let now = self.now();
        for dispatch in self.scheduler.poll(now) {
            self.dispatch(dispatch, now).await;
        }
    }

    async fn dispatch(&mut self, dispatch: Dispatch, now: Duration) {
        let Some(spec) = self.specs.get(&dispatch.key).cloned() else {
            self.scheduler
                .completed(&dispatch.key, Outcome::failure(Duration::ZERO), now);
            return;
        };
        let labels = self.labels(&dispatch.key);
        self.emit(ProbeEvent::Attempt(labels.clone())).await;
        if dispatch.budget_deferred {
            self.emit(ProbeEvent::Deferred(labels, DeferReason::Budget))
                .await;
        }
        let n = match dispatch.attempt {
            Attempt::Regular => {
                let n = self.regular_probes.entry(dispatch.key.clone()).or_default();
                *n += 1;
                *n
            }
            Attempt::BusyRetry(_) => self.regular_probes.get(&dispatch.key).copied().unwrap_or(1),
        };
        let request = spec.burst_request(n);
        // A session idle longer than the responder keeps it would be closed there before the
        // next probe: close it now and free the responder's session permit (docs/scale.md,
        // "Sessions").
        let keep_warm = self
            .scheduler
            .path_status(&dispatch.key)
            .is_some_and(|s| s.effective_interval < super::IDLE_TIMEOUT);
        let sent = match self.workers.get(&dispatch.key.device) {
            Some(worker) => worker
                .send(DeviceCommand::Probe {
                    spec: Box::new(spec),
                    request,
                    keep_warm,
                })
                .await
                .is_ok(),
            None => false,
        };
        if !sent {
            tracing::error!(path = %dispatch.key, "the device worker is gone; path not probed");
            self.scheduler
                .completed(&dispatch.key, Outcome::failure(Duration::ZERO), now);
        }
    }

    async fn on_finished(&mut self, done: ProbeFinished) {
        let ProbeFinished { key, outcome, at } = done;
        let burst_time = outcome
            .report
            .as_ref()
            .map_or(Duration::ZERO, |r| r.elapsed);
        let result = if outcome.deferred.is_some() {
            Outcome::busy(burst_time)
        } else if outcome.is_success() {
            Outcome::success(burst_time)
        } else {
            Outcome::failure(burst_time)
        };
        let now = self.now();
        self.scheduler.completed(&key, result, now);
        if result.kind != OutcomeKind::Busy {
            self.rotation.probed(&key);
        }
        if !self.specs.contains_key(&key) {
            return; // removed by a reload while its burst ran: its series are gone
        }
        if let Some(identity) = outcome.peer_identity.clone() {
            self.learn_identity(&key.peer, identity, now).await;
        }
        if self.unmatched.contains_key(&key) {
            // What the peer said took the path out of the schedule and its series off
            // `/metrics`: this probe is neither a result nor a failure of the path.
            return;
        }
        if let Some(peer_device) = &outcome.peer_device {
            self.learn_peer_device(&key, peer_device).await;
        }
        self.log_transition(&key, &outcome);
        let record = ProbeRecord::from_outcome(&outcome, unix_seconds(at));
        let labels = self.labels(&key);
        self.emit(ProbeEvent::completed(labels, record)).await;
        self.emit_schedule(&key.device, now).await;
        // The burst's cost moved the device's stretch, so its paths' intervals too.
        self.emit_intervals(&key.device).await;
    }

    /// Keeps what `peer` said about itself: a change goes to its `peer_info`, and a path whose
    /// verdict changed (a rail gained or lost, the peer is this node) enters or leaves the
    /// schedule.
    async fn learn_identity(&mut self, peer: &str, identity: Identity, now: Duration) {
        if self.identities.learn(peer, identity, now) {
            if let Some(said) = self.identities.get(peer) {
                tracing::info!(peer, peer_node = %said.node, devices = %said.describe_devices(),
                    "the peer told who it is");
            }
            if let Some(labels) = self.peer_info(peer) {
                self.emit(ProbeEvent::PeerLabels {
                    peer: peer.to_owned(),
                    labels,
                })
                .await;
            }
        }
        let node = self.config.node();
        let changed = self
            .specs
            .keys()
            .chain(self.unmatched.keys())
            .filter(|k| k.peer == peer)
            .any(|k| self.identities.unmatched(k, node, now) != self.unmatched.get(k).copied());
        if changed {
            if let Err(e) = self.select_paths().await {
                tracing::error!(error = %e, "the paths cannot be scheduled after what a peer said: keeping the previous ones");
            }
        }
    }

    /// The `peer_info` labels of an active peer of the config.
    fn peer_info(&self, peer: &str) -> Option<Vec<(String, String)>> {
        let configured = self.config.active_peers().find(|p| p.name() == peer)?;
        Some(peer_info_labels(
            peer,
            configured_node(configured),
            configured.labels(),
            self.identities.get(peer),
        ))
    }

    /// Takes the paths newly left out by what their peers said off `/metrics`, logs each once,
    /// and counts them per device (`rdma_probe_schedule_skipped_paths`).
    async fn note_unmatched(&mut self, unmatched: BTreeMap<PathKey, Unmatched>) {
        for (key, why) in &unmatched {
            if !self.unmatched.contains_key(key) {
                let labels = self.labels(key);
                self.peer_devices.remove(key);
                self.failing.remove(key);
                self.emit(ProbeEvent::ForgetPath(labels)).await;
            }
            if self.announced.insert(key.clone()) {
                let said = self.identities.get(&key.peer);
                let what = match why {
                    Unmatched::NoRail => "the peer has no device on this path's rail",
                    Unmatched::Itself => "the peer is this node",
                };
                tracing::warn!(path = %key, reason = why.as_str(),
                    peer_node = said.map_or("", |i| i.node.as_str()),
                    peer_devices = %said.map(Identity::describe_devices).unwrap_or_default(),
                    "path not probed: {what} (logged once; rdma_probe_schedule_skipped_paths)");
            }
        }
        let now = self.now();
        let answered: Vec<PathKey> = self
            .announced
            .iter()
            .filter(|k| self.specs.contains_key(*k) && self.identities.is_fresh(&k.peer, now))
            .cloned()
            .collect();
        for key in answered {
            self.announced.remove(&key);
            tracing::info!(path = %key, "the peer now answers this path: probing it again");
        }
        self.unmatched = unmatched;
        let mut counts = Vec::new();
        for device in self.workers.keys() {
            for why in Unmatched::ALL {
                let n = self
                    .unmatched
                    .iter()
                    .filter(|(k, w)| &k.device == device && **w == why)
                    .count();
                counts.push((device.clone(), why.as_str(), n as u64));
            }
        }
        let paths = self
            .unmatched
            .iter()
            .map(|(key, why)| (self.labels(key), why.as_str()))
            .collect();
        self.emit(ProbeEvent::SkippedPaths {
            per_device: counts,
            paths,
        })
        .await;
    }

    /// Labels follow the peer's answer: when its device on the rail changes (or is first
    /// known), the path's series move to the new `peer_device` and the old ones go.
    async fn learn_peer_device(&mut self, key: &PathKey, peer_device: &str) {
        let known = self.peer_devices.get(key).map(String::as_str);
        if known == Some(peer_device) {
            return;
        }
        let old = self.labels(key);
        self.peer_devices
            .insert(key.clone(), peer_device.to_owned());
        self.emit(ProbeEvent::ForgetPath(old)).await;
    }

    fn log_transition(&mut self, key: &PathKey, outcome: &crate::prober::ProbeOutcome) {
        if outcome.is_success() {
            if self.failing.remove(key) {
                tracing::info!(path = %key, "probes succeed again");
            }
        } else if let Some(reason) = outcome.error {
            if self.failing.insert(key.clone()) {
                tracing::warn!(
                    path = %key,
                    reason = reason.as_str(),
                    message = outcome.message.as_deref().unwrap_or(""),
                    "probe failed (logged again when it recovers)"
                );
            }
        }
    }

    /// Reads the config file again; a file that does not load leaves everything as it was.
    pub async fn reload(&mut self) -> Result<(), String> {
        let path = self.config_path.clone();
        let loaded = tokio::task::spawn_blocking(move || Config::load(path))
            .await
            .map_err(|e| format!("config loader task: {e}"))
            .and_then(|r| r.map_err(|e| e.to_string()));
        let result = match loaded {
            Ok(config) => self.apply(config).await,
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                tracing::info!(file = %self.config_path.display(), paths = self.specs.len(), "config reloaded")
            }
            Err(e) => {
                tracing::error!(file = %self.config_path.display(), error = %e, "config reload failed: the previous config keeps running")
            }
        }
        self.loaded(result.is_ok()).await;
        result
    }

    /// Discovery found a new set: the candidates change, the config stays.
    async fn on_discovered(&mut self, peers: Vec<DiscoveredPeer>) {
        self.discovered = peers;
        if let Err(e) = self.set_peers(self.config.clone()).await {
            tracing::error!(error = %e, "the discovered peers' paths cannot be scheduled: keeping the previous ones");
            return;
        }
        tracing::info!(
            discovered = self.config.discovered_peers().len(),
            paths = self.specs.len(),
            "candidates changed by discovery"
        );
    }

    /// Makes `config` the running config: paths added keep nothing, paths kept keep their
    /// schedule, warm session and counters, paths removed lose their series.
    async fn apply(&mut self, config: Config) -> Result<(), String> {
        self.warn_restart_only(&config);
        let duty_cycle = config.schedule().duty_cycle;
        if duty_cycle != self.scheduler.config().duty_cycle {
            let schedule = ScheduleConfig {
                duty_cycle,
                ..self.scheduler.config().clone()
            };
            self.scheduler
                .set_config(schedule)
                .map_err(|e| e.to_string())?;
        }
        self.set_peers(config).await?;
        let series = self.config.series();
        self.emit(ProbeEvent::SeriesBudget {
            limit: series.budget,
            ttl: series.ttl,
        })
        .await;
        self.emit(ProbeEvent::Judge(Criteria::new(
            *self.config.judge(),
            self.config.defaults().interval(),
            self.config.ping().interval,
        )))
        .await;
        self.responder_metrics
            .set_prober_window(probers::window_seconds(
                self.config.judge(),
                self.config.defaults().interval(),
            ));
        Ok(())
    }

    /// Makes `config`, with the discovered peers merged in, the running config and its peers
    /// the candidates; on error nothing changes.
    async fn set_peers(&mut self, config: Config) -> Result<(), String> {
        let discovered = discovery::merge(&config, &self.discovered);
        let config = config.with_discovered(discovered);
        let selector = selector(&config, &self.devices);
        let old = std::mem::replace(&mut self.config, config);
        let old_selector = std::mem::replace(&mut self.selector, selector);
        if let Err(e) = self.select_paths().await {
            self.config = old;
            self.selector = old_selector;
            return Err(e);
        }
        // Paths to peers no longer in the config lose their series now; the others keep them
        // (until they have not been probed for the series TTL, when out of the selection).
        let peers: BTreeSet<String> = self
            .config
            .active_peers()
            .map(|p| p.name().to_owned())
            .collect();
        self.peer_devices.retain(|k, _| peers.contains(&k.peer));
        self.identities.retain(&peers);
        self.announced.retain(|k| peers.contains(&k.peer));
        self.emit(ProbeEvent::RetainPeers(peers)).await;
        self.emit(ProbeEvent::Info(info_labels(
            &self.config,
            &self.identities,
        )))
        .await;
        Ok(())
    }

    /// Schedules the selection of the current round (the config's paths, for a full mesh) and
    /// tells the device workers and the recorder. On error nothing changes.
    async fn select_paths(&mut self) -> Result<(), String> {
        let round = self.selector.round_at(unix_time(SystemTime::now()));
        let mut selected = self.selector.fixed_paths(round);
        let mut rotation = if self.selector.is_full_mesh() {
            // Every path is selected: nothing waits.
            Rotation::new()
        } else {
            self.rotation.clone()
        };
        let wanted = self.selector.sampled_paths(round);
        rotation.advance(round, wanted.into_iter().map(|s| s.key).collect());
        // A path still waiting from before a reload may now be one of the node's group.
        let fixed: BTreeSet<PathKey> = selected.iter().map(|s| s.key.clone()).collect();
        selected.extend(
            rotation
                .sampled()
                .filter(|k| !fixed.contains(*k))
                .map(|key| Selected {
                    key: key.clone(),
                    role: Role::Sampled,
                }),
        );
        // Paths their peer cannot answer, or that lead back to this node, are not scheduled; a
        // sampled one waits no longer.
        let now = self.now();
        let mut unmatched = BTreeMap::new();
        selected.retain(
            |s| match self.identities.unmatched(&s.key, self.config.node(), now) {
                Some(why) => {
                    unmatched.insert(s.key.clone(), why);
                    false
                }
                None => true,
            },
        );
        for key in unmatched.keys() {
            rotation.probed(key);
        }
        let specs = path_specs(
            &self.config,
            &self.devices,
            &self.auth,
            &self.limits,
            &selected,
        );
        let selected: Vec<_> = selected
            .into_iter()
            .filter(|s| specs.contains_key(&s.key))
            .collect();
        let plans = fit_plans(
            &selected,
            |key| specs[key].schedule_plan(),
            self.scheduler.config().duty_cycle,
            self.selector.config().round,
            self.selector.coverage().sampled_per_device,
        );
        self.scheduler
            .set_paths(plans, self.now())
            .map_err(|e| e.to_string())?;
        self.rotation = rotation;
        if round != self.round && !self.selector.is_full_mesh() {
            let coverage = self.selector.coverage();
            tracing::debug!(
                round,
                paths = specs.len(),
                waiting = self.rotation.waiting(),
                groups = coverage.groups,
                "new selection round"
            );
        }
        self.round = round;
        self.specs = specs;
        self.regular_probes
            .retain(|k, _| self.specs.contains_key(k));
        self.failing.retain(|k| self.specs.contains_key(k));
        for (device, worker) in &self.workers {
            let mine = self
                .specs
                .values()
                .filter(|s| &s.key.device == device)
                .cloned()
                .collect();
            let _ = worker.send(DeviceCommand::Retain(mine)).await;
        }
        let selection = self
            .specs
            .values()
            .map(|s| {
                (
                    (s.key.device.clone(), s.key.peer.clone()),
                    s.role.is_preferred(),
                )
            })
            .collect();
        self.emit(ProbeEvent::Selection(selection)).await;
        self.note_unmatched(unmatched).await;
        let now = self.now();
        for device in self.workers.keys().cloned().collect::<Vec<_>>() {
            self.emit_schedule(&device, now).await;
            self.emit_intervals(&device).await;
        }
        Ok(())
    }

    /// Listening addresses, the key and the devices are taken at start only: say so instead of
    /// silently ignoring a change.
    fn warn_restart_only(&self, new: &Config) {
        let old = &self.config;
        let mut changed = Vec::new();
        if old.listen() != new.listen() {
            changed.push("listen");
        }
        if old.auth() != new.auth() {
            changed.push("auth");
        }
        if old.devices() != new.devices() || old.exclude_devices() != new.exclude_devices() {
            changed.push("devices");
        }
        if old.limits() != new.limits() {
            changed.push("limits");
        }
        if old.discovery() != new.discovery() {
            changed.push("discovery");
        }
        if old.ping() != new.ping() {
            changed.push("ping");
        }
        if old.rdma_networks() != new.rdma_networks() {
            // The probes follow the new list at once; the responder's check keeps the old one.
            changed.push("rdma_networks (the responder's check)");
        }
        if !changed.is_empty() {
            tracing::warn!(
                fields = changed.join(", "),
                "changed in the config file, but taken only at start: restart the exporter to apply"
            );
        }
    }

    async fn loaded(&self, ok: bool) {
        self.emit(ProbeEvent::ConfigLoaded {
            ok,
            at_unix_seconds: unix_seconds(SystemTime::now()),
        })
        .await;
    }

    fn labels(&self, key: &PathKey) -> PathLabels {
        PathLabels {
            device: key.device.clone(),
            peer: key.peer.clone(),
            peer_device: self
                .peer_devices
                .get(key)
                .cloned()
                .unwrap_or_else(|| UNKNOWN_PEER_DEVICE.to_owned()),
        }
    }

    async fn emit_schedule(&self, device: &str, now: Duration) {
        if let Some(stats) = self.scheduler.device_stats(device, now) {
            let figures = DeviceScheduleFigures {
                device: device.to_owned(),
                paths: stats.paths as u64,
                duty_cycle_used: stats.duty_cycle_used,
                duty_cycle_budget: stats.duty_cycle_budget,
                demand: stats.demand,
                stretch: stats.stretch_factor,
            };
            self.emit(ProbeEvent::Schedule(figures)).await;
        }
    }

    /// The interval each path of `device` is planned at now
    /// (`rdma_probe_path_interval_seconds`).
    async fn emit_intervals(&self, device: &str) {
        let intervals: Vec<_> = self
            .scheduler
            .planned_intervals(device)
            .into_iter()
            .map(|(key, interval)| ((key.device.clone(), key.peer.clone()), interval))
            .collect();
        if !intervals.is_empty() {
            self.emit(ProbeEvent::Intervals(intervals)).await;
        }
    }

    async fn emit(&self, event: ProbeEvent) {
        // Only fails when the recorder is gone, i.e. at shutdown.
        let _ = self.events.send(event).await;
    }
}

/// The node's static labels (its own entry in `peers`, overridden by `labels`, as the selection
/// and the responder see them), and each active peer's with what it said about itself, for
/// `node_info` and `peer_info`.
fn info_labels(config: &Config, identities: &PeerIdentities) -> InfoLabels {
    let node = std::iter::once(("node".to_owned(), config.node().to_owned()))
        .chain(own_labels(config))
        .collect();
    let peers = config
        .active_peers()
        .map(|p| {
            peer_info_labels(
                p.name(),
                configured_node(p),
                p.labels(),
                identities.get(p.name()),
            )
        })
        .collect();
    InfoLabels { node, peers }
}

/// The next set of discovered peers; never resolves without discovery (or once it has
/// stopped).
async fn discovery_changed(
    peers: &mut Option<watch::Receiver<Vec<DiscoveredPeer>>>,
) -> Vec<DiscoveredPeer> {
    let Some(receiver) = peers else {
        return std::future::pending().await;
    };
    if receiver.changed().await.is_ok() {
        return receiver.borrow_and_update().clone();
    }
    *peers = None;
    std::future::pending().await
}

fn unix_time(at: SystemTime) -> Duration {
    at.duration_since(UNIX_EPOCH).unwrap_or_default()
}

fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests;
