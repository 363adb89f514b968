//! `probe`: one burst (or a few on one session) against a responder or a perftest server.

use std::time::Duration;

use clap::error::ErrorKind;
use clap::Args;

use super::common::{
    parse_byte_size, parse_duration_flag, parse_name, AuthArgs, NodeArgs, RdmaNetworkArgs,
};
use super::usage_error;
use crate::burst::plan::{MAX_QPS, MAX_TX_DEPTH};
use crate::burst::{BurstLength, BurstPlan};
use crate::config::DEFAULT_CONTROL_PORT;
use crate::control::AuthMode;
use crate::perftest::PerftestOptions;
use crate::prober::ProbeSettings;
use crate::units::{parse_duration, ByteSize, RateLimit, UnitError, RATE_LIMIT_FORMS};
use crate::verbs::{LocalPort, PathMtu};

/// perftest's `-n` default for ib_write_bw (`DEF_ITERS_WB`).
pub const DEFAULT_MESSAGES: u64 = 5000;

/// Shown after `probe --help`.
pub(super) const EXAMPLES: &str = "\
Examples:
  # One ib_write_bw-like burst (5000 x 64 KiB, unpaced) against a responder:
  rdma-probe-exporter probe 10.0.0.2:18516 --psk-file /etc/rdma-probe/psk

  # Half a second at 25% of the link rate, 4 QPs, as JSON:
  rdma-probe-exporter probe node-b:18516 --psk-file psk --duration 500ms --rate-limit 25% \\
      --qps 4 --json

  # 1000 pings 10 ms apart instead of a burst (ib_write_lat's figures: RTT min, median, p99,
  # max, and loss); the responder must answer pings (an exporter, or the responder command):
  rdma-probe-exporter probe node-b:18516 --psk-file psk --ping 1000 --ping-interval 10ms

Exit status 0 only if the burst ran and the responder verified its data.";

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

    /// Send this many pings instead of a burst: 48-byte UD datagrams the responder answers
    /// twice, like the exporter's (docs/architecture.md, "Pings"). Prints the round-trip time's
    /// min, median, p90, p99 and max (the responder's processing taken out) and the loss, as
    /// ib_write_lat prints latency. A session is set up first to learn where pings go; the
    /// burst flags size it but no burst runs.
    #[arg(long, value_name = "N", conflicts_with_all = ["perftest", "bursts"], value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub ping: Option<u64>,

    /// With --ping: the time between two pings (each jittered by up to 10%), e.g. 10ms. A ping
    /// without an answer after a second is lost.
    #[arg(long, value_name = "DURATION", default_value = "10ms", requires = "ping", value_parser = parse_ping_interval)]
    pub ping_interval: Duration,

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

    #[command(flatten)]
    pub rdma: RdmaNetworkArgs,

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

/// Which local RDMA port the probe uses (the responder serves devices: `ServedDeviceArgs`).
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
    /// `Some((count, interval))`: pings instead of a burst (`--ping`).
    pub ping: Option<(u64, Duration)>,
}

impl ProbeArgs {
    pub(super) fn into_action(self) -> Result<ProbeAction, clap::Error> {
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
                rdma_networks: self.rdma.rdma_networks,
            },
            plan,
            json: self.json,
            bursts: self.bursts,
            pause: self.pause,
            perftest,
            ping: self.ping.map(|count| (count, self.ping_interval)),
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
    s.parse().map_err(|e: UnitError| match e {
        // The unit errors already list the forms; an empty one gets them too.
        UnitError::Empty { .. } => {
            format!("empty rate; expected {RATE_LIMIT_FORMS}; or `unpaced`")
        }
        e => format!("{e}; or `unpaced`"),
    })
}

fn parse_ping_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(1) || d > Duration::from_secs(60) {
        return Err(format!("{s} is out of range (1ms to 1m)"));
    }
    Ok(d)
}

fn parse_pause(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
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

/// A perftest server's address: `HOST:PORT`, `[IPv6]:PORT`, or `HOST` (port 18515).
pub fn parse_perftest_target(s: &str) -> Result<String, String> {
    crate::config::parse_host_port(s, crate::perftest::DEFAULT_PORT).map(|a| a.to_string())
}

/// Parses the probe target into `HOST:PORT` form: `HOST:PORT`, `[IPv6]:PORT`, a bare IP address
/// or host name (default port), or a bare IPv6 address; the same forms as a peer's `address` in
/// the config file. Only the syntax is checked here; the host name is resolved when connecting.
pub fn parse_target(s: &str) -> Result<String, String> {
    crate::config::parse_host_port(s, DEFAULT_CONTROL_PORT).map(|a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{parse, Action};

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
