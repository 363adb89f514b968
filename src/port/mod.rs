//! What sysfs says about an RDMA device and its ports: state, physical state, link layer, link
//! rate (the `rate` file, and for RoCE the netdev's speed: the lower wins), active width and
//! speed, the PCIe link of the NIC's PCI function against its maximum, the NUMA node, and an
//! allowlist of port counters (docs/metrics.md, "Port facts" and "Port counters").
//!
//! - [`Sysfs`] reads a tree under an injectable root (`/sys`, or a fixture tree in tests) and
//!   skips excluded devices before reading anything under them; it never follows symlinks by
//!   hand, so fixtures are plain directories.
//! - The parsers ([`LinkRate`], [`PhysState`], [`PcieSpeed`], ...) are pure and total: a value
//!   this build does not know (a new speed, width or state) is a value, never an error or panic.
//! - [`CounterSnapshot`] / [`increases`] are the pure counter arithmetic for bursts: resets and
//!   wraps never produce a negative or huge increase, and `port_xmit_data` / `port_rcv_data`
//!   (4-byte words) come out in bytes; [`other_traffic`] is what a port carried during a burst
//!   beyond the burst itself.
//! - No `unsafe`; the active RDMA MTU is not in sysfs (verbs reports it; the netdev MTU is here).

mod allowlist;
mod counters;
mod error;
mod facts;
mod link_rate;
mod netdev;
mod pcie;
mod state;
mod sysfs;
mod traffic;

pub use allowlist::{
    by_label, lookup, CounterKind, CounterSource, CounterSpec, CounterUnit, ALLOWLIST,
};
pub use counters::{
    increase, increases, nonzero_increases, total, CounterIncrease, CounterSnapshot, IncreaseStatus,
};
pub use error::PortError;
pub use facts::{effective_rate, DeviceFacts, PortFacts};
pub use link_rate::{LinkRate, LinkSpeed};
pub use netdev::NetdevFacts;
pub use pcie::{PciFacts, PcieLink, PcieSpeed};
pub use state::{parse_link_layer, parse_state, PhysState};
pub use sysfs::{CounterReader, Sysfs, SYSTEM_ROOT};
pub use traffic::{other_traffic, BurstEnd, BurstTraffic, OtherTraffic};

#[cfg(test)]
mod tests;
