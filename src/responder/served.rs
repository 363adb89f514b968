//! The devices a responder serves, opened once at start, and the state every session shares.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use crate::control::message::{Identity as NodeIdentity, IdentityDevice};
use crate::control::SessionRequest;
use crate::metrics::{ResponderMetrics, SessionResult};
use crate::placement::{self, Placement};
use crate::port::Sysfs;
use crate::reason::ErrorReason;
use crate::verbs::Context;

use super::admission::Admission;
use super::failure::{failure, RefusalLog, SessionFailure};
use super::select::{select_device, DeviceRail, SelectError};
use super::{DevicePinger, ResponderError, ResponderSettings, ServedDevice};

/// A device being served: its context, and the state its sessions share.
pub(super) struct Served {
    pub(super) ctx: Context,
    pub(super) rail: Option<u16>,
    pub(super) gid_index: Option<u32>,
    /// At most one active burst on this device; other probers get `busy` (a burst on another
    /// device does not).
    pub(super) burst_claim: Arc<AtomicBool>,
    /// Where the memory of its sessions is registered (docs/architecture.md, "NUMA placement").
    pub(super) placement: Placement,
    /// The device's ping engine, if it runs one.
    pub(super) pinger: Option<DevicePinger>,
}

impl Served {
    pub(super) fn name(&self) -> &str {
        self.ctx.device_name()
    }

    pub(super) fn identity(&self) -> Identity<'_> {
        (self.name(), self.ctx.port(), self.rail)
    }
}

/// State shared by all sessions of a responder.
pub(super) struct Shared {
    pub(super) settings: ResponderSettings,
    /// In the order of `settings.devices`; never empty.
    pub(super) devices: Vec<Arc<Served>>,
    pub(super) pinned: Arc<AtomicU64>,
    pub(super) admission: Admission,
    pub(super) metrics: ResponderMetrics,
    pub(super) refusals: RefusalLog,
}

impl Shared {
    pub(super) fn new(
        settings: ResponderSettings,
        devices: Vec<Arc<Served>>,
        metrics: ResponderMetrics,
    ) -> Self {
        let identity = identity(&settings, &devices);
        Shared {
            admission: Admission::new(&settings, identity),
            settings,
            devices,
            pinned: Arc::new(AtomicU64::new(0)),
            metrics,
            refusals: RefusalLog::default(),
        }
    }

    /// Counts a session under its device, or under the first device when the session never got
    /// one (refused in the handshake or at a limit before it asked for a device).
    pub(super) fn count(&self, device: Option<&Served>, result: SessionResult) {
        let name = device
            .or_else(|| self.devices.first().map(Arc::as_ref))
            .map_or("", Served::name);
        self.metrics.session(name, result);
    }

    /// The device that answers `request` ([`select_device`]).
    pub(super) fn select(&self, request: &SessionRequest) -> Result<Arc<Served>, SessionFailure> {
        let served: Vec<DeviceRail<'_>> = self
            .devices
            .iter()
            .map(|d| DeviceRail {
                name: d.name(),
                rail: d.rail,
            })
            .collect();
        let chosen = select_device(&served, request.device.as_deref(), request.rail)
            .map_err(|e| failure(ErrorReason::NoDevice, e.to_string()))?;
        self.devices
            .get(chosen)
            .cloned()
            .ok_or_else(|| failure(ErrorReason::NoDevice, SelectError::Empty.to_string()))
    }
}

/// Opens every device of `devices` (the first failure is the error) and checks that no device
/// and no rail is served twice.
pub(super) fn open_devices(
    devices: &[ServedDevice],
    pingers: &BTreeMap<String, DevicePinger>,
) -> Result<Vec<Arc<Served>>, ResponderError> {
    if devices.is_empty() {
        return Err(ResponderError::NoDevices);
    }
    let mut served: Vec<Arc<Served>> = Vec::with_capacity(devices.len());
    for device in devices {
        let ctx = Context::open(device.local.device.as_deref(), device.local.port)?;
        if let Some(i) = device.local.gid_index {
            ctx.gid(i)?;
        }
        let placement = placement::for_device(&Sysfs::system(), ctx.device_name());
        if placement.cpus().is_some() {
            tracing::info!(device = ctx.device_name(), %placement, "session memory on the NIC's NUMA node");
        }
        let name = ctx.device_name().to_owned();
        let opened = Served {
            ctx,
            rail: device.rail,
            gid_index: device.local.gid_index,
            burst_claim: Arc::new(AtomicBool::new(false)),
            pinger: pingers.get(&name).cloned(),
            placement,
        };
        let known: Vec<_> = served.iter().map(|d| d.identity()).collect();
        check_distinct(&known, opened.identity())?;
        served.push(Arc::new(opened));
    }
    Ok(served)
}

