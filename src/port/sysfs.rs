//! Reading sysfs under an injectable root: `/sys` in production, a fixture tree in tests.
//!
//! Paths are only ever joined (`<root>/class/infiniband/<dev>/device/numa_node`), never
//! resolved with `readlink` or `canonicalize`: on a live system the kernel follows the symlinks
//! (`class/infiniband/<dev>`, `device`, `class/net/<if>`), and a fixture tree can lay the same
//! paths out as plain directories (tests/fixtures/sysfs/README.md).
//!
//! The exclusion list is checked before anything under a device is touched: some
//! firmware-restricted NICs flood the kernel log when their attributes are read.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use super::allowlist::{self, CounterSource, CounterSpec};
use super::counters::CounterSnapshot;
use super::error::PortError;
use super::facts::{effective_rate, DeviceFacts, PortFacts};
use super::link_rate::LinkRate;
use super::netdev::{self, NetdevFacts};
use super::pcie::{self, PciFacts, PcieLink, PcieSpeed};
use super::state::{parse_link_layer, parse_state, PhysState};
use crate::verbs::LinkLayer;

/// The root production reads.
pub const SYSTEM_ROOT: &str = "/sys";

/// How many GID table entries are tried to find a RoCE port's netdev (entry 0, the default GID
/// derived from the MAC, is there whenever the netdev is; the rest cover odd drivers).
const NDEV_SCAN: u32 = 8;

/// One attribute read.
enum Attr {
    Value(String),
    /// The file does not exist (the kernel or driver does not provide it).
    Missing,
    /// It exists but the read failed (`EINVAL` from a netdev that is down, `EIO`).
    Unreadable(io::Error),
}

/// A sysfs tree, minus the excluded devices.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
    exclude: BTreeSet<String>,
    #[cfg(test)]
    touched: std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
}

