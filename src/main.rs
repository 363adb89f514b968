//! `rdma-probe-exporter` entry point: wiring only. The commands live in
//! [`rdma_probe_exporter::cli`].

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser as _;
use rdma_probe_exporter::cli::{self, Action, Cli, Logging};

/// At exit, how long to wait for tasks still running (a session being torn down) before
/// leaving anyway: a stuck peer must not keep the process alive.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Most async worker threads: the work is control-channel I/O (bursts run on their own
/// threads), so a handful is plenty even on a 128-core GPU node.
const MAX_WORKERS: usize = 4;

fn main() -> ExitCode {
    // Usage errors (and --help/--version) print and exit here: 2 for errors, 0 for help.
    let (logging, action) = Cli::parse().into_action().unwrap_or_else(|e| e.exit());
    match run(&logging, action) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(logging: &Logging, action: Action) -> anyhow::Result<ExitCode> {
    cli::init_tracing(logging)?;
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("rdma-probe-async")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(cli::execute(action));
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}
