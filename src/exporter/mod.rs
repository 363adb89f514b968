//! The exporter (`run --config`): probes every configured path on its schedule, serves probe
//! sessions for the other nodes, and exports the results on `/metrics`.
//!
//! Tasks and threads (docs/architecture.md, "The exporter"):
//! - the **service loop** ([`service::Service`]) owns the scheduler, the path table and the
//!   running config; it dispatches due probes to the device workers, takes their results, and
//!   applies reloads;
//! - one **device worker** per local device ([`device::DeviceWorker`]) owns the device context,
//!   the device's burst thread and the warm sessions of its paths;
//! - the **recorder** ([`crate::metrics::probe::ProbeRecorder`]) owns the probe metric families;
//!   the service loop feeds it over a bounded channel, so a scrape never waits on a burst;
//! - the **responder** serves the other nodes' probes on the same devices;
//! - the **admin HTTP server** serves `/metrics`, `/healthz`, `/readyz`, `POST /-/reload` and
//!   the status page;
//! - a **file watcher** ([`config_file::watch_file`]) asks for a reload when the config file's
//!   content changes (also when a Kubernetes ConfigMap swaps its symlink);
//! - with a `discovery` section, the **discovery** tasks ([`crate::discovery`]) publish the
//!   discovered peers, which the service loop merges with the config's;
//! - a **port reader** ([`ports::run`]) reads the probed ports' facts from sysfs every 30 s for
//!   the port and PCIe gauges.

pub mod config_file;
pub mod device;
pub mod identity;
pub mod paths;
pub mod ports;
pub mod service;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::config::{Config, Device, Devices, GidIndex};
use crate::control::{AuthMode, PskError};
use crate::http::{self, ExporterPages};
use crate::memlock::{self, Allowance, MemlockError, Need};
use crate::metrics::probe::ProbeEvent;
use crate::metrics::Metrics;
use crate::ping::PingSettings;
use crate::port::Sysfs;
use crate::prober::ProbeError;
use crate::readiness::Readiness;
use crate::reload::ReloadRequest;
use crate::responder::{self, DevicePinger, ResponderSettings, ServedDevice};
use crate::schedule::{seed_from_name, ScheduleConfig, Scheduler};
use crate::verbs::VerbsError;

pub use service::UNKNOWN_PEER_DEVICE;

/// Results and events in flight between tasks: bounded, so a stuck consumer slows the loop
/// instead of growing memory.
const EVENT_QUEUE: usize = 1024;
const COMMAND_QUEUE: usize = 16;

