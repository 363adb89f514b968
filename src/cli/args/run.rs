//! `run`: the exporter, from its config file.

use std::path::PathBuf;

use clap::Args;

/// Shown after `run --help`.
pub(super) const EXAMPLES: &str = "\
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
