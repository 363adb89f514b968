//! The `devices` listing: what verbs and sysfs say about each device and port, merged, as JSON
//! or text (pure: unit-tested without RDMA).
//!
//! Verbs gives the port attributes and GID table a probe uses (active MTU, GIDs); sysfs gives the
//! link rate (the `rate` file and the RoCE netdev's speed, the lower winning), the physical state,
//! the PCIe link against its maximum, the NUMA node and the allowlisted counters. Either may be
//! missing (a container without libibverbs, a device sysfs cannot read): what the other says is
//! still listed.

use std::fmt::Write as _;

use serde::Serialize;

use super::report::format_link_rate;
use crate::port::{DeviceFacts, PciFacts, PcieSpeed, PortFacts};
use crate::verbs::{select_gid, DeviceInfo, LinkLayer, PortInfo};

/// One device as `devices` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceListing {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// The PCI function: address, NUMA node, PCIe link against its maximum.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci: Option<PciFacts>,
    pub ports: Vec<PortListing>,
    /// Why verbs could not open or query the device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why sysfs could not be read for the device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysfs_error: Option<String>,
}

/// One port: the verbs attributes (flattened, as `devices --json` always printed them) and
/// what sysfs says, under `sysfs`.
#[derive(Debug, Clone, Serialize)]
pub struct PortListing {
    #[serde(flatten)]
    pub verbs: Option<PortInfo>,
    /// The port number when verbs did not list the port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysfs: Option<PortFacts>,
}

impl PortListing {
    pub fn number(&self) -> u8 {
        self.verbs
            .as_ref()
            .map(|v| v.port)
            .or(self.port)
            .or(self.sysfs.as_ref().map(|s| s.port))
            .unwrap_or(0)
    }
}

/// Merges verbs' list with sysfs' facts by device name and port number: verbs' devices in its
/// order, then those only sysfs has. `sysfs` holds each device's facts or why they could not be
/// read.
pub fn merge(
    verbs: &[DeviceInfo],
    sysfs: Vec<(String, Result<DeviceFacts, String>)>,
) -> Vec<DeviceListing> {
    let mut sysfs: Vec<(String, Option<Result<DeviceFacts, String>>)> =
        sysfs.into_iter().map(|(n, f)| (n, Some(f))).collect();
    let mut take = |name: &str| {
        sysfs
            .iter_mut()
            .find(|(n, _)| n == name)
            .and_then(|(_, f)| f.take())
    };
    let mut out: Vec<DeviceListing> = verbs
        .iter()
        .map(|d| listing(&d.name, Some(d), take(&d.name)))
        .collect();
    for (name, facts) in sysfs.iter_mut() {
        if let Some(facts) = facts.take() {
            out.push(listing(name, None, Some(facts)));
        }
    }
    out
}

