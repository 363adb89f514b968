//! `rdma-probe-exporter` entry point: wiring only. The commands live in
//! [`rdma_probe_exporter::cli`], which starts the async runtime for those that need one.

use std::process::ExitCode;

use clap::Parser as _;
use rdma_probe_exporter::cli::{self, Cli};

fn main() -> ExitCode {
    // Usage errors (and --help/--version) print and exit here: 2 for errors, 0 for help.
    let (logging, action) = Cli::parse().into_action().unwrap_or_else(|e| e.exit());
    match cli::init_tracing(&logging).and_then(|()| cli::execute(action)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
