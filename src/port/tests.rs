//! The reader against the fixture trees in tests/fixtures/sysfs (their README names the source
//! of every layout).

use std::path::PathBuf;

use super::*;
use crate::verbs::{LinkLayer, PortState};

fn fixture(tree: &str) -> Sysfs {
    Sysfs::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sysfs")
            .join(tree),
    )
}

#[test]
fn mlx5_roce_port() {
    let sysfs = fixture("mlx5-roce");
    assert_eq!(sysfs.devices().unwrap(), ["mlx5_0", "mlx5_1", "mlx5_8"]);
    let dev = sysfs.device("mlx5_0").unwrap();
    assert_eq!(dev.firmware.as_deref(), Some("22.36.1010"));
    let port = dev.port(1).unwrap();
    assert!(port.is_up());
    assert_eq!(port.state, Some(PortState::Active));
    assert_eq!(port.phys_state, Some(PhysState::LinkUp));
    assert_eq!(port.link_layer, Some(LinkLayer::Ethernet));
    let rate = port.rate.as_ref().unwrap();
    assert_eq!(rate.text, "100 Gb/sec (4X EDR)");
    assert_eq!(
        (rate.lanes, rate.speed.clone()),
        (Some(4), Some(LinkSpeed::Edr))
    );
    let netdev = port.netdev.as_ref().unwrap();
    assert_eq!(netdev.name, "ens1f0np0");
    assert_eq!(netdev.speed_bits_per_second, Some(100_000_000_000));
    assert_eq!(netdev.mtu, Some(9000));
    assert_eq!(port.link_rate_bits_per_second, Some(100_000_000_000));
    assert!(port.unreadable.is_empty(), "{:?}", port.unreadable);
    assert!(port.counters.is_none(), "counters are read only on request");
    let pci = dev.pci.as_ref().unwrap();
    assert_eq!(pci.address.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(pci.numa_node, Some(0));
    assert_eq!(pci.link.width, Some(16));
    assert_eq!(pci.link.degraded(), Some(false));
    assert_eq!(
        pci.link.speed.as_ref().unwrap().transfers_per_second,
        Some(16_000_000_000)
    );
}

#[test]
fn a_nic_in_a_narrow_slot_is_degraded() {
    let dev = fixture("mlx5-roce").device("mlx5_1").unwrap();
    let pci = dev.pci.unwrap();
    assert_eq!(pci.numa_node, Some(1));
    assert_eq!((pci.link.width, pci.link.max_width), (Some(8), Some(16)));
    assert_eq!(pci.link.degraded(), Some(true));
}

#[test]
fn mlx5_roce_counters_are_the_allowlisted_ones() {
    let sysfs = fixture("mlx5-roce");
    let port = sysfs.port_with_counters("mlx5_0", 1).unwrap();
    let counters = port.counters.unwrap();
    assert_eq!(counters.get("port_xmit_data"), Some(2_500_000_000));
    assert_eq!(counters.get("out_of_sequence"), Some(12));
    assert_eq!(counters.get("np_cnp_sent"), Some(1500));
    assert_eq!(counters.get("rp_cnp_handled"), Some(1400));
    assert_eq!(counters.get("netdev_tx_bytes"), Some(71_234_567));
    // Present in the tree but not allowlisted: never read.
    for not_allowed in [
        "lifespan",
        "rx_write_requests",
        "VL15_dropped",
        "collisions",
    ] {
        assert_eq!(counters.get(not_allowed), None, "{not_allowed}");
    }
    let touched = sysfs.touched();
    assert!(
        !touched
            .iter()
            .any(|p| p.ends_with("hw_counters/lifespan") || p.ends_with("counters/VL15_dropped")),
        "a counter off the allowlist was read: {touched:?}"
    );
    let reader = sysfs.counter_reader("mlx5_0", 1).unwrap();
    assert_eq!(reader.read(), counters);
    assert!(reader.len() > 20, "{}", reader.len());
}

#[test]
fn excluded_devices_are_never_read() {
    let sysfs = fixture("mlx5-roce").excluding(["mlx5_8"]);
    assert_eq!(sysfs.devices().unwrap(), ["mlx5_0", "mlx5_1"]);
    for result in [
        sysfs.device("mlx5_8").map(|_| ()),
        sysfs.port("mlx5_8", 1).map(|_| ()),
        sysfs.port_with_counters("mlx5_8", 1).map(|_| ()),
        sysfs.counter_reader("mlx5_8", 1).map(|_| ()),
        sysfs.ports("mlx5_8").map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(PortError::Excluded { .. })),
            "{result:?}"
        );
    }
    let touched = sysfs.touched();
    assert!(!touched.is_empty());
    assert!(
        !touched
            .iter()
            .any(|p| p.to_string_lossy().contains("mlx5_8")),
        "touched under the excluded device: {touched:?}"
    );
}

