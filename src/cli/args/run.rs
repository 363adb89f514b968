//! `run`: the exporter, from its config file.

use std::path::PathBuf;

use clap::Args;

/// Shown after `run --help`.
pub(super) const EXAMPLES: &str = "\
Examples:
  NODE_NAME=gpu-a01 rdma-probe-exporter run --config /etc/rdma-probe/config.yaml
  curl -s localhost:9587/metrics | grep '^rdma_probe_success'
  curl -s -X POST localhost:9587/-/reload        # or: kill -HUP <pid>

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
}
