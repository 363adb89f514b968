//! One emulated node: its config, and the exporter's own parts wired as `exporter::run` wires
//! them (scheduler, service loop, recorder, port reader, admin HTTP server), with stand-in
//! device workers instead of RDMA devices and no responder.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rdma_probe_exporter::config::{Config, Devices};
use rdma_probe_exporter::exporter::{ports, service};
use rdma_probe_exporter::http::{self, ExporterPages, ReloadAccess, ReloadEndpoint};
use rdma_probe_exporter::metrics::Metrics;
use rdma_probe_exporter::port::Sysfs;
use rdma_probe_exporter::readiness::Readiness;
use rdma_probe_exporter::schedule::{seed_from_name, ScheduleConfig, Scheduler};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::fault::Shape;
use crate::sysfs;
use crate::worker::{self, Fleet};

/// The exporter's queue sizes (`exporter::run`'s).
const EVENT_QUEUE: usize = 1024;
const COMMAND_QUEUE: usize = 16;
/// How long a stopping node's workers may take (`exporter::run`'s grace).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A node's address in the shared peers list: never connected to (the stand-in workers answer
/// every probe), only unique per node as the config requires.
fn address(k: usize) -> String {
    let n = k + 1;
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// What every node's config has in common: the devices, the probe defaults, and the peers list
/// (every node with its `tor` label, the node itself included, as one file shared by a real
/// fleet has it). The node's own name goes in front.
pub fn shared_config(shape: &Shape, interval: Duration, burst: Duration) -> String {
    let mut text = String::from("auth: none\ndevices:\n");
    for r in 0..shape.rails {
        text += &format!("  - {{name: mlx5_{r}, port: 1, rail: {r}}}\n");
    }
    text += &format!(
        "defaults:\n  interval: {}ms\n  burst: {{duration: {}ms}}\n  rate_limit: 25%\n",
        interval.as_millis(),
        burst.as_millis()
    );
    text += "peers:\n";
    for k in 0..shape.nodes {
        text += &format!(
            "  - {{name: {}, address: {}, labels: {{tor: t{}}}}}\n",
            shape.node_name(k),
            address(k),
            shape.tor_of(k)
        );
    }
    text
}

/// Runs node `k` while it is powered on, again after each reboot, until `shutdown` turns true.
/// `listener` is the port bound at start (absent when the node starts powered off).
pub async fn supervise(
    k: usize,
    fleet: Arc<Fleet>,
    shared: Arc<String>,
    out: PathBuf,
    port: u16,
    mut listener: Option<TcpListener>,
    mut shutdown: watch::Receiver<bool>,
) {
    let name = fleet.model.shape.node_name(k);
    let config_path = out.join("nodes").join(&name).join("config.yaml");
    let sysfs_root = sysfs::root(&out, &name);
    let text = format!("node: {name}\n{shared}");
    if let Err(e) = std::fs::write(&config_path, &text) {
        eprintln!("fleet: writing {}: {e}", config_path.display());
        return;
    }
    loop {
        // Powered off: wait for the power to come back.
        while fleet.model.node_down(k, fleet.started.elapsed()) {
            listener = None;
            let until = next_change(&fleet, k).unwrap_or(Duration::MAX);
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return,
                () = sleep_until(fleet.started, until) => {}
            }
        }
        let bound = match listener.take() {
            Some(l) => l,
            None => match bind(port).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("fleet: {name}: binding 127.0.0.1:{port} again: {e}");
                    return;
                }
            },
        };
        let goes_down = next_change(&fleet, k).unwrap_or(Duration::MAX);
        let (started, mut stop) = (fleet.started, shutdown.clone());
        let stop = async move {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => {}
                () = sleep_until(started, goes_down) => {}
            }
        };
        fleet.counts.nodes_up.fetch_add(1, Ordering::Relaxed);
        let result = run_instance(
            k,
            &fleet,
            &config_path,
            sysfs_root.clone(),
            &text,
            bound,
            stop,
        )
        .await;
        fleet.counts.nodes_up.fetch_sub(1, Ordering::Relaxed);
        if let Err(e) = result {
            eprintln!("fleet: {name}: {e}");
            return;
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// When node `k` changes between powered on and off next (from the run's start).
fn next_change(fleet: &Fleet, k: usize) -> Option<Duration> {
    let now = fleet.started.elapsed();
    let down = fleet.model.node_down(k, now);
    let mut at: Vec<Duration> = fleet
        .model
        .faults
        .iter()
        .filter(|f| f.node == Some(k))
        .flat_map(|f| [Some(f.start), f.end])
        .flatten()
        .filter(|t| *t > now)
        .collect();
    at.sort();
    at.into_iter()
        .find(|t| fleet.model.node_down(k, *t) != down)
}

/// Sleeps until `after` past `started`; forever when that is past what the clock can hold.
pub async fn sleep_until(started: Instant, after: Duration) {
    match started.checked_add(after) {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await
}

/// One life of node `k`: fresh metrics, scheduler and service, until `stop` resolves.
async fn run_instance(
    k: usize,
    fleet: &Arc<Fleet>,
    config_path: &Path,
    sysfs_root: PathBuf,
    text: &str,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let config = Config::from_str(text, &config_path.display().to_string(), |_| None)
        .map_err(|e| format!("the generated config: {e}"))?;
    let auth = config.auth().load().map_err(|e| e.to_string())?;
    let Devices::Listed(devices) = config.devices().clone() else {
        return Err("the generated config lists no devices".into());
    };
    let schedule = ScheduleConfig::with_duty_cycle(config.schedule().duty_cycle);
    let scheduler = Scheduler::new(seed_from_name(config.node()), schedule)
        .map_err(|e| format!("the scheduler refused the config: {e}"))?;

    let (metrics, recorder) = Metrics::with_recorder();
    let (events, events_rx) = mpsc::channel(EVENT_QUEUE);
    let paths = recorder.snapshot();
    let recorder_task = tokio::spawn(recorder.run(events_rx));

    let (stop_tx, stop_rx) = watch::channel(false);
    let (finished, finished_rx) = mpsc::channel(EVENT_QUEUE);
    let mut workers = BTreeMap::new();
    let mut worker_tasks = Vec::new();
    for device in &devices {
        let (commands, commands_rx) = mpsc::channel(COMMAND_QUEUE);
        workers.insert(device.name.clone(), commands);
        worker_tasks.push(tokio::spawn(worker::run(
            Arc::clone(fleet),
            k,
            device.rail.unwrap_or(0),
            commands_rx,
            finished.clone(),
            stop_rx.clone(),
        )));
    }
    drop(finished);

    let readiness = Readiness::default();
    let probing = readiness.condition("exporter: config loaded, paths scheduled");
    let (reload_tx, reload_rx) = mpsc::channel(4);
    let mut http_stop = stop_rx.clone();
    let http_task = tokio::spawn(http::serve_exporter(
        listener,
        metrics.clone(),
        readiness,
        ExporterPages {
            paths,
            reload: ReloadEndpoint::new(reload_tx, ReloadAccess::Disabled),
        },
        async move {
            let _ = http_stop.wait_for(|s| *s).await;
        },
    ));
    let port_facts = tokio::spawn(ports::run(
        Sysfs::new(sysfs_root),
        devices.iter().map(|d| (d.name.clone(), d.port)).collect(),
        devices
            .iter()
            .filter_map(|d| Some((d.name.clone(), d.rail?)))
            .collect(),
        events.clone(),
        ports::REFRESH,
    ));

    let service = service::Service::start(service::ServiceParts {
        config_path: config_path.to_owned(),
        config,
        devices,
        auth,
        scheduler,
        workers,
        events,
        responder_metrics: metrics.responder.clone(),
    })
    .await;
    probing.set(true);
    service.run(finished_rx, reload_rx, stop).await;

    probing.set(false);
    let _ = stop_tx.send(true);
    port_facts.abort();
    let workers_done = async {
        for task in worker_tasks {
            let _ = task.await;
        }
    };
    let _ = tokio::time::timeout(STOP_GRACE, workers_done).await;
    let _ = http_task.await;
    recorder_task.abort();
    Ok(())
}
