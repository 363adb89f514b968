//! The command line as clap sees it ("low" args), and its one-time conversion into validated
//! settings ("high" args: [`Action`]).
//!
//! Why two layers (ripgrep's LowArgs → HiArgs): clap checks what a single flag can check (a
//! number, a unit, a range, flags that exclude each other); everything that needs several flags
//! at once (a burst plan, the auth choice) or a file (the PSK) is checked exactly once in
//! [`Cli::into_action`], before any network traffic or RDMA resource. The rest of the program
//! only ever sees [`ProbeSettings`](crate::prober::ProbeSettings) /
//! [`ResponderSettings`](crate::responder::ResponderSettings), never raw flags.
//!
//! Every refusal is a [`clap::Error`], so it prints like clap's own errors (`error: ...` plus the
//! usage line) and exits with status 2.
//!
//! One file per subcommand ([`run`], [`responder`], [`probe`], [`devices`], [`check_config`],
//! [`simulate`]): its flags, its examples, its validated form and the conversion between them.
//! [`common`] holds the flag groups and value parsers several subcommands share; this file the
//! top-level command line, the logging flags and [`Action`].

use std::path::PathBuf;

use clap::builder::styling::{AnsiColor, Styles};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

pub mod check_config;
pub mod common;
pub mod devices;
pub mod probe;
pub mod responder;
pub mod run;
pub mod simulate;

pub use check_config::CheckConfigArgs;
pub use devices::{DevicesAction, DevicesArgs};
pub use probe::{ProbeAction, ProbeArgs};
pub use responder::{ResponderAction, ResponderArgs};
pub use run::RunArgs;
pub use simulate::SimulateArgs;

pub use crate::config::DEFAULT_CONTROL_PORT;

const ABOUT: &str = "Measures RDMA links (InfiniBand, RoCE v2) with short, paced \
                     ib_write_bw-style RDMA WRITE bursts";

const LONG_ABOUT: &str = "\
Measures RDMA links (InfiniBand, RoCE v2) with short, paced ib_write_bw-style RDMA WRITE bursts.

Links that are up but slow (a port trained at half width, a bad cable, a wrong MTU, PFC trouble)
only show under traffic. Every node runs a responder; a prober sends it a burst of RDMA WRITEs over
an authenticated TCP control channel and reports bandwidth (Gb/s = 10^9 bit/s, MiB/s = 2^20 B/s, as
ib_write_bw prints them), message rate, the lowest short-window bandwidth, the longest completion
gap and whether the responder verified the data.

Exit status: 0 success; 1 the command ran and failed (the probe failed, no RDMA device, ...);
2 the command line is invalid (nothing was attempted).";

fn styles() -> Styles {
    Styles::styled()
        .header(AnsiColor::Yellow.on_default().bold())
        .usage(AnsiColor::Yellow.on_default().bold())
        .literal(AnsiColor::Green.on_default())
        .placeholder(AnsiColor::Cyan.on_default())
}

/// `rdma-probe-exporter`: the whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "rdma-probe-exporter",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    styles = styles(),
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Log format on stderr: `text` for people, `json` (one object per line) for log collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Text,
        help_heading = "Logging"
    )]
    pub log_format: LogFormat,

    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives.
    ///
    /// Directives as in RUST_LOG, e.g. `info,rdma_probe_exporter::prober=debug`. The flag wins
    /// over the RUST_LOG environment variable; without either the level is `info`.
    #[arg(
        long,
        global = true,
        env = "RUST_LOG",
        value_name = "FILTER",
        default_value = "info",
        value_parser = parse_log_filter,
        help_heading = "Logging"
    )]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the exporter: probe every configured peer on a schedule and export the results.
    ///
    /// Reads the YAML config (see `check-config`), opens the configured RDMA devices (default:
    /// every device with an ACTIVE port), serves other nodes' probes on the control port, probes
    /// every (local device, peer) path on the peer's device of the same rail with short paced
    /// RDMA WRITE bursts, and serves /metrics, /healthz, /readyz, POST /-/reload and a status
    /// page at / on the metrics address. Runs until SIGTERM/SIGINT; SIGHUP reloads the config.
    #[command(after_help = run::EXAMPLES)]
    Run(RunArgs),

    /// Serve probe sessions from other nodes (runs until SIGTERM/SIGINT).
    ///
    /// Accepts authenticated sessions on a TCP control port, sets up a memory region and RC QPs
    /// on a local RDMA port for each, lets the prober write its burst, verifies the written data
    /// and reports back. Limits on sessions, pinned memory and idle time keep a responder cheap
    /// on a busy node.
    #[command(after_help = responder::EXAMPLES)]
    Responder(ResponderArgs),

    /// Run one RDMA WRITE burst against a responder and print an ib_write_bw-like report.
    ///
    /// Connects to the responder's control port, authenticates, sets up the QPs (timed as
    /// "setup"), runs one burst of RDMA WRITEs from a local RDMA port to the responder's, and
    /// prints bandwidth, message rate, the lowest short-window bandwidth, the longest completion
    /// gap and whether the responder verified the data. Defaults are ib_write_bw's: 64 KiB
    /// messages, 5000 of them, TX depth 128, 1 QP, unpaced.
    #[command(after_help = probe::EXAMPLES)]
    Probe(ProbeArgs),

    /// List RDMA devices, ports, link rates, PCIe links, counters and GID tables.
    ///
    /// For each device: firmware, PCI address, PCIe link speed and width against their maximum
    /// (DEGRADED when below) and NUMA node. For each port: state, link layer, active/max MTU,
    /// link rate with its width and speed, what sysfs says (physical state, the `rate` file,
    /// the RoCE netdev's speed and MTU, and the link rate: the lower of the two), the non-zero
    /// allowlisted port counters, and every readable GID with its index, type and netdev. The
    /// GID a probe picks when --gid-index is not given is marked with `*`.
    #[command(after_help = devices::EXAMPLES)]
    Devices(DevicesArgs),

    /// Check a config file and print what the exporter would do with it.
    ///
    /// Parses and validates the YAML config (with `${VAR}` references substituted from the
    /// environment), builds every peer's burst plan, and prints the resolved node, listen
    /// addresses, auth mode, devices and every peer with its effective settings, skipped peers
    /// included. Touches no RDMA device and no network, and does not read the PSK file.
    #[command(after_help = check_config::EXAMPLES)]
    CheckConfig(CheckConfigArgs),

    /// Simulate a cluster's probing in virtual time, with the real scheduler and selection.
    ///
    /// Every node of a synthetic cluster (nodes in ToRs of --nodes-per-tor, --rails devices
    /// each, one per rail) runs the exporter's own scheduler and peer selection; a burst takes
    /// --burst of device time and a responder device serves one burst at a time (a second prober
    /// gets `busy` and retries). Touches no RDMA device and no network.
    #[command(after_help = simulate::EXAMPLES)]
    Simulate(SimulateArgs),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// How to log, from the global flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logging {
    pub format: LogFormat,
    /// A filter already known to parse (checked by clap).
    pub filter: String,
}

