//! One exporter through 500 successful and 500 failed bursts, a port down and up
//! (lab/scenarios/leaks.sh): every failure is a real RDMA failure on a real session (node1's
//! RoCE packets are dropped, its TCP passes), the port going down gives `port_down` quickly, and
//! afterwards the exporter's RDMA resources, file descriptors and threads are back at their
//! baseline, its RSS near it, and the responder's resources too. The long run is a script's
//! (`scripts/lab-leaks`); a short one (20 and 20, lab/scenarios/faults-exporter.sh) runs with
//! every test run.

use std::collections::BTreeMap;

use crate::support;

const BIN: &str = "target/release/rdma-probe-exporter";

/// `key=value` pairs of one result line.
fn fields(line: &str) -> BTreeMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// About 25 minutes with its boot: a script's run (`scripts/lab-leaks`), not in `scripts/test`.
#[test]
#[ignore = "long: scripts/lab-leaks runs it"]
fn five_hundred_failed_and_successful_bursts_leak_nothing() {
    let run = support::run("leaks", 2, "leaks.sh", &[std::path::Path::new(BIN)], 2700);
    assert_faults_handled_without_leaks(&run, 500, 500);
}

/// The same scenario in short (20 and 20 bursts, about a minute): the faults part of it on every
/// test run.
#[test]
fn unreachable_peer_and_port_down_fail_fast_and_recover() {
    let run = support::run(
        "faults-exporter",
        2,
        "faults-exporter.sh",
        &[std::path::Path::new(BIN)],
        600,
    );
    assert_faults_handled_without_leaks(&run, 20, 20);
}

fn assert_faults_handled_without_leaks(run: &support::LabRun, successes: u64, failures: u64) {
    eprintln!("---- node1 ----\n{}", run.log("node1"));
    run.assert_success();
    let results = run.results("node1");
    eprintln!("results: {results:#?}");
    let baseline = fields(&results["baseline"]);
    let end = fields(&results["end"]);
    // Nothing grows. Threads are counted with nothing to probe, before the first peer and
    // after the last (the scenario's `idle_threads`): a busy exporter's blocking pool keeps a
    // thread for every job that ever overlapped another, so its count under load is history,
    // not a leak. A thread that never ends (stuck in a verbs call, say) is still counted. The
    // device's burst thread, started by its first probe and kept while it is configured, is
    // counted apart: one, not one a session.
    for resource in ["pd", "cq", "qp", "mr", "ctx", "fds", "threads"] {
        let (before, after) = (baseline.get(resource), end.get(resource));
        assert!(
            before.is_some() && after.is_some(),
            "no {resource} in the baseline or the end: {results:?}"
        );
        if resource == "threads" {
            assert!(after <= before, "threads: baseline vs end: {results:?}");
        } else {
            assert_eq!(before, after, "{resource}: baseline vs end: {results:?}");
        }
    }
    assert_eq!(end.get("burst_threads"), Some(&1), "{results:?}");
    let (rss_before, rss_after) = (baseline["rss_kib"], end["rss_kib"]);
    assert!(
        rss_after <= rss_before + rss_before / 4 + 2048,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    let totals = fields(&results["totals"]);
    // The warm-up, the successes, and 20 after each recovery.
    assert!(totals["success"] >= successes + 40, "{results:?}");
    assert!(totals["failure"] >= failures, "{results:?}");
    // The failures are the RDMA layer's, not setup's: node1's RoCE packets were dropped, its TCP
    // passed, so every session was set up and its burst found the peer silent.
    let reasons = fields(&results["failure_reasons"]);
    assert!(
        reasons["wc_retry_exceeded"] + reasons["timeout"] >= failures,
        "{results:?}"
    );
    // Each failure is known within the burst's timeout (2 s), not after a hang: with the
    // 150 ms interval and the session's rebuild, 3 s each at most.
    let failing: u64 = results["failures_seconds"].parse().unwrap();
    assert!(
        failing <= failures * 3,
        "{failures} failures took {failing} s: longer than their timeouts"
    );
    let port_down: u64 = results["port_down_seconds"].parse().unwrap();
    assert!(port_down <= 15, "port_down after {port_down} s");
    assert_eq!(results["exit"], "0", "SIGTERM ends the exporter cleanly");

    let responder = run.results("node2");
    eprintln!("responder: {responder:#?}");
    // The baseline is taken with the exporter's warm session open, the end when the exporter
    // is done: its last session may be open or already closed, never more.
    let (before, after) = (
        fields(&responder["responder_baseline"]),
        fields(&responder["responder_end"]),
    );
    assert!(!before.is_empty(), "{responder:?}");
    for (resource, count) in &after {
        assert!(
            before.get(resource).is_some_and(|b| count <= b),
            "the responder holds more {resource} than at the baseline: {responder:?}"
        );
    }
}
