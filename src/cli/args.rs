//! The command line as clap sees it ("low" args), and its one-time conversion into validated
//! settings ("high" args: [`Action`]).
//!
//! Why two layers (ripgrep's LowArgs → HiArgs): clap checks what a single flag can check (a
//! number, a unit, a range, flags that exclude each other); everything that needs several flags
//! at once (a burst plan, the auth choice) or a file (the PSK) is checked exactly once in
//! [`Cli::into_action`], before any network traffic or RDMA resource. The rest of the program
//! only ever sees [`ProbeSettings`] / [`ResponderSettings`], never raw flags.
//!
//! Every refusal is a [`clap::Error`], so it prints like clap's own errors (`error: ...` plus the
//! usage line) and exits with status 2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::styling::{AnsiColor, Styles};
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::burst::plan::{MAX_QPS, MAX_TX_DEPTH};
use crate::burst::{BurstLength, BurstPlan};
use crate::config::units::{BYTE_SIZE_FORMS, RATE_LIMIT_FORMS};
use crate::config::{parse_positive_duration, ByteSize, RateLimit};
use crate::control::{AuthMode, Keys, Psk};
use crate::perftest::PerftestOptions;
use crate::prober::ProbeSettings;
use crate::responder::{ResponderSettings, ServedDevice};
use crate::verbs::LocalPort;
use crate::verbs::PathMtu;

pub use crate::config::DEFAULT_CONTROL_PORT;

/// perftest's `-n` default for ib_write_bw (`DEF_ITERS_WB`).
pub const DEFAULT_MESSAGES: u64 = 5000;

/// Where `--node` falls back to when neither the flag nor `NODE_NAME` is set.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

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

const RESPONDER_EXAMPLES: &str = "\
Examples:
  # Serve probes on the default port, authenticated by a pre-shared key:
  rdma-probe-exporter responder --psk-file /etc/rdma-probe/psk

  # Serve on one device only, on the storage network's address:
  rdma-probe-exporter responder --listen 10.0.0.1:18516 --device mlx5_0 --psk-file psk

  # Serve one device per rail in one process; a prober on rail 1 gets mlx5_1:
  rdma-probe-exporter responder --device mlx5_0:0 --device mlx5_1:1 --psk-file psk

  # Also let Prometheus scrape the responder's counters and process CPU/memory:
  rdma-probe-exporter responder --psk-file psk --metrics-listen 0.0.0.0:9587

Runs until SIGTERM or SIGINT, then stops accepting, releases every session's QPs and memory,
and exits 0.";

const PROBE_EXAMPLES: &str = "\
Examples:
  # One ib_write_bw-like burst (5000 x 64 KiB, unpaced) against a responder:
  rdma-probe-exporter probe 10.0.0.2:18516 --psk-file /etc/rdma-probe/psk

  # Half a second at 25% of the link rate, 4 QPs, as JSON:
  rdma-probe-exporter probe node-b:18516 --psk-file psk --duration 500ms --rate-limit 25% \\
      --qps 4 --json

Exit status 0 only if the burst ran and the responder verified its data.";

const DEVICES_EXAMPLES: &str = "\
Examples:
  rdma-probe-exporter devices
  rdma-probe-exporter devices --exclude mlx5_8
  rdma-probe-exporter devices --json | jq '.[].ports[].sysfs.link_rate_bits_per_second'
  rdma-probe-exporter devices --sysfs-root /host/sys   # a container with the host's /sys there";

const CHECK_CONFIG_EXAMPLES: &str = "\
Examples:
  NODE_NAME=gpu-a01 rdma-probe-exporter check-config /etc/rdma-probe/config.yaml

Exit status 0 if the file is valid (the resolved config is printed on stdout), 1 if not (the
first error, with its file, line, column and field, is printed on stderr).";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  # The defaults: 10,000 nodes, 8 rails, 32 nodes per ToR, 6 hours (about a minute in release):
  rdma-probe-exporter simulate

  # A 100-node cluster with a longer round and a larger sample:
  rdma-probe-exporter simulate --nodes 100 --round 20m --sample 24

Prints, per node (min / median / max) and for the cluster: paths, series on /metrics, duty
cycle, the longest gaps between probes (same-ToR paths, ToR pairs per rail, any path) against
the bounds the selection guarantees, the most bursts aimed at one responder device at once and
the share of busy answers. See docs/scale.md.";

const RUN_EXAMPLES: &str = "\
Examples:
  NODE_NAME=gpu-a01 rdma-probe-exporter run --config /etc/rdma-probe/config.yaml
  curl -s localhost:9587/metrics | grep '^rdma_probe_success'
  kill -HUP <pid>                                  # reload the config
  # with --enable-reload-endpoint:
  curl -s -X POST -H 'X-Rdma-Probe-Reload: 1' localhost:9587/-/reload

Check a file first with `check-config`. The exporter reloads the file by itself when its content
changes (also a Kubernetes ConfigMap update); a file that does not load is refused, the previous
config keeps running and rdma_probe_config_reload_success drops to 0. SIGTERM ends the running
burst within 2 s, closes every session and exits 0.";

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
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),

    /// Serve probe sessions from other nodes (runs until SIGTERM/SIGINT).
    ///
    /// Accepts authenticated sessions on a TCP control port, sets up a memory region and RC QPs
    /// on a local RDMA port for each, lets the prober write its burst, verifies the written data
    /// and reports back. Limits on sessions, pinned memory and idle time keep a responder cheap
    /// on a busy node.
    #[command(after_help = RESPONDER_EXAMPLES)]
    Responder(ResponderArgs),

    /// Run one RDMA WRITE burst against a responder and print an ib_write_bw-like report.
    ///
    /// Connects to the responder's control port, authenticates, sets up the QPs (timed as
    /// "setup"), runs one burst of RDMA WRITEs from a local RDMA port to the responder's, and
    /// prints bandwidth, message rate, the lowest short-window bandwidth, the longest completion
    /// gap and whether the responder verified the data. Defaults are ib_write_bw's: 64 KiB
    /// messages, 5000 of them, TX depth 128, 1 QP, unpaced.
    #[command(after_help = PROBE_EXAMPLES)]
    Probe(ProbeArgs),

    /// List RDMA devices, ports, link rates, PCIe links, counters and GID tables.
    ///
    /// For each device: firmware, PCI address, PCIe link speed and width against their maximum
    /// (DEGRADED when below) and NUMA node. For each port: state, link layer, active/max MTU,
    /// link rate with its width and speed, what sysfs says (physical state, the `rate` file,
    /// the RoCE netdev's speed and MTU, and the link rate: the lower of the two), the non-zero
    /// allowlisted port counters, and every readable GID with its index, type and netdev. The
    /// GID a probe picks when --gid-index is not given is marked with `*`.
    #[command(after_help = DEVICES_EXAMPLES)]
    Devices(DevicesArgs),

    /// Check a config file and print what the exporter would do with it.
    ///
    /// Parses and validates the YAML config (with `${VAR}` references substituted from the
    /// environment), builds every peer's burst plan, and prints the resolved node, listen
    /// addresses, auth mode, devices and every peer with its effective settings, skipped peers
    /// included. Touches no RDMA device and no network, and does not read the PSK file.
    #[command(after_help = CHECK_CONFIG_EXAMPLES)]
    CheckConfig(CheckConfigArgs),

    /// Simulate a cluster's probing in virtual time, with the real scheduler and selection.
    ///
    /// Every node of a synthetic cluster (nodes in ToRs of --nodes-per-tor, --rails devices
    /// each, one per rail) runs the exporter's own scheduler and peer selection; a burst takes
    /// --burst of device time and a responder device serves one burst at a time (a second prober
    /// gets `busy` and retries). Touches no RDMA device and no network.
    #[command(after_help = SIMULATE_EXAMPLES)]
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

