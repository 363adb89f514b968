//! Capacity, not just pace, on real Soft-RoCE (lab/scenarios/capacity.sh): a tbf cap on the
//! prober's link leaves a burst paced below the cap at its pace while an unpaced (capacity) burst
//! shows the cap, in `probe --json` and in the exporter's gauges, which keep the two kinds apart.

use serde_json::Value;

use crate::promtool;
use crate::support::{self, LabRun};

const BIN: &str = "target/release/rdma-probe-exporter";

fn json(run: &LabRun, file: &str) -> Value {
    let text = run.file("node1", file);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "node1/{file} is not one JSON object ({e}):\n{text}\n{}",
            run.log("node1")
        )
    })
}

fn exit_code(run: &LabRun, name: &str) -> String {
    run.file("node1", "exits")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} exit=")).map(str::to_string))
        .unwrap_or_else(|| panic!("no exit code for {name}: {}", run.log("node1")))
}

fn f64_of(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing or not a number in {v}"))
}

/// A probe that succeeded and validated, of the expected kind.
fn succeeded(run: &LabRun, name: &str, kind: &str) -> Value {
    let v = json(run, &format!("{name}.json"));
    assert_eq!(exit_code(run, name), "0", "{name}: {v}");
    assert!(v["error"].is_null(), "{name}: {v}");
    assert_eq!(v["validated"], true, "{name}: {v}");
    assert_eq!(v["kind"], kind, "{name}: {v}");
    v
}

/// The lower link rate of both ends, in bytes per second, as the probe reported them.
fn link_rate_bytes(v: &Value) -> f64 {
    let local = f64_of(v, "local_link_rate_bits_per_second");
    let peer = f64_of(v, "peer_link_rate_bits_per_second");
    local.min(peer) / 8.0
}

fn mbps(bytes_per_second: f64) -> f64 {
    bytes_per_second * 8e-6
}

#[test]
fn capacity_bursts_show_a_rate_cap_that_paced_bursts_stay_under() {
    let run = support::run("capacity", 2, "capacity.sh", &[BIN.as_ref()], 900);
    run.assert_success();
    let results = run.results("node1");
    let cap_mbps: f64 = results["cap_mbps"].parse().unwrap();
    let pace_mbps: f64 = results["pace_mbps"].parse().unwrap();

    // Unpaced, the target is the lower link rate of both ends.
    let free = succeeded(&run, "capacity-free", "capacity");
    let link = link_rate_bytes(&free);
    assert_eq!(f64_of(&free, "target_bandwidth_bytes_per_second"), link);
    let free_bw = f64_of(&free, "bandwidth_bytes_per_second");

    // Under a cap at half the link, a burst paced at a fifth of it keeps its pace ...
    let paced = succeeded(&run, "paced-capped", "paced");
    let paced_bw = f64_of(&paced, "bandwidth_bytes_per_second");
    let pace = pace_mbps * 1e6 / 8.0;
    assert!((f64_of(&paced, "target_bandwidth_bytes_per_second") - pace).abs() < 1.0);
    let paced_error = (paced_bw - pace) / pace;
    // ... while the capacity burst shows the cap (tbf counts headers too: payload stays below).
    let capped = succeeded(&run, "capacity-capped", "capacity");
    let capped_bw = f64_of(&capped, "bandwidth_bytes_per_second");
    eprintln!(
        "link rate {:.0} Mb/s; capacity {:.1} Mb/s free, {:.1} Mb/s under a {cap_mbps} Mbit tbf \
         cap ({:.0}% of the cap); paced at {pace_mbps} Mbps under the cap: {:.2} Mb/s \
         ({:+.2}%)",
        mbps(link),
        mbps(free_bw),
        mbps(capped_bw),
        mbps(capped_bw) / cap_mbps * 100.0,
        mbps(paced_bw),
        paced_error * 100.0
    );
    assert!(
        paced_error.abs() <= 0.03,
        "paced burst off its pace under the cap: {paced}"
    );
    assert!(
        mbps(capped_bw) <= cap_mbps * 1.02,
        "capacity above the cap: {capped}"
    );
    assert!(
        capped_bw <= 0.6 * free_bw,
        "capacity under a cap at half the link did not fall: {capped_bw} vs {free_bw}"
    );
    assert!(
        mbps(capped_bw) >= 0.3 * cap_mbps,
        "capacity far below the cap: {capped}"
    );

    // The exporter, every other burst unpaced, under the same cap: both kinds, each with its
    // own figures and target.
    assert_eq!(exit_code(&run, "capacity-metrics"), "0");
    assert_eq!(exit_code(&run, "exporter"), "0");
    let metrics = run.file("node1", "capacity-metrics.txt");
    promtool::assert_promtool_accepts(&metrics);
    let series = |family: &str, kind: &str| {
        let s =
            format!(r#"{family}{{device="rxe0",peer="node2",peer_device="rxe0",kind="{kind}"}}"#);
        promtool::sample(&metrics, &s).unwrap_or_else(|| panic!("no {s} in:\n{metrics}"))
    };
    let bandwidth = "rdma_probe_bandwidth_bytes_per_second";
    let target = "rdma_probe_target_bandwidth_bytes_per_second";
    let exporter_paced = series(bandwidth, "paced");
    let exporter_capacity = series(bandwidth, "capacity");
    eprintln!(
        "exporter under the cap: paced {:.2} Mb/s (pace {pace_mbps}), capacity {:.1} Mb/s \
         (target {:.0} Mb/s)",
        mbps(exporter_paced),
        mbps(exporter_capacity),
        mbps(series(target, "capacity"))
    );
    assert!((series(target, "paced") - pace).abs() < 1.0, "{metrics}");
    assert_eq!(series(target, "capacity"), link, "{metrics}");
    assert!(
        ((exporter_paced - pace) / pace).abs() <= 0.05,
        "exporter's paced burst off its pace: {metrics}"
    );
    assert!(
        mbps(exporter_capacity) <= cap_mbps * 1.02 && exporter_capacity <= 0.6 * free_bw,
        "exporter's capacity burst does not show the cap: {metrics}"
    );
    // Paced bursts and capacity bursts both count as runs of the path.
    let runs =
        r#"rdma_probe_runs_total{device="rxe0",peer="node2",peer_device="rxe0",result="success"}"#;
    assert!(
        promtool::sample(&metrics, runs).unwrap_or(0.0) >= 4.0,
        "{metrics}"
    );
}
