//! Devices, ports and GID tables: listing (`devices` command) and opening one port ([`Context`]).
//!
//! Port attributes are read from the raw `ibv_port_attr` (zero-initialised, so fields an older
//! libibverbs does not fill, like `active_speed_ex` before rdma-core 47, read as 0), never
//! through sideway's typed getters, which `panic!` on codes they do not know.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_gid, ibv_gid_entry, ibv_port_attr};
use serde::Serialize;
use sideway::ibverbs::device::{DeviceInfo as _, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;

use super::error::{Result, VerbsError};
use super::types::{
    effective_speed_code, link_rate_bits_per_second, mtu_to_bytes, speed_name, width_name, Gid,
    GidEntry, GidType, LinkLayer, PathMtu, PortState,
};

/// One RDMA device as listed by `devices`.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// Kernel device name, e.g. `mlx5_0`, `rxe0`.
    pub name: String,
    pub ports: Vec<PortInfo>,
    /// Set when the device could not be opened or (some of) its ports not queried; the device
    /// is still listed so one unusable device does not hide the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `ibv_query_port` and the GID table say about one port.
#[derive(Debug, Clone, Serialize)]
pub struct PortInfo {
    /// Port number, counting from 1.
    pub port: u8,
    pub state: PortState,
    /// Active RDMA MTU in bytes; `None` if the driver reports a code this build does not know.
    pub active_mtu: Option<u32>,
    /// Largest RDMA MTU the port supports, in bytes.
    pub max_mtu: Option<u32>,
    pub link_layer: LinkLayer,
    /// Base LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Raw `active_width` code (1=1X, 2=4X, 4=8X, 8=12X, 16=2X).
    pub active_width: u8,
    /// Raw speed code: `active_speed_ex` if set, else `active_speed` (1=SDR ... 256=XDR).
    pub active_speed: u32,
    /// Width × per-lane effective data rate (see [`super::link_rate_bits_per_second`]); `None`
    /// if the width or speed code is unknown.
    pub link_rate_bits_per_second: Option<u64>,
    /// Readable, non-empty GID entries in index order.
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// The active MTU as a [`PathMtu`].
    pub fn active_path_mtu(&self) -> Option<PathMtu> {
        self.active_mtu.and_then(PathMtu::from_bytes)
    }

    /// `"4X EDR"`-style description, or the raw codes when unknown (`"width 3 speed 512"`).
    pub fn link_description(&self) -> String {
        match (width_name(self.active_width), speed_name(self.active_speed)) {
            (Some(w), Some(s)) => format!("{w} {s}"),
            _ => format!("width {} speed {}", self.active_width, self.active_speed),
        }
    }

    /// The GID entry at `index`, if it is in the table.
    pub fn gid(&self, index: u32) -> Option<&GidEntry> {
        self.gids.iter().find(|g| g.index == index)
    }

    /// Indexes of all readable entries (for error messages).
    pub fn gid_indexes(&self) -> Vec<u32> {
        self.gids.iter().map(|g| g.index).collect()
    }
}

/// Which local RDMA port a session uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    /// Device name (`mlx5_0`, `rxe0`); `None` picks the first device with an ACTIVE port.
    pub device: Option<String>,
    /// Port number, 1-based.
    pub port: u8,
    /// GID table index; `None` selects the global IPv4-mapped RoCE v2 GID (docs/architecture.md,
    /// "ib_write_bw semantics").
    pub gid_index: Option<u32>,
}

/// Lists every RDMA device with all its ports and GID tables.
///
/// Errors only when there is no usable RDMA stack or no device ([`VerbsError::NoDevice`]); a
/// device that cannot be opened is listed with its `error` set.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    list_devices_filtered(|_| true)
}

