//! Capacity, not just pace, on real Soft-RoCE (lab/scenarios/capacity.sh, one boot for both
//! tests): a tbf cap on the prober's link leaves a burst paced below the cap at its pace while an
//! unpaced (capacity) burst shows the cap, in `probe --json` and in the exporter's gauges, which
//! keep the two kinds apart; and with several QPs each QP takes its own UDP source port (ECMP
//! path), the ports move on from burst to burst, and a slow port shows as the lowest per-QP
//! bandwidth.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::Value;

use crate::promtool;
use crate::support::{self, LabRun};

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

/// Every command of the scenario exited 0, node2's responder (stopped by SIGTERM) included.
fn assert_every_exit(run: &LabRun) {
    let node1: Vec<(&str, &str)> = [
        "capacity-free",
        "paced-capped",
        "capacity-capped",
        "capacity-metrics",
        "exporter",
        "ecmp",
    ]
    .iter()
    .map(|step| (*step, "0"))
    .collect();
    run.assert_exits("node1", "exits", &node1);
    run.assert_exits("node2", "exits", &[("responder", "0")]);
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

/// The scenario's run, shared by the tests of this file (one boot).
fn lab_run() -> &'static LabRun {
    static RUN: OnceLock<LabRun> = OnceLock::new();
    RUN.get_or_init(|| support::run_shared(&support::PAIR, "capacity.sh"))
}

#[test]
fn capacity_bursts_show_a_rate_cap_that_paced_bursts_stay_under() {
    let run = lab_run();
    run.assert_success();
    assert_every_exit(run);
    let results = run.results("node1");
    let cap_mbps: f64 = results["cap_mbps"].parse().unwrap();
    let pace_mbps: f64 = results["pace_mbps"].parse().unwrap();

    // Unpaced, the target is the lower link rate of both ends.
    let free = succeeded(run, "capacity-free", "capacity");
    let link = link_rate_bytes(&free);
    assert_eq!(f64_of(&free, "target_bandwidth_bytes_per_second"), link);
    let free_bw = f64_of(&free, "bandwidth_bytes_per_second");

    // Under a cap at half the link, a burst paced at a fifth of it keeps its pace ...
    let paced = succeeded(run, "paced-capped", "paced");
    let paced_bw = f64_of(&paced, "bandwidth_bytes_per_second");
    let pace = pace_mbps * 1e6 / 8.0;
    assert!((f64_of(&paced, "target_bandwidth_bytes_per_second") - pace).abs() < 1.0);
    let paced_error = (paced_bw - pace) / pace;
    // ... while the capacity burst shows the cap (tbf counts headers too: payload stays below).
    let capped = succeeded(run, "capacity-capped", "capacity");
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
    assert_eq!(exit_code(run, "capacity-metrics"), "0");
    assert_eq!(exit_code(run, "exporter"), "0");
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
    // 1 s at this pace is some 17 messages, and the last completion trails the last post by a
    // message's time through the cap: such a short burst reads a few percent low (probe-basic
    // checks the pacer's accuracy on 8 s bursts).
    assert!(
        ((exporter_paced - pace) / pace).abs() <= 0.1,
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

/// The UDP source ports node2 saw on the closing WRITE WITH IMMEDIATE of each QP and burst.
fn ports_on_the_wire(run: &LabRun) -> BTreeSet<u16> {
    run.file("node2", "closing-writes.txt")
        .lines()
        .filter_map(|l| {
            // "12:00:00.000000 IP 192.0.2.11.49153 > 192.0.2.12.4791: UDP, length 1052"
            let source = l.split_whitespace().nth(2)?;
            source.rsplit('.').next()?.parse().ok()
        })
        .collect()
}

#[test]
fn every_qp_takes_its_own_ecmp_path_and_a_slow_one_shows() {
    let run = lab_run();
    run.assert_success();
    assert_every_exit(run);
    let slow_mbps: f64 = run.results("node1")["slow_mbps"].parse().unwrap();
    assert_eq!(
        exit_code(run, "ecmp"),
        "0",
        "{}",
        run.file("node1", "ecmp.json")
    );
    let bursts: Vec<Value> = run
        .file("node1", "ecmp.json")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(bursts.len(), 3, "{bursts:?}");
    let mut all_ports = BTreeSet::new();
    let mut judged = 0;
    for (b, burst) in bursts.iter().enumerate() {
        assert!(burst["error"].is_null(), "burst {b}: {burst}");
        assert_eq!(burst["validated"], true, "burst {b}: {burst}");
        assert_eq!(
            burst["new_session"],
            b == 0,
            "burst {b}: one warm session: {burst}"
        );
        let ports: Vec<u16> = serde_json::from_value(burst["udp_source_ports"].clone()).unwrap();
        let labels: Vec<u32> = serde_json::from_value(burst["flow_labels"].clone()).unwrap();
        let per_qp: Vec<f64> =
            serde_json::from_value(burst["per_qp_bandwidth_bytes_per_second"].clone()).unwrap();
        assert_eq!(
            (ports.len(), labels.len(), per_qp.len()),
            (4, 4, 4),
            "{burst}"
        );
        assert!(
            ports
                .iter()
                .zip(&labels)
                .all(|(&p, &l)| u32::from(p) == 0xc000 | l),
            "{burst}"
        );
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            4,
            "burst {b}: each QP its own port: {burst}"
        );
        for port in &ports {
            assert!(
                all_ports.insert(*port),
                "burst {b} reused port {port}: {bursts:?}"
            );
        }
        let total = f64_of(burst, "bandwidth_bytes_per_second");
        let min = f64_of(burst, "per_qp_bandwidth_min_bytes_per_second");
        let slowed: Vec<usize> = (0..4).filter(|&q| ports[q].is_multiple_of(4)).collect();
        eprintln!(
            "burst {b}: total {:.1} Mb/s; per QP (UDP port: Mb/s) {}; slowed {slowed:?} to \
             {slow_mbps} Mbit",
            mbps(total),
            ports
                .iter()
                .zip(&per_qp)
                .map(|(p, bw)| format!("{p}: {:.2}", mbps(*bw)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // Consecutive ports: one in four is slowed, unless the burst wrapped past the last port.
        let [slow] = slowed[..] else { continue };
        judged += 1;
        assert_eq!(
            min, per_qp[slow],
            "burst {b}: the slowed QP is the slowest: {burst}"
        );
        let fastest_other = (0..4)
            .filter(|&q| q != slow)
            .map(|q| per_qp[q])
            .fold(f64::INFINITY, f64::min);
        assert!(
            per_qp[slow] < 0.5 * fastest_other,
            "burst {b}: the slowed QP does not stand out: {burst}"
        );
        assert!(
            mbps(per_qp[slow]) <= slow_mbps * 1.05,
            "burst {b}: the slowed QP beat its netem rate: {burst}"
        );
    }
    assert!(
        judged >= 2,
        "too few bursts with one slowed port: {bursts:?}"
    );
    // node2 saw exactly those ports on the closing writes: the driver takes the UDP source port
    // from the flow label as the kernel's convention says.
    assert_eq!(
        ports_on_the_wire(run),
        all_ports,
        "{}",
        run.file("node2", "closing-writes.txt")
    );
}