fn listing(
    name: &str,
    verbs: Option<&DeviceInfo>,
    sysfs: Option<Result<DeviceFacts, String>>,
) -> DeviceListing {
    let (facts, sysfs_error) = match sysfs {
        Some(Ok(f)) => (Some(f), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let mut sysfs_ports: Vec<PortFacts> =
        facts.as_ref().map(|f| f.ports.clone()).unwrap_or_default();
    let mut ports: Vec<PortListing> = verbs
        .map(|d| d.ports.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let at = sysfs_ports.iter().position(|s| s.port == p.port);
            PortListing {
                verbs: Some(p.clone()),
                port: None,
                sysfs: at.map(|i| sysfs_ports.remove(i)),
            }
        })
        .collect();
    ports.extend(sysfs_ports.into_iter().map(|s| PortListing {
        verbs: None,
        port: Some(s.port),
        sysfs: Some(s),
    }));
    ports.sort_by_key(PortListing::number);
    DeviceListing {
        name: name.to_owned(),
        firmware: facts.as_ref().and_then(|f| f.firmware.clone()),
        pci: facts.and_then(|f| f.pci),
        ports,
        error: verbs.and_then(|d| d.error.clone()),
        sysfs_error,
    }
}

/// The text listing: per device its PCIe link and NUMA node, per port the state, link layer,
/// MTU, link rate, what sysfs says and the non-zero counters, and the GID table with the GID a
/// probe would pick by default marked `*`.
pub fn format(devices: &[DeviceListing]) -> String {
    let mut out = String::new();
    let mut marked = false;
    for device in devices {
        match &device.firmware {
            Some(fw) => {
                let _ = writeln!(out, "{} (firmware {fw})", device.name);
            }
            None => {
                let _ = writeln!(out, "{}", device.name);
            }
        }
        if let Some(pci) = &device.pci {
            let _ = writeln!(out, "  {}", format_pci(pci));
        }
        if let Some(error) = &device.error {
            let _ = writeln!(out, "  error: {error}");
        }
        if let Some(error) = &device.sysfs_error {
            let _ = writeln!(out, "  sysfs: {error}");
        }
        for port in &device.ports {
            marked |= format_port(&mut out, port);
        }
    }
    if marked {
        let _ = writeln!(
            out,
            "\n* = the GID a probe uses on that port when --gid-index is not given"
        );
    }
    out
}

/// "PCIe 0000:3b:00.0: 16.0 GT/s x16 (max 16.0 GT/s x16), NUMA node 0", "DEGRADED" when the link
/// trained below the maximum.
fn format_pci(pci: &PciFacts) -> String {
    let speed = |s: &Option<PcieSpeed>| s.as_ref().map_or("?", |s| s.text.as_str()).to_owned();
    let width = |w: Option<u32>| w.map_or_else(|| "?".to_owned(), |w| w.to_string());
    let link = &pci.link;
    let mut text = format!(
        "PCIe {}: ",
        pci.address.as_deref().unwrap_or("(no address)")
    );
    if link.is_known() {
        let _ = write!(
            text,
            "{} x{} (max {} x{})",
            speed(&link.speed),
            width(link.width),
            speed(&link.max_speed),
            width(link.max_width)
        );
        if link.degraded() == Some(true) {
            text.push_str(" DEGRADED");
        }
    } else {
        text.push_str("link not reported");
    }
    match pci.numa_node {
        Some(node) => {
            let _ = write!(text, ", NUMA node {node}");
        }
        None => text.push_str(", no NUMA node"),
    }
    text
}

/// Writes one port; returns whether a default GID was marked.
fn format_port(out: &mut String, port: &PortListing) -> bool {
    match &port.verbs {
        Some(verbs) => format_verbs_port(out, verbs),
        None => {
            let s = port.sysfs.as_ref();
            let state = s
                .and_then(|s| s.state)
                .map_or_else(|| "?".to_owned(), |v| v.to_string());
            let layer = s
                .and_then(|s| s.link_layer)
                .map_or_else(|| "?".to_owned(), |v| v.to_string());
            let _ = writeln!(
                out,
                "  port {}: {state}, {layer} (not listed by verbs)",
                port.number()
            );
        }
    }
    if let Some(sysfs) = &port.sysfs {
        format_sysfs_port(out, sysfs);
    }
    match &port.verbs {
        Some(verbs) => format_gids(out, verbs),
        None => false,
    }
}

fn format_verbs_port(out: &mut String, port: &PortInfo) {
    let mtu = |m: Option<u32>| m.map_or_else(|| "?".to_owned(), |m| m.to_string());
    let _ = writeln!(
        out,
        "  port {}: {}, {}, MTU {}/{} (active/max), {} ({})",
        port.port,
        port.state,
        port.link_layer,
        mtu(port.active_mtu),
        mtu(port.max_mtu),
        format_link_rate(port.link_rate_bits_per_second),
        port.link_description()
    );
    if port.link_layer == LinkLayer::InfiniBand {
        let _ = writeln!(out, "    LID {}", port.lid);
    }
}

/// "sysfs: link_up, rate 100 Gb/sec (4X EDR), netdev eth2 100000 Mb/s MTU 9000: link rate
/// 100.00 Gb/s", then the non-zero allowlisted counters.
fn format_sysfs_port(out: &mut String, s: &PortFacts) {
    let mut line = String::from("    sysfs: ");
    line.push_str(
        &s.phys_state
            .map_or_else(|| "physical state ?".to_owned(), |p| p.to_string()),
    );
    let _ = write!(
        line,
        ", rate {}",
        s.rate.as_ref().map_or("?", |r| r.text.as_str())
    );
    if let Some(n) = &s.netdev {
        let speed = n.speed_bits_per_second.map_or_else(
            || "speed unknown".to_owned(),
            |b| format!("{} Mb/s", b / 1_000_000),
        );
        let _ = write!(line, ", netdev {} {speed}", n.name);
        if let Some(mtu) = n.mtu {
            let _ = write!(line, " MTU {mtu}");
        }
    }
    let _ = write!(
        line,
        ": link rate {}",
        format_link_rate(s.link_rate_bits_per_second)
    );
    let _ = writeln!(out, "{line}");
    for problem in &s.unreadable {
        let _ = writeln!(out, "    unreadable: {problem}");
    }
    if let Some(counters) = &s.counters {
        let nonzero: Vec<String> = counters
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(spec, v)| format!("{}={v}", spec.label))
            .collect();
        if counters.is_empty() {
            let _ = writeln!(out, "    counters: none of the allowlisted ones");
        } else if nonzero.is_empty() {
            let _ = writeln!(
                out,
                "    counters: all {} allowlisted counters are 0",
                counters.len()
            );
        } else {
            let _ = writeln!(out, "    counters: {}", nonzero.join(" "));
        }
    }
}

