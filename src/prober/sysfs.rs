//! What the prober reads from sysfs, on blocking threads: a device's NUMA placement and its
//! port's allowlisted counters.

use crate::placement::{self, Placement};
use crate::port::{CounterReader, CounterSnapshot, Sysfs};

/// Where `device`'s work goes (a few sysfs reads, on a blocking thread), logged once per device.
pub async fn device_placement(device: &str) -> Placement {
    let name = device.to_owned();
    let placement =
        tokio::task::spawn_blocking(move || placement::for_device(&Sysfs::system(), &name))
            .await
            .unwrap_or(Placement::Anywhere(placement::Anywhere::NoNumaNode));
    match placement.cpus() {
        Some(_) => {
            tracing::info!(device, %placement, "burst thread and session memory on the NIC's NUMA node")
        }
        None => tracing::debug!(device, %placement, "burst thread and session memory not placed"),
    }
    placement
}

/// The allowlisted counter files of the session's port, found once per session (on a blocking
/// thread); `None`, logged, when sysfs has no such port. The device is one the exporter or the
/// CLI opened, so never an excluded one.
pub(crate) async fn counter_reader(device: &str, port: u8) -> Option<CounterReader> {
    let name = device.to_owned();
    let found = tokio::task::spawn_blocking(move || Sysfs::system().counter_reader(&name, port))
        .await
        .ok()?;
    match found {
        Ok(reader) => Some(reader),
        Err(e) => {
            tracing::debug!(device, port, error = %e, "no port counters for the session's port");
            None
        }
    }
}

/// The port's allowlisted counters now (a few small sysfs files, on a blocking thread); `None`
/// when the port has none. Shared with the responder, which reads its own around each burst.
pub(crate) async fn read_counters(reader: Option<CounterReader>) -> Option<CounterSnapshot> {
    let reader = reader?;
    tokio::task::spawn_blocking(move || reader.read())
        .await
        .ok()
}
