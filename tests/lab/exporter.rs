//! The exporter (`run --config`) on three lab nodes: every path measured, exported and judged
//! (the judged failing paths agree with the paths' own failure counts), a peer that goes away
//! and comes back, reloads (a removed peer, a broken file, peers by address
//! alone), and SIGTERM in the middle of a burst (lab/scenarios/exporter.sh).

use std::collections::BTreeMap;

use crate::promtool;
use crate::support::{self, LabRun};

const NODES: [&str; 3] = ["node1", "node2", "node3"];

/// Samples of a classic-format scrape, by series text (name and labels).
fn samples(scrape: &str) -> BTreeMap<String, f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(series, v)| Some((series.to_owned(), v.parse().ok()?)))
        .collect()
}

/// The device's judged paths (docs/metrics.md, "Judged paths"); every lab path is local.
const JUDGED_LOCAL: &str = r#"rdma_probe_judged_paths{device="rxe0",crossing="local"}"#;
const JUDGED_LAST_SUCCESS: &str =
    r#"rdma_probe_judged_last_success_timestamp_seconds{device="rxe0",crossing="local"}"#;
const JUDGED_FAILED: &str =
    r#"rdma_probe_judged_bad_paths{device="rxe0",crossing="local",state="failed"}"#;

/// The row of `peer`'s path judged failing (docs/metrics.md, "Judged paths"): its failures in a
/// row, 0 while it lingers after; the peer's node name is its configured one.
fn failed_row(peer: &str) -> String {
    format!(
        "rdma_probe_bad_path_in_a_row{{device=\"rxe0\",peer=\"{peer}\",peer_device=\"rxe0\",\
         peer_node=\"{peer}\",peer_tor=\"\",crossing=\"local\",state=\"failed\"}}"
    )
}

/// The probers whose last burst on rxe0 ended `how` (docs/metrics.md, "Probers served").
fn probers(how: &str) -> String {
    format!("rdma_probe_responder_probers{{device=\"rxe0\",last_burst=\"{how}\"}}")
}

fn path(family: &str, peer: &str) -> String {
    format!("{family}{{device=\"rxe0\",peer=\"{peer}\",peer_device=\"rxe0\"}}")
}

/// A per-burst gauge of the path's last paced burst (docs/metrics.md, "Paced and capacity
/// bursts").
fn paced(family: &str, peer: &str) -> String {
    format!("{family}{{device=\"rxe0\",peer=\"{peer}\",peer_device=\"rxe0\",kind=\"paced\"}}")
}

/// The sum of a family's samples whose labels name `peer`.
fn sum_for_peer(samples: &BTreeMap<String, f64>, family: &str, peer: &str) -> f64 {
    let prefix = format!("{family}{{");
    let label = format!("peer=\"{peer}\"");
    samples
        .iter()
        .filter(|(s, _)| s.starts_with(&prefix) && s.contains(&label))
        .map(|(_, v)| v)
        .sum()
}

/// The last `lines` lines of a log: what a failure message shows, the end of a long run's log.
fn log_tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn result(run: &LabRun, node: &str, key: &str) -> String {
    run.results(node)
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("{node} recorded no {key}:\n{}", run.log(node)))
}

fn seconds(run: &LabRun, node: &str, key: &str) -> f64 {
    result(run, node, key)
        .parse()
        .unwrap_or_else(|e| panic!("{node} {key}: {e}"))
}

