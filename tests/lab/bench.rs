//! The lab benchmark (lab/scenarios/bench.sh): prints figures measured side by side in one run —
//! our probe vs stock ib_write_bw on the same link, achieved vs limit, warm-session start, CPU
//! at the same software rate limit. It asserts that every figure was produced and that our probe
//! did not stall (one failed try in the run at most, rerun once): speed goals live in the
//! printed ratios, not in timed assertions (the lab is noisy).

use std::collections::BTreeMap;

use crate::support;

/// Failed tries of our probe the benchmark tolerates in one run (each rerun once).
const MAX_FAILED_TRIES: u64 = 1;

fn assert_within_failed_tries(results: &BTreeMap<String, String>, tries: &str) {
    eprintln!(
        "failed tries of our probe, each rerun once: {:?}\n{tries}",
        results.get("ours_failed_tries")
    );
    assert_eq!(
        results.get("ours_failures").map(String::as_str),
        Some("0"),
        "{results:?}"
    );
    let failed: u64 = results
        .get("ours_failed_tries")
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of failed tries: {results:?}"));
    assert!(
        failed <= MAX_FAILED_TRIES,
        "{failed} failed tries of our probe (at most {MAX_FAILED_TRIES}), each passed on its \
         rerun: a stall rate the benchmark does not accept\n{tries}"
    );
}

#[test]
fn failed_tries_beyond_one_fail_the_benchmark() {
    let results = |tries: &str, failures: &str| -> BTreeMap<String, String> {
        [("ours_failed_tries", tries), ("ours_failures", failures)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    assert_within_failed_tries(&results("0", "0"), "");
    assert_within_failed_tries(&results("1", "0"), "paced-10 try 1: stalled");
    // Half the probes stalled once and passed on their rerun: not a pass.
    assert!(support::panics(|| assert_within_failed_tries(
        &results("6", "0"),
        "..."
    )));
    assert!(support::panics(|| assert_within_failed_tries(
        &results("0", "1"),
        ""
    )));
    assert!(support::panics(|| assert_within_failed_tries(
        &BTreeMap::new(),
        ""
    )));
}

#[test]
fn benchmark_prints_side_by_side_figures() {
    let bin = std::path::Path::new("target/release/rdma-probe-exporter");
    let run = support::run("bench", 2, "bench.sh", &[bin], 900);
    run.assert_success();
    let results = run.results("node1");
    eprintln!("---- benchmark ----\n{}", run.log("node1"));
    for key in [
        "bw_round_1",
        "pacing_10",
        "pacing_50",
        "warm",
        "cpu_25",
        "cpu_50",
    ] {
        let value = results
            .get(key)
            .unwrap_or_else(|| panic!("no {key}: {results:?}"));
        assert!(!value.is_empty() && !value.contains("=0 "), "{key}={value}");
    }
    assert_eq!(results["warm"].split_whitespace().count(), 5, "{results:?}");
    // Every probe of ours succeeded (a failed one is retried once; the failed tries are shown),
    // and at most one try of the run's 10 probes failed: the rerun is for Soft-RoCE's rare
    // stall under emulation, not for a probe that stalls often.
    assert_within_failed_tries(&results, &run.file("node1", "ours-failed-tries"));
    run.assert_result("node2", "responder_exit", "0");
    // The doorbell shim saw every post of both tools (one uverbs write per message on
    // Soft-RoCE), so the CPU figures without the NIC emulation rest on a real measurement.
    for key in ["cpu_25", "cpu_50"] {
        let line = &results[key];
        let counts: Vec<&str> = line
            .split(" doorbells")
            .filter_map(|part| part.rsplit(' ').next())
            .collect();
        assert_eq!(counts[..2], ["500", "500"], "{key}={line}");
    }
}
