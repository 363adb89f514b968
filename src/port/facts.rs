//! What sysfs says about a device and its ports, assembled ([`super::Sysfs`] reads it).
//!
//! Every field the kernel does not give, or gives in a form this build cannot read, is `None`;
//! attributes that exist but could not be read are listed in `unreadable`.

use serde::Serialize;

use super::counters::CounterSnapshot;
use super::link_rate::LinkRate;
use super::netdev::NetdevFacts;
use super::pcie::PciFacts;
use super::state::PhysState;
use crate::verbs::{LinkLayer, PortState};

/// One port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortFacts {
    pub port: u8,
    pub state: Option<PortState>,
    pub phys_state: Option<PhysState>,
    pub link_layer: Option<LinkLayer>,
    /// The `rate` file.
    pub rate: Option<LinkRate>,
    /// The Ethernet netdev of a RoCE/iWARP port (`None` on InfiniBand).
    pub netdev: Option<NetdevFacts>,
    /// The port's link rate: the `rate` file's, or the netdev's speed when that is lower
    /// (a RoCE port on a slower bond or a link that negotiated down).
    pub link_rate_bits_per_second: Option<u64>,
    /// Allowlisted counters, raw (`port_xmit_data` in 4-byte words); `None` when not read
    /// (reading `counters/` asks the device's firmware, so only those who need them do).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterSnapshot>,
    /// Files that exist but could not be read, with the error ("rate: Invalid argument").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

impl PortFacts {
    /// Whether the port is ACTIVE (the only state in which data flows).
    pub fn is_up(&self) -> bool {
        self.state.is_some_and(PortState::is_active)
    }
}

/// The lower of the `rate` file's rate and the netdev's speed, of those known.
pub fn effective_rate(rate: Option<&LinkRate>, netdev: Option<&NetdevFacts>) -> Option<u64> {
    let from_rate = rate.and_then(|r| r.bits_per_second);
    let from_netdev = netdev.and_then(|n| n.speed_bits_per_second);
    match (from_rate, from_netdev) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceFacts {
    pub name: String,
    /// `fw_ver` (empty on software devices such as rxe: `None`).
    pub firmware: Option<String>,
    /// The PCI function: the device's own, or (rxe, siw) that of its netdev. `None` when
    /// neither is a PCI device (a virtio NIC in a VM).
    pub pci: Option<PciFacts>,
    pub ports: Vec<PortFacts>,
}

impl DeviceFacts {
    pub fn port(&self, port: u8) -> Option<&PortFacts> {
        self.ports.iter().find(|p| p.port == port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn netdev(speed: Option<u64>) -> NetdevFacts {
        NetdevFacts {
            name: "eth0".into(),
            speed_bits_per_second: speed,
            mtu: Some(9000),
            operstate: Some("up".into()),
        }
    }

    #[test]
    fn the_lower_rate_wins() {
        let rate = LinkRate::parse("100 Gb/sec (4X EDR)");
        assert_eq!(
            effective_rate(Some(&rate), Some(&netdev(Some(25_000_000_000)))),
            Some(25_000_000_000)
        );
        assert_eq!(
            effective_rate(Some(&rate), Some(&netdev(Some(200_000_000_000)))),
            Some(100_000_000_000)
        );
        assert_eq!(
            effective_rate(Some(&rate), Some(&netdev(None))),
            Some(100_000_000_000)
        );
        assert_eq!(effective_rate(Some(&rate), None), Some(100_000_000_000));
        assert_eq!(
            effective_rate(None, Some(&netdev(Some(10_000_000_000)))),
            Some(10_000_000_000)
        );
        let unknown = LinkRate::parse("fast");
        assert_eq!(effective_rate(Some(&unknown), None), None);
    }
}