/// A served device's name, port and rail.
pub(super) type Identity<'a> = (&'a str, u8, Option<u16>);

/// `Err` when `new` is a device (and port) or a rail that `served` already has. A device named
/// twice, or the default device (the first with an ACTIVE port) next to the same device named,
/// would be two entries for one device; a rail twice would make rail matching ambiguous.
fn check_distinct(served: &[Identity<'_>], new: Identity<'_>) -> Result<(), ResponderError> {
    let (name, port, rail) = new;
    for &(old_name, old_port, old_rail) in served {
        if (old_name, old_port) == (name, port) {
            return Err(ResponderError::DuplicateDevice {
                device: name.to_owned(),
                port,
            });
        }
        if let Some(rail) = rail.filter(|_| old_rail == rail) {
            return Err(ResponderError::DuplicateRail {
                rail,
                first: old_name.to_owned(),
                second: name.to_owned(),
            });
        }
    }
    Ok(())
}

/// What this responder tells a prober that proved the key: its node name, labels and devices
/// with their rails, within the protocol's limits (what does not fit is logged and left out). A
/// node name the protocol does not take leaves the identity out altogether.
pub(super) fn identity(
    settings: &ResponderSettings,
    devices: &[Arc<Served>],
) -> Option<NodeIdentity> {
    let served = devices.iter().map(|d| IdentityDevice {
        name: d.name().to_owned(),
        port: d.ctx.port(),
        rail: d.rail,
    });
    let (identity, left_out) = NodeIdentity::bounded(&settings.node_name, &settings.labels, served);
    for what in left_out {
        tracing::warn!(left_out = %what, "not told to probers in this node's identity");
    }
    match identity.validate() {
        Ok(()) => Some(identity),
        Err(e) => {
            tracing::warn!(error = %e, "probers are not told this node's identity");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Labels;

    #[test]
    fn a_device_or_rail_is_served_once() {
        let served = [("mlx5_0", 1, Some(0)), ("mlx5_1", 1, Some(1))];
        assert!(check_distinct(&served, ("mlx5_2", 1, Some(2))).is_ok());
        // Another port of a served device is another device.
        assert!(check_distinct(&served, ("mlx5_0", 2, Some(2))).is_ok());
        let e = check_distinct(&served, ("mlx5_1", 1, Some(2))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device mlx5_1 port 1 is listed twice; serve each device once"
        );
        let e = check_distinct(&served, ("mlx5_2", 1, Some(0))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rail 0 is given to both mlx5_0 and mlx5_2; each rail has one device"
        );
        // Devices without rails do not collide on "no rail".
        let plain = [("rxe0", 1, None)];
        assert!(check_distinct(&plain, ("rxe1", 1, None)).is_ok());
    }

    #[test]
    fn the_identity_keeps_what_the_protocol_takes_and_says_what_it_left_out() {
        let mut labels: Labels = (0..40)
            .map(|i| (format!("l{i:02}"), "v".to_owned()))
            .collect();
        labels.insert("empty".into(), String::new());
        let devices = (0..34).map(|i| IdentityDevice {
            name: format!("mlx5_{i}"),
            port: 1,
            rail: Some(i),
        });
        let (identity, left_out) = NodeIdentity::bounded("node-a", &labels, devices);
        assert!(identity.validate().is_ok());
        assert_eq!(identity.labels.len(), 32);
        assert_eq!(identity.devices.len(), 32);
        assert_eq!(left_out.len(), 1 + 8 + 2, "{left_out:?}");
        assert!(
            left_out[0].contains("labels.empty is empty"),
            "{left_out:?}"
        );
        assert!(
            left_out.iter().any(|w| w.contains("device mlx5_33")),
            "{left_out:?}"
        );
        let (identity, _) = NodeIdentity::bounded("node a", &Labels::new(), []);
        assert!(identity.validate().is_err());
    }
}