/// How long the device workers may take to end their bursts and close their sessions at
/// shutdown before the exporter leaves anyway.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Connections authenticating at once (the `responder` command's default); the session and
/// memory limits are the config's `limits`.
const MAX_HANDSHAKES: usize = 8;
/// How long the responder keeps an idle session; the probers close theirs after a burst when
/// their next probe comes later than this.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the exporter could not start.
#[derive(Debug, Error)]
pub enum ExporterError {
    // The cause is in the message, not a `source`: printed once, not twice in an error chain.
    #[error("reading the pre-shared key: {0}")]
    Psk(PskError),
    #[error("listing RDMA devices: {0}")]
    Devices(VerbsError),
    #[error("no RDMA device with an ACTIVE port{excluded} (devices: all active in the config)")]
    NoActiveDevice { excluded: String },
    #[error("opening device {device}: {error}")]
    OpenDevice { device: String, error: ProbeError },
    #[error("the scheduler refused the config: {0}")]
    Schedule(String),
    #[error(transparent)]
    Responder(#[from] responder::ResponderError),
    #[error(transparent)]
    Memlock(#[from] MemlockError),
}

/// The two listeners the exporter serves on, bound by the caller (so a port in use is reported
/// against the flag or field that named it).
pub struct Listeners {
    pub metrics: TcpListener,
    pub control: TcpListener,
    /// Who may use `POST /-/reload` on the metrics listener (off unless enabled).
    pub reload_access: http::ReloadAccess,
}

/// Where reload requests come from besides the file watcher (SIGHUP, `POST /-/reload`).
pub fn reload_channel() -> (mpsc::Sender<ReloadRequest>, mpsc::Receiver<ReloadRequest>) {
    mpsc::channel(4)
}

/// Runs the exporter until `shutdown` resolves; then ends the running bursts (within
/// [`STOP_GRACE`]), closes every session, releases every RDMA resource and returns.
pub async fn run(
    config_path: PathBuf,
    config: Config,
    listeners: Listeners,
    reloads: (mpsc::Sender<ReloadRequest>, mpsc::Receiver<ReloadRequest>),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ExporterError> {
    let auth = config.auth().load().map_err(ExporterError::Psk)?;
    let devices = local_devices(&config)?;
    check_memlock(&config, &devices, &auth)?;
    let schedule = ScheduleConfig::with_duty_cycle(config.schedule().duty_cycle);
    let scheduler = Scheduler::new(seed_from_name(config.node()), schedule)
        .map_err(|e| ExporterError::Schedule(e.to_string()))?;

    let (metrics, recorder) = Metrics::with_recorder();
    let (events, events_rx) = mpsc::channel(EVENT_QUEUE);
    let paths = recorder.snapshot();
    let recorder_task = tokio::spawn(recorder.run(events_rx));

    let pingers = start_pingers(&config, &devices, &events);

    let (stop, stop_rx) = watch::channel(false);
    let (finished, finished_rx) = mpsc::channel(EVENT_QUEUE);
    let mut workers = BTreeMap::new();
    let mut worker_tasks = Vec::new();
    for device in &devices {
        let pinger = pingers.get(&device.name).cloned();
        let worker = device::DeviceWorker::open(device, pinger)
            .await
            .map_err(|error| ExporterError::OpenDevice {
                device: device.name.clone(),
                error,
            })?;
        let (commands, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        workers.insert(device.name.clone(), commands);
        worker_tasks.push(tokio::spawn(worker.run(
            commands_rx,
            finished.clone(),
            stop_rx.clone(),
        )));
    }
    drop(finished);

    let readiness = Readiness::default();
    // Set once the config's paths are scheduled; the responder adds one per served device.
    let probing = readiness.condition("exporter: config loaded, paths scheduled");
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut responder_task = tokio::spawn(responder::run(
        listeners.control,
        responder_settings(&config, &devices, auth.clone(), pingers),
        metrics.responder.clone(),
        readiness.clone(),
        stopped(stop_rx.clone()),
    ));
    let (reload_tx, reload_rx) = reloads;
    let http_task = tokio::spawn(http::serve_exporter(
        listeners.metrics,
        metrics.clone(),
        readiness,
        ExporterPages {
            paths,
            reload: http::ReloadEndpoint::new(reload_tx.clone(), listeners.reload_access),
        },
        stopped(stop_rx.clone()),
    ));
    let watcher = tokio::spawn(config_file::watch_file(
        config_path.clone(),
        reload_tx,
        config_file::POLL_INTERVAL,
    ));
    let port_facts = tokio::spawn(ports::run(
        Sysfs::system().excluding(config.exclude_devices().iter().cloned()),
        devices.iter().map(|d| (d.name.clone(), d.port)).collect(),
        devices
            .iter()
            .filter_map(|d| Some((d.name.clone(), d.rail?)))
            .collect(),
        events.clone(),
        ports::REFRESH,
    ));

    tracing::info!(
        node = config.node(),
        devices = devices.len(),
        peers = config.active_peers().count(),
        "exporter running"
    );
    let discovery = config.discovery().map(|d| {
        crate::discovery::spawn(d, config.listen().control.port(), metrics.discovery.clone())
    });
    let mut service = service::Service::start(service::ServiceParts {
        config_path,
        config,
        devices,
        auth,
        scheduler,
        workers,
        events,
        responder_metrics: metrics.responder.clone(),
    })
    .await;
    if let Some((peers, _)) = &discovery {
        service = service.with_discovery(peers.clone());
    }
    probing.set(true);
    // The responder ending on its own (its device failed) ends the exporter too.
    let responder_result = tokio::select! {
        () = service.run(finished_rx, reload_rx, shutdown) => None,
        r = &mut responder_task => Some(r),
    };

    probing.set(false);
    let _ = stop.send(true);
    watcher.abort();
    port_facts.abort();
    drop(discovery);
    let workers_done = async {
        for task in worker_tasks {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(STOP_GRACE, workers_done)
        .await
        .is_err()
    {
        tracing::warn!("device workers did not stop within {STOP_GRACE:?}");
    }
    let responder_result = match responder_result {
        Some(r) => r,
        None => responder_task.await,
    };
    let _ = http_task.await;
    recorder_task.abort();
    match responder_result {
        Ok(r) => r.map_err(ExporterError::from),
        Err(e) => {
            tracing::error!(error = %e, "responder task failed");
            Ok(())
        }
    }
}

/// A ping engine per local device (none with `ping.interval: off`). A device whose engine does
/// not start is probed and served without pings, as the log says.
fn start_pingers(
    config: &Config,
    devices: &[Device],
    events: &mpsc::Sender<ProbeEvent>,
) -> BTreeMap<String, DevicePinger> {
    let ping = config.ping();
    let Some(interval) = ping.interval else {
        return BTreeMap::new();
    };
    let settings = PingSettings {
        interval,
        timeout: ping.timeout,
        window: ping.window,
        max_rate: ping.max_rate,
        ttl: config.series().ttl,
        max_paths: ping.max_paths,
    };
    let devices = devices.iter().map(|d| (d.name.clone(), d.port));
    responder::start_pingers(devices, settings, || {
        let events = events.clone();
        // A full queue drops a report: the next one carries the same totals.
        Box::new(move |reports| {
            let _ = events.try_send(ProbeEvent::Pings(reports));
        })
    })
}

/// Refuses to start when RLIMIT_MEMLOCK cannot hold what the config's sessions may pin: the
/// sessions served (within `limits`) and one warm session per path of a selection round (every
/// round selects as many).
fn check_memlock(config: &Config, devices: &[Device], auth: &AuthMode) -> Result<(), MemlockError> {
    let limits = config.limits();
    let selected = paths::selector(config, devices).select(0);
    let regions = paths::path_specs(config, devices, auth, limits, &selected)
        .into_values()
        .map(|spec| crate::prober::session_region_bytes(&spec.settings));
    let need = Need::serving(limits.max_sessions, limits.max_pinned_bytes).probing(regions);
    memlock::check(
        need,
        Allowance::current(),
        "limits.max_pinned, or limits.max_session_memory and the paths' burst sizes",
    )
}

/// The configured devices, or every device with an ACTIVE port (its first) that is not
/// excluded, with automatic GID selection and no rail.
fn local_devices(config: &Config) -> Result<Vec<Device>, ExporterError> {
    match config.devices() {
        Devices::Listed(devices) => Ok(devices.clone()),
        Devices::AllActive => {
            let found = crate::verbs::list_devices_filtered(|name| !config.is_excluded(name))
                .map_err(ExporterError::Devices)?;
            let devices: Vec<Device> = found
                .iter()
                .filter_map(|d| {
                    let port = d.ports.iter().find(|p| p.state.is_active())?;
                    Some(Device {
                        name: d.name.clone(),
                        port: port.port,
                        rail: None,
                        gid_index: GidIndex::Auto,
                    })
                })
                .collect();
            if devices.is_empty() {
                let excluded = if config.exclude_devices().is_empty() {
                    String::new()
                } else {
                    format!(" (excluded: {})", config.exclude_devices().join(", "))
                };
                return Err(ExporterError::NoActiveDevice { excluded });
            }
            Ok(devices)
        }
    }
}

fn responder_settings(
    config: &Config,
    devices: &[Device],
    auth: AuthMode,
    pingers: BTreeMap<String, DevicePinger>,
) -> ResponderSettings {
    ResponderSettings {
        node_name: config.node().to_owned(),
        labels: paths::own_labels(config),
        devices: devices
            .iter()
            .map(|d| ServedDevice {
                local: d.local_port(),
                rail: d.rail,
            })
            .collect(),
        auth,
        max_sessions: config.limits().max_sessions,
        max_pinned_bytes: config.limits().max_pinned_bytes,
        max_session_bytes: config.limits().max_session_bytes,
        max_handshakes: MAX_HANDSHAKES,
        idle_timeout: IDLE_TIMEOUT,
        io_timeout: config.defaults().timeout(),
        rdma_networks: config.rdma_networks().to_vec(),
        pingers,
    }
}
