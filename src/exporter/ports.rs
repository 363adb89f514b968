//! Traffic-free port facts on `/metrics`: every [`REFRESH`] the ports the exporter probes from
//! are read from sysfs (on a blocking thread: a handful of small files) and handed to the
//! recorder (docs/metrics.md, "Port facts").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::metrics::port::PortReport;
use crate::metrics::probe::ProbeEvent;
use crate::port::Sysfs;

/// How often the port facts are read again: a link that retrains or a port that goes down shows
/// within one refresh, and reading sysfs this rarely costs nothing measurable.
pub const REFRESH: Duration = Duration::from_secs(30);

/// Reads the devices of `ports` and keeps only those ports; the devices that could not be read,
/// with why.
pub fn report(sysfs: &Sysfs, ports: &[(String, u8)]) -> (PortReport, Vec<(String, String)>) {
    let names: BTreeSet<&str> = ports.iter().map(|(d, _)| d.as_str()).collect();
    let mut devices = Vec::new();
    let mut failed = Vec::new();
    for name in names {
        match sysfs.device(name) {
            Ok(mut facts) => {
                facts
                    .ports
                    .retain(|p| ports.iter().any(|(d, n)| d == name && *n == p.port));
                devices.push(facts);
            }
            Err(e) => failed.push((name.to_owned(), e.to_string())),
        }
    }
    let report = PortReport {
        ports: ports.to_vec(),
        devices,
        rails: BTreeMap::new(),
    };
    (report, failed)
}

