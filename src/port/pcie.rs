//! The NIC's PCI function: its PCIe link (negotiated speed and width against what the device
//! can do) and its NUMA node.
//!
//! Texts as `drivers/pci/pci-sysfs.c` prints them: `current_link_speed` = "16.0 GT/s PCIe"
//! ("8 GT/s" before Linux 5.7, "Unknown" when the link status gives no speed, e.g. on an SR-IOV
//! virtual function), `current_link_width` = "16" (0 when the link status gives none),
//! `numa_node` = "-1" when the platform does not say.

use serde::Serialize;

use super::link_rate::scaled_decimal;

/// A PCIe link speed: the text, and the transfer rate it names (GT/s × 10^9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PcieSpeed {
    pub text: String,
    pub transfers_per_second: Option<u64>,
}

impl PcieSpeed {
    /// Decodes "16.0 GT/s PCIe", "8 GT/s", "Unknown"; never fails.
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        let transfers_per_second = text
            .split_once(" GT/s")
            .and_then(|(number, _)| scaled_decimal(number.trim(), 1_000_000_000))
            .filter(|&t| t > 0);
        PcieSpeed {
            text: text.to_owned(),
            transfers_per_second,
        }
    }
}

/// Lane count from `current_link_width` / `max_link_width`; 0 and text that is not a number
/// are unknown.
pub fn parse_width(text: &str) -> Option<u32> {
    let text = text.trim();
    let text = text.strip_prefix('x').unwrap_or(text);
    text.parse().ok().filter(|&w| w > 0)
}

/// `numa_node`: `None` for -1 (no affinity known) and for anything that is not a node number.
pub fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim().parse().ok()
}

/// The negotiated PCIe link against the device's capability. A function that is not PCIe (or
/// a kernel without the files) has every field `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PcieLink {
    pub speed: Option<PcieSpeed>,
    pub width: Option<u32>,
    pub max_speed: Option<PcieSpeed>,
    pub max_width: Option<u32>,
}

impl PcieLink {
    /// `Some(true)` when the link trained below what the device supports (fewer lanes, or a
    /// lower speed), `Some(false)` when it did not, `None` when that cannot be told. Only the
    /// device's own link is compared: a narrower slot or upstream bridge shows here as fewer
    /// lanes than the device's maximum, which is what an operator wants to see.
    pub fn degraded(&self) -> Option<bool> {
        let rate = |s: &Option<PcieSpeed>| s.as_ref().and_then(|s| s.transfers_per_second);
        let width = match (self.width, self.max_width) {
            (Some(now), Some(max)) => Some(now < max),
            _ => None,
        };
        let speed = match (rate(&self.speed), rate(&self.max_speed)) {
            (Some(now), Some(max)) => Some(now < max),
            _ => None,
        };
        match (width, speed) {
            (None, None) => None,
            (w, s) => Some(w.unwrap_or(false) || s.unwrap_or(false)),
        }
    }

    /// Whether any of the four files was there.
    pub fn is_known(&self) -> bool {
        self.speed.is_some()
            || self.width.is_some()
            || self.max_speed.is_some()
            || self.max_width.is_some()
    }
}

/// The PCI function behind an RDMA device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PciFacts {
    /// Domain:bus:device.function ("0000:3b:00.0"), from `uevent`'s `PCI_SLOT_NAME`.
    pub address: Option<String>,
    pub numa_node: Option<u32>,
    pub link: PcieLink,
}

/// `PCI_SLOT_NAME` from a device's `uevent` text; `None` for a device that is not PCI.
pub fn slot_name_from_uevent(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_of_every_kernel_and_generation() {
        for (text, gts) in [
            ("2.5 GT/s PCIe", 2_500_000_000),
            ("5.0 GT/s PCIe", 5_000_000_000),
            ("8.0 GT/s PCIe\n", 8_000_000_000),
            ("16.0 GT/s PCIe", 16_000_000_000),
            ("32.0 GT/s PCIe", 32_000_000_000),
            ("64.0 GT/s PCIe", 64_000_000_000),
            ("128.0 GT/s PCIe", 128_000_000_000),
            ("8 GT/s", 8_000_000_000),
            ("2.5 GT/s", 2_500_000_000),
        ] {
            let s = PcieSpeed::parse(text);
            assert_eq!(s.transfers_per_second, Some(gts), "{text}");
            assert_eq!(s.text, text.trim());
        }
        for unknown in ["Unknown", "Unknown speed", "", "0 GT/s", "8x AGP"] {
            assert_eq!(
                PcieSpeed::parse(unknown).transfers_per_second,
                None,
                "{unknown}"
            );
        }
    }

    #[test]
    fn widths_and_numa_nodes() {
        assert_eq!(parse_width("16\n"), Some(16));
        assert_eq!(parse_width("x8"), Some(8));
        assert_eq!(parse_width("0"), None);
        assert_eq!(parse_width("wide"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1"), None);
        assert_eq!(parse_numa_node(""), None);
    }

    fn link(speed: &str, width: u32, max_speed: &str, max_width: u32) -> PcieLink {
        PcieLink {
            speed: Some(PcieSpeed::parse(speed)),
            width: parse_width(&width.to_string()),
            max_speed: Some(PcieSpeed::parse(max_speed)),
            max_width: parse_width(&max_width.to_string()),
        }
    }

    #[test]
    fn degraded_compares_current_with_max() {
        let full = link("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16);
        assert_eq!(full.degraded(), Some(false));
        let narrow = link("16.0 GT/s PCIe", 8, "16.0 GT/s PCIe", 16);
        assert_eq!(narrow.degraded(), Some(true));
        let slow = link("8.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16);
        assert_eq!(slow.degraded(), Some(true));
        // A virtual function: the link status is not its own to report.
        let vf = link("Unknown", 0, "Unknown", 0);
        assert_eq!(vf.degraded(), None);
        assert!(vf.is_known());
        assert_eq!(PcieLink::default().degraded(), None);
        assert!(!PcieLink::default().is_known());
        let half_known = link("Unknown", 8, "Unknown", 16);
        assert_eq!(half_known.degraded(), Some(true));
    }

    #[test]
    fn slot_names_come_from_uevent() {
        let pci =
            "DRIVER=mlx5_core\nPCI_CLASS=20000\nPCI_ID=15B3:101D\nPCI_SLOT_NAME=0000:3b:00.0\n";
        assert_eq!(slot_name_from_uevent(pci).as_deref(), Some("0000:3b:00.0"));
        let virtio = "DRIVER=virtio_net\nMODALIAS=virtio:d00000001v00001AF4\n";
        assert_eq!(slot_name_from_uevent(virtio), None);
    }
}
