//! Errors of the verbs layer, each mapped to one bounded metric `reason`.

use std::io;

use crate::reason::ErrorReason;

use super::types::{PortState, WcStatus};

/// Which verbs resource failed to be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    ProtectionDomain,
    MemoryRegion,
    CompletionChannel,
    CompletionQueue,
    QueuePair,
    AddressHandle,
}

impl std::fmt::Display for Resource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resource::ProtectionDomain => "protection domain",
            Resource::MemoryRegion => "memory region",
            Resource::CompletionChannel => "completion channel",
            Resource::CompletionQueue => "completion queue",
            Resource::QueuePair => "queue pair",
            Resource::AddressHandle => "address handle",
        })
    }
}

/// Everything that can go wrong in [`crate::verbs`].
///
/// Messages are written for an operator reading a log line or `probe` output: they name the
/// device/port/QP involved and, where a wrong choice was made, list the valid ones.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// No usable RDMA stack or no device at all (errno 38 ENOSYS: kernel without RDMA; errno 95
    /// EOPNOTSUPP: libibverbs not installed; or an empty device list).
    #[error("no RDMA device: {detail}")]
    NoDevice { detail: String },

    /// A device name that does not exist.
    #[error(
        "unknown RDMA device {name:?}; devices present: {}",
        list_or_none(available)
    )]
    UnknownDevice {
        name: String,
        available: Vec<String>,
    },

    /// A port number the device does not have (ports count from 1).
    #[error("device {device} has no port {port} (it has ports 1..={port_count})")]
    UnknownPort {
        device: String,
        port: u8,
        port_count: u8,
    },

    /// The port exists but is not ACTIVE, so no traffic can flow.
    #[error("device {device} port {port} is {state}, not active")]
    PortDown {
        device: String,
        port: u8,
        state: PortState,
    },

    /// A GID index that is empty or unreadable on this port.
    #[error(
        "GID index {index} is not usable on {device} port {port}; valid indexes: {}",
        list_or_none(valid)
    )]
    BadGidIndex {
        device: String,
        port: u8,
        index: u32,
        valid: Vec<u32>,
    },

    /// Opening a device or querying its attributes failed (e.g. EACCES on `/dev/infiniband/*`).
    #[error("{op} on device {device} failed: {source}")]
    Device {
        device: String,
        op: &'static str,
        #[source]
        source: io::Error,
    },

    /// Creating a PD, MR, completion channel, CQ or QP failed.
    #[error("creating {resource} on device {device} failed: {source}")]
    Create {
        resource: Resource,
        device: String,
        #[source]
        source: io::Error,
    },

    /// `ibv_modify_qp` to `to` failed.
    #[error("moving QP {qpn} to {to} failed: {detail}")]
    Modify {
        qpn: u32,
        to: &'static str,
        detail: String,
    },

    /// `ibv_query_qp` failed.
    #[error("querying QP {qpn} failed: {detail}")]
    Query { qpn: u32, detail: String },

    /// A caller-supplied value is out of range (MTU, buffer bounds, GID index, ...). Caught
    /// before reaching the driver, so the QP is unaffected.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// `ibv_post_send` / `ibv_post_recv` refused a work request. `posted` WRs of the chain (those
    /// before the rejected one) were accepted and will complete.
    #[error("posting {queue} work request on QP {qpn} failed after {posted} accepted: {source}")]
    Post {
        qpn: u32,
        queue: &'static str,
        posted: usize,
        #[source]
        source: io::Error,
    },

    /// `ibv_poll_cq`, `ibv_req_notify_cq`, `poll(2)` on the channel or `ibv_get_cq_event` failed.
    #[error("completion queue {op} failed: {source}")]
    Completion {
        op: &'static str,
        #[source]
        source: io::Error,
    },

    /// A work completion with an error status (see [`super::Completion::check`]).
    #[error(
        "work completion error: {status}, wr_id {wr_id}, vendor syndrome {vendor_err:#x}, QP {qpn}"
    )]
    WorkCompletion {
        status: WcStatus,
        wr_id: u64,
        vendor_err: u32,
        qpn: u32,
    },
}

