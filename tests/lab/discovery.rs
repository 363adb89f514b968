//! Discovery by DNS on three lab nodes with a real DNS server (dnsmasq on node1, whose hosts
//! file the scenario edits): a record added adds the node's paths, a record removed keeps the
//! node probed (and failing, its exporter stopped) until `forget_after`, then its series go; a
//! DNS server that stops leaves the last good set in place (lab/scenarios/discovery.sh).

use crate::promtool;
use crate::support::{self, LabRun};

/// The scenario's `forget_after`, and how often it resolves the name.
const FORGET_AFTER: f64 = 20.0;
const REFRESH: f64 = 2.0;

fn result(run: &LabRun, key: &str) -> String {
    run.results("node1")
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("node1 recorded no {key}:\n{}", run.log("node1")))
}

fn seconds(run: &LabRun, key: &str) -> f64 {
    result(run, key)
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

#[test]
fn dns_discovery_adds_paths_keeps_a_vanished_peer_until_forget_after_and_survives_dns_failure() {
    let run = support::run_shared(&support::MESH, "discovery.sh");
    run.assert_success();
    // Every exporter stopped cleanly on SIGTERM: node2's when its record went, the others' at
    // the end.
    run.assert_result("node2", "removed_stop_status", "0");
    run.assert_result("node1", "final_stop_status", "0");
    run.assert_result("node3", "final_stop_status", "0");
    assert_eq!(run.results("node2").get("final_stop_status"), None);
    for file in [
        "metrics-initial.txt",
        "metrics-vanished.txt",
        "metrics-failing.txt",
        "metrics-dns-down.txt",
    ] {
        promtool::assert_promtool_accepts(&run.file("node1", file));
    }

    // 1. node1 skips its own record; node3, not in DNS, is not a peer.
    assert_eq!(result(&run, "initial_self_series"), "0");
    assert_eq!(result(&run, "initial_node3_series"), "0");

    // Every node's ToR and spine come from the topology file alone: node1's own, the one node3
    // reported (its peer name is its address), and so node1's two paths, one per crossing.
    let added_scrape = run.file("node1", "metrics-added.txt");
    let lines: Vec<&str> = added_scrape.lines().collect();
    let has = |prefix: &str, parts: &[&str]| {
        lines
            .iter()
            .any(|l| l.starts_with(prefix) && parts.iter().all(|p| l.contains(p)))
    };
    assert!(
        has(
            "rdma_probe_node_info{",
            &[r#"node="node1""#, r#"spine="spine0""#, r#"tor="leaf0""#]
        ),
        "node1's place from topology.conf:\n{added_scrape}"
    );
    assert!(
        has(
            "rdma_probe_peer_info{",
            &[r#"peer_node="node3""#, r#"tor="leaf1""#]
        ),
        "node3's place, as it reported it:\n{added_scrape}"
    );
    for crossing in ["local", "cross"] {
        let judged =
            format!("rdma_probe_judged_paths{{device=\"rxe0\",crossing=\"{crossing}\"}} 1");
        assert!(
            lines.contains(&judged.as_str()),
            "{judged}:\n{added_scrape}"
        );
    }

    // 2. A record added: the node's paths succeed within a refresh plus a probe interval (3 s,
    // first probe at a random point of it) and a burst.
    let added = seconds(&run, "added_success_seconds");
    assert!(
        added < REFRESH + 3.0 + 10.0,
        "node3 probed {added} s after its record"
    );

    // 3. A record removed: the peer stays (vanished) and its probes fail, then after
    // forget_after its series go, not before.
    let failing = seconds(&run, "failing_seconds");
    let gone = seconds(&run, "gone_seconds");
    assert!(
        failing < gone,
        "node2 failing {failing} s after removal, gone after {gone} s"
    );
    assert!(
        (FORGET_AFTER..FORGET_AFTER + REFRESH + 10.0).contains(&gone),
        "node2's series went {gone} s after its record (forget_after {FORGET_AFTER} s)"
    );
    let vanished = run.file("node1", "metrics-vanished.txt");
    assert!(
        vanished.contains("rdma_probe_discovery_vanished_peers 1"),
        "{vanished}"
    );
    assert!(
        vanished.contains("rdma_probe_success{device=\"rxe0\",peer=\"192.0.2.12\""),
        "a vanished peer keeps its paths:\n{vanished}"
    );
    let failing = run.file("node1", "metrics-failing.txt");
    let node2 = "device=\"rxe0\",peer=\"192.0.2.12\",peer_device=\"rxe0\"";
    assert_eq!(
        promtool::sample(&failing, &format!("rdma_probe_success{{{node2}}}")),
        Some(0.0),
        "{failing}"
    );
    let connect_errors = promtool::sample(
        &failing,
        &format!("rdma_probe_errors_total{{{node2},reason=\"connect\"}}"),
    );
    assert!(connect_errors.is_some_and(|n| n >= 1.0), "{failing}");
    let forgotten = run.file("node1", "metrics-forgotten.txt");
    assert!(!forgotten.contains("peer=\"192.0.2.12\""), "{forgotten}");
    assert_eq!(result(&run, "forgotten_node3_success"), "1");

    // 4. DNS down: errors counted, the last good set kept past forget_after.
    assert!(seconds(&run, "dns_error_seconds") < 15.0);
    assert_eq!(result(&run, "dns_down_node3_success"), "1");
    assert_eq!(result(&run, "dns_down_peers"), "2");
    let errors: f64 = result(&run, "dns_down_errors").parse().unwrap();
    assert!(errors >= 1.0, "{errors}");
}