/// Which local RDMA port to use (shared by `responder` and `probe`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Local RDMA port")]
pub struct LocalPortArgs {
    /// RDMA device name, e.g. mlx5_0 or rxe0 (default: the first device with an active port).
    #[arg(long, value_name = "NAME", value_parser = parse_name)]
    pub device: Option<String>,

    /// Port number on the device, counting from 1.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub port: u8,

    /// GID table index (default: the port's global IPv4-mapped RoCE v2 GID, as ib_write_bw picks).
    ///
    /// `devices` lists the GIDs of each port and marks the default one.
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
}

impl LocalPortArgs {
    fn into_local_port(self) -> LocalPort {
        LocalPort {
            device: self.device,
            port: self.port,
            gid_index: self.gid_index,
        }
    }
}

/// Which local RDMA devices the responder serves.
#[derive(Debug, Args)]
#[command(next_help_heading = "Local RDMA devices")]
pub struct ServedDeviceArgs {
    /// RDMA device to serve, optionally with its rail: mlx5_0 or mlx5_0:0; repeat for each
    /// device (default: the first device with an active port).
    ///
    /// A prober asks for a device by name, or by rail (`probe --peer-rail`, as the exporter
    /// does); one that asks for neither gets the first --device. Each device and each rail may
    /// be given once. --port and --gid-index apply to every device.
    #[arg(
        long = "device",
        value_name = "NAME[:RAIL]",
        value_parser = parse_served_device
    )]
    pub devices: Vec<DeviceArg>,

    /// Port number on every device, counting from 1.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub port: u8,

    /// GID table index on every device (default: each port's global IPv4-mapped RoCE v2 GID, as
    /// ib_write_bw picks).
    ///
    /// `devices` lists the GIDs of each port and marks the default one.
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
}

/// One `--device NAME[:RAIL]` of the responder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceArg {
    pub name: String,
    pub rail: Option<u16>,
}

impl ServedDeviceArgs {
    /// The served devices: one per --device, or the first device with an active port. A device
    /// or a rail given twice is refused.
    fn into_served(self, subcommand: &str) -> Result<Vec<ServedDevice>, clap::Error> {
        let refuse = |message: String| usage_error(subcommand, ErrorKind::ValueValidation, message);
        for (i, d) in self.devices.iter().enumerate() {
            let earlier = &self.devices[..i];
            if earlier.iter().any(|e| e.name == d.name) {
                return Err(refuse(format!(
                    "--device {} is given twice; give each device once",
                    d.name
                )));
            }
            if let Some(rail) = d.rail {
                if let Some(e) = earlier.iter().find(|e| e.rail == Some(rail)) {
                    return Err(refuse(format!(
                        "--device: rail {rail} is given to both {} and {}; each rail has one \
                         device",
                        e.name, d.name
                    )));
                }
            }
        }
        let local = |device: Option<String>| LocalPort {
            device,
            port: self.port,
            gid_index: self.gid_index,
        };
        if self.devices.is_empty() {
            return Ok(vec![ServedDevice {
                local: local(None),
                rail: None,
            }]);
        }
        Ok(self
            .devices
            .iter()
            .map(|d| ServedDevice {
                local: local(Some(d.name.clone())),
                rail: d.rail,
            })
            .collect())
    }
}

/// How the control channel is authenticated; a key file (with, during a rollover, the previous one) or --no-auth is required.
#[derive(Debug, Args)]
#[command(next_help_heading = "Authentication (a key file or --no-auth is required)")]
pub struct AuthArgs {
    /// File holding the pre-shared key both ends use: at least 32 random bytes, base64-encoded on
    /// one line (`head -c 32 /dev/urandom | base64`), e.g. a mounted Kubernetes Secret.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,

    /// During a key rollover, the key being replaced: it is accepted (and tried) next to
    /// --psk-file's, so nodes that still hold it keep working while the new key spreads
    /// (docs/security.md, "Rotating the key").
    #[arg(long, value_name = "FILE", requires = "psk_file")]
    pub previous_psk_file: Option<PathBuf>,

    /// Run the control channel without authentication (must be said explicitly).
    ///
    /// Anyone who can reach the control port can then make a responder pin memory and learn its
    /// QP numbers and keys. Both ends must agree: a --no-auth prober cannot talk to a PSK responder.
    #[arg(long, conflicts_with_all = ["psk_file", "previous_psk_file"])]
    pub no_auth: bool,
}

impl AuthArgs {
    /// Loads the key, or refuses when neither choice was made: secure by default
    /// (docs/architecture.md, "Authentication").
    fn into_auth(self, subcommand: &str) -> Result<AuthMode, clap::Error> {
        // PskError never contains key material (see control::auth).
        let load = |path: &PathBuf, flag: &str| {
            Psk::load(path).map_err(|e| {
                usage_error(
                    subcommand,
                    ErrorKind::ValueValidation,
                    format!("{flag}: {e}"),
                )
            })
        };
        match (self.psk_file, self.no_auth) {
            (Some(path), _) => {
                let current = load(&path, "--psk-file")?;
                let previous = self
                    .previous_psk_file
                    .map(|p| load(&p, "--previous-psk-file"))
                    .transpose()?;
                Ok(AuthMode::Psk(Keys::new(current, previous)))
            }
            (None, true) => Ok(AuthMode::None),
            (None, false) => Err(usage_error(
                subcommand,
                ErrorKind::MissingRequiredArgument,
                "authentication is required: pass --psk-file FILE (a pre-shared key of at least \
                 32 random bytes, base64-encoded, that both ends share), or --no-auth to run the control channel without \
                 authentication explicitly",
            )),
        }
    }
}

/// This node's name (shared by `responder` and `probe`).
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// This node's name, sent in the handshake for the peer's logs and metrics
    /// [default: $NODE_NAME if set and not empty, else the host name].
    #[arg(long, value_name = "NAME", value_parser = parse_name)]
    pub node: Option<String>,
}

/// The environment variable Kubernetes manifests set from `spec.nodeName` (the downward API), so
/// every pod of a DaemonSet knows its node's name.
const NODE_NAME_ENV: &str = "NODE_NAME";

impl NodeArgs {
    /// `--node`, else `NODE_NAME`, else the host name. Read here rather than through clap's
    /// `env` so that an empty `NODE_NAME` (a manifest with the field unset) falls back to the
    /// host name instead of being refused as an empty `--node`.
    fn into_node_name(self, subcommand: &str) -> Result<String, clap::Error> {
        if let Some(node) = self.node {
            return Ok(node);
        }
        let invalid = |detail: String| {
            usage_error(
                subcommand,
                ErrorKind::ValueValidation,
                format!("cannot determine this node's name ({detail}); pass --node NAME"),
            )
        };
        match std::env::var(NODE_NAME_ENV) {
            Ok(name) if !name.is_empty() => {
                parse_name(&name).map_err(|e| invalid(format!("{NODE_NAME_ENV}: {e}")))
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(invalid(format!("{NODE_NAME_ENV} is not valid UTF-8")))
            }
            _ => hostname().map_err(invalid),
        }
    }
}

/// `responder` flags.
#[derive(Debug, Args)]
pub struct ResponderArgs {
    /// TCP address (IP:PORT) for the control channel.
    // The help text is an attribute, not the doc comment: rustdoc would read `[::]` as a link.
    #[arg(long, value_name = "ADDR", help = "TCP address (IP:PORT) for the control channel, e.g. 10.0.0.1:18516 or [::]:18516", default_value_t = SocketAddr::from(([0, 0, 0, 0], DEFAULT_CONTROL_PORT)))]
    pub listen: SocketAddr,

