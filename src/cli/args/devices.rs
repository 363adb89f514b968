//! `devices`: which devices to list, from where, and how.

use std::path::PathBuf;

use clap::Args;

use super::common::parse_name;

/// Shown after `devices --help`.
pub(super) const EXAMPLES: &str = "\
Examples:
  rdma-probe-exporter devices
  rdma-probe-exporter devices --exclude mlx5_8
  rdma-probe-exporter devices --json | jq '.[].ports[].sysfs.link_rate_bits_per_second'
  rdma-probe-exporter devices --sysfs-root /host/sys   # a container with the host's /sys there";

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

/// A validated `devices` command.
#[derive(Debug)]
pub struct DevicesAction {
    pub json: bool,
    pub exclude: Vec<String>,
    pub sysfs_root: PathBuf,
}

impl DevicesArgs {
    pub(super) fn into_action(self) -> DevicesAction {
        DevicesAction {
            json: self.json,
            exclude: self.exclude,
            sysfs_root: self.sysfs_root,
        }
    }
}
