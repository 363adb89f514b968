//! The Ethernet netdev under a RoCE (or iWARP) port: its name, speed and MTU.
//!
//! `speed` is in Mb/s; the kernel prints -1 when the driver does not know it (virtio-net, a
//! link without carrier) and refuses the read (`EINVAL`) while the interface is down. Both are
//! an unknown speed, never an error.

use serde::Serialize;

/// What sysfs says about the netdev of a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetdevFacts {
    /// Interface name ("eth2", "ens1f0np0", "bond0").
    pub name: String,
    /// `speed` in bit/s; `None` when unknown.
    pub speed_bits_per_second: Option<u64>,
    /// `mtu`: the Ethernet MTU; the RDMA MTU of a RoCE port is the largest of 256..4096 that
    /// fits in it with the RoCE headers.
    pub mtu: Option<u32>,
    /// `operstate` ("up", "down", "lowerlayerdown", ...).
    pub operstate: Option<String>,
}

/// `speed` (Mb/s) to bit/s; -1, 0 and the unsigned form of -1 are unknown.
pub fn parse_speed(text: &str) -> Option<u64> {
    let mbps: i64 = text.trim().parse().ok()?;
    if mbps <= 0 || mbps == i64::from(u32::MAX) {
        return None;
    }
    u64::try_from(mbps).ok()?.checked_mul(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_in_megabits() {
        assert_eq!(parse_speed("100000\n"), Some(100_000_000_000));
        assert_eq!(parse_speed("25000"), Some(25_000_000_000));
        assert_eq!(parse_speed("1000"), Some(1_000_000_000));
        assert_eq!(parse_speed("800000"), Some(800_000_000_000));
        assert_eq!(parse_speed("-1"), None);
        assert_eq!(parse_speed("0"), None);
        assert_eq!(parse_speed("4294967295"), None);
        assert_eq!(parse_speed("fast"), None);
        assert_eq!(parse_speed(""), None);
    }
}