/// [`list_devices`] restricted to devices for which `include(name)` is true; the others are not
/// opened or queried at all (for a device exclusion list such as the config's `exclude_devices`:
/// some firmware-restricted NICs flood the kernel log when queried).
pub fn list_devices_filtered(include: impl Fn(&str) -> bool) -> Result<Vec<DeviceInfo>> {
    let list = device_list()?;
    let mut out = Vec::with_capacity(list.len());
    for device in list.iter() {
        let name = device.name();
        if !include(&name) {
            continue;
        }
        let ctx = match device.open() {
            Ok(ctx) => ctx,
            Err(e) => {
                out.push(DeviceInfo {
                    name,
                    ports: Vec::new(),
                    error: Some(format!("open failed: {}", error_chain(&e))),
                });
                continue;
            }
        };
        let mut info = DeviceInfo {
            name: name.clone(),
            ports: Vec::new(),
            error: None,
        };
        match port_count(&ctx, &name) {
            Ok(count) => {
                let mut errors = Vec::new();
                for port in 1..=count {
                    match query_port_info(&ctx, &name, port, count) {
                        Ok(p) => info.ports.push(p),
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                if !errors.is_empty() {
                    info.error = Some(errors.join("; "));
                }
            }
            Err(e) => info.error = Some(e.to_string()),
        }
        out.push(info);
    }
    Ok(out)
}

/// `ibv_get_device_list`, with "nothing there" in all its forms mapped to `NoDevice`.
fn device_list() -> Result<DeviceList> {
    let list = DeviceList::new().map_err(|e| {
        let io_err = match e.0 {
            sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) => io,
            #[allow(unreachable_patterns)] // the sideway enum is #[non_exhaustive]
            _ => io::Error::other("unknown error"),
        };
        VerbsError::from_device_list_errno(io_err)
    })?;
    if list.is_empty() {
        return Err(VerbsError::NoDevice {
            detail: "libibverbs found no RDMA devices (for Soft-RoCE: `rdma link add rxe0 type rxe netdev <if>`)"
                .to_string(),
        });
    }
    Ok(list)
}

/// `e` and all its sources, joined with ": " (sideway's errors put the OS error in `source`).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

fn port_count(ctx: &DeviceContext, device: &str) -> Result<u8> {
    ctx.query_device()
        .map(|attr| attr.phys_port_cnt())
        .map_err(|e| VerbsError::Device {
            device: device.to_string(),
            op: "query device",
            source: io::Error::other(error_chain(&e)),
        })
}

/// Raw `ibv_query_port` into a zeroed struct.
fn query_port_raw(ctx: &DeviceContext, device: &str, port: u8) -> Result<ibv_port_attr> {
    let mut attr = MaybeUninit::<ibv_port_attr>::zeroed();
    // SAFETY: `ctx.context()` is the live `ibv_context` owned by `ctx` (borrowed for this call);
    // `attr` is a writable, zero-initialised `ibv_port_attr` of the size the binding declares,
    // which is what rdma-mummy passes as the length to the provider.
    let ret =
        unsafe { rdma_mummy_sys::ibv_query_port(ctx.context().as_ptr(), port, attr.as_mut_ptr()) };
    if ret != 0 {
        return Err(VerbsError::Device {
            device: device.to_string(),
            op: "query port",
            source: io::Error::from_raw_os_error(ret),
        });
    }
    // SAFETY: the struct was zero-initialised (a valid bit pattern for this plain-integer C
    // struct) and then filled by the driver.
    Ok(unsafe { attr.assume_init() })
}

/// Port attributes plus GID table of one port.
pub(crate) fn query_port_info(
    ctx: &DeviceContext,
    device: &str,
    port: u8,
    port_count: u8,
) -> Result<PortInfo> {
    let attr = query_port_raw(ctx, device, port)?;
    let link_layer = LinkLayer::from_raw(attr.link_layer);
    let speed = effective_speed_code(attr.active_speed, attr.active_speed_ex);
    let gid_tbl_len = u32::try_from(attr.gid_tbl_len).unwrap_or(0);
    Ok(PortInfo {
        port,
        state: PortState::from_raw(attr.state),
        active_mtu: mtu_to_bytes(attr.active_mtu),
        max_mtu: mtu_to_bytes(attr.max_mtu),
        link_layer,
        lid: attr.lid,
        active_width: attr.active_width,
        active_speed: speed,
        link_rate_bits_per_second: link_rate_bits_per_second(attr.active_width, speed),
        gids: query_gids(ctx, device, port, port_count, gid_tbl_len, link_layer),
    })
}

/// Reads the GID table of one port, skipping empty and unreadable (EINVAL/ENODATA) entries.
///
/// First tries `ibv_query_gid_table` (one ioctl for all ports); if that is unsupported or fails,
/// falls back to one `ibv_query_gid_ex` per index, and if even that is unsupported (rdma-core
/// older than v32) to `ibv_query_gid` plus the sysfs type/netdev files.
fn query_gids(
    ctx: &DeviceContext,
    device: &str,
    port: u8,
    port_count: u8,
    gid_tbl_len: u32,
    link_layer: LinkLayer,
) -> Vec<GidEntry> {
    if let Some(all) = query_gid_table(ctx, port_count, gid_tbl_len) {
        let mut gids: Vec<GidEntry> = all
            .iter()
            .filter(|e| e.port_num == u32::from(port))
            .map(gid_entry_from_raw)
            .filter(|e| !e.gid.is_zero())
            .collect();
        gids.sort_by_key(|e| e.index);
        return gids;
    }
    let mut gids = Vec::new();
    for index in 0..gid_tbl_len {
        match query_gid_ex(ctx, port, index) {
            Ok(e) if !e.gid.is_zero() => gids.push(e),
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                return query_gids_legacy(ctx, device, port, gid_tbl_len, link_layer);
            }
            Err(err) => {
                tracing::trace!(device, port, index, %err, "skipping unreadable GID entry");
            }
        }
    }
    gids
}