/// What to do, fully validated (`CheckConfig` carries the file to check: checking it is the
/// command itself, so a bad file is its failure, exit 1, not a usage error).
#[derive(Debug)]
pub enum Action {
    Run {
        config: PathBuf,
        /// `--enable-reload-endpoint`, and its token file if any.
        reload_endpoint: bool,
        reload_token_file: Option<PathBuf>,
    },
    Responder(ResponderAction),
    Probe(ProbeAction),
    Devices(DevicesAction),
    CheckConfig(PathBuf),
    Simulate(Box<crate::simulate::SimulationConfig>),
}

impl Cli {
    /// Turns the parsed flags into validated settings; the only place flags are interpreted.
    pub fn into_action(self) -> Result<(Logging, Action), clap::Error> {
        let logging = Logging {
            format: self.log_format,
            filter: self.log_level,
        };
        let action = match self.command {
            Command::Responder(args) => Action::Responder(args.into_action()?),
            Command::Probe(args) => Action::Probe(args.into_action()?),
            Command::Devices(args) => Action::Devices(args.into_action()),
            Command::CheckConfig(args) => Action::CheckConfig(args.file),
            Command::Simulate(args) => Action::Simulate(Box::new(args.into_config()?)),
            Command::Run(args) => Action::Run {
                config: args.config,
                reload_endpoint: args.enable_reload_endpoint,
                reload_token_file: args.reload_token_file,
            },
        };
        Ok((logging, action))
    }
}

/// A validation error that prints like clap's own: `error: ...`, the subcommand's usage, exit 2.
fn usage_error(subcommand: &str, kind: ErrorKind, message: impl std::fmt::Display) -> clap::Error {
    let mut cmd = Cli::command();
    // Building sets each subcommand's full bin name, so the usage line reads
    // `rdma-probe-exporter probe ...`.
    cmd.build();
    match cmd.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(kind, message),
        None => cmd.error(kind, message),
    }
}

/// A tracing filter that parses; empty (e.g. `RUST_LOG=` exported with no value) means the
/// default `info`, not "errors only" as an empty `EnvFilter` would.
fn parse_log_filter(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Ok("info".to_owned());
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| {
            format!(
                "{e}; expected a level (error, warn, info, debug, trace) or directives such as \
                 info,rdma_probe_exporter::prober=debug"
            )
        })
}

/// The command line `args` (without the program name), parsed and validated.
#[cfg(test)]
fn parse(args: &[&str]) -> Result<(Logging, Action), clap::Error> {
    let mut full = vec!["rdma-probe-exporter"];
    full.extend_from_slice(args);
    Cli::try_parse_from(full)?.into_action()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn log_flags() {
        let (logging, _) =
            parse(&["--log-format", "json", "--log-level", "debug", "devices"]).unwrap();
        assert_eq!(logging.format, LogFormat::Json);
        assert_eq!(logging.filter, "debug");
        let (logging, _) =
            parse(&["devices", "--log-level", "warn,rdma_probe_exporter=trace"]).unwrap();
        assert_eq!(logging.filter, "warn,rdma_probe_exporter=trace");
        let (logging, _) = parse(&["devices", "--log-level", ""]).unwrap();
        assert_eq!(logging.filter, "info");
        let e = parse(&["devices", "--log-level", "x=loud"]).unwrap_err();
        assert!(e.to_string().contains("--log-level"), "{e}");
        let e = parse(&["devices", "--log-format", "xml"]).unwrap_err();
        assert!(e.to_string().contains("--log-format"), "{e}");
    }
}