    // Help as an attribute for the same reason as --listen.
    #[arg(
        long,
        value_name = "ADDR",
        help = "Also serve /metrics, /healthz and /readyz over HTTP on this address (IP:PORT), e.g. 0.0.0.0:9587; off when absent"
    )]
    pub metrics_listen: Option<SocketAddr>,

    /// Deadline for each control exchange with a prober (e.g. 10s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_flag)]
    pub timeout: Duration,

    #[command(flatten)]
    pub node: NodeArgs,

    /// Most concurrent sessions; more are refused.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        value_parser = clap::value_parser!(u32).range(1..=65536),
        help_heading = "Limits"
    )]
    pub max_sessions: u32,

    /// Most memory registered (pinned) across all sessions, e.g. 1GiB or 512MiB; a session that
    /// would exceed it is refused.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "1GiB",
        value_parser = parse_byte_size,
        help_heading = "Limits"
    )]
    pub max_pinned: ByteSize,

    /// Most memory one session's regions may take, e.g. 64MiB. A burst whose messages fit is
    /// verified message by message (each lands at its own offset); a longer one over its last
    /// messages, as many as fit.
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "64MiB",
        value_parser = parse_byte_size,
        help_heading = "Limits"
    )]
    pub max_session_memory: ByteSize,

    /// Most connections authenticating at once; more are refused at once (strangers cannot
    /// use up the session limit: a session permit is taken only after authentication).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        value_parser = clap::value_parser!(u32).range(1..=4096),
        help_heading = "Limits"
    )]
    pub max_handshakes: u32,

    /// A session with no control message for this long between bursts is closed and its
    /// memory freed (e.g. 60s, 5m); the prober rebuilds it for its next burst. During a burst
    /// the responder waits for the burst's own deadline instead.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5m",
        value_parser = parse_duration_flag,
        help_heading = "Limits"
    )]
    pub idle_timeout: Duration,

    #[command(flatten)]
    pub devices: ServedDeviceArgs,

    #[command(flatten)]
    pub auth: AuthArgs,
}

/// How long one probe burst runs: at most one of the three.
#[derive(Debug, Args)]
#[command(next_help_heading = "Burst")]
#[group(multiple = false)]
pub struct LengthArgs {
    /// Burst length in messages, over all QPs together (ib_write_bw's -n counts per QP)
    /// [default: 5000].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: Option<u64>,

    /// Burst length in payload bytes, rounded up to whole messages, e.g. 256MiB.
    #[arg(long, value_name = "BYTES", value_parser = parse_byte_size)]
    pub bytes: Option<ByteSize>,

    /// Burst length in time from the first post, e.g. 500ms (then the send queues drain).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_flag)]
    pub duration: Option<Duration>,
}

impl LengthArgs {
    fn into_length(self) -> BurstLength {
        match (self.messages, self.bytes, self.duration) {
            (_, _, Some(d)) => BurstLength::Duration(d),
            (_, Some(b), _) => BurstLength::Bytes(b.bytes()),
            (Some(n), _, _) => BurstLength::Messages(n),
            (None, None, None) => BurstLength::Messages(DEFAULT_MESSAGES),
        }
    }
}

/// `probe` flags.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The responder's control address.
    // The help text is an attribute, not the doc comment: rustdoc would read `[IPv6]` as a link.
    #[arg(
        value_name = "HOST:PORT",
        value_parser = parse_target,
        required_unless_present = "perftest",
        conflicts_with = "perftest",
        help = "The responder's control address: HOST:PORT, [IPv6]:PORT, or HOST (port 18516)"
    )]
    pub target: Option<String>,

    /// Probe a stock ib_write_bw server instead of a responder (HOST:PORT, or HOST for port
    /// 18515): one burst into the server's buffer, whose report then shows our figures.
    ///
    /// The server serves this one probe and exits. Its -s must be at least --size, its -q must
    /// equal --qps, and on InfiniBand both sides use a GID or neither (its -x, our --gid-index);
    /// no authentication (perftest has none). See docs/perftest.md.
    #[arg(
        long,
        value_name = "HOST:PORT",
        value_parser = parse_perftest_target,
        conflicts_with_all = ["psk_file", "no_auth", "peer_rail", "bursts"],
    )]
    pub perftest: Option<String>,

    /// With --perftest: the server runs with --report_gbits, so send its report in Gb/s (the
    /// report carries no unit; MiB/s otherwise).
    #[arg(long)]
    pub perftest_report_gbits: bool,

    /// Poll the completion queue all through the burst, as ib_write_bw does, instead of
    /// sleeping through pacing gaps and blocking on the completion channel.
    ///
    /// Costs a whole CPU for the burst. For comparing our figures with perftest's on the same
    /// link like for like (docs/perftest.md, "Calibration"); the exporter never busy-polls.
    #[arg(long)]
    pub busy_poll: bool,

    /// Print one JSON object per burst (the probe outcome) on stdout instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Run this many bursts, one after another, on one warm session (the exporter's way:
    /// setup is paid once; `burst_start_seconds` shows what a warm burst costs to start).
    #[arg(long, value_name = "N", default_value = "1", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub bursts: u32,

    /// With --bursts: wait this long after each burst before the next (e.g. 60s, as the
    /// exporter's interval). A session the responder closed as idle meanwhile is rebuilt
    /// (`new_session`), not counted as a failure.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_pause)]
    pub pause: Duration,

    /// Deadline for each control exchange, and how long completions may stop arriving before
    /// the burst is abandoned (e.g. 10s, 1m). A paced --messages/--bytes burst also ends at
    /// twice its planned length plus this, reporting what it measured so far; a --duration
    /// burst at its duration plus this.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_flag)]
    pub timeout: Duration,

    /// Most memory the session's regions may take on each end, e.g. 64MiB: a burst whose
    /// messages fit is verified message by message, a longer one over its last messages.
    #[arg(long, value_name = "BYTES", default_value = "64MiB", value_parser = parse_byte_size)]
    pub max_session_memory: ByteSize,

    #[command(flatten)]
    pub node: NodeArgs,

    /// Message (RDMA WRITE) size in bytes; accepts units: 65536, 64K, 64KiB, 1MiB, 64KB (= 64000).
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "65536",
        value_parser = parse_byte_size,
        help_heading = "Burst"
    )]
    pub size: ByteSize,

    #[command(flatten)]
    pub length: LengthArgs,

    /// Pace the burst: 10Gbps, 1200MiB/s, 50000msg/s, 25% of the link rate, or `unpaced` (the
    /// default).
    ///
    /// Bits per second (50Mbps, 10Gbps, 1Tbps), bytes per second (1200MiB/s, 1GiB/s, 500MB/s),
    /// messages per second (50000msg/s) or a percentage of the lower link rate of both ends
    /// (25%). `Gb/s` and `MBps` are refused as ambiguous: write Gbps for bits, GB/s or GiB/s for
    /// bytes. Unpaced (no limit, or `unpaced`), the burst is a capacity check: it runs as fast as
    /// the path goes, and its target is the lower link rate of both ends.
    #[arg(
        long,
        value_name = "RATE",
        value_parser = parse_pace,
        help_heading = "Burst"
    )]
    pub rate_limit: Option<Pace>,

    /// Number of RC QPs the burst is spread over, 1 to 64 (on RoCE v2 each may take its own
    /// ECMP path).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=i64::from(MAX_QPS)),
        help_heading = "Burst"
    )]
    pub qps: u16,

    /// Send queue depth per QP: most RDMA WRITEs outstanding, 1 to 15000.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 128,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_TX_DEPTH)),
        help_heading = "Burst"
    )]
    pub tx_depth: u32,

    /// Request a completion every N WRs, 1 to --tx-depth [default: 1 above 8 KiB, else 100].
    ///
    /// As ib_write_bw: the post list size when --post-list is above 1, else 1 for messages above
    /// 8 KiB and 100 for smaller ones, capped at --tx-depth. Whatever the value, the WR that
    /// would fill the send queue and the last WR are always signaled.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Burst"
    )]
    pub cq_mod: Option<u32>,

    /// WRs per ibv_post_send call, 1 to --tx-depth.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Burst"
    )]
    pub post_list: u32,

    /// Upper bound for the path MTU in bytes: 256, 512, 1024, 2048 or 4096
    /// [default: the lower active MTU of both ends].
    #[arg(
        long,
        value_name = "BYTES",
        value_parser = parse_mtu,
        help_heading = "Path"
    )]
    pub mtu: Option<u32>,

    /// Traffic class of the packets (RoCE v2: DSCP << 2), 0 to 255; use the lossless class to
    /// test PFC/ECN.
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "Path")]
    pub traffic_class: u8,

    /// InfiniBand service level, 0 to 15.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        value_parser = clap::value_parser!(u8).range(0..=15),
        help_heading = "Path"
    )]
    pub service_level: u8,

    /// Local ACK timeout exponent, 0 to 31 (ib_write_bw's -u): 4.096 µs x 2^N before a WRITE is
    /// retransmitted (14 = 67 ms). Raise it on links with long ACK delays (e.g. emulated NICs).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 14,
        value_parser = clap::value_parser!(u8).range(0..=31),
        help_heading = "Path"
    )]
    pub qp_timeout: u8,

    /// Ask the responder for its device on rail N (as the exporter does) [default: the
    /// responder's first device].
    ///
    /// A responder that serves several devices (`responder --device mlx5_0:0 --device mlx5_1:1`)
    /// answers with the one on this rail, and refuses the probe when it has none there. The
    /// report's peer device says which one answered.
    #[arg(long, value_name = "N", help_heading = "Path")]
    pub peer_rail: Option<u16>,

    #[command(flatten)]
    pub local: LocalPortArgs,

    #[command(flatten)]
    pub auth: AuthArgs,
}

