//! The traffic-free port families (docs/metrics.md, "Port facts"): port state and link rate,
//! active width, and the PCIe link of the NIC against its maximum, side by side, so that a
//! rule can say "degraded" by comparing two series with the same labels.
//!
//! Written only by the recorder, from [`PortReport`]s the exporter reads from sysfs every
//! [`REFRESH`](crate::exporter::ports::REFRESH). A value sysfs does not give is left out (its
//! series goes), never exported as 0; `port_up` is there for every port the exporter probes
//! from, 0 also when the port could not be read at all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::PREFIX;
use crate::port::{DeviceFacts, PortFacts};

type FloatGauge = Gauge<f64, AtomicU64>;

/// The ports to show, and what sysfs said about their devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortReport {
    /// (device, port) of every port the exporter probes from: each gets a `port_up` series.
    pub ports: Vec<(String, u8)>,
    /// What was read; a device missing here (unreadable, vanished) shows its ports down.
    pub devices: Vec<DeviceFacts>,
    /// The configured rail of each local device that has one (`rail` of `device_info`).
    pub rails: BTreeMap<String, u16>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PortLabels {
    device: String,
    port: u8,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct PortInfoLabels {
    device: String,
    port: u8,
    link_layer: String,
    netdev: String,
    width: String,
    speed: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct DeviceInfoLabels {
    device: String,
    pci_address: String,
    firmware: String,
    /// The device's configured rail, empty when it has none: a path from a device on rail R
    /// probes the peer's device on R, so this is the path's rail.
    rail: String,
}

/// The families, registered once.
#[derive(Debug, Clone, Default)]
pub struct PortFamilies {
    up: Family<PortLabels, Gauge>,
    rate: Family<PortLabels, FloatGauge>,
    width: Family<PortLabels, Gauge>,
    phys_state: Family<PortLabels, Gauge>,
    info: Family<PortInfoLabels, Gauge>,
    pcie_width: Family<DeviceLabels, Gauge>,
    pcie_max_width: Family<DeviceLabels, Gauge>,
    pcie_speed: Family<DeviceLabels, Gauge>,
    pcie_max_speed: Family<DeviceLabels, Gauge>,
    numa_node: Family<DeviceLabels, Gauge>,
    device_info: Family<DeviceInfoLabels, Gauge>,
}

impl PortFamilies {
    pub fn register(registry: &mut Registry) -> Self {
        let f = PortFamilies::default();
        macro_rules! add {
            ($name:literal, $help:literal, $metric:expr) => {
                registry.register(format!("{PREFIX}_{}", $name), $help, $metric)
            };
        }
        add!(
            "port_up",
            "1 if the port is ACTIVE, else 0 (also when sysfs could not be read)",
            f.up.clone()
        );
        add!(
            "port_rate_bytes_per_second",
            "The port's link rate: sysfs rate, or the RoCE netdev's speed when lower",
            f.rate.clone()
        );
        add!(
            "port_width_lanes",
            "Active lanes of the port's link (4 for 4X)",
            f.width.clone()
        );
        add!(
            "port_phys_state_id",
            "Physical port state code (5 LinkUp, 2 Polling, 3 Disabled, 6 LinkErrorRecovery)",
            f.phys_state.clone()
        );
        add!(
            "port_info",
            "The port's link layer, netdev, width and speed; always 1",
            f.info.clone()
        );
        add!(
            "pcie_link_width_lanes",
            "Negotiated PCIe link width of the device's PCI function",
            f.pcie_width.clone()
        );
        add!(
            "pcie_link_max_width_lanes",
            "Widest PCIe link the device's PCI function supports",
            f.pcie_max_width.clone()
        );
        add!(
            "pcie_link_speed_transfers_per_second",
            "Negotiated PCIe link speed of the device's PCI function (GT/s x 1e9)",
            f.pcie_speed.clone()
        );
        add!(
            "pcie_link_max_speed_transfers_per_second",
            "Fastest PCIe link speed the device's PCI function supports (GT/s x 1e9)",
            f.pcie_max_speed.clone()
        );
        add!(
            "device_numa_node",
            "NUMA node of the device's PCI function",
            f.numa_node.clone()
        );
        add!(
            "device_info",
            "The device's PCI address, firmware version and configured rail; always 1",
            f.device_info.clone()
        );
        f
    }
}

/// The label sets shown now, so that the next report removes the ones that went.
#[derive(Debug, Default)]
pub struct PortSeries {
    ports: BTreeSet<PortLabels>,
    info: BTreeSet<PortInfoLabels>,
    devices: BTreeSet<DeviceLabels>,
    device_info: BTreeSet<DeviceInfoLabels>,
}

impl PortSeries {
    /// Shows `report`: sets what it gives, removes every series it no longer gives.
    pub fn apply(&mut self, f: &PortFamilies, report: &PortReport) {
        let mut ports = BTreeSet::new();
        let mut info = BTreeSet::new();
        let mut devices = BTreeSet::new();
        let mut device_info = BTreeSet::new();
        for (device, port) in &report.ports {
            let labels = PortLabels {
                device: device.clone(),
                port: *port,
            };
            let dev = report.devices.iter().find(|d| &d.name == device);
            let facts = dev.and_then(|d| d.port(*port));
            show_port(f, &labels, facts);
            if let Some(i) = facts.map(|p| info_labels(&labels, p)) {
                f.info.get_or_create(&i).set(1);
                info.insert(i);
            }
            ports.insert(labels);
            if let Some(dev) = dev {
                let d = DeviceLabels {
                    device: device.clone(),
                };
                if devices.insert(d.clone()) {
                    show_device(f, &d, dev);
                    let i = DeviceInfoLabels {
                        device: device.clone(),
                        pci_address: pci_address(dev),
                        firmware: dev.firmware.clone().unwrap_or_default(),
                        rail: report
                            .rails
                            .get(device)
                            .map(u16::to_string)
                            .unwrap_or_default(),
                    };
                    f.device_info.get_or_create(&i).set(1);
                    device_info.insert(i);
                }
            }
        }
        for gone in self.ports.difference(&ports) {
            f.up.remove(gone);
            clear_port(f, gone);
        }
        for gone in self.info.difference(&info) {
            f.info.remove(gone);
        }
        for gone in self.devices.difference(&devices) {
            clear_device(f, gone);
        }
        for gone in self.device_info.difference(&device_info) {
            f.device_info.remove(gone);
        }
        *self = PortSeries {
            ports,
            info,
            devices,
            device_info,
        };
    }
}

fn pci_address(dev: &DeviceFacts) -> String {
    dev.pci
        .as_ref()
        .and_then(|p| p.address.clone())
        .unwrap_or_default()
}

fn info_labels(labels: &PortLabels, p: &PortFacts) -> PortInfoLabels {
    let rate = p.rate.as_ref();
    PortInfoLabels {
        device: labels.device.clone(),
        port: labels.port,
        link_layer: p.link_layer.map(|l| l.to_string()).unwrap_or_default(),
        netdev: p
            .netdev
            .as_ref()
            .map(|n| n.name.clone())
            .unwrap_or_default(),
        width: rate
            .and_then(|r| r.lanes)
            .map(|l| format!("{l}X"))
            .unwrap_or_default(),
        speed: rate
            .and_then(|r| r.speed.as_ref())
            .map(|s| s.name().to_owned())
            .unwrap_or_default(),
    }
}

/// Sets `family[labels]` to `value`, or removes the series when there is no value.
fn set_or_remove<L>(family: &Family<L, Gauge>, labels: &L, value: Option<i64>)
where
    L: Clone + std::hash::Hash + Eq,
{
    match value {
        Some(v) => {
            family.get_or_create(labels).set(v);
        }
        None => {
            family.remove(labels);
        }
    }
}

fn show_port(f: &PortFamilies, labels: &PortLabels, facts: Option<&PortFacts>) {
    f.up.get_or_create(labels)
        .set(i64::from(facts.is_some_and(PortFacts::is_up)));
    let Some(p) = facts else {
        clear_port(f, labels);
        return;
    };
    match p.link_rate_bits_per_second {
        // Rates are far below 2^53: exact as f64.
        Some(bits) => {
            f.rate.get_or_create(labels).set(bits as f64 / 8.0);
        }
        None => {
            f.rate.remove(labels);
        }
    }
    let lanes = p.rate.as_ref().and_then(|r| r.lanes);
    set_or_remove(&f.width, labels, lanes.map(i64::from));
    let phys = p.phys_state.map(|s| i64::from(s.code()));
    set_or_remove(&f.phys_state, labels, phys);
}

/// Removes every per-port series but `port_up` and `port_info`.
fn clear_port(f: &PortFamilies, labels: &PortLabels) {
    f.rate.remove(labels);
    f.width.remove(labels);
    f.phys_state.remove(labels);
}

fn show_device(f: &PortFamilies, labels: &DeviceLabels, dev: &DeviceFacts) {
    let pci = dev.pci.as_ref();
    let link = pci.map(|p| &p.link);
    let speed = |s: Option<&crate::port::PcieSpeed>| s.and_then(|s| s.transfers_per_second);
    set_or_remove(
        &f.pcie_width,
        labels,
        link.and_then(|l| l.width).map(i64::from),
    );
    set_or_remove(
        &f.pcie_max_width,
        labels,
        link.and_then(|l| l.max_width).map(i64::from),
    );
    set_or_remove(
        &f.pcie_speed,
        labels,
        speed(link.and_then(|l| l.speed.as_ref())).and_then(|t| i64::try_from(t).ok()),
    );
    set_or_remove(
        &f.pcie_max_speed,
        labels,
        speed(link.and_then(|l| l.max_speed.as_ref())).and_then(|t| i64::try_from(t).ok()),
    );
    set_or_remove(
        &f.numa_node,
        labels,
        pci.and_then(|p| p.numa_node).map(i64::from),
    );
}

fn clear_device(f: &PortFamilies, labels: &DeviceLabels) {
    f.pcie_width.remove(labels);
    f.pcie_max_width.remove(labels);
    f.pcie_speed.remove(labels);
    f.pcie_max_speed.remove(labels);
    f.numa_node.remove(labels);
}