#[test]
fn three_exporters_measure_every_path_and_follow_peers_reloads_and_shutdowns() {
    let run = support::run_shared(&support::MESH, "exporter.sh");
    run.assert_success();

    // 1. Every node: success 1 and bandwidth > 0 for both of its paths; promtool-clean.
    for node in NODES {
        let scrape = run.file(node, "metrics-all-up.txt");
        promtool::assert_promtool_accepts(&scrape);
        let s = samples(&scrape);
        for peer in NODES.iter().filter(|p| **p != node) {
            assert_eq!(
                s.get(&path("rdma_probe_success", peer)),
                Some(&1.0),
                "{node}->{peer}\n{scrape}"
            );
            let bandwidth = s[&paced("rdma_probe_bandwidth_bytes_per_second", peer)];
            let target = s[&paced("rdma_probe_target_bandwidth_bytes_per_second", peer)];
            assert!(bandwidth > 0.0, "{node}->{peer}: {bandwidth}");
            assert_eq!(
                target,
                20e6 / 8.0,
                "{node}->{peer}: the rate limit is the target"
            );
            eprintln!(
                "{node}->{peer}: {:.3} Mb/s paced at {:.0} Mb/s",
                bandwidth * 8e-6,
                target * 8e-6
            );
        }
        assert!(
            s.keys().all(|k| !k.starts_with("rdma_probe_success")
                || !k.contains(&format!("peer=\"{node}\""))),
            "{node} has no path to itself:\n{scrape}"
        );
        assert_eq!(s.get("rdma_probe_config_reload_success"), Some(&1.0));
        // The node's labels: its own entry in the shared peer list (rack), then `labels` (lab).
        assert_eq!(
            s.get(&format!(
                "rdma_probe_node_info{{node=\"{node}\",lab=\"soft-roce\",rack=\"r{node}\"}}"
            )),
            Some(&1.0),
            "{scrape}"
        );
        // Its judgement of its paths, per device (no `tor` label here: every path is local):
        // both judged, none failing.
        assert_eq!(s.get(JUDGED_LOCAL), Some(&2.0), "{scrape}");
        assert!(
            s.get(JUDGED_LAST_SUCCESS).is_some_and(|t| *t > 0.0),
            "{scrape}"
        );
        assert_eq!(s.get(JUDGED_FAILED), None, "{scrape}");
        // Nor a failing row above 0 (one may linger at 0 from the peers' start).
        for peer in NODES.iter().filter(|p| **p != node) {
            assert!(
                s.get(&failed_row(peer)).is_none_or(|n| *n == 0.0),
                "{scrape}"
            );
        }
        assert_eq!(run.file(node, "readyz.txt").trim(), "ready");
        let status = run.file(node, "status.html");
        for peer in NODES.iter().filter(|p| **p != node) {
            assert!(
                status.contains(peer),
                "status page of {node} lists {peer}:\n{status}"
            );
        }
        eprintln!(
            "{node}: all paths up {} s after start",
            result(&run, node, "all_up_seconds")
        );
        // Its responder served both other nodes, and their last bursts completed.
        let served = samples(&run.file(node, "metrics-probers.txt"));
        let ends = ["completed", "failed", "corrupt"].map(|how| served.get(&probers(how)).copied());
        assert_eq!(
            ends,
            [Some(2.0), None, None],
            "{node}: probers served, by their last burst (completed, failed, corrupt)"
        );
    }

    // 2. node3's exporter stopped: node1 and node2 see it fail (only it), then recover.
    assert_eq!(result(&run, "node3", "peer_stop_status"), "0");
    for node in ["node1", "node2"] {
        let scrape = run.file(node, "metrics-peer-down.txt");
        promtool::assert_promtool_accepts(&scrape);
        let s = samples(&scrape);
        assert_eq!(
            s.get(&path("rdma_probe_success", "node3")),
            Some(&0.0),
            "{scrape}"
        );
        let errors = sum_for_peer(&s, "rdma_probe_errors_total", "node3");
        assert!(errors >= 2.0, "{node}: errors for node3 {errors}\n{scrape}");
        // The judged failing paths agree with the path's own count of failures in a row: the
        // path to node3 is failing from its third (the scrape may come between a result and
        // the judgement of it, so at exactly three either is right).
        let in_a_row = s
            .get(&path("rdma_probe_consecutive_failures", "node3"))
            .copied()
            .unwrap_or(0.0);
        let failing = s.get(JUDGED_FAILED).copied();
        let agrees = match in_a_row {
            n if n < 3.0 => failing.is_none(),
            n if n < 4.0 => failing.is_none() || failing == Some(1.0),
            _ => failing == Some(1.0),
        };
        assert!(
            agrees,
            "{node}: {in_a_row} failures in a row to node3, judged failing: {failing:?}\n{scrape}"
        );
        // While judged failing, the path has its row: the judgement's streak, the path's own
        // count or (judged before that count's next failure was) one less.
        let row = s.get(&failed_row("node3")).copied();
        if failing == Some(1.0) {
            assert!(
                row.is_some_and(|n| n >= 3.0 && (n == in_a_row || n == in_a_row - 1.0)),
                "{node}: judged failing with {in_a_row} failures in a row, row {row:?}\n{scrape}"
            );
        }
        eprintln!(
            "{node}: node3 down -> {in_a_row} failures in a row, judged failing paths {failing:?}, its row {row:?}"
        );
        assert_eq!(result(&run, node, "outage_other_success"), "1", "{node}");
        assert_eq!(
            result(&run, node, "outage_other_errors_increase"),
            "0",
            "{node}"
        );
        let recovered = run.file(node, "metrics-recovered.txt");
        assert_eq!(
            samples(&recovered).get(&path("rdma_probe_success", "node3")),
            Some(&1.0)
        );
        eprintln!(
            "{node}: node3 down -> {errors} errors ({}), recovered {} s after its restart",
            s.keys()
                .filter(|k| k.starts_with("rdma_probe_errors_total") && k.contains("node3"))
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
            result(&run, node, "recovered_seconds")
        );
    }

    // 3. Reloads on node1.
    let removed = run.file("node1", "metrics-peer-removed.txt");
    promtool::assert_promtool_accepts(&removed);
    assert!(
        !removed.contains("peer=\"node2\",peer_device"),
        "node2's path series are gone:\n{removed}"
    );
    assert!(removed.contains(&path("rdma_probe_success", "node3")));
    let broken = samples(&run.file("node1", "metrics-broken-reload.txt"));
    assert_eq!(broken.get("rdma_probe_config_reload_success"), Some(&0.0));
    assert_eq!(broken.get(&path("rdma_probe_success", "node3")), Some(&1.0));
    assert_eq!(result(&run, "node1", "broken_post_status"), "400");
    // The client learns only that the file was refused; the log says why.
    let why = run.file("node1", "reload-broken.txt");
    assert!(
        !why.contains("exporter.yaml"),
        "no detail to the client: {why}"
    );
    assert!(why.contains("log"), "the refusal points at the log: {why}");
    let log = run.file("node1", "exporter.log");
    assert!(
        log.lines()
            .any(|l| l.contains("config reload failed") && l.contains("exporter.yaml")),
        "the log names the file"
    );
    assert_eq!(result(&run, "node1", "good_post_status"), "200");
    assert_eq!(result(&run, "node1", "alive_after_sighup"), "yes");
    assert_eq!(result(&run, "node1", "sighup_logged"), "1");
    // Peers by address alone: node2's path under its address, its name in peer_info; node1's own
    // address skipped once it said who it is.
    let by_address = run.file("node1", "metrics-by-address.txt");
    promtool::assert_promtool_accepts(&by_address);
    let s = samples(&by_address);
    let (node1_address, node2_address) = (
        result(&run, "node1", "node1_address"),
        result(&run, "node1", "node2_address"),
    );
    assert_eq!(
        s.get(&path("rdma_probe_success", &node2_address)),
        Some(&1.0),
        "{by_address}"
    );
    assert_eq!(
        s.get(&format!(
            "rdma_probe_peer_info{{peer=\"{node2_address}\",peer_node=\"node2\",lab=\"soft-roce\",rack=\"rnode2\"}}"
        )),
        Some(&1.0),
        "node2 told its name and labels:\n{by_address}"
    );
    // No measured path to node1 itself: only the series that says it is skipped.
    let own_path = format!("peer=\"{node1_address}\",peer_device");
    assert!(
        !by_address
            .lines()
            .any(|l| l.contains(&own_path) && !l.starts_with("rdma_probe_path_skipped{")),
        "no path to node1 itself:\n{by_address}"
    );
    assert_eq!(
        s.get(&format!(
            "rdma_probe_path_skipped{{device=\"rxe0\",peer=\"{node1_address}\",peer_device=\"unknown\",reason=\"itself\"}}"
        )),
        Some(&1.0),
        "the skipped path is shown:\n{by_address}"
    );
    assert_eq!(
        s.get("rdma_probe_schedule_skipped_paths{device=\"rxe0\",reason=\"itself\"}"),
        Some(&1.0)
    );
    assert_eq!(result(&run, "node1", "itself_logged"), "1");
    eprintln!(
        "node1: node2 by address {node2_address} -> peer_node=\"node2\"; its own address {node1_address} skipped"
    );

    // 4. SIGTERM during a 10 s burst: exit 0 within 2 s; node2 keeps serving node3.
    let stop = seconds(&run, "node1", "midburst_stop_seconds");
    assert_eq!(result(&run, "node1", "midburst_stop_status"), "0");
    assert_eq!(result(&run, "node1", "midburst_reload_status"), "200");
    assert_eq!(
        result(&run, "node1", "midburst_probe_ended"),
        "1",
        "the SIGTERM landed in a burst; the end of node1's log:\n{}",
        log_tail(&run.file("node1", "exporter.log"), 40)
    );
    assert!(stop < 2.0, "SIGTERM mid-burst to exit: {stop} s");
    // The exporters still running at the end (node2's, and node3's since its restart) stop
    // cleanly too; node1's stopped above.
    run.assert_result("node2", "final_stop_status", "0");
    run.assert_result("node3", "final_stop_status", "0");
    assert_eq!(run.results("node1").get("final_stop_status"), None);
    assert_eq!(
        result(&run, "node3", "node2_serves_after_midburst_stop"),
        "1"
    );
    // node2's responder counts node1's cut burst as its last, failed, and node3's as completed.
    let served = samples(&run.file("node2", "metrics-final.txt"));
    let ends = ["completed", "failed", "corrupt"].map(|how| served.get(&probers(how)).copied());
    assert_eq!(
        ends,
        [Some(1.0), Some(1.0), None],
        "node2: probers served after node1 stopped mid-burst (completed, failed, corrupt)"
    );
    eprintln!(
        "SIGTERM mid-burst: exit 0 after {stop:.3} s; idle stops: node3 {} s, final {} / {} s",
        result(&run, "node3", "peer_stop_seconds"),
        result(&run, "node2", "final_stop_seconds"),
        result(&run, "node3", "final_stop_seconds"),
    );
}