/// `devices` flags.
#[derive(Debug, Args)]
pub struct DevicesArgs {
    /// Print the device list as JSON (an array of devices with their ports, GIDs and, under
    /// `sysfs`, what sysfs says about each port).
    #[arg(long)]
    pub json: bool,

    /// Never open, query or read this device, not even in sysfs (repeatable; as the config's
    /// `exclude_devices`: some firmware-restricted NICs flood the kernel log when read).
    #[arg(long, value_name = "DEVICE", value_parser = parse_name)]
    pub exclude: Vec<String>,

    /// Where sysfs is mounted (a container may have the host's at another path).
    #[arg(long, value_name = "DIR", default_value = crate::port::SYSTEM_ROOT)]
    pub sysfs_root: PathBuf,
}

/// `run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The config file (YAML); reloaded when it changes, on SIGHUP and on POST /-/reload.
    #[arg(long, short = 'c', value_name = "FILE", env = "RDMA_PROBE_CONFIG")]
    pub config: PathBuf,

    /// Serve POST /-/reload (off by default; SIGHUP and a change of the file reload without it):
    /// for clients on this host that send the header X-Rdma-Probe-Reload, or with
    /// --reload-token-file for clients anywhere that send the token.
    #[arg(long)]
    pub enable_reload_endpoint: bool,

    /// With --enable-reload-endpoint: a file whose first line (16 characters or more) POST
    /// /-/reload must send as `Authorization: Bearer TOKEN`, from any address.
    #[arg(long, value_name = "FILE", requires = "enable_reload_endpoint")]
    pub reload_token_file: Option<PathBuf>,
}

/// `check-config` arguments.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The config file (YAML).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// `simulate`: the cluster and the config, as the config file would set them.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Nodes in the cluster.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(2..=crate::simulate::MAX_NODES as i64))]
    pub nodes: u32,

    /// RDMA devices per node, one per rail.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub rails: u16,

    /// Nodes per ToR (the group label's value); the last ToR may hold fewer.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes_per_tor: u32,

    /// Virtual time to simulate, e.g. 6h.
    #[arg(long, value_name = "DURATION", default_value = "6h", value_parser = parse_duration_flag)]
    pub duration: Duration,

    /// `defaults.interval`: the wanted time between two probes of a path.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration_flag)]
    pub interval: Duration,

    /// `defaults.jitter`, a percentage of the interval (0% to 50%).
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = parse_jitter)]
    pub jitter: f64,

    /// `defaults.burst.duration`: device time of one burst.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration_flag)]
    pub burst: Duration,

    /// `schedule.duty_cycle`: share of wall time each device may burst (0.1% to 100%).
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_duty_cycle)]
    pub duty_cycle: f64,

    /// `selection.max_peers`: up to this many peers, the full mesh.
    #[arg(long, value_name = "N", default_value_t = crate::config::DEFAULT_MAX_PEERS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_peers: u32,

    /// `selection.sample`: other-group paths per device and round.
    #[arg(long, value_name = "N", default_value_t = crate::config::DEFAULT_SAMPLE, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub sample: u32,

    /// `selection.round`: how often the sample changes.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_round)]
    pub round: Duration,

    /// `series.budget`: per-path series a node keeps on /metrics at most.
    #[arg(long, value_name = "N", default_value_t = crate::metrics::budget::DEFAULT_SERIES_BUDGET)]
    pub series_budget: usize,

    /// `series.ttl`: how long a path out of the selection stays on /metrics after its last probe.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration_flag)]
    pub series_ttl: Duration,

    /// Series of one path besides its port traffic and its derived series (a healthy path with
    /// a busy deferral: success, the paced burst's bandwidth, min-window, gap and target gauges,
    /// runs, last success, deferred).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub series_per_path: usize,

    /// Series a path's first capacity burst (its `unpaced_every`-th probe) adds besides its
    /// message rate: the bandwidth, min-window, gap and target gauges of `kind="capacity"`.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub capacity_series: usize,

    /// Derived series of one path (message rate, setup time, byte and message totals; one
    /// more message rate after a capacity burst); the budget sheds them second.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub derived_series: usize,

    /// Series of one path's port traffic (the bytes and packets counters of both ends: 8 on a
    /// hardware RoCE port; the other traffic, 4); the budget sheds them first.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub port_traffic_series: usize,

    /// Track every path's gaps (default: when the cluster has at most 20 million paths).
    #[arg(long, value_name = "BOOL")]
    pub track_paths: Option<bool>,

    /// Threads to run on (default: one per core). The rails of the cluster run side by side
    /// between rounds; the figures are the same whatever the count.
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
}

// ---------------------------------------------------------------------------------------------
// High-level, validated form

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

/// A validated `devices` command.
#[derive(Debug)]
pub struct DevicesAction {
    pub json: bool,
    pub exclude: Vec<String>,
    pub sysfs_root: PathBuf,
}

/// A validated `responder` command.
#[derive(Debug)]
pub struct ResponderAction {
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    pub settings: ResponderSettings,
}