#[test]
fn infiniband_ports_ignore_the_ipoib_netdev() {
    let sysfs = fixture("mlx5-ib");
    let dev = sysfs.device("mlx5_0").unwrap();
    let port = dev.port(1).unwrap();
    assert_eq!(port.link_layer, Some(LinkLayer::InfiniBand));
    assert_eq!(port.rate.as_ref().unwrap().speed, Some(LinkSpeed::Hdr));
    assert!(port.netdev.is_none(), "{:?}", port.netdev);
    assert_eq!(port.link_rate_bits_per_second, Some(200_000_000_000));
    assert_eq!(
        dev.pci.as_ref().unwrap().address.as_deref(),
        Some("0000:c1:00.0")
    );
    let counters = sysfs
        .port_with_counters("mlx5_0", 1)
        .unwrap()
        .counters
        .unwrap();
    assert_eq!(counters.get("symbol_error"), Some(17));
    assert_eq!(counters.get("link_downed"), Some(2));
    assert_eq!(counters.get("port_xmit_wait"), Some(5_432_100));
    assert_eq!(counters.get("local_ack_timeout_err"), Some(6));
    assert_eq!(counters.get("netdev_tx_bytes"), None);

    let down = sysfs.port("mlx5_1", 1).unwrap();
    assert!(!down.is_up());
    assert_eq!(down.state, Some(PortState::Down));
    assert_eq!(down.phys_state, Some(PhysState::Polling));
    assert_eq!(down.link_rate_bits_per_second, Some(10_000_000_000));
}

#[test]
fn rxe_on_virtio() {
    let sysfs = fixture("rxe");
    assert_eq!(sysfs.devices().unwrap(), ["rxe0"]);
    let dev = sysfs.device("rxe0").unwrap();
    assert_eq!(dev.firmware, None, "rxe has an empty fw_ver");
    assert_eq!(
        dev.pci, None,
        "a virtio NIC is not a PCI function of its own"
    );
    let port = dev.port(1).unwrap();
    assert!(port.is_up());
    let netdev = port.netdev.as_ref().unwrap();
    assert_eq!(netdev.name, "eth0");
    assert_eq!(netdev.speed_bits_per_second, None, "virtio-net reports -1");
    assert_eq!(port.link_rate_bits_per_second, Some(2_500_000_000));
    let counters = sysfs
        .port_with_counters("rxe0", 1)
        .unwrap()
        .counters
        .unwrap();
    assert_eq!(counters.get("completer_retry_err"), Some(9));
    assert_eq!(counters.get("rcvd_seq_err"), Some(2));
    assert_eq!(counters.get("sent_pkts"), Some(52_000));
    assert_eq!(counters.get("link_downed"), Some(0));
    assert_eq!(counters.get("netdev_tx_bytes"), Some(77_000_000));
    assert_eq!(counters.get("lifespan"), None);
}

#[test]
fn unknown_devices_and_ports_are_errors_that_say_so() {
    let sysfs = fixture("rxe");
    let e = sysfs.device("mlx5_0").unwrap_err();
    assert!(matches!(e, PortError::UnknownDevice { .. }), "{e}");
    for bad in ["../rxe", "", ".", "rxe0/ports"] {
        assert!(
            matches!(sysfs.device(bad), Err(PortError::UnknownDevice { .. })),
            "{bad}"
        );
    }
    let e = sysfs.port("rxe0", 2).unwrap_err();
    assert!(
        matches!(&e, PortError::UnknownPort { available, .. } if available == &[1]),
        "{e}"
    );
    assert_eq!(e.to_string(), "device rxe0 has no port 2 (ports: [1])");
    assert_eq!(sysfs.ports("rxe0").unwrap(), [1]);
    // A host without RDMA: no class/infiniband, no devices, no error.
    let none = Sysfs::new("/nonexistent-sysfs-root");
    assert!(none.devices().unwrap().is_empty());
}

