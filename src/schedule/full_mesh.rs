//! The full mesh, the simplest selection of which paths exist: every candidate peer, on every
//! local device, matched by rail (what [`selection`](super::selection) hands out for a small
//! cluster).
//!
//! The scheduler never decides *which* paths to probe, only *when*: it is handed the selected
//! set with [`Scheduler::set_paths`](super::Scheduler::set_paths) and keeps the state of the
//! paths that stay. What feeds it (the configured peers, discovery, a bounded rotating sample
//! of a large cluster) lives on this side of the seam and can change without touching the
//! scheduling rules.

use super::path::PathKey;

/// A local device and the rail it is cabled to (`None`: not on a rail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDevice {
    pub name: String,
    pub rail: Option<u16>,
}

impl LocalDevice {
    pub fn new(name: impl Into<String>, rail: Option<u16>) -> Self {
        LocalDevice {
            name: name.into(),
            rail,
        }
    }
}

/// One path per (local device, peer): each local device probes the peer's device on its own
/// rail (the peer answers with its device on that rail). A device without a rail lets the peer
/// choose. Peers are taken in the given order and repeated names are kept once.
pub fn rail_matched<'a>(
    devices: &[LocalDevice],
    peers: impl IntoIterator<Item = &'a str>,
) -> Vec<PathKey> {
    let mut unique: Vec<&str> = Vec::new();
    for peer in peers {
        if !unique.contains(&peer) {
            unique.push(peer);
        }
    }
    devices
        .iter()
        .flat_map(|d| {
            unique
                .iter()
                .map(move |peer| PathKey::new(d.name.clone(), *peer, d.rail))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_probes_every_peer_on_its_rail() {
        let devices = [
            LocalDevice::new("mlx5_0", Some(0)),
            LocalDevice::new("mlx5_1", Some(1)),
            LocalDevice::new("rxe0", None),
        ];
        let keys = rail_matched(&devices, ["node-b", "node-c", "node-b"]);
        assert_eq!(
            keys,
            vec![
                PathKey::new("mlx5_0", "node-b", Some(0)),
                PathKey::new("mlx5_0", "node-c", Some(0)),
                PathKey::new("mlx5_1", "node-b", Some(1)),
                PathKey::new("mlx5_1", "node-c", Some(1)),
                PathKey::new("rxe0", "node-b", None),
                PathKey::new("rxe0", "node-c", None),
            ]
        );
        assert!(rail_matched(&[], ["node-b"]).is_empty());
        assert!(rail_matched(&devices, []).is_empty());
    }
}