/// `ibv_query_gid_table` for all ports; `None` if unsupported or failing. The buffer is sized
/// for `port_count × gid_tbl_len` entries (ports of one device share a table size in practice;
/// if not, the call fails with EINVAL and the per-index fallback runs).
fn query_gid_table(
    ctx: &DeviceContext,
    port_count: u8,
    gid_tbl_len: u32,
) -> Option<Vec<ibv_gid_entry>> {
    let capacity = usize::from(port_count).checked_mul(gid_tbl_len as usize)?;
    if capacity == 0 {
        return Some(Vec::new());
    }
    let mut entries: Vec<ibv_gid_entry> = Vec::with_capacity(capacity);
    // SAFETY: `entries` has room for `capacity` entries and the call writes at most
    // `max_entries = capacity` of them; the context is live for the call.
    let n = unsafe {
        rdma_mummy_sys::ibv_query_gid_table(
            ctx.context().as_ptr(),
            entries.as_mut_ptr(),
            capacity,
            0,
        )
    };
    if n < 0 {
        return None;
    }
    let n = usize::try_from(n).ok()?.min(capacity);
    // SAFETY: the library initialised the first `n` entries (its return value), `n <= capacity`.
    unsafe { entries.set_len(n) };
    Some(entries)
}

fn query_gid_ex(ctx: &DeviceContext, port: u8, index: u32) -> io::Result<GidEntry> {
    let mut raw = MaybeUninit::<ibv_gid_entry>::zeroed();
    // SAFETY: live context; `raw` is a writable, zeroed `ibv_gid_entry` whose size rdma-mummy
    // passes to the library.
    let ret = unsafe {
        rdma_mummy_sys::ibv_query_gid_ex(
            ctx.context().as_ptr(),
            u32::from(port),
            index,
            raw.as_mut_ptr(),
            0,
        )
    };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    // SAFETY: zero-initialised plain-data struct, filled by the library on success.
    Ok(gid_entry_from_raw(&unsafe { raw.assume_init() }))
}

