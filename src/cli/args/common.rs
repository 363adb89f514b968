//! The flag groups and value parsers that several subcommands share: authentication and the
//! node's name (`responder`, `probe`), sizes, durations and names. Every value parser returns a
//! message that names the accepted forms.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::Args;
use ipnet::IpNet;

use super::usage_error;
use crate::control::{AuthMode, Keys, Psk};
use crate::label::check_name;
use crate::rdma_address::parse_network;
use crate::units::{parse_positive_duration, ByteSize, UnitError, BYTE_SIZE_FORMS};

/// Where `--node` falls back to when neither the flag nor `NODE_NAME` is set.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

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
    pub(super) fn into_auth(self, subcommand: &str) -> Result<AuthMode, clap::Error> {
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

/// Where a peer's RDMA traffic may go (shared by `responder` and `probe`).
#[derive(Debug, Args)]
pub struct RdmaNetworkArgs {
    /// A network the peer's RDMA address (its RoCE v2 GID) may be in besides the address its
    /// control connection reached or came from, e.g. 10.1.0.0/16; repeat for each rail's subnet.
    /// Without it the GID must carry the control address: whoever answers a connection does not
    /// choose where the RDMA traffic goes (docs/security.md, "Where RDMA traffic goes").
    #[arg(long = "rdma-network", value_name = "CIDR", value_parser = parse_rdma_network)]
    pub rdma_networks: Vec<IpNet>,
}

/// A network in CIDR form, without host bits.
fn parse_rdma_network(s: &str) -> Result<IpNet, String> {
    parse_network(s).map_err(|why| format!("{s:?}: {why}"))
}

/// The environment variable Kubernetes manifests set from `spec.nodeName` (the downward API), so
/// every pod of a DaemonSet knows its node's name.
const NODE_NAME_ENV: &str = "NODE_NAME";

impl NodeArgs {
    /// `--node`, else `NODE_NAME`, else the host name. Read here rather than through clap's
    /// `env` so that an empty `NODE_NAME` (a manifest with the field unset) falls back to the
    /// host name instead of being refused as an empty `--node`.
    pub(super) fn into_node_name(self, subcommand: &str) -> Result<String, clap::Error> {
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

/// A byte size of at least one byte: every size flag (message size, burst bytes, pinned
/// memory) is meaningless at zero, and `ByteSize` itself accepts `0`.
pub(super) fn parse_byte_size(s: &str) -> Result<ByteSize, String> {
    let size: ByteSize = s.parse().map_err(|e: UnitError| e.to_string())?;
    if size.bytes() == 0 {
        return Err(format!(
            "byte size {s:?} must be greater than zero; expected {BYTE_SIZE_FORMS}"
        ));
    }
    Ok(size)
}

pub(super) fn parse_duration_flag(s: &str) -> Result<Duration, String> {
    parse_positive_duration(s).map_err(|e| e.to_string())
}

/// Names (devices, nodes), as [`check_name`] allows.
pub(super) fn parse_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    check_name(s)?;
    Ok(s.to_owned())
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
    use crate::cli::args::{parse, Action};

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
}
