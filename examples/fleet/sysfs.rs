//! Each node's fixture sysfs tree: the files the exporter's port reader (`port::Sysfs`) reads for
//! an InfiniBand port of a ConnectX-7 in a PCIe Gen5 x16 slot, rewritten when a fault of the
//! port or of its PCIe link starts or ends.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fault::{FaultModel, Link};

/// PCIe Gen5: 32 GT/s a lane, 128b/130b encoding.
const PCIE_LANE_BITS_PER_SECOND: f64 = 32e9 * 128.0 / 130.0;
const PCIE_MAX_WIDTH: u32 = 16;

/// The node's tree root: `DIR/nodes/NODE/sys`.
pub fn root(out: &Path, node: &str) -> PathBuf {
    out.join("nodes").join(node).join("sys")
}

/// The PCIe link's width while `degraded` or not.
pub fn pcie_width(degraded: bool) -> u32 {
    if degraded {
        PCIE_MAX_WIDTH / 2
    } else {
        PCIE_MAX_WIDTH
    }
}

/// What the PCIe link of that width carries at most.
pub fn pcie_bits_per_second(width: u32) -> f64 {
    f64::from(width) * PCIE_LANE_BITS_PER_SECOND
}

/// Writes device `mlx5_{rail}` of `node` as the faults at `at` make it. Every file is written
/// to a temporary name and renamed, so the reader never sees half a value.
pub fn write_device(
    root: &Path,
    model: &FaultModel,
    node: usize,
    rail: u16,
    at: Duration,
) -> io::Result<()> {
    let dir = root.join(format!("class/infiniband/mlx5_{rail}"));
    let port = dir.join("ports/1");
    let pci = dir.join("device");
    std::fs::create_dir_all(&port)?;
    std::fs::create_dir_all(&pci)?;
    let down = model.port_down(node, rail, at);
    let link: Link = model.link(node, rail, at);
    let width = pcie_width(model.pcie_degraded(node, rail, at));
    let files: [(&Path, &str, String); 11] = [
        (&dir, "fw_ver", "28.39.1002".into()),
        (
            &port,
            "state",
            if down { "1: DOWN" } else { "4: ACTIVE" }.into(),
        ),
        (
            &port,
            "phys_state",
            if down { "3: Disabled" } else { "5: LinkUp" }.into(),
        ),
        (&port, "link_layer", "InfiniBand".into()),
        (&port, "rate", link.rate_text().into()),
        (
            &pci,
            "uevent",
            format!(
                "DRIVER=mlx5_core\nPCI_SLOT_NAME=0000:{:02x}:00.0",
                0x10 + rail
            ),
        ),
        (&pci, "numa_node", u16::from(rail >= 4).to_string()),
        (&pci, "current_link_speed", "32.0 GT/s PCIe".into()),
        (&pci, "max_link_speed", "32.0 GT/s PCIe".into()),
        (&pci, "current_link_width", width.to_string()),
        (&pci, "max_link_width", PCIE_MAX_WIDTH.to_string()),
    ];
    for (dir, name, text) in files {
        let path = dir.join(name);
        let new = dir.join(format!(".{name}.new"));
        std::fs::write(&new, format!("{text}\n"))?;
        std::fs::rename(new, path)?;
    }
    Ok(())
}

/// Writes every device of every node as the faults at `at` make them.
pub fn write_all(out: &Path, model: &FaultModel, at: Duration) -> io::Result<()> {
    for node in 0..model.shape.nodes {
        let root = root(out, &model.shape.node_name(node));
        for rail in 0..model.shape.rails {
            write_device(&root, model, node, rail, at)?;
        }
    }
    Ok(())
}

/// Rewrites the trees of the nodes a sysfs fault touches, at each of its starts and ends.
pub async fn follow_faults(out: PathBuf, model: FaultModel, started: tokio::time::Instant) {
    for at in model.sysfs_changes() {
        crate::node::sleep_until(started, at).await;
        let touched: Vec<(usize, u16)> = model
            .faults
            .iter()
            .filter(|f| f.kind.in_sysfs() && (f.start == at || f.end == Some(at)))
            .filter_map(|f| Some((f.node?, f.device?)))
            .collect();
        let (out, model) = (out.clone(), model.clone());
        let written = tokio::task::spawn_blocking(move || {
            for (node, rail) in touched {
                let root = root(&out, &model.shape.node_name(node));
                write_device(&root, &model, node, rail, at)?;
            }
            io::Result::Ok(())
        })
        .await;
        if let Ok(Err(e)) = written {
            eprintln!("fleet: rewriting a sysfs fixture: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{Fault, Shape};
    use rdma_probe_exporter::port::Sysfs;
    use rdma_probe_exporter::verbs::PortState;

    #[test]
    fn the_exporters_reader_sees_each_fault() {
        let shape = Shape {
            nodes: 2,
            rails: 4,
            per_tor: 2,
        };
        let faults = [
            "port_down:node=0,device=0",
            "port_width:node=0,device=1",
            "port_speed:node=0,device=2,start=5s",
            "pcie:node=0,device=3",
        ]
        .iter()
        .map(|s| Fault::parse(s, &shape).unwrap())
        .collect();
        let model = FaultModel { shape, faults };
        let out = std::env::temp_dir().join(format!("fleet-sysfs-test-{}", std::process::id()));
        write_all(&out, &model, Duration::ZERO).unwrap();
        let sysfs = Sysfs::new(root(&out, "t0n0"));
        let port = |d: &str| sysfs.device(d).unwrap().ports[0].clone();
        assert_eq!(port("mlx5_0").state, Some(PortState::Down));
        assert_eq!(port("mlx5_1").state, Some(PortState::Active));
        assert_eq!(
            port("mlx5_1").link_rate_bits_per_second,
            Some(200_000_000_000)
        );
        assert_eq!(
            port("mlx5_2").link_rate_bits_per_second,
            Some(400_000_000_000)
        );
        let pci = sysfs.device("mlx5_3").unwrap().pci.unwrap();
        assert_eq!((pci.link.width, pci.link.degraded()), (Some(8), Some(true)));
        let other = Sysfs::new(root(&out, "t0n1")).device("mlx5_3").unwrap();
        assert_eq!(other.pci.unwrap().link.degraded(), Some(false));

        write_all(&out, &model, Duration::from_secs(5)).unwrap();
        assert_eq!(
            port("mlx5_2").link_rate_bits_per_second,
            Some(200_000_000_000)
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}
