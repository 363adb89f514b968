//! Carrying out a validated [`Action`]: logging set-up, the async runtime for the commands that
//! do network I/O (`run`, `responder`, `probe`), and one function per subcommand. `devices`,
//! `check-config` and `simulate` run on the calling thread without a runtime.
//!
//! Results go to stdout through explicit writes (never `println!`, which panics on a closed
//! pipe such as `probe --json | head -c0`); errors and logs go to stderr.

use std::future::Future;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

use crate::memlock::{self, Allowance, Need};

use super::args::{Action, DevicesAction, LogFormat, Logging, ProbeAction, ResponderAction};
use super::devices;
use super::report::{self, ReportHeader};
use crate::config::Config;
use crate::http;
use crate::metrics::Metrics;
use crate::port::{DeviceFacts, PortError, Sysfs};
use crate::readiness::Readiness;
use crate::reload::ReloadRequest;
use crate::{exporter, prober, responder, verbs};

/// Installs the global tracing subscriber: stderr, text (colored only on a terminal) or JSON
/// lines, filtered by `--log-level` / `RUST_LOG`.
pub fn init_tracing(logging: &Logging) -> anyhow::Result<()> {
    let filter = EnvFilter::builder()
        .parse(&logging.filter)
        .with_context(|| format!("invalid log filter {:?}", logging.filter))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match logging.format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// Runs the action; `Ok(FAILURE)` when it ran and failed after reporting why itself (a probe
/// failure), `Err` when it could not run (the caller prints the error and exits 1).
pub fn execute(action: Action) -> anyhow::Result<ExitCode> {
    match action {
        Action::Responder(action) => on_runtime(run_responder(action)),
        Action::Probe(action) => on_runtime(run_probe(action)),
        Action::Devices(action) => run_devices(action),
        Action::CheckConfig(file) => run_check_config(&file),
        Action::Run {
            config,
            reload_endpoint,
            reload_token_file,
        } => {
            let access = match (reload_endpoint, reload_token_file) {
                (false, _) => http::ReloadAccess::Disabled,
                (true, None) => http::ReloadAccess::Loopback,
                (true, Some(file)) => {
                    http::ReloadAccess::token_file(&file).map_err(|e| anyhow::anyhow!("{e}"))?
                }
            };
            on_runtime(run_exporter(config, access))
        }
        Action::Simulate(config) => run_simulate(&config),
    }
}

/// At exit, how long to wait for tasks still running (a session being torn down) before
/// leaving anyway: a stuck peer must not keep the process alive.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Most async worker threads: the work is control-channel I/O (bursts run on their own
/// threads), so a handful is plenty even on a 128-core GPU node.
const MAX_WORKERS: usize = 4;

/// Runs `command` to its end on a multi-threaded tokio runtime started for it.
fn on_runtime(command: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("rdma-probe-async")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(command);
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

/// `simulate`: the report on stdout, progress on stderr.
fn run_simulate(config: &crate::simulate::SimulationConfig) -> anyhow::Result<ExitCode> {
    let report = crate::simulate::run(config, |t| {
        tracing::info!(hours = t.as_secs() / 3600, "simulated");
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(report.render().as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// `run`: the exporter, until SIGTERM/SIGINT; SIGHUP reloads the config.
async fn run_exporter(
    config_path: std::path::PathBuf,
    reload_access: http::ReloadAccess,
) -> anyhow::Result<ExitCode> {
    let shutdown = shutdown_signal()?;
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let config = Config::load(&config_path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let listen = *config.listen();
    let listeners = exporter::Listeners {
        metrics: TcpListener::bind(listen.metrics).await.with_context(|| {
            format!(
                "cannot listen on {} (listen.metrics in the config)",
                listen.metrics
            )
        })?,
        control: responder::listen(listen.control).with_context(|| {
            format!(
                "cannot listen on {} (listen.control in the config)",
                listen.control
            )
        })?,
        reload_access,
    };
    let (reload_tx, reload_rx) = exporter::reload_channel();
    let hangups = reload_tx.clone();
    let on_hangup = tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            if hangups.send(ReloadRequest { reply: None }).await.is_err() {
                return;
            }
        }
    });
    let result = exporter::run(
        config_path,
        config,
        listeners,
        (reload_tx, reload_rx),
        shutdown,
    )
    .await;
    on_hangup.abort();
    result.context("exporter failed")?;
    tracing::info!("exporter stopped");
    Ok(ExitCode::SUCCESS)
}

async fn run_probe(action: ProbeAction) -> anyhow::Result<ExitCode> {
    let header = ReportHeader::from_action(&action);
    tracing::debug!(
        target = %header.target,
        node = %action.settings.node_name,
        plan = ?action.plan,
        "probing"
    );
    // A probe pins one session's region: refuse up front with the limit and the fix, rather
    // than fail in memory registration with a bare ENOMEM.
    memlock::check(
        Need::default().probing([prober::session_region_bytes(&action.settings)]),
        Allowance::current(),
        "--message-size and --messages (or --tx-depth)",
    )?;
    if let Some((count, interval)) = action.ping {
        return super::ping::run(&action.settings, count, interval, action.json).await;
    }
    let mut failed = false;
    let mut print = |outcome: &prober::ProbeOutcome| -> anyhow::Result<()> {
        let mut stdout = std::io::stdout().lock();
        if action.json {
            let json = serde_json::to_string(outcome).context("serializing the probe outcome")?;
            writeln!(stdout, "{json}").context("writing to stdout")?;
        } else if let Some(table) = report::format_probe_report(&header, outcome) {
            stdout
                .write_all(table.as_bytes())
                .context("writing to stdout")?;
        }
        stdout.flush().context("writing to stdout")?;
        if !outcome.is_success() {
            failed = true;
            eprintln!(
                "error: {}",
                report::format_probe_error(&header.target, outcome)
            );
        }
        Ok(())
    };
    if let Some(options) = &action.perftest {
        let outcome = crate::perftest::probe_perftest(&action.settings, options).await;
        if !action.json {
            if let Some(version) = &outcome.perftest_server_version {
                println!(" perftest server : ib_write_bw {version}");
            }
        }
        print(&outcome)?;
    } else if action.bursts == 1 {
        print(&prober::probe_once(&action.settings).await)?;
    } else {
        // One warm session: rebuilt after a failure, as the exporter does.
        let mut warm = prober::WarmSession::new(action.settings.clone());
        for i in 0..action.bursts {
            if i > 0 && !action.pause.is_zero() {
                tokio::time::sleep(action.pause).await;
            }
            print(&warm.burst().await)?;
        }
        warm.close().await;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// How long scrapes in flight may take to finish at shutdown.
const ADMIN_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

async fn run_responder(action: ResponderAction) -> anyhow::Result<ExitCode> {
    // Handlers first: a SIGTERM that arrives while the device is being opened must still end
    // in a graceful shutdown, not in the default action (killed without cleanup).
    let signal = shutdown_signal()?;
    let limits = &action.settings;
    memlock::check(
        Need::serving(limits.max_sessions, limits.max_pinned_bytes),
        Allowance::current(),
        "--max-pinned",
    )?;
    let listener = responder::listen(action.listen)
        .with_context(|| format!("cannot listen on {} (--listen)", action.listen))?;
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    // One signal ends both servers.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        // An error means the sender is gone, which also means stop.
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let admin = match action.metrics_listen {
        Some(addr) => {
            let admin_listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?;
            let server = http::serve(
                admin_listener,
                metrics.clone(),
                readiness.clone(),
                stopped(stop_rx.clone()),
            );
            Some(tokio::spawn(server))
        }
        None => None,
    };
    let mut settings = action.settings;
    settings.pingers = responder::answering_pingers(
        &settings.devices,
        crate::metrics::budget::DEFAULT_SERIES_TTL,
    );
    let responder = responder::run(
        listener,
        settings,
        metrics.responder.clone(),
        readiness,
        async move {
            signal.await;
            let _ = stop_tx.send(true);
        },
    );
    // However the responder ends, its shutdown future (holding `stop_tx`) is dropped with it,
    // which stops the admin server too: a responder without its device does not linger.
    let result = responder.await.context("responder failed");
    if let Some(admin) = admin {
        match tokio::time::timeout(ADMIN_SHUTDOWN_GRACE, admin).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "admin HTTP server failed"),
            Err(_) => tracing::warn!("admin HTTP server did not stop in time"),
            _ => {}
        }
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves on the first SIGTERM (systemd, Kubernetes) or SIGINT (Ctrl-C).
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
    })
}

fn run_devices(action: DevicesAction) -> anyhow::Result<ExitCode> {
    let sysfs = Sysfs::new(&action.sysfs_root).excluding(action.exclude.iter().cloned());
    let verbs = verbs::list_devices_filtered(|name| !sysfs.is_excluded(name));
    let in_sysfs = match sysfs.devices() {
        Ok(names) => names,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list RDMA devices in sysfs");
            Vec::new()
        }
    };
    // No RDMA stack or no device is an error (exit 1) with verbs' message, which says what is
    // missing (kernel support, libibverbs, devices); sysfs alone still lists what it knows.
    let verbs = match verbs {
        Ok(list) => list,
        Err(e) if in_sysfs.is_empty() => return Err(e.into()),
        Err(e) => {
            eprintln!("warning: {e}; listing what sysfs says only");
            Vec::new()
        }
    };
    let mut names = in_sysfs;
    for d in &verbs {
        if !names.contains(&d.name) {
            names.push(d.name.clone());
        }
    }
    let facts = names
        .into_iter()
        .map(|name| {
            let facts = sysfs_facts(&sysfs, &name).map_err(|e| e.to_string());
            (name, facts)
        })
        .collect();
    let listing = devices::merge(&verbs, facts);
    let mut stdout = std::io::stdout().lock();
    if action.json {
        let text = serde_json::to_string_pretty(&listing).context("serializing the devices")?;
        writeln!(stdout, "{text}").context("writing to stdout")?;
    } else {
        stdout
            .write_all(devices::format(&listing).as_bytes())
            .context("writing to stdout")?;
    }
    stdout.flush().context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// A device's sysfs facts with every port's allowlisted counters (left out where they cannot
/// be read).
fn sysfs_facts(sysfs: &Sysfs, name: &str) -> Result<DeviceFacts, PortError> {
    let mut facts = sysfs.device(name)?;
    for port in &mut facts.ports {
        port.counters = sysfs
            .port_with_counters(name, port.port)
            .ok()
            .and_then(|f| f.counters);
    }
    Ok(facts)
}

/// `check-config`: the resolved config on stdout and exit 0, or the first error on stderr and
/// exit 1.
fn run_check_config(file: &std::path::Path) -> anyhow::Result<ExitCode> {
    match Config::load(file) {
        Ok(config) => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(config.render().as_bytes())
                .and_then(|()| stdout.flush())
                .context("writing to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::Cli;

    fn action(args: &[&str]) -> Action {
        let argv = std::iter::once("rdma-probe-exporter").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap().into_action().unwrap().1
    }

    /// `devices`, `check-config` and `simulate` start no runtime: run inside one, where starting
    /// another and blocking on it panics, each ends as it would on its own.
    #[test]
    fn devices_check_config_and_simulate_run_without_a_runtime() {
        let missing = std::env::temp_dir().join(format!("no-such-dir-{}", std::process::id()));
        let missing = missing.to_str().unwrap();
        let mut simulate = action(&["simulate", "--nodes", "2"]);
        if let Action::Simulate(config) = &mut simulate {
            config.duration = Duration::ZERO;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            // No device in this sysfs: what verbs lists, or verbs' error where there is none.
            let _ = execute(action(&["devices", "--sysfs-root", missing]));
            let check = execute(action(&["check-config", missing])).unwrap();
            assert_eq!(check, ExitCode::FAILURE);
            let simulated = execute(simulate).unwrap_err().to_string();
            assert!(simulated.contains("duration"), "{simulated}");
        });
    }
}