/// The GID table; returns whether a default GID was marked.
fn format_gids(out: &mut String, port: &PortInfo) -> bool {
    if port.gids.is_empty() {
        let _ = writeln!(out, "    no readable GIDs");
        return false;
    }
    // On InfiniBand a probe uses LID routing (no GRH) unless --gid-index is given.
    let default = match port.link_layer {
        LinkLayer::InfiniBand => None,
        _ => select_gid(&port.gids),
    };
    let _ = writeln!(
        out,
        "      {:<5} {:<10} {:<16} ADDRESS",
        "GID", "TYPE", "NETDEV"
    );
    for gid in &port.gids {
        let mark = if Some(gid.index) == default { '*' } else { ' ' };
        let _ = writeln!(
            out,
            "    {mark} {:<5} {:<10} {:<16} {}",
            gid.index,
            gid.gid_type.to_string(),
            gid.netdev.as_deref().unwrap_or("-"),
            gid.gid
        );
    }
    default.is_some()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::port::Sysfs;
    use crate::verbs::{Gid, GidEntry, GidType, PortState};

    fn gid(index: u32, addr: &str, gid_type: GidType) -> GidEntry {
        let ip: std::net::Ipv6Addr = addr.parse().unwrap();
        GidEntry {
            index,
            gid: Gid(ip.octets()),
            gid_type,
            netdev: Some("eth0".into()),
        }
    }

    fn verbs_rxe() -> DeviceInfo {
        DeviceInfo {
            name: "rxe0".into(),
            ports: vec![PortInfo {
                port: 1,
                state: PortState::Active,
                active_mtu: Some(1024),
                max_mtu: Some(4096),
                link_layer: LinkLayer::Ethernet,
                lid: 0,
                active_width: 2,
                active_speed: 16,
                link_rate_bits_per_second: Some(100_000_000_000),
                gids: vec![
                    gid(0, "fe80::1", GidType::RoceV2),
                    gid(1, "fe80::1", GidType::RoceV1),
                    gid(2, "::ffff:10.0.0.1", GidType::RoceV2),
                ],
            }],
            error: None,
        }
    }

    fn fixture(tree: &str) -> Sysfs {
        Sysfs::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(tree),
        )
    }

    fn with_counters(sysfs: &Sysfs, name: &str) -> (String, Result<DeviceFacts, String>) {
        let facts = sysfs.device(name).map(|mut d| {
            for p in &mut d.ports {
                p.counters = sysfs
                    .port_with_counters(name, p.port)
                    .ok()
                    .and_then(|f| f.counters);
            }
            d
        });
        (name.to_owned(), facts.map_err(|e| e.to_string()))
    }

    #[test]
    fn verbs_only_listing_is_as_before() {
        let devices = merge(
            &[
                verbs_rxe(),
                DeviceInfo {
                    name: "mlx5_9".into(),
                    ports: vec![],
                    error: Some("open failed: permission denied".into()),
                },
            ],
            Vec::new(),
        );
        let text = format(&devices);
        assert!(text.contains("rxe0\n"), "{text}");
        assert!(
            text.contains("port 1: active, ethernet, MTU 1024/4096 (active/max), 100.00 Gb/s"),
            "{text}"
        );
        assert!(
            text.contains("* 2     roce_v2    eth0             ::ffff:10.0.0.1"),
            "{text}"
        );
        assert!(
            text.contains("  0     roce_v2    eth0             fe80::1"),
            "{text}"
        );
        assert!(
            text.contains("mlx5_9\n  error: open failed: permission denied"),
            "{text}"
        );
        assert!(text.contains("* = the GID a probe uses"), "{text}");
        assert!(!text.contains("sysfs"), "{text}");
        let json = serde_json::to_value(&devices).unwrap();
        assert_eq!(json[0]["ports"][0]["port"], 1);
        assert_eq!(json[0]["ports"][0]["state"], "active");
        assert!(json[0]["ports"][0].get("sysfs").is_none());
    }

    #[test]
    fn verbs_and_sysfs_merge_by_name_and_port() {
        let sysfs = fixture("rxe");
        let devices = merge(&[verbs_rxe()], vec![with_counters(&sysfs, "rxe0")]);
        let text = format(&devices);
        println!("{text}");
        assert!(
            text.contains(
                "    sysfs: link_up, rate 2.5 Gb/sec (1X SDR), netdev eth0 speed unknown MTU 1500: link rate 2.50 Gb/s"
            ),
            "{text}"
        );
        assert!(text.contains("completer_retry_err=9"), "{text}");
        assert!(!text.contains("PCIe"), "{text}");
        let json = serde_json::to_value(&devices).unwrap();
        let port = &json[0]["ports"][0];
        assert_eq!(port["port"], 1);
        assert_eq!(port["gids"][2]["gid"], "::ffff:10.0.0.1");
        assert_eq!(port["sysfs"]["link_rate_bits_per_second"], 2_500_000_000u64);
        assert_eq!(port["sysfs"]["netdev"]["name"], "eth0");
        assert_eq!(port["sysfs"]["counters"]["sent_pkts"], 52_000);
    }

    #[test]
    fn sysfs_only_devices_are_listed_with_their_pcie_link() {
        let sysfs = fixture("mlx5-roce").excluding(["mlx5_8"]);
        let facts = sysfs
            .devices()
            .unwrap()
            .iter()
            .map(|n| with_counters(&sysfs, n))
            .collect();
        let devices = merge(&[], facts);
        let text = format(&devices);
        println!("{text}");
        assert!(text.contains("mlx5_0 (firmware 22.36.1010)\n"), "{text}");
        assert!(
            text.contains(
                "  PCIe 0000:3b:00.0: 16.0 GT/s PCIe x16 (max 16.0 GT/s PCIe x16), NUMA node 0\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "  PCIe 0000:86:00.0: 16.0 GT/s PCIe x8 (max 16.0 GT/s PCIe x16) DEGRADED, NUMA node 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  port 1: active, ethernet (not listed by verbs)\n"),
            "{text}"
        );
        assert!(
            text.contains("netdev ens1f0np0 100000 Mb/s MTU 9000: link rate 100.00 Gb/s"),
            "{text}"
        );
        assert!(text.contains("np_cnp_sent=1500"), "{text}");
        assert!(!text.contains("mlx5_8"), "{text}");
        let json = serde_json::to_value(&devices).unwrap();
        assert_eq!(json[1]["pci"]["link"]["width"], 8);
        assert_eq!(json[1]["pci"]["link"]["max_width"], 16);
        assert_eq!(json[0]["ports"][0]["port"], 1);
        assert_eq!(json[0]["ports"][0]["sysfs"]["rate"]["speed"], "EDR");
        assert!(json[0]["ports"][0].get("gids").is_none());
    }

    #[test]
    fn a_device_sysfs_cannot_read_keeps_what_verbs_says() {
        let devices = merge(
            &[verbs_rxe()],
            vec![("rxe0".into(), Err("listing /x: permission denied".into()))],
        );
        let text = format(&devices);
        assert!(
            text.contains("  sysfs: listing /x: permission denied\n"),
            "{text}"
        );
        assert!(text.contains("port 1: active"), "{text}");
        let counters_zero = {
            let sysfs = fixture("mlx5-ib");
            format(&merge(&[], vec![with_counters(&sysfs, "mlx5_1")]))
        };
        assert!(
            counters_zero.contains("counters: all ") && counters_zero.contains("are 0"),
            "{counters_zero}"
        );
        assert!(
            counters_zero.contains("  port 1: down, infiniband"),
            "{counters_zero}"
        );
    }
}
