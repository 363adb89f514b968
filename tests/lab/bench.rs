//! The lab benchmark (lab/scenarios/bench.sh): prints figures measured side by side in one run —
//! our probe vs stock ib_write_bw on the same link, achieved vs limit, warm-session start, CPU
//! at the same software rate limit. It asserts only that every figure was produced: speed
//! goals live in the printed ratios, not in timed assertions (the lab is noisy).

use crate::support;

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
    // Every probe of ours succeeded (a failed one is retried once; the failed tries are shown).
    eprintln!(
        "failed tries of our probe, each rerun once: {}\n{}",
        results["ours_failed_tries"],
        run.file("node1", "ours-failed-tries")
    );
    assert_eq!(results["ours_failures"], "0", "{results:?}");
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
