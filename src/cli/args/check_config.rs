//! `check-config`: a config file to check (checking it is the command itself).

use std::path::PathBuf;

use clap::Args;

/// Shown after `check-config --help`.
pub(super) const EXAMPLES: &str = "\
Examples:
  NODE_NAME=gpu-a01 rdma-probe-exporter check-config /etc/rdma-probe/config.yaml

Exit status 0 if the file is valid (the resolved config is printed on stdout), 1 if not (the
first error, with its file, line, column and field, is printed on stderr).";

/// `check-config` arguments.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The config file (YAML).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}