/// A validated `probe` command.
#[derive(Debug)]
pub struct ProbeAction {
    pub settings: ProbeSettings,
    /// The plan the flags describe (rate left out when it is a percentage, which needs the link
    /// rate): proof that the flags combine, and the effective CQ moderation for the report.
    pub plan: BurstPlan,
    pub json: bool,
    /// Bursts to run on one session.
    pub bursts: u32,
    /// `Some`: the target is a stock ib_write_bw server (`--perftest`).
    pub perftest: Option<PerftestOptions>,
    /// Wait between bursts.
    pub pause: Duration,
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
            Command::Devices(args) => Action::Devices(DevicesAction {
                json: args.json,
                exclude: args.exclude,
                sysfs_root: args.sysfs_root,
            }),
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

impl SimulateArgs {
    fn into_config(self) -> Result<crate::simulate::SimulationConfig, clap::Error> {
        const SUB: &str = "simulate";
        if self.burst >= self.interval {
            return Err(usage_error(
                SUB,
                ErrorKind::ValueValidation,
                format!(
                    "--burst {} must be shorter than --interval {}",
                    humantime::format_duration(self.burst),
                    humantime::format_duration(self.interval)
                ),
            ));
        }
        Ok(crate::simulate::SimulationConfig {
            nodes: self.nodes as usize,
            rails: self.rails,
            nodes_per_group: self.nodes_per_tor as usize,
            interval: self.interval,
            jitter: self.jitter,
            burst: self.burst,
            duty_cycle: self.duty_cycle,
            duration: self.duration,
            selection: crate::schedule::SelectionConfig {
                max_peers: self.max_peers as usize,
                sample: self.sample as usize,
                round: self.round,
                ..crate::schedule::SelectionConfig::default()
            },
            series: crate::simulate::SeriesModel {
                per_path: self.series_per_path,
                capacity_per_path: self.capacity_series,
                unpaced_every: crate::config::DEFAULT_UNPACED_EVERY,
                detail_per_path: self.port_traffic_series,
                derived_per_path: self.derived_series,
                per_node: crate::simulate::SERIES_PER_NODE,
                per_device: crate::simulate::SERIES_PER_DEVICE,
                ttl: self.series_ttl,
                budget: self.series_budget,
            },
            track_all_paths: self.track_paths,
            threads: self.threads,
        })
    }
}

impl ResponderArgs {
    fn into_action(self) -> Result<ResponderAction, clap::Error> {
        const SUB: &str = "responder";
        let auth = self.auth.into_auth(SUB)?;
        let node_name = self.node.into_node_name(SUB)?;
        let devices = self.devices.into_served(SUB)?;
        Ok(ResponderAction {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            settings: ResponderSettings {
                node_name,
                // The command has no labels: its identity is its node name and devices.
                labels: crate::config::Labels::new(),
                devices,
                auth,
                // u32 → usize cannot fail on the 32/64-bit targets RDMA runs on.
                max_sessions: usize::try_from(self.max_sessions).unwrap_or(usize::MAX),
                max_pinned_bytes: self.max_pinned.bytes(),
                max_session_bytes: self.max_session_memory.bytes(),
                max_handshakes: usize::try_from(self.max_handshakes).unwrap_or(usize::MAX),
                idle_timeout: self.idle_timeout,
                io_timeout: self.timeout,
            },
        })
    }
}

impl ProbeArgs {
    fn into_action(self) -> Result<ProbeAction, clap::Error> {
        const SUB: &str = "probe";
        let message_size = self.size.bytes();
        let length = self.length.into_length();
        let rate_limit = self.rate_limit.and_then(Pace::limit);
        // An absolute rate is resolved now so a rate the pacer cannot use is refused up front; a
        // percentage needs both link rates, known only after the handshake.
        let resolved = match rate_limit {
            None | Some(RateLimit::PercentOfLink(_)) => None,
            Some(limit) => Some(limit.resolve(message_size, None).map_err(|e| {
                usage_error(
                    SUB,
                    ErrorKind::ValueValidation,
                    format!("--rate-limit {limit}: {e}"),
                )
            })?),
        };
        let mut builder = BurstPlan::builder(message_size, length)
            .qps(self.qps)
            .tx_depth(self.tx_depth)
            .post_list(self.post_list)
            .rate(resolved);
        if let Some(cq_mod) = self.cq_mod {
            builder = builder.cq_mod(cq_mod);
        }
        let plan = builder.build().map_err(|e| {
            usage_error(
                SUB,
                ErrorKind::ArgumentConflict,
                format!("these probe flags do not combine: {e}{}", plan_hint(&e)),
            )
        })?;
        if self.perftest_report_gbits && self.perftest.is_none() {
            return Err(usage_error(
                SUB,
                ErrorKind::MissingRequiredArgument,
                "--perftest-report-gbits goes with --perftest HOST:PORT",
            ));
        }
        let (target, auth, perftest) = match self.perftest {
            // perftest has no authentication; clap refuses the auth flags next to --perftest.
            Some(server) => (
                server,
                AuthMode::None,
                Some(PerftestOptions {
                    report_gbits: self.perftest_report_gbits,
                }),
            ),
            None => (
                self.target.unwrap_or_default(), // clap requires one of the two
                self.auth.into_auth(SUB)?,
                None,
            ),
        };
        let node_name = self.node.into_node_name(SUB)?;
        Ok(ProbeAction {
            settings: ProbeSettings {
                target,
                node_name,
                local: self.local.into_local_port(),
                rail: self.peer_rail,
                message_size,
                length,
                rate_limit,
                qps: self.qps,
                tx_depth: self.tx_depth,
                cq_mod: self.cq_mod,
                post_list: self.post_list,
                mtu: self.mtu,
                traffic_class: self.traffic_class,
                qp_timeout: self.qp_timeout,
                service_level: self.service_level,
                auth,
                timeout: self.timeout,
                max_session_bytes: self.max_session_memory.bytes(),
                busy_poll: self.busy_poll,
            },
            plan,
            json: self.json,
            bursts: self.bursts,
            pause: self.pause,
            perftest,
        })
    }
}

/// Plan errors speak the config's field names (`tx_depth`); say which flags they are.
fn plan_hint(e: &crate::burst::PlanError) -> &'static str {
    use crate::burst::PlanError;
    match e {
        PlanError::Signaling(_) => {
            " (flags --tx-depth, --cq-mod and --post-list; --cq-mod and --post-list may not \
             exceed --tx-depth)"
        }
        PlanError::TooFewMessages { .. } => " (flags --messages/--bytes and --qps)",
        PlanError::MessageSize(_) => " (flag --size)",
        PlanError::TxDepth(_) => " (flag --tx-depth)",
        PlanError::Qps(_) => " (flag --qps)",
        _ => " (flags --messages, --bytes, --duration and --size)",
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

// ---------------------------------------------------------------------------------------------
// Value parsers: each returns a message that names the accepted forms.

/// A byte size of at least one byte: every size flag (message size, burst bytes, pinned
/// memory) is meaningless at zero, and `ByteSize` itself accepts `0`.
fn parse_byte_size(s: &str) -> Result<ByteSize, String> {
    let size: ByteSize = s
        .parse()
        .map_err(|e: crate::config::UnitError| e.to_string())?;
    if size.bytes() == 0 {
        return Err(format!(
            "byte size {s:?} must be greater than zero; expected {BYTE_SIZE_FORMS}"
        ));
    }
    Ok(size)
}

/// `--rate-limit`: a rate, or `unpaced` (as the config's `rate_limit` takes it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    Limit(RateLimit),
    Unpaced,
}

impl Pace {
    pub fn limit(self) -> Option<RateLimit> {
        match self {
            Pace::Limit(limit) => Some(limit),
            Pace::Unpaced => None,
        }
    }
}

fn parse_pace(s: &str) -> Result<Pace, String> {
    if s.trim() == "unpaced" {
        return Ok(Pace::Unpaced);
    }
    parse_rate_limit(s).map(Pace::Limit)
}

fn parse_rate_limit(s: &str) -> Result<RateLimit, String> {
    s.parse().map_err(|e: crate::config::UnitError| match e {
        // The unit errors already list the forms; an empty one gets them too.
        crate::config::UnitError::Empty { .. } => {
            format!("empty rate; expected {RATE_LIMIT_FORMS}; or `unpaced`")
        }
        e => format!("{e}; or `unpaced`"),
    })
}

fn parse_pause(s: &str) -> Result<Duration, String> {
    crate::config::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_duration_flag(s: &str) -> Result<Duration, String> {
    parse_positive_duration(s).map_err(|e| e.to_string())
}

/// `N%` (decimals allowed) as a fraction, when `min ≤ N ≤ max`.
fn parse_percent(s: &str, min: f64, max: f64) -> Result<f64, String> {
    let number = s
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| format!("{s:?} is not a percentage; expected e.g. 5%"))?;
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("{s:?} is not a percentage; expected e.g. 5%"))?;
    if !(min..=max).contains(&value) {
        return Err(format!("{s} is out of range: from {min}% to {max}%"));
    }
    Ok(value / 100.0)
}

