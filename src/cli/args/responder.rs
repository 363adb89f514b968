//! `responder`: where it listens, which devices it serves, its limits and its key.

use std::net::SocketAddr;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Args;

use super::common::{
    parse_byte_size, parse_duration_flag, parse_name, AuthArgs, NodeArgs, RdmaNetworkArgs,
};
use super::usage_error;
use crate::config::DEFAULT_CONTROL_PORT;
use crate::responder::{ResponderSettings, ServedDevice};
use crate::units::ByteSize;
use crate::verbs::LocalPort;

/// Shown after `responder --help`.
pub(super) const EXAMPLES: &str = "\
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

    #[command(flatten)]
    pub rdma: RdmaNetworkArgs,

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

/// A validated `responder` command.
#[derive(Debug)]
pub struct ResponderAction {
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    pub settings: ResponderSettings,
}

impl ResponderArgs {
    pub(super) fn into_action(self) -> Result<ResponderAction, clap::Error> {
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
                rdma_networks: self.rdma.rdma_networks,
                pingers: Default::default(),
            },
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{parse, Action};

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
        assert!(r.settings.rdma_networks.is_empty());
        let (_, action) = parse(&[
            "responder",
            "--no-auth",
            "--node",
            "b",
            "--rdma-network",
            "10.1.0.0/16",
            "--rdma-network",
            "10.2.0.0/16",
        ])
        .unwrap();
        let Action::Responder(r) = action else {
            panic!("expected responder")
        };
        let networks: Vec<String> = r
            .settings
            .rdma_networks
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(networks, ["10.1.0.0/16", "10.2.0.0/16"]);
        for (bad, says) in [
            ("10.1.2.3/16", "the network is 10.1.0.0/16"),
            ("rail1", "CIDR"),
        ] {
            let err = parse(&[
                "responder",
                "--no-auth",
                "--node",
                "b",
                "--rdma-network",
                bad,
            ])
            .unwrap_err()
            .to_string();
            assert!(err.contains(says), "{bad}: {err}");
        }

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
}