/// Sends a [`PortReport`] now and every `every`, until the recorder is gone, with the
/// configured rail of each device in `rails`. A device that cannot be read is logged when it
/// starts and stops failing, not at every refresh.
pub async fn run(
    sysfs: Sysfs,
    ports: Vec<(String, u8)>,
    rails: BTreeMap<String, u16>,
    events: mpsc::Sender<ProbeEvent>,
    every: Duration,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = BTreeSet::new();
    loop {
        ticker.tick().await;
        let (s, p) = (sysfs.clone(), ports.clone());
        let Ok((mut report, failed)) = tokio::task::spawn_blocking(move || report(&s, &p)).await
        else {
            return; // the runtime is shutting down
        };
        report.rails = rails.clone();
        let now: BTreeSet<String> = failed.iter().map(|(d, _)| d.clone()).collect();
        for (device, error) in &failed {
            if !failing.contains(device) {
                tracing::warn!(device, error, "cannot read the port facts from sysfs");
            }
        }
        for device in failing.difference(&now) {
            tracing::info!(device, "port facts readable again");
        }
        failing = now;
        if events.send(ProbeEvent::Ports(report)).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::metrics::probe::ProbeRecorder;
    use crate::metrics::{Format, Metrics};

    fn fixture(tree: &str) -> Sysfs {
        Sysfs::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(tree),
        )
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn port_gauges_from_a_fixture_tree() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let sysfs = fixture("mlx5-roce").excluding(["mlx5_8"]);
        let ports = vec![
            ("mlx5_0".to_owned(), 1),
            ("mlx5_1".to_owned(), 1),
            ("mlx5_8".to_owned(), 1),
        ];
        let (mut first, failed) = report(&sysfs, &ports);
        first.rails = [("mlx5_0".to_owned(), 3)].into();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].1.contains("excluded"), "{failed:?}");
        recorder.apply(ProbeEvent::Ports(first));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let m0 = r#"{device="mlx5_0",port="1"}"#;
        let m1 = r#"{device="mlx5_1",port="1"}"#;
        assert_eq!(sample(&text, &format!("rdma_probe_port_up{m0}")), Some(1.0));
        assert_eq!(
            sample(&text, &format!("rdma_probe_port_rate_bytes_per_second{m0}")),
            Some(12.5e9)
        );
        assert_eq!(
            sample(&text, &format!("rdma_probe_port_width_lanes{m0}")),
            Some(4.0)
        );
        assert_eq!(
            sample(&text, &format!("rdma_probe_port_phys_state_id{m0}")),
            Some(5.0)
        );
        let info = r#"rdma_probe_port_info{device="mlx5_0",port="1",link_layer="ethernet",netdev="ens1f0np0",width="4X",speed="EDR"}"#;
        assert_eq!(sample(&text, info), Some(1.0), "{text}");
        let d1 = r#"{device="mlx5_1"}"#;
        assert_eq!(
            sample(&text, &format!("rdma_probe_pcie_link_width_lanes{d1}")),
            Some(8.0)
        );
        assert_eq!(
            sample(&text, &format!("rdma_probe_pcie_link_max_width_lanes{d1}")),
            Some(16.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("rdma_probe_pcie_link_speed_transfers_per_second{d1}")
            ),
            Some(16e9)
        );
        assert_eq!(
            sample(&text, &format!("rdma_probe_device_numa_node{d1}")),
            Some(1.0)
        );
        let dinfo = r#"rdma_probe_device_info{device="mlx5_0",pci_address="0000:3b:00.0",firmware="22.36.1010",rail="3"}"#;
        assert_eq!(sample(&text, dinfo), Some(1.0), "{text}");
        // A device without a configured rail: an empty rail label.
        assert!(
            text.contains(r#"rdma_probe_device_info{device="mlx5_1",pci_address=""#)
                && text.lines().any(
                    |l| l.starts_with(r#"rdma_probe_device_info{device="mlx5_1""#)
                        && l.contains(r#",rail=""}"#)
                ),
            "{text}"
        );
        assert!(sample(&text, &format!("rdma_probe_port_up{m1}")).is_some());
        // The excluded device is listed as a probed port but never read: down, nothing else.
        let m8 = r#"{device="mlx5_8",port="1"}"#;
        assert_eq!(sample(&text, &format!("rdma_probe_port_up{m8}")), Some(0.0));
        assert!(!text.contains(r#"rdma_probe_port_rate_bytes_per_second{device="mlx5_8""#));
        assert!(!sysfs
            .touched()
            .iter()
            .any(|p| p.to_string_lossy().contains("mlx5_8")));

        // The next refresh no longer has mlx5_1: its series go, mlx5_0's stay.
        let (second, _) = report(&sysfs, &ports[..1]);
        recorder.apply(ProbeEvent::Ports(second));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert!(!text.contains(r#"device="mlx5_1""#), "{text}");
        assert_eq!(sample(&text, &format!("rdma_probe_port_up{m0}")), Some(1.0));
    }

    #[test]
    fn a_port_that_goes_down_keeps_port_up_and_loses_what_sysfs_no_longer_says() {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let ports = vec![("mlx5_1".to_owned(), 1)];
        let (first, _) = report(&fixture("mlx5-ib"), &ports);
        recorder.apply(ProbeEvent::Ports(first));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        let m1 = r#"{device="mlx5_1",port="1"}"#;
        assert_eq!(sample(&text, &format!("rdma_probe_port_up{m1}")), Some(0.0));
        assert_eq!(
            sample(&text, &format!("rdma_probe_port_phys_state_id{m1}")),
            Some(2.0)
        );
        // A device that vanished: port_up 0, every other series of it gone.
        let (gone, failed) = report(&fixture("rxe"), &ports);
        assert_eq!(failed.len(), 1);
        recorder.apply(ProbeEvent::Ports(gone));
        let text = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(sample(&text, &format!("rdma_probe_port_up{m1}")), Some(0.0));
        assert!(
            !text.contains(r#"rdma_probe_port_phys_state_id{"#),
            "{text}"
        );
        assert!(!text.contains(r#"rdma_probe_port_info{"#), "{text}");
        assert!(
            !text.contains(r#"rdma_probe_pcie_link_width_lanes{"#),
            "{text}"
        );
        assert!(!text.contains(r#"rdma_probe_device_info{"#), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_refresh_sends_a_report_now_and_at_every_interval() {
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(run(
            fixture("rxe"),
            vec![("rxe0".to_owned(), 1)],
            [("rxe0".to_owned(), 0)].into(),
            tx,
            Duration::from_secs(30),
        ));
        for _ in 0..2 {
            match rx.recv().await {
                Some(ProbeEvent::Ports(report)) => {
                    assert_eq!(report.devices.len(), 1);
                    assert_eq!(report.rails.get("rxe0"), Some(&0));
                    assert!(report.devices[0].ports[0].is_up());
                }
                other => panic!("{other:?}"),
            }
        }
        drop(rx);
        let _ = tokio::time::timeout(Duration::from_secs(120), task).await;
    }
}
