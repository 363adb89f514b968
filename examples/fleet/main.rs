//! A fleet of emulated exporters in one process, for proving the alert rules on a real
//! Prometheus and Alertmanager at fleet size (docs/scale.md, "Fleet bench: the emulator").
//!
//! Every node runs the exporter's own code: a config parsed from YAML, the scheduler and the
//! selection, the service loop, the recorder and its series budget, the port reader on a
//! fixture sysfs tree, and `/metrics` on its own port. **The RDMA bursts are not real: a fault
//! model replaces them.** Each device has a stand-in worker that answers each probe from the
//! faults active at the time (`--fault`), with a few percent of noise on the bandwidth, rare
//! single failures and `busy` deferrals; a burst takes its planned time, a probe into a dead
//! node or a dropping path takes `--probe-timeout`.
//!
//! ```text
//! cargo build --release --example fleet
//! target/release/examples/fleet --nodes 250 --rails 8 --per-tor 32 --interval 10s \
//!     --base-port 20000 --duration 3600s --seed 1 --out /tmp/fleet \
//!     --fault port:node=t3n5,device=mlx5_2,fraction=0,start=300s,end=900s
//! ```
//!
//! Node k is `t{k / per_tor}n{k % per_tor}` on 127.0.0.1:(base_port + k). Once every node
//! listens, `DIR/fleet.json` (the nodes, the faults with their Unix times) and `DIR/targets.json`
//! (Prometheus file_sd) are written.

mod fault;
mod node;
mod sysfs;
mod worker;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use rdma_probe_exporter::units::parse_positive_duration;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use fault::{Fault, FaultModel, Shape};
use worker::{Behaviour, Fleet};

/// What `fleet.json` says about the probes.
const FAULT_MODEL: &str = "The RDMA bursts are not run: a fault model answers each probe \
    (bandwidth = target x fault fraction x noise; failures, timeouts and busy deferrals as the \
    faults and rates say), everything else is the exporter's own code.";

/// How often the progress line is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Parser)]
#[command(
    about = "Runs a fleet of emulated rdma-probe-exporter nodes in one process",
    long_about = "Runs a fleet of emulated rdma-probe-exporter nodes in one process: every node \
        is the exporter's own scheduler, service loop, recorder, port reader (on a fixture sysfs \
        tree) and /metrics server, on 127.0.0.1:(base-port + k). The RDMA bursts are NOT real: \
        a fault model replaces them, answering each probe from the --fault specs active at the \
        time, with noise, rare failures and busy deferrals.",
    after_help = "Fault kinds (start/end: durations from the start, e.g. start=300s,end=900s; \
        end defaults to the end of the run; nodes by name t3n5 or index, devices mlx5_2 or 2, \
        ToRs t3 or 3):\n  \
        path:node=N,device=D,peer=M,fraction=F   probes N/D -> M at F of the pace (0: failing)\n  \
        port:node=N,device=D,fraction=F          every probe out of or into the port at F\n  \
        port_down:node=N,device=D                port DOWN in sysfs, every probe through it fails\n  \
        node:node=N                              powered off: exporter gone, probes into it fail\n  \
        reboot:node=N                            gone from start to end, then back with fresh state\n  \
        tor_uplink:tor=T,rail=R,fraction=F       cross-ToR probes of ToR T on rail R at F\n  \
        port_width:node=N,device=D               port trained at half width (2X: 200 Gb/s)\n  \
        port_speed:node=N,device=D               port trained at a lower speed (HDR: 200 Gb/s)\n  \
        pcie:node=N,device=D                     PCIe link at x8 of x16"
)]
pub struct Args {
    /// Nodes in the fleet.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub nodes: u32,
    /// Devices (rails) per node: mlx5_0 to mlx5_{rails-1}, device r on rail r.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub rails: u16,
    /// Nodes a ToR: node k is on ToR k / per-tor.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub per_tor: u32,
    /// The probe interval in every node's config (`defaults.interval`).
    #[arg(long, default_value = "10s", value_parser = parse_duration_flag)]
    pub interval: Duration,
    /// The burst duration in every node's config (`defaults.burst.duration`).
    #[arg(long, default_value = "100ms", value_parser = parse_duration_flag)]
    pub burst: Duration,
    /// Node k serves /metrics on 127.0.0.1:(base-port + k).
    #[arg(long, default_value_t = 20000)]
    pub base_port: u16,
    /// How long to run; then every node shuts down.
    #[arg(long, default_value = "3600s", value_parser = parse_duration_flag)]
    pub duration: Duration,
    /// Seeds the noise, failures and busy deferrals (the schedules follow the node names, as
    /// on a real fleet).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where fleet.json, targets.json and each node's config and sysfs tree go.
    #[arg(long)]
    pub out: PathBuf,
    /// How long a probe into a dead node, port or path takes to fail.
    #[arg(long, default_value = "2s", value_parser = parse_duration_flag)]
    pub probe_timeout: Duration,
    /// Share of probes that fail once, at random.
    #[arg(long, default_value_t = 0.002, value_parser = parse_share)]
    pub failure_rate: f64,
    /// Share of probes the responder defers as `busy`.
    #[arg(long, default_value_t = 0.01, value_parser = parse_share)]
    pub busy_rate: f64,
    /// A burst's bandwidth falls short of its target by up to this share.
    #[arg(long, default_value_t = 0.03, value_parser = parse_share)]
    pub noise: f64,
    /// A fault: KIND:key=value,... (see below); repeat for more.
    #[arg(long = "fault", value_name = "KIND:KEY=VALUE,...")]
    pub faults: Vec<String>,
}