#[test]
fn values_the_build_does_not_know_are_values() {
    let dir = std::env::temp_dir().join(format!("rpe-port-future-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = dir.join("class/infiniband/mlx9_0/ports/1");
    std::fs::create_dir_all(&port).unwrap();
    let write = |name: &str, text: &str| std::fs::write(port.join(name), text).unwrap();
    write("state", "7: HYPERACTIVE\n");
    write("phys_state", "9: <unknown>\n");
    write("link_layer", "Photonic\n");
    write("rate", "3200 Gb/sec (16X GDR)\n");
    let device = dir.join("class/infiniband/mlx9_0/device");
    std::fs::create_dir_all(&device).unwrap();
    std::fs::write(device.join("uevent"), "PCI_SLOT_NAME=0000:01:00.0\n").unwrap();
    std::fs::write(device.join("current_link_speed"), "128.0 GT/s PCIe\n").unwrap();
    std::fs::write(device.join("max_link_speed"), "Unknown\n").unwrap();
    std::fs::write(device.join("current_link_width"), "32\n").unwrap();
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    std::fs::write(port.join("hw_counters/out_of_sequence"), "N/A (no PMA)\n").unwrap();
    std::fs::write(port.join("hw_counters/np_cnp_sent"), "5\n").unwrap();

    let sysfs = Sysfs::new(&dir);
    let dev = sysfs.device("mlx9_0").unwrap();
    let p = dev.port(1).unwrap();
    assert_eq!(p.state, Some(PortState::Unknown(7)));
    assert!(!p.is_up());
    assert_eq!(p.phys_state, Some(PhysState::Unknown(9)));
    assert_eq!(p.link_layer, Some(LinkLayer::Unknown(u8::MAX)));
    let rate = p.rate.as_ref().unwrap();
    assert_eq!(rate.bits_per_second, Some(3_200_000_000_000));
    assert_eq!(rate.speed, Some(LinkSpeed::Other("GDR".into())));
    assert_eq!(rate.lanes, Some(16));
    let link = &dev.pci.as_ref().unwrap().link;
    assert_eq!(
        link.speed.as_ref().unwrap().transfers_per_second,
        Some(128_000_000_000)
    );
    assert_eq!(link.max_speed.as_ref().unwrap().transfers_per_second, None);
    assert_eq!(link.degraded(), None);
    let counters = sysfs
        .port_with_counters("mlx9_0", 1)
        .unwrap()
        .counters
        .unwrap();
    assert_eq!(counters.get("out_of_sequence"), None, "N/A is left out");
    assert_eq!(counters.get("np_cnp_sent"), Some(5));
    let json = serde_json::to_value(&dev).unwrap();
    assert_eq!(json["ports"][0]["state"], "unknown(7)");
    assert_eq!(json["ports"][0]["rate"]["speed"], "GDR");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn counter_increases_over_a_burst_on_fixture_snapshots() {
    // Two readings of the rxe tree's counters, the second after a "burst" with one reset.
    let before = fixture("rxe")
        .port_with_counters("rxe0", 1)
        .unwrap()
        .counters
        .unwrap();
    let mut after = CounterSnapshot::new();
    for (spec, value) in before.iter() {
        let value = match spec.label {
            "sent_pkts" => value + 1000,
            "netdev_tx_bytes" => value + 65_536_000,
            "completer_retry_err" => 0, // the driver was reloaded
            _ => value,
        };
        after.insert(spec, value);
    }
    let incs = increases(&before, &after);
    let of = |label: &str| incs.iter().find(|i| i.label() == label).copied().unwrap();
    assert_eq!(of("sent_pkts").increase, 1000);
    assert_eq!(of("completer_retry_err").increase, 0);
    assert_eq!(of("completer_retry_err").status, IncreaseStatus::Reset);
    assert_eq!(
        total(&incs, CounterKind::XmitBytes),
        Some((CounterSource::Netdev, 65_536_000))
    );
    assert_eq!(
        total(&incs, CounterKind::XmitPackets),
        Some((CounterSource::Hw, 1000))
    );
}