fn list_or_none<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl VerbsError {
    /// The bounded metric label for this error.
    pub fn reason(&self) -> ErrorReason {
        match self {
            VerbsError::NoDevice { .. }
            | VerbsError::UnknownDevice { .. }
            | VerbsError::Device { .. } => ErrorReason::NoDevice,
            VerbsError::UnknownPort { .. } | VerbsError::PortDown { .. } => ErrorReason::PortDown,
            VerbsError::BadGidIndex { .. }
            | VerbsError::Create { .. }
            | VerbsError::Modify { .. }
            | VerbsError::Query { .. }
            | VerbsError::InvalidArgument(_)
            | VerbsError::Post { .. } => ErrorReason::QpSetup,
            VerbsError::Completion { .. } => ErrorReason::WcOther,
            VerbsError::WorkCompletion { status, .. } => status.reason(),
        }
    }

    /// Maps the error of `ibv_get_device_list` (null return) to [`VerbsError::NoDevice`] with a
    /// message that says what to fix.
    pub(crate) fn from_device_list_errno(err: io::Error) -> Self {
        let detail = match err.raw_os_error() {
            Some(libc::ENOSYS) => format!(
                "the kernel has no RDMA support (no /sys/class/infiniband; ib_uverbs not loaded): {err}"
            ),
            Some(libc::EOPNOTSUPP) => format!("libibverbs (rdma-core) is not installed: {err}"),
            _ => format!("listing RDMA devices failed: {err}"),
        };
        VerbsError::NoDevice { detail }
    }
}

/// Result alias of the verbs layer.
pub type Result<T, E = VerbsError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_list_errnos_map_to_no_device() {
        for errno in [libc::ENOSYS, libc::EOPNOTSUPP, libc::EPERM] {
            let e = VerbsError::from_device_list_errno(io::Error::from_raw_os_error(errno));
            assert_eq!(e.reason(), ErrorReason::NoDevice);
        }
        let e = VerbsError::from_device_list_errno(io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(e.to_string().contains("no RDMA support"), "{e}");
        let e = VerbsError::from_device_list_errno(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert!(e.to_string().contains("libibverbs"), "{e}");
    }

    #[test]
    fn messages_list_valid_choices() {
        let e = VerbsError::UnknownDevice {
            name: "mlx5_9".into(),
            available: vec!["mlx5_0".into(), "mlx5_1".into()],
        };
        assert_eq!(
            e.to_string(),
            "unknown RDMA device \"mlx5_9\"; devices present: mlx5_0, mlx5_1"
        );
        let e = VerbsError::BadGidIndex {
            device: "rxe0".into(),
            port: 1,
            index: 7,
            valid: vec![0, 1],
        };
        assert_eq!(
            e.to_string(),
            "GID index 7 is not usable on rxe0 port 1; valid indexes: 0, 1"
        );
        assert_eq!(e.reason(), ErrorReason::QpSetup);
        let e = VerbsError::UnknownDevice {
            name: "x".into(),
            available: vec![],
        };
        assert!(e.to_string().ends_with("devices present: none"));
    }

    #[test]
    fn reasons() {
        let e = VerbsError::PortDown {
            device: "rxe0".into(),
            port: 1,
            state: PortState::Down,
        };
        assert_eq!(e.reason(), ErrorReason::PortDown);
        assert_eq!(e.to_string(), "device rxe0 port 1 is down, not active");
        let e = VerbsError::WorkCompletion {
            status: WcStatus::RetryExcErr,
            wr_id: 3,
            vendor_err: 0x81,
            qpn: 17,
        };
        assert_eq!(e.reason(), ErrorReason::WcRetryExceeded);
        assert!(e
            .to_string()
            .contains("transport retry counter exceeded (12)"));
        let e = VerbsError::Create {
            resource: Resource::QueuePair,
            device: "rxe0".into(),
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        };
        assert_eq!(e.reason(), ErrorReason::QpSetup);
    }
}