fn parse_duration_flag(s: &str) -> Result<Duration, String> {
    parse_positive_duration(s).map_err(|e| e.to_string())
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: a share is a number from 0 to 1")),
    }
}

impl Args {
    fn shape(&self) -> Shape {
        Shape {
            nodes: self.nodes as usize,
            rails: self.rails,
            per_tor: self.per_tor as usize,
        }
    }

    /// The fault model, or the first spec that is wrong.
    fn model(&self) -> Result<FaultModel, String> {
        let shape = self.shape();
        let faults = self
            .faults
            .iter()
            .map(|spec| Fault::parse(spec, &shape))
            .collect::<Result<_, _>>()?;
        Ok(FaultModel { shape, faults })
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // A wrong fault spec is a usage error, like a wrong flag.
    if let Err(e) = args.model() {
        eprintln!("fleet: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fleet: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, signalled())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGINT or SIGTERM.
async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Runs the fleet for `--duration` or until `interrupted` resolves.
pub async fn run(
    args: Args,
    interrupted: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let model = args.model()?;
    let shape = model.shape;
    if usize::from(args.base_port) + shape.nodes > usize::from(u16::MAX) + 1 {
        return Err(format!(
            "--base-port {} + {} nodes runs past port 65535",
            args.base_port, shape.nodes
        ));
    }
    // The settings every node shares, checked once: a burst as long as the interval is the
    // config's error, before anything starts.
    let shared = Arc::new(node::shared_config(&shape, args.interval, args.burst));
    let first = format!("node: {}\n{shared}", shape.node_name(0));
    rdma_probe_exporter::config::Config::from_str(&first, "the generated config", |_| None)
        .map_err(|e| {
            format!(
                "--interval {:?} --burst {:?}: {e}",
                args.interval, args.burst
            )
        })?;
    let out = args.out.clone();
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    // Every tree as it is at the start, before any node reads it.
    sysfs::write_all(&out, &model, Duration::ZERO)
        .map_err(|e| format!("writing the sysfs fixtures under {}: {e}", out.display()))?;

    let mut listeners = Vec::with_capacity(shape.nodes);
    for k in 0..shape.nodes {
        let port = args.base_port + k as u16;
        let listener = node::bind(port)
            .await
            .map_err(|e| format!("node {}: binding 127.0.0.1:{port}: {e}", shape.node_name(k)))?;
        listeners.push(listener);
    }

    let started = Instant::now();
    let started_unix = unix_now();
    let behaviour = Behaviour {
        probe_timeout: args.probe_timeout,
        failure_rate: args.failure_rate,
        busy_rate: args.busy_rate,
        noise: args.noise,
        seed: args.seed,
    };
    let fleet = Arc::new(Fleet::new(model.clone(), behaviour, started));
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut nodes = Vec::with_capacity(shape.nodes);
    for (k, listener) in listeners.into_iter().enumerate() {
        // A node that starts powered off does not listen.
        let listener = (!model.node_down(k, Duration::ZERO)).then_some(listener);
        nodes.push(tokio::spawn(node::supervise(
            k,
            Arc::clone(&fleet),
            Arc::clone(&shared),
            out.clone(),
            args.base_port + k as u16,
            listener,
            shutdown_rx.clone(),
        )));
    }
    let follow = tokio::spawn(sysfs::follow_faults(out.clone(), model.clone(), started));

    let addresses: Vec<String> = (0..shape.nodes)
        .map(|k| format!("127.0.0.1:{}", u32::from(args.base_port) + k as u32))
        .collect();
    write_atomically(
        &out.join("targets.json"),
        &json!([{"targets": addresses, "labels": {}}]),
    )?;
    write_atomically(
        &out.join("fleet.json"),
        &manifest(&args, &model, started_unix, &addresses),
    )?;
    eprintln!(
        "fleet: {} nodes x {} rails ({} a ToR) on 127.0.0.1:{}..{}, interval {:?}, {} faults; manifest {}",
        shape.nodes,
        shape.rails,
        shape.per_tor,
        args.base_port,
        u32::from(args.base_port) + shape.nodes as u32 - 1,
        args.interval,
        model.faults.len(),
        out.join("fleet.json").display()
    );

    let progress = tokio::spawn(progress(Arc::clone(&fleet), args.duration));
    tokio::select! {
        () = node::sleep_until(started, args.duration) => {}
        () = interrupted => eprintln!("fleet: interrupted, stopping every node"),
    }
    let _ = shutdown.send(true);
    follow.abort();
    progress.abort();
    for node in nodes {
        let _ = node.await;
    }
    eprintln!(
        "fleet: stopped after {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn manifest(args: &Args, model: &FaultModel, started_unix: f64, addresses: &[String]) -> Value {
    let shape = model.shape;
    let nodes: Vec<Value> = (0..shape.nodes)
        .map(|k| {
            json!({
                "node": shape.node_name(k),
                "tor": format!("t{}", shape.tor_of(k)),
                "address": addresses[k],
            })
        })
        .collect();
    let faults: Vec<Value> = model
        .faults
        .iter()
        .map(|f| f.manifest(&shape, started_unix, args.duration))
        .collect();
    json!({
        "started_unix": started_unix,
        "interval_seconds": args.interval.as_secs_f64(),
        "duration_seconds": args.duration.as_secs_f64(),
        "rails": shape.rails,
        "per_tor": shape.per_tor,
        "burst_seconds": args.burst.as_secs_f64(),
        "nodes": nodes,
        "faults": faults,
        "noise": {
            "bandwidth_shortfall_max": args.noise,
            "failure_rate": args.failure_rate,
            "busy_rate": args.busy_rate,
            "probe_timeout_seconds": args.probe_timeout.as_secs_f64(),
            "seed": args.seed,
        },
        "fault_model": FAULT_MODEL,
    })
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes `value` to a temporary file next to `path` and renames it over `path`: a reader sees
/// the old file or the whole new one.
fn write_atomically(path: &Path, value: &Value) -> Result<(), String> {
    let new = path.with_extension("json.new");
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(&new, text + "\n")
        .and_then(|()| std::fs::rename(&new, path))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// One line every [`PROGRESS_EVERY`]: nodes up and what the probes did.
async fn progress(fleet: Arc<Fleet>, duration: Duration) {
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.tick().await;
    let mut last = 0;
    loop {
        ticker.tick().await;
        let c = &fleet.counts;
        let (ok, failed, busy) = (
            c.succeeded.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            c.busy.load(Ordering::Relaxed),
        );
        let total = ok + failed + busy;
        eprintln!(
            "fleet: {:.0}/{:.0} s, nodes up {}/{}, probes {total} ({:.0}/s): ok {ok}, failed {failed}, busy {busy}",
            fleet.started.elapsed().as_secs_f64(),
            duration.as_secs_f64(),
            c.nodes_up.load(Ordering::Relaxed),
            fleet.model.shape.nodes,
            (total - last) as f64 / PROGRESS_EVERY.as_secs_f64(),
        );
        last = total;
    }
}
