//! Why the `port` module could not describe a device or port at all.
//!
//! Only a missing device or port, an excluded device, or a directory that cannot be listed is an
//! error. A value the code does not know, or an attribute the kernel refuses to show (`EINVAL`
//! from a netdev that is down), is not: it becomes an unknown value in the facts.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PortError {
    /// The device is on the exclusion list: nothing under it was read.
    #[error("device {device} is excluded (exclude_devices): not read")]
    Excluded { device: String },
    #[error("no RDMA device {device} in {}", .class_dir.display())]
    UnknownDevice { device: String, class_dir: PathBuf },
    #[error("device {device} has no port {port} (ports: {available:?})")]
    UnknownPort {
        device: String,
        port: u8,
        available: Vec<u8>,
    },
    #[error("listing {}: {source}", .path.display())]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