fn parse_jitter(s: &str) -> Result<f64, String> {
    parse_percent(s, 0.0, crate::config::MAX_JITTER * 100.0)
}

fn parse_duty_cycle(s: &str) -> Result<f64, String> {
    parse_percent(s, 0.1, 100.0)
}

fn parse_round(s: &str) -> Result<Duration, String> {
    let round = parse_duration_flag(s)?;
    if round < Duration::from_secs(60) || round > Duration::from_secs(24 * 3600) {
        return Err(format!("{s} is out of range: from 1m to 24h"));
    }
    Ok(round)
}

/// RDMA MTUs are exactly 256..4096 in powers of two; anything else is refused rather than rounded,
/// because the usual mistake is passing the Ethernet MTU.
fn parse_mtu(s: &str) -> Result<u32, String> {
    let size = parse_byte_size(s)?;
    u32::try_from(size.bytes())
        .ok()
        .and_then(PathMtu::from_bytes)
        .map(PathMtu::bytes)
        .ok_or_else(|| {
            format!(
                "{s} is not an RDMA MTU: use 256, 512, 1024, 2048 or 4096 (RDMA MTUs count \
                 payload only; a 1500-byte Ethernet MTU carries 1024, a 9000-byte one 4096)"
            )
        })
}

/// A responder's `--device`: `NAME` or `NAME:RAIL` (a rail number from 0 to 65535).
fn parse_served_device(s: &str) -> Result<DeviceArg, String> {
    const FORMS: &str = "expected NAME or NAME:RAIL, e.g. mlx5_0 or mlx5_0:0";
    let (name, rail) = match s.rsplit_once(':') {
        None => (s, None),
        Some((name, rail)) => {
            let rail = rail
                .parse::<u16>()
                .map_err(|_| format!("rail {rail:?} is not a number from 0 to 65535; {FORMS}"))?;
            (name, Some(rail))
        }
    };
    let name = parse_name(name).map_err(|e| format!("device name {e}; {FORMS}"))?;
    Ok(DeviceArg { name, rail })
}

/// Names (devices, nodes): non-empty, printable, no whitespace.
fn parse_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{s:?} contains whitespace or control characters"));
    }
    Ok(s.to_owned())
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

/// Parses the probe target into `HOST:PORT` form: `HOST:PORT`, `[IPv6]:PORT`, a bare IP address
/// or host name (default port), or a bare IPv6 address; the same forms as a peer's `address` in
/// the config file. Only the syntax is checked here; the host name is resolved when connecting.
/// A perftest server's address: `HOST:PORT`, `[IPv6]:PORT`, or `HOST` (port 18515).
pub fn parse_perftest_target(s: &str) -> Result<String, String> {
    crate::config::parse_host_port(s, crate::perftest::DEFAULT_PORT).map(|a| a.to_string())
}

pub fn parse_target(s: &str) -> Result<String, String> {
    crate::config::parse_host_port(s, DEFAULT_CONTROL_PORT).map(|a| a.to_string())
}