impl Sysfs {
    /// The tree under `root` (e.g. `/sys`, or a fixture directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs {
            root: root.into(),
            exclude: BTreeSet::new(),
            #[cfg(test)]
            touched: Default::default(),
        }
    }

    /// `/sys`.
    pub fn system() -> Self {
        Self::new(SYSTEM_ROOT)
    }

    /// Never reads anything under these devices (the config's `exclude_devices`).
    pub fn excluding<S: Into<String>>(mut self, devices: impl IntoIterator<Item = S>) -> Self {
        self.exclude.extend(devices.into_iter().map(Into::into));
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn is_excluded(&self, device: &str) -> bool {
        self.exclude.contains(device)
    }

    fn class_dir(&self) -> PathBuf {
        self.root.join("class/infiniband")
    }

    /// The RDMA devices, sorted, without the excluded ones (only the class directory is
    /// listed). No `class/infiniband` (no RDMA stack) is an empty list.
    pub fn devices(&self) -> Result<Vec<String>, PortError> {
        let dir = self.class_dir();
        let mut names = match self.list(&dir) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(PortError::List { path: dir, source }),
        };
        names.retain(|n| !self.is_excluded(n));
        names.sort();
        Ok(names)
    }

    /// The device's directory, after the exclusion and name checks.
    fn device_dir(&self, device: &str) -> Result<PathBuf, PortError> {
        if self.is_excluded(device) {
            return Err(PortError::Excluded {
                device: device.to_owned(),
            });
        }
        let unknown = || PortError::UnknownDevice {
            device: device.to_owned(),
            class_dir: self.class_dir(),
        };
        if !is_plain_name(device) {
            return Err(unknown());
        }
        let dir = self.class_dir().join(device);
        if !self.exists(&dir) {
            return Err(unknown());
        }
        Ok(dir)
    }

    /// The device's port numbers, ascending.
    pub fn ports(&self, device: &str) -> Result<Vec<u8>, PortError> {
        let dir = self.device_dir(device)?.join("ports");
        self.port_numbers(&dir)
    }

    fn port_numbers(&self, dir: &Path) -> Result<Vec<u8>, PortError> {
        let names = self.list(dir).map_err(|source| PortError::List {
            path: dir.to_owned(),
            source,
        })?;
        let mut ports: Vec<u8> = names.iter().filter_map(|n| n.parse().ok()).collect();
        ports.sort_unstable();
        Ok(ports)
    }

    /// Everything about the device and all its ports, without counters.
    pub fn device(&self, device: &str) -> Result<DeviceFacts, PortError> {
        let dir = self.device_dir(device)?;
        let ports = self.port_numbers(&dir.join("ports"))?;
        let facts: Vec<PortFacts> = ports.iter().map(|&p| self.port_at(&dir, p)).collect();
        let firmware = match self.attr(&dir.join("fw_ver")) {
            Attr::Value(v) if !v.is_empty() => Some(v),
            _ => None,
        };
        let netdev = facts.iter().find_map(|p| p.netdev.as_ref());
        Ok(DeviceFacts {
            name: device.to_owned(),
            firmware,
            pci: self.pci(&dir, netdev.map(|n| n.name.as_str())),
            ports: facts,
        })
    }

    /// One port, without counters.
    pub fn port(&self, device: &str, port: u8) -> Result<PortFacts, PortError> {
        let dir = self.device_dir(device)?;
        self.check_port(device, &dir, port)?;
        Ok(self.port_at(&dir, port))
    }

    /// One port with its allowlisted counters.
    pub fn port_with_counters(&self, device: &str, port: u8) -> Result<PortFacts, PortError> {
        let mut facts = self.port(device, port)?;
        let dir = self.device_dir(device)?;
        facts.counters = Some(self.counter_files(&dir, port, facts.netdev.as_ref()).read());
        Ok(facts)
    }

    /// A reader of the port's allowlisted counters, for reading them before and after each
    /// burst: the directories are listed once, here; each [`CounterReader::read`] reads only
    /// the allowlisted files.
    pub fn counter_reader(&self, device: &str, port: u8) -> Result<CounterReader, PortError> {
        let facts = self.port(device, port)?;
        let dir = self.device_dir(device)?;
        Ok(self.counter_files(&dir, port, facts.netdev.as_ref()))
    }

    fn check_port(&self, device: &str, dir: &Path, port: u8) -> Result<(), PortError> {
        if self.exists(&dir.join("ports").join(port.to_string())) {
            return Ok(());
        }
        Err(PortError::UnknownPort {
            device: device.to_owned(),
            port,
            available: self.port_numbers(&dir.join("ports")).unwrap_or_default(),
        })
    }

    fn port_at(&self, device_dir: &Path, port: u8) -> PortFacts {
        let dir = device_dir.join("ports").join(port.to_string());
        let mut unreadable = Vec::new();
        let mut read = |name: &str| match self.attr(&dir.join(name)) {
            Attr::Value(v) => Some(v),
            Attr::Missing => None,
            Attr::Unreadable(e) => {
                unreadable.push(format!("{name}: {e}"));
                None
            }
        };
        let state = read("state").and_then(|t| parse_state(&t));
        let phys_state = read("phys_state").and_then(|t| PhysState::parse(&t));
        let link_layer = read("link_layer").map(|t| parse_link_layer(&t));
        let rate = read("rate").map(|t| LinkRate::parse(&t));
        let netdev = match link_layer {
            Some(LinkLayer::Ethernet) => self
                .netdev_name(device_dir, &dir, port)
                .map(|name| self.netdev(&name, &mut unreadable)),
            _ => None,
        };
        PortFacts {
            port,
            state,
            phys_state,
            link_layer,
            link_rate_bits_per_second: effective_rate(rate.as_ref(), netdev.as_ref()),
            rate,
            netdev,
            counters: None,
            unreadable,
        }
    }

    /// The netdev of an Ethernet port: the one its GID table names, else the device's
    /// `parent` (rxe, siw), else the PCI function's only netdev (or the one whose `dev_port`
    /// is this port's).
    fn netdev_name(&self, device_dir: &Path, port_dir: &Path, port: u8) -> Option<String> {
        let existing = |name: String| {
            let name = name.trim().to_owned();
            (is_plain_name(&name) && self.exists(&self.net_dir(&name))).then_some(name)
        };
        let ndevs = port_dir.join("gid_attrs/ndevs");
        let from_gids = (0..NDEV_SCAN).find_map(|i| match self.attr(&ndevs.join(i.to_string())) {
            Attr::Value(name) => existing(name),
            _ => None,
        });
        if from_gids.is_some() {
            return from_gids;
        }
        if let Attr::Value(parent) = self.attr(&device_dir.join("parent")) {
            if let Some(name) = existing(parent) {
                return Some(name);
            }
        }
        let mut names = self.list(&device_dir.join("device/net")).ok()?;
        names.sort();
        if names.len() == 1 {
            return names.pop().and_then(existing);
        }
        let wanted = u32::from(port).saturating_sub(1);
        names.into_iter().find_map(|name| {
            let dev_port = self.net_dir(&name).join("dev_port");
            match self.attr(&dev_port) {
                Attr::Value(v) if v.parse() == Ok(wanted) => existing(name),
                _ => None,
            }
        })
    }

    fn net_dir(&self, netdev: &str) -> PathBuf {
        self.root.join("class/net").join(netdev)
    }

    fn netdev(&self, name: &str, unreadable: &mut Vec<String>) -> NetdevFacts {
        let dir = self.net_dir(name);
        let mut read = |attr: &str| match self.attr(&dir.join(attr)) {
            Attr::Value(v) => Some(v),
            Attr::Missing => None,
            // EINVAL is how the kernel says "no speed while the interface is down".
            Attr::Unreadable(e) if e.kind() == io::ErrorKind::InvalidInput => None,
            Attr::Unreadable(e) => {
                unreadable.push(format!("{name}/{attr}: {e}"));
                None
            }
        };
        NetdevFacts {
            name: name.to_owned(),
            speed_bits_per_second: read("speed").and_then(|t| netdev::parse_speed(&t)),
            mtu: read("mtu").and_then(|t| t.parse().ok()),
            operstate: read("operstate").filter(|s| !s.is_empty()),
        }
    }

    /// The PCI function: the device's `device`, or the netdev's when the device has none
    /// (software devices). Not PCI (no `PCI_SLOT_NAME` in its `uevent`): `None`.
    fn pci(&self, device_dir: &Path, netdev: Option<&str>) -> Option<PciFacts> {
        let candidates = std::iter::once(device_dir.join("device"))
            .chain(netdev.map(|n| self.net_dir(n).join("device")));
        for dir in candidates {
            let Attr::Value(uevent) = self.attr(&dir.join("uevent")) else {
                continue;
            };
            let Some(address) = pcie::slot_name_from_uevent(&uevent) else {
                continue;
            };
            let value = |name: &str| match self.attr(&dir.join(name)) {
                Attr::Value(v) => Some(v),
                _ => None,
            };
            return Some(PciFacts {
                address: Some(address),
                numa_node: value("numa_node").and_then(|t| pcie::parse_numa_node(&t)),
                link: PcieLink {
                    speed: value("current_link_speed").map(|t| PcieSpeed::parse(&t)),
                    width: value("current_link_width").and_then(|t| pcie::parse_width(&t)),
                    max_speed: value("max_link_speed").map(|t| PcieSpeed::parse(&t)),
                    max_width: value("max_link_width").and_then(|t| pcie::parse_width(&t)),
                },
            });
        }
        None
    }

    /// The allowlisted counter files of a port, in allowlist order.
    fn counter_files(
        &self,
        device_dir: &Path,
        port: u8,
        netdev: Option<&NetdevFacts>,
    ) -> CounterReader {
        let port_dir = device_dir.join("ports").join(port.to_string());
        let dir_of = |source: CounterSource| match source {
            CounterSource::Port | CounterSource::Hw => Some(port_dir.join(source.dir())),
            CounterSource::Netdev => netdev.map(|n| self.net_dir(&n.name).join(source.dir())),
        };
        let mut present: Vec<(CounterSource, BTreeSet<String>)> = Vec::new();
        for source in [
            CounterSource::Port,
            CounterSource::Hw,
            CounterSource::Netdev,
        ] {
            if let Some(dir) = dir_of(source) {
                let names = self.list(&dir).unwrap_or_default();
                present.push((source, names.into_iter().collect()));
            }
        }
        let files = allowlist::ALLOWLIST
            .iter()
            .filter(|spec| {
                present
                    .iter()
                    .any(|(source, names)| *source == spec.source && names.contains(spec.name))
            })
            .filter_map(|spec| Some((spec, dir_of(spec.source)?.join(spec.name))))
            .collect();
        CounterReader { files }
    }

    fn attr(&self, path: &Path) -> Attr {
        match self.read(path) {
            Ok(text) => Attr::Value(text.trim().to_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Attr::Missing
            }
            Err(e) => Attr::Unreadable(e),
        }
    }

    fn read(&self, path: &Path) -> io::Result<String> {
        self.touch(path);
        std::fs::read_to_string(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.touch(dir);
        std::fs::read_dir(dir)?
            .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }

    fn exists(&self, path: &Path) -> bool {
        self.touch(path);
        path.exists()
    }

    #[cfg(test)]
    fn touch(&self, path: &Path) {
        self.touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(path.to_owned());
    }

    #[cfg(not(test))]
    fn touch(&self, _path: &Path) {}

    /// Every path read, listed or checked so far (tests of the exclusion list).
    #[cfg(test)]
    pub(crate) fn touched(&self) -> Vec<PathBuf> {
        self.touched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A device or netdev name that is one path component (no `/`, not `.` or `..`).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".." && !name.contains('\0')
}

/// The allowlisted counter files of one port, found once; reads them on demand.
#[derive(Debug, Clone)]
pub struct CounterReader {
    files: Vec<(&'static CounterSpec, PathBuf)>,
}

impl CounterReader {
    /// Reads every file now. A file that cannot be read or does not hold a number
    /// ("N/A (no PMA)") is left out of the snapshot, never an error.
    pub fn read(&self) -> CounterSnapshot {
        let mut snapshot = CounterSnapshot::new();
        for (spec, path) in &self.files {
            let value = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok());
            if let Some(value) = value {
                snapshot.insert(spec, value);
            }
        }
        snapshot
    }

    /// How many counters this port has on the allowlist.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}