/// Pre-rdma-core-32 path: raw GID via `ibv_query_gid`, type and netdev from sysfs.
fn query_gids_legacy(
    ctx: &DeviceContext,
    device: &str,
    port: u8,
    gid_tbl_len: u32,
    link_layer: LinkLayer,
) -> Vec<GidEntry> {
    let mut gids = Vec::new();
    for index in 0..gid_tbl_len {
        let Ok(index_c) = i32::try_from(index) else {
            break;
        };
        let mut gid = MaybeUninit::<ibv_gid>::zeroed();
        // SAFETY: live context; `gid` is a writable 16-byte `ibv_gid`.
        let ret = unsafe {
            rdma_mummy_sys::ibv_query_gid(ctx.context().as_ptr(), port, index_c, gid.as_mut_ptr())
        };
        if ret != 0 {
            continue;
        }
        // SAFETY: zero-initialised, then filled on success; every bit pattern of the
        // `[u8; 16]` union member is valid.
        let raw = unsafe { gid.assume_init().raw };
        let gid = Gid(raw);
        if gid.is_zero() {
            continue;
        }
        let base = format!("/sys/class/infiniband/{device}/ports/{port}/gid_attrs");
        let gid_type = match std::fs::read_to_string(format!("{base}/types/{index}")) {
            Ok(t) => GidType::from_sysfs(&t, link_layer),
            // Unreadable type (EINVAL on some drivers): the entry is not usable.
            Err(_) => continue,
        };
        let netdev = std::fs::read_to_string(format!("{base}/ndevs/{index}"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        gids.push(GidEntry {
            index,
            gid,
            gid_type,
            netdev,
        });
    }
    gids
}

fn gid_entry_from_raw(raw: &ibv_gid_entry) -> GidEntry {
    // SAFETY: `ibv_gid` is a union of `[u8; 16]` and two `u64`s; every bit pattern is a valid
    // `[u8; 16]`.
    let bytes = unsafe { raw.gid.raw };
    GidEntry {
        index: raw.gid_index,
        gid: Gid(bytes),
        gid_type: GidType::from_raw(raw.gid_type),
        netdev: netdev_name(raw.ndev_ifindex),
    }
}

/// Interface name for an ifindex; `None` for 0 or an index not visible in this network
/// namespace (e.g. inside a pod whose RDMA device belongs to a host netdev).
fn netdev_name(ifindex: u32) -> Option<String> {
    if ifindex == 0 {
        return None;
    }
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` is IF_NAMESIZE bytes, the size `if_indextoname` requires; it writes a
    // NUL-terminated name on success and returns NULL on failure.
    let ret = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr().cast()) };
    if ret.is_null() {
        return None;
    }
    CStr::from_bytes_until_nul(&buf)
        .ok()
        .map(|c| c.to_string_lossy().into_owned())
}

/// An opened RDMA device bound to one ACTIVE port: the starting point for PD, CQ and QP creation.
///
/// Cloning is cheap (the device context is reference counted); the device is closed when the
/// last clone and the last resource created from it are dropped.
#[derive(Clone)]
pub struct Context {
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) name: Arc<str>,
    port_count: u8,
    port_info: PortInfo,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.name)
            .field("port", &self.port_info.port)
            .finish()
    }
}

impl Context {
    /// Opens `device` (or, with `None`, the first device whose `port` is ACTIVE) and checks that
    /// `port` exists and is ACTIVE.
    ///
    /// Errors: [`VerbsError::NoDevice`] (no RDMA stack or no device),
    /// [`VerbsError::UnknownDevice`] (lists the devices present), [`VerbsError::UnknownPort`],
    /// [`VerbsError::PortDown`] (with `None`: the first device's state is reported).
    pub fn open(device: Option<&str>, port: u8) -> Result<Context> {
        Self::open_filtered(device, port, |_| true)
    }

    /// [`Context::open`] that, when searching (`device = None`), skips devices for which
    /// `include(name)` is false without opening them (the device exclusion list). An explicitly
    /// named device is opened regardless.
    pub fn open_filtered(
        device: Option<&str>,
        port: u8,
        include: impl Fn(&str) -> bool,
    ) -> Result<Context> {
        let list = device_list()?;
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        match device {
            Some(want) => {
                let Some(pos) = names.iter().position(|n| n == want) else {
                    return Err(VerbsError::UnknownDevice {
                        name: want.to_string(),
                        available: names,
                    });
                };
                let dev = list.get(pos).ok_or_else(|| VerbsError::UnknownDevice {
                    name: want.to_string(),
                    available: names.clone(),
                })?;
                let ctx = dev.open().map_err(|e| VerbsError::Device {
                    device: want.to_string(),
                    op: "open",
                    source: io::Error::other(error_chain(&e)),
                })?;
                Self::bind(ctx, want, port)
            }
            None => {
                let mut first_err = None;
                for (dev, name) in list.iter().zip(&names) {
                    if !include(name) {
                        continue;
                    }
                    let attempt = dev
                        .open()
                        .map_err(|e| VerbsError::Device {
                            device: name.clone(),
                            op: "open",
                            source: io::Error::other(error_chain(&e)),
                        })
                        .and_then(|ctx| Self::bind(ctx, name, port));
                    match attempt {
                        Ok(c) => return Ok(c),
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                Err(first_err.unwrap_or_else(|| VerbsError::NoDevice {
                    detail: format!(
                        "every RDMA device is excluded (present: {})",
                        names.join(", ")
                    ),
                }))
            }
        }
    }

    fn bind(ctx: Arc<DeviceContext>, name: &str, port: u8) -> Result<Context> {
        let port_count = port_count(&ctx, name)?;
        if port == 0 || port > port_count {
            return Err(VerbsError::UnknownPort {
                device: name.to_string(),
                port,
                port_count,
            });
        }
        let port_info = query_port_info(&ctx, name, port, port_count)?;
        if !port_info.state.is_active() {
            return Err(VerbsError::PortDown {
                device: name.to_string(),
                port,
                state: port_info.state,
            });
        }
        Ok(Context {
            ctx,
            name: Arc::from(name),
            port_count,
            port_info,
        })
    }

    /// Kernel device name (`mlx5_0`, `rxe0`).
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// Number of physical ports of the device.
    pub fn port_count(&self) -> u8 {
        self.port_count
    }

    /// The bound port number.
    pub fn port(&self) -> u8 {
        self.port_info.port
    }

    /// Port attributes and GID table as read by [`Context::open`] or the last
    /// [`Context::refresh_port_info`].
    pub fn port_info(&self) -> &PortInfo {
        &self.port_info
    }

    /// Re-reads the port attributes and GID table (GIDs change when addresses are added or
    /// removed on the netdev; state changes when the link flaps).
    pub fn refresh_port_info(&mut self) -> Result<&PortInfo> {
        self.port_info = query_port_info(&self.ctx, &self.name, self.port(), self.port_count)?;
        Ok(&self.port_info)
    }

    /// Reads GID `index` of the bound port now (not from the snapshot).
    ///
    /// Errors with [`VerbsError::BadGidIndex`] listing the readable indexes when the entry is
    /// empty or unreadable.
    pub fn gid(&self, index: u32) -> Result<GidEntry> {
        query_valid_gid(&self.ctx, &self.name, self.port(), self.port_count, index)
    }

    /// The GID index perftest would choose for the bound port ([`super::select_gid`] over a
    /// fresh read of the table), or `None` when there is no usable GID (e.g. an IB port with
    /// LID routing and no GRH needed still has GID 0, so `None` means an empty table).
    pub fn select_gid(&self) -> Result<Option<u32>> {
        let info = query_port_info(&self.ctx, &self.name, self.port(), self.port_count)?;
        Ok(super::types::select_gid(&info.gids))
    }
}

/// Reads one GID, returning `BadGidIndex` (with the valid indexes) if it is empty/unreadable.
pub(crate) fn query_valid_gid(
    ctx: &DeviceContext,
    device: &str,
    port: u8,
    port_count: u8,
    index: u32,
) -> Result<GidEntry> {
    match query_gid_ex(ctx, port, index) {
        Ok(e) if !e.gid.is_zero() => Ok(e),
        Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            // Old rdma-core: take the entry from the (legacy) table read.
            let info = query_port_info(ctx, device, port, port_count)?;
            info.gid(index)
                .cloned()
                .ok_or_else(|| VerbsError::BadGidIndex {
                    device: device.to_string(),
                    port,
                    index,
                    valid: info.gid_indexes(),
                })
        }
        _ => {
            let valid = query_port_info(ctx, device, port, port_count)
                .map(|i| i.gid_indexes())
                .unwrap_or_default();
            Err(VerbsError::BadGidIndex {
                device: device.to_string(),
                port,
                index,
                valid,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::ErrorReason;

    /// On a host without RDMA (this dev host, CI) every entry point must fail cleanly with
    /// `NoDevice`, not panic. On a host with RDMA the calls must succeed or fail with a
    /// device-level reason.
    #[test]
    fn no_rdma_host_maps_to_no_device() {
        match list_devices() {
            Ok(devs) => assert!(!devs.is_empty()),
            Err(e) => assert_eq!(e.reason(), ErrorReason::NoDevice, "{e}"),
        }
        match Context::open(Some("no-such-device-xyz"), 1) {
            Ok(_) => panic!("opened a device that does not exist"),
            Err(e) => assert_eq!(e.reason(), ErrorReason::NoDevice, "{e}"),
        }
    }

    #[test]
    fn port_info_helpers() {
        let p = PortInfo {
            port: 1,
            state: PortState::Active,
            active_mtu: Some(1024),
            max_mtu: Some(4096),
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            active_width: 2,
            active_speed: 32,
            link_rate_bits_per_second: Some(100_000_000_000),
            gids: vec![GidEntry {
                index: 1,
                gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]),
                gid_type: GidType::RoceV2,
                netdev: Some("eth0".into()),
            }],
        };
        assert_eq!(p.link_description(), "4X EDR");
        assert_eq!(p.active_path_mtu(), Some(PathMtu::Mtu1024));
        assert_eq!(p.gid_indexes(), vec![1]);
        assert!(p.gid(0).is_none());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["state"], "active");
        assert_eq!(json["link_layer"], "ethernet");
        assert_eq!(json["gids"][0]["gid"], "::ffff:192.0.2.1");
        assert_eq!(json["gids"][0]["gid_type"], "roce_v2");
        let unknown = PortInfo {
            active_width: 3,
            active_speed: 512,
            ..p
        };
        assert_eq!(unknown.link_description(), "width 3 speed 512");
    }
}
