//! The only module with `unsafe`: RDMA verbs through `sideway` (and raw `rdma-mummy-sys` calls
//! where sideway has no wrapper).
//!
//! What it provides, and why it is shaped this way:
//! - [`list_devices`] / [`Context::open`]: devices, ports, GID tables. Raw attribute codes are
//!   decoded totally (unknown → `Unknown(raw)` / `None`), never with sideway's panicking
//!   conversions, so a new NIC generation cannot crash the exporter. A host without RDMA (ENOSYS),
//!   without libibverbs (EOPNOTSUPP) or without devices yields [`VerbsError::NoDevice`].
//! - [`select_gid`]: perftest's GID auto-selection (per device and port, never derived from the
//!   control connection's address: docs/architecture.md, "ib_write_bw semantics").
//! - [`ProtectionDomain`], [`MemoryRegion`] (owned page-aligned buffer, LOCAL_WRITE |
//!   REMOTE_WRITE, never REMOTE_READ), [`CompletionQueue`] (basic CQ + completion channel: the
//!   extended CQ poller is broken on rxe with rdma-core < 55; an extended one only where the NIC
//!   stamps completions with its clock, for pings: [`Context::completion_clock`]), [`QueuePair`] (basic RC QP,
//!   perftest transition defaults, chained `ibv_post_send`), [`UdQueuePair`] and [`AddressHandle`]
//!   (datagrams to any peer's UD QP: pings).
//! - RAII: sideway handles hold `Arc`s to their parents, so QPs are destroyed before their CQs
//!   and PD, MRs before their PD, everything before the device context, in any drop order.
//!   All handle types are `Send` so the burst engine can own them on its own OS thread.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod device;
mod error;
mod qp;
mod resources;
mod timestamps;
mod types;
mod ud;

pub use device::{list_devices, list_devices_filtered, Context, DeviceInfo, LocalPort, PortInfo};
pub use error::{Resource, Result, VerbsError};
pub use qp::{
    PathParams, QpCaps, QueuePair, RemoteAddr, RemoteEndpoint, RtsParams, WriteRequest,
    MAX_FLOW_LABEL, MAX_PSN,
};
pub use resources::{
    Completion, CompletionQueue, MemoryRegion, ProtectionDomain, RemoteAccess, Woken,
};
pub use timestamps::CompletionClock;
pub use types::{
    bytes_to_mtu, effective_speed_code, lane_rate_bits_per_second, link_rate_bits_per_second,
    mtu_to_bytes, select_gid, select_gid_with, speed_name, wc_opcode, width_lanes, width_name, Gid,
    GidEntry, GidType, LinkLayer, PathMtu, PortState, WcStatus,
};
pub use ud::{AddressHandle, Route, UdQueuePair, GRH_LEN};