/// The kernel's host name, read from procfs (no libc call, so no `unsafe`).
fn hostname() -> Result<String, String> {
    let raw = std::fs::read_to_string(HOSTNAME_FILE)
        .map_err(|e| format!("reading {HOSTNAME_FILE} failed: {e}"))?;
    let name = raw.trim();
    if name.is_empty() {
        return Err(format!("{HOSTNAME_FILE} is empty"));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(Logging, Action), clap::Error> {
        let mut full = vec!["rdma-probe-exporter"];
        full.extend_from_slice(args);
        Cli::try_parse_from(full)?.into_action()
    }

    fn probe(args: &[&str]) -> Result<ProbeAction, clap::Error> {
        let mut full = vec!["probe", "10.0.0.2:18516", "--no-auth", "--node", "a"];
        full.extend_from_slice(args);
        match parse(&full)?.1 {
            Action::Probe(p) => Ok(p),
            other => panic!("expected probe, got {other:?}"),
        }
    }

    fn err(args: &[&str]) -> String {
        let e = probe(args).expect_err("should be refused");
        assert_eq!(e.exit_code(), 2, "{e}");
        e.to_string()
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn probe_defaults_are_ib_write_bw_defaults() {
        let p = probe(&[]).unwrap();
        let s = &p.settings;
        assert_eq!(s.target, "10.0.0.2:18516");
        assert_eq!(s.node_name, "a");
        assert_eq!(s.message_size, 65536);
        assert_eq!(s.length, BurstLength::Messages(5000));
        assert_eq!(s.qps, 1);
        assert_eq!(s.tx_depth, 128);
        assert_eq!(s.cq_mod, None);
        assert_eq!(s.post_list, 1);
        assert_eq!(s.rate_limit, None);
        assert_eq!(s.timeout, Duration::from_secs(10));
        assert_eq!(s.local.port, 1);
        assert!(matches!(s.auth, AuthMode::None));
        assert_eq!(s.rail, None, "no rail: the responder's first device");
        // 64 KiB > 8 KiB: every WR signaled, as perftest.
        assert_eq!(p.plan.cq_mod(), 1);
        assert!(!p.json);
    }

    #[test]
    fn perftest_mode_needs_no_auth_and_refuses_responder_flags() {
        let parse_probe = |args: &[&str]| {
            let mut full = vec!["probe", "--node", "a"];
            full.extend_from_slice(args);
            parse(&full).map(|(_, action)| match action {
                Action::Probe(p) => p,
                other => panic!("expected probe, got {other:?}"),
            })
        };
        let p = parse_probe(&["--perftest", "10.0.0.2"]).unwrap();
        assert_eq!(p.settings.target, "10.0.0.2:18515");
        assert!(matches!(p.settings.auth, AuthMode::None));
        assert_eq!(
            p.perftest,
            Some(PerftestOptions {
                report_gbits: false
            })
        );
        let p = parse_probe(&["--perftest", "nodeb:9999", "--perftest-report-gbits"]).unwrap();
        assert_eq!(p.settings.target, "nodeb:9999");
        assert_eq!(p.perftest, Some(PerftestOptions { report_gbits: true }));
        // A responder probe is unchanged and needs its target and auth.
        assert_eq!(probe(&[]).unwrap().perftest, None);
        for refused in [
            &["--perftest", "b", "10.0.0.2:18516"][..],
            &["--perftest", "b", "--no-auth"],
            &["--perftest", "b", "--bursts", "2"],
            &["--perftest", "b", "--peer-rail", "1"],
            &["--perftest-report-gbits", "10.0.0.2", "--no-auth"],
            &["--no-auth"],
        ] {
            let e = parse_probe(refused).expect_err("refused");
            assert_eq!(e.exit_code(), 2, "{refused:?}: {e}");
        }
    }

    #[test]
    fn rate_limit_unpaced_is_a_capacity_check_like_no_limit() {
        let p = probe(&["--rate-limit", "unpaced"]).unwrap();
        assert_eq!(p.settings.rate_limit, None);
        assert_eq!(p.plan.rate(), None);
        assert_eq!(
            crate::prober::BurstKind::of(p.settings.rate_limit.as_ref()),
            crate::prober::BurstKind::Capacity
        );
        let e = err(&["--rate-limit", "unpaced-ish"]);
        assert!(e.contains("`unpaced`"), "{e}");
    }

    #[test]
    fn probe_flags_map_to_settings() {
        let p = probe(&[
            "--size",
            "4KiB",
            "--duration",
            "500ms",
            "--rate-limit",
            "25%",
            "--qps",
            "4",
            "--tx-depth",
            "64",
            "--cq-mod",
            "8",
            "--mtu",
            "1024",
            "--traffic-class",
            "106",
            "--service-level",
            "3",
            "--device",
            "mlx5_1",
            "--port",
            "2",
            "--gid-index",
            "3",
            "--peer-rail",
            "5",
            "--json",
        ])
        .unwrap();
        let s = &p.settings;
        assert_eq!(s.message_size, 4096);
        assert_eq!(s.length, BurstLength::Duration(Duration::from_millis(500)));
        assert_eq!(s.rate_limit, Some(RateLimit::PercentOfLink(25.0)));
        assert_eq!((s.qps, s.tx_depth, s.cq_mod), (4, 64, Some(8)));
        assert_eq!(s.mtu, Some(1024));
        assert_eq!((s.traffic_class, s.service_level), (106, 3));
        assert_eq!(s.rail, Some(5));
        assert_eq!(
            s.local,
            LocalPort {
                device: Some("mlx5_1".into()),
                port: 2,
                gid_index: Some(3)
            }
        );
        assert!(p.json);
        // A percentage cannot be resolved before the link rates are known.
        assert_eq!(p.plan.rate(), None);
    }

    #[test]
    fn absolute_rate_is_resolved_into_the_plan() {
        let p = probe(&["--rate-limit", "8Gbps"]).unwrap();
        let rate = p.plan.rate().unwrap();
        assert!((rate.bytes_per_second() - 1e9).abs() < 1e-3);
    }

    #[test]
    fn bytes_length() {
        let p = probe(&["--bytes", "256MiB"]).unwrap();
        assert_eq!(p.settings.length, BurstLength::Bytes(256 << 20));
    }

    #[test]
    fn bad_single_flags_name_the_flag() {
        let e = err(&["--size", "0"]);
        assert!(
            e.contains("--size") && e.contains("greater than zero"),
            "{e}"
        );
        let e = err(&["--rate-limit", "5furlongs"]);
        assert!(
            e.contains("--rate-limit") && e.contains("unknown unit"),
            "{e}"
        );
        assert!(e.contains("Gbps") && e.contains("msg/s"), "{e}");
        let e = err(&["--rate-limit", "10Gb/s"]);
        assert!(e.contains("ambiguous"), "{e}");
        let e = err(&["--qps", "0"]);
        assert!(e.contains("--qps"), "{e}");
        let e = err(&["--qps", "65"]);
        assert!(e.contains("--qps"), "{e}");
        let e = err(&["--tx-depth", "0"]);
        assert!(e.contains("--tx-depth"), "{e}");
        let e = err(&["--messages", "0"]);
        assert!(e.contains("--messages"), "{e}");
        let e = err(&["--duration", "0s"]);
        assert!(
            e.contains("--duration") && e.contains("greater than zero"),
            "{e}"
        );
        let e = err(&["--timeout", "soon"]);
        assert!(e.contains("--timeout"), "{e}");
        let e = err(&["--mtu", "1500"]);
        assert!(e.contains("not an RDMA MTU"), "{e}");
        let e = err(&["--service-level", "16"]);
        assert!(e.contains("--service-level"), "{e}");
        let e = err(&["--port", "0"]);
        assert!(e.contains("--port"), "{e}");
        let e = err(&["--device", ""]);
        assert!(e.contains("--device"), "{e}");
        let e = err(&["--peer-rail", "65536"]);
        assert!(e.contains("--peer-rail"), "{e}");
        let e = err(&["--peer-rail", "one"]);
        assert!(e.contains("--peer-rail"), "{e}");
    }

    #[test]
    fn length_flags_exclude_each_other() {
        let e = err(&["--messages", "10", "--duration", "1s"]);
        assert!(e.contains("cannot be used with"), "{e}");
        let e = err(&["--bytes", "1MiB", "--messages", "10"]);
        assert!(e.contains("cannot be used with"), "{e}");
    }

    #[test]
    fn flag_combinations_are_checked_by_the_plan() {
        let e = err(&["--cq-mod", "200"]);
        assert!(
            e.contains("do not combine") && e.contains("--cq-mod"),
            "{e}"
        );
        let e = err(&["--post-list", "256", "--tx-depth", "128"]);
        assert!(e.contains("--post-list"), "{e}");
        let e = err(&["--messages", "2", "--qps", "4"]);
        assert!(e.contains("every QP needs at least one"), "{e}");
        let e = err(&["--size", "2GiB"]);
        assert!(e.contains("1 GiB"), "{e}");
        let e = err(&["--duration", "2h"]);
        assert!(e.contains("too long"), "{e}");
    }

    #[test]
    fn auth_choice_is_required_and_exclusive() {
        let e = parse(&["probe", "h:1", "--node", "a"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        assert!(msg.contains("authentication is required"), "{msg}");
        assert!(
            msg.contains("--psk-file") && msg.contains("--no-auth"),
            "{msg}"
        );
        let e = parse(&["responder", "--node", "a"]).unwrap_err();
        assert!(e.to_string().contains("authentication is required"));
        let e = parse(&[
            "probe",
            "h:1",
            "--no-auth",
            "--psk-file",
            "x",
            "--node",
            "a",
        ])
        .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("cannot be used with"), "{e}");
    }

    /// A file only its owner can read, as a key file must be.
    fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path =
            std::env::temp_dir().join(format!("rdma-probe-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    #[test]
    fn psk_file_errors_never_show_the_key() {
        let path = temp_file("short", b"hunter2\n");
        let e = parse(&[
            "probe",
            "h:1",
            "--node",
            "a",
            "--psk-file",
            path.to_str().unwrap(),
        ])
        .unwrap_err();
        std::fs::remove_file(&path).ok();
        let msg = e.to_string();
        assert!(
            msg.contains("--psk-file") && msg.contains("head -c 32 /dev/urandom | base64"),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");

        let e = parse(&[
            "probe",
            "h:1",
            "--node",
            "a",
            "--psk-file",
            "/nonexistent/psk",
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("cannot read pre-shared key file"),
            "{e}"
        );

        let path = temp_file("good", b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n");
        let (_, action) = parse(&[
            "probe",
            "h:1",
            "--node",
            "a",
            "--psk-file",
            path.to_str().unwrap(),
        ])
        .unwrap();
        std::fs::remove_file(&path).ok();
        let Action::Probe(p) = action else {
            panic!("expected probe")
        };
        assert!(matches!(p.settings.auth, AuthMode::Psk(_)));
    }

    #[test]
    fn a_previous_key_is_held_beside_the_current_one_during_a_rollover() {
        let current = temp_file("current", b"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n");
        let previous = temp_file(
            "previous",
            b"ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n",
        );
        let args = |extra: &[&str]| {
            let mut args = vec!["responder", "--node", "b", "--psk-file"];
            args.push(current.to_str().unwrap());
            args.extend_from_slice(extra);
            parse(&args)
        };
        let (_, action) = args(&["--previous-psk-file", previous.to_str().unwrap()]).unwrap();
        let Action::Responder(r) = action else {
            panic!("expected responder")
        };
        assert!(matches!(&r.settings.auth, AuthMode::Psk(keys) if keys.has_previous()));
        let (_, action) = args(&[]).unwrap();
        let Action::Responder(r) = action else {
            panic!("expected responder")
        };
        assert!(matches!(&r.settings.auth, AuthMode::Psk(keys) if !keys.has_previous()));
        // A bad previous key is named as such, without its bytes.
        let short = temp_file("previous-short", b"hunter2\n");
        let e = args(&["--previous-psk-file", short.to_str().unwrap()]).unwrap_err();
        assert!(e.to_string().contains("--previous-psk-file"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        // Without a current key it means nothing.
        let e = parse(&[
            "responder",
            "--node",
            "b",
            "--no-auth",
            "--previous-psk-file",
            previous.to_str().unwrap(),
        ])
        .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        for path in [current, previous, short] {
            std::fs::remove_file(path).ok();
        }
    }

    #[test]
    fn responder_defaults_and_flags() {
        let (_, action) = parse(&["responder", "--no-auth", "--node", "b"]).unwrap();
        let Action::Responder(r) = action else {
            panic!("expected responder")
        };
        assert_eq!(r.listen, "0.0.0.0:18516".parse().unwrap());
        assert_eq!(r.settings.max_sessions, 16);
        assert_eq!(r.settings.max_pinned_bytes, 1 << 30);
        assert_eq!(r.settings.idle_timeout, Duration::from_secs(300));
        assert_eq!(r.settings.max_session_bytes, 64 << 20);
        assert_eq!(r.settings.max_handshakes, 8);
        assert_eq!(r.settings.io_timeout, Duration::from_secs(10));
        assert_eq!(r.settings.node_name, "b");

        let (_, action) = parse(&[
            "responder",
            "--no-auth",
            "--node",
            "b",
            "--listen",
            "127.0.0.1:0",
            "--max-sessions",
            "2",
            "--max-pinned",
            "512MiB",
            "--idle-timeout",
            "5m",
            "--device",
            "rxe0",
        ])
        .unwrap();
        let Action::Responder(r) = action else {
            panic!("expected responder")
        };
        assert_eq!(r.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(r.settings.max_sessions, 2);
        assert_eq!(r.settings.max_pinned_bytes, 512 << 20);
        assert_eq!(r.settings.idle_timeout, Duration::from_secs(300));
        assert_eq!(
            r.settings.devices,
            vec![ServedDevice {
                local: LocalPort {
                    device: Some("rxe0".into()),
                    port: 1,
                    gid_index: None
                },
                rail: None
            }]
        );

        for bad in [
            &["--max-sessions", "0"][..],
            &["--max-pinned", "0"],
            &["--idle-timeout", "0s"],
            &["--listen", "nowhere"],
        ] {
            let mut args = vec!["responder", "--no-auth", "--node", "b"];
            args.extend_from_slice(bad);
            let e = parse(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
            assert!(e.to_string().contains(bad[0]), "{bad:?}: {e}");
        }
    }

    fn responder(extra: &[&str]) -> Result<ResponderAction, clap::Error> {
        let mut args = vec!["responder", "--no-auth", "--node", "b"];
        args.extend_from_slice(extra);
        match parse(&args)?.1 {
            Action::Responder(r) => Ok(r),
            other => panic!("expected responder, got {other:?}"),
        }
    }

    #[test]
    fn responder_serves_every_device_given() {
        let served = |device: Option<&str>, port, gid_index, rail| ServedDevice {
            local: LocalPort {
                device: device.map(Into::into),
                port,
                gid_index,
            },
            rail,
        };
        // No --device: the first device with an active port, on no rail.
        let r = responder(&[]).unwrap();
        assert_eq!(r.settings.devices, vec![served(None, 1, None, None)]);
        let r = responder(&[
            "--device",
            "mlx5_0:0",
            "--device",
            "mlx5_1:1",
            "--device",
            "mlx5_2",
            "--port",
            "2",
            "--gid-index",
            "3",
        ])
        .unwrap();
        assert_eq!(
            r.settings.devices,
            vec![
                served(Some("mlx5_0"), 2, Some(3), Some(0)),
                served(Some("mlx5_1"), 2, Some(3), Some(1)),
                served(Some("mlx5_2"), 2, Some(3), None),
            ]
        );
        let r = responder(&["--device", "rxe0:65535"]).unwrap();
        assert_eq!(r.settings.devices[0].rail, Some(65535));
    }

    #[test]
    fn responder_devices_are_checked() {
        for (bad, needle) in [
            (&["--device", "mlx5_0:x"][..], "rail \"x\" is not a number"),
            (&["--device", "mlx5_0:65536"], "from 0 to 65535"),
            (&["--device", "mlx5_0:"], "NAME:RAIL"),
            (&["--device", ":1"], "device name must not be empty"),
            (&["--device", ""], "device name must not be empty"),
            (
                &["--device", "rxe0", "--device", "rxe0:1"],
                "rxe0 is given twice",
            ),
            (
                &["--device", "mlx5_0:1", "--device", "mlx5_1:1"],
                "rail 1 is given to both mlx5_0 and mlx5_1",
            ),
        ] {
            let e = responder(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {e}");
            let msg = e.to_string();
            assert!(msg.contains("--device"), "{bad:?}: {msg}");
            assert!(msg.contains(needle), "{bad:?}: {msg}");
        }
    }

    #[test]
    fn node_defaults_to_node_name_env_or_the_host_name() {
        // Whatever the test environment's NODE_NAME, a name comes out (the black-box tests in
        // tests/cli.rs set the variable explicitly; tests here must not mutate the process env).
        let (_, action) = parse(&["probe", "h:1", "--no-auth"]).unwrap();
        let Action::Probe(p) = action else {
            panic!("expected probe")
        };
        assert!(!p.settings.node_name.is_empty());
        let (_, action) = parse(&["probe", "h:1", "--no-auth", "--node", "x-1"]).unwrap();
        let Action::Probe(p) = action else {
            panic!("expected probe")
        };
        assert_eq!(p.settings.node_name, "x-1");
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

    #[test]
    fn targets() {
        let ok = |s: &str| parse_target(s).unwrap();
        assert_eq!(ok("10.0.0.2:18516"), "10.0.0.2:18516");
        assert_eq!(ok("10.0.0.2"), "10.0.0.2:18516");
        assert_eq!(ok("node-b.example:1234"), "node-b.example:1234");
        assert_eq!(ok("node-b"), "node-b:18516");
        assert_eq!(ok("[::1]:99"), "[::1]:99");
        assert_eq!(ok("[fe80::1]"), "[fe80::1]:18516");
        assert_eq!(ok("::1"), "[::1]:18516");
        for bad in [
            "",
            "h:",
            "h:0",
            "h:70000",
            ":80",
            "a b:1",
            "[zz]",
            "h:x",
            "10.0.0.2:0",
        ] {
            let e = parse_target(bad).unwrap_err();
            assert!(e.contains("HOST:PORT"), "{bad:?}: {e}");
        }
    }
}
