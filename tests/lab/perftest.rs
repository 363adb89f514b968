//! `probe --perftest` against Debian's stock ib_write_bw server (lab/scenarios/perftest-interop.sh):
//! the server accepts our burst and prints our figures as its report, exits 0, and the
//! benchmark prints ours (busy-polling as perftest does, and CPU-frugal as the exporter runs)
//! next to perftest's own client on the same link (ratio ours/stock;
//! speed goals live in the printed ratio, not in timed assertions). An incompatible server gets
//! a clear error within seconds, never a hang. Then the exporter probes the same server as a
//! `mode: perftest` peer on its schedule, node2 restarting a stock server after each probe.

use crate::support;

#[test]
fn perftest_server_accepts_our_burst_and_reports_it() {
    let run = support::run_shared(&support::PAIR, "perftest-interop.sh");
    eprintln!("---- perftest interop ----\n{}", run.log("node1"));
    run.assert_success();
    let results = run.results("node1");
    assert_eq!(results["failures"], "0", "{results:?}");
    // One round: perftest-interop.sh's default PERFTEST_ROUNDS.
    let rounds = results.keys().filter(|k| k.starts_with("round_")).count();
    assert_eq!(rounds, 1, "{results:?}");
    for r in 1..=rounds {
        let line = &results[&format!("round_{r}")];
        let field = |name: &str| -> f64 {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line}"))
        };
        assert_eq!(field("ours_rc"), 0.0, "{line}");
        assert_eq!(field("server_rc"), 0.0, "the server exits 0: {line}");
        assert_eq!(field("frugal_rc"), 0.0, "{line}");
        assert_eq!(field("frugal_server_rc"), 0.0, "{line}");
        assert!(field("frugal") > 0.0, "{line}");
        assert_eq!(field("server_iters"), 500.0, "{line}");
        let (ours, reported) = (field("ours"), field("server_reported"));
        assert!(ours > 0.0 && field("stock") > 0.0, "{line}");
        // The server prints what we sent, rounded to its format (`%.2f`, `%.6f` below 0.1 Gb/s).
        assert!(
            (reported - ours).abs() <= 0.005 + 1e-6,
            "the server's report {reported} is not ours {ours}: {line}"
        );
        let report = run.file("node1", &format!("server-of-ours-{r}.txt"));
        let row = support::parse_perftest(&report).expect("the server printed a report");
        assert_eq!((row.bytes, row.iterations), (65536, 500), "{report}");
    }
    let incompatible = &results["incompatible"];
    assert!(!incompatible.starts_with("rc=0 "), "{incompatible}");
    let seconds: u64 = incompatible
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("seconds="))
        .and_then(|v| v.parse().ok())
        .expect("seconds");
    assert!(seconds < 60, "the incompatible server took {seconds} s");
    let text = run.file("node1", "incompatible.txt");
    assert!(
        text.contains("wc_remote_access") && text.contains("-s at least 65536"),
        "{text}"
    );
    exporter_probes_a_perftest_peer(&run, &results);
}

/// The exporter's `mode: perftest` peer: every probe is a stock server's whole session (the
/// server exits 0 after each), two in three paced and one unpaced, all counted as successes.
fn exporter_probes_a_perftest_peer(
    run: &support::LabRun,
    results: &std::collections::BTreeMap<String, String>,
) {
    assert_eq!(results["exporter_exit"], "0", "SIGTERM ends it cleanly");
    let successes: u64 = results["exporter_success"].parse().expect("success count");
    assert!(successes >= 6, "{results:?}");
    let failures = results["exporter_failure"].as_str();
    assert!(
        failures.is_empty() || failures == "0",
        "no probe of the server loop failed: {results:?}\n{}",
        run.file("node1", "exporter.log")
    );
    let bytes: f64 = results["exporter_bytes"].parse().expect("bytes");
    assert!(bytes >= 6.0 * 65536.0, "{results:?}");
    // Every server that served a whole probe exited 0. Only the last two may not: one whose
    // probe SIGTERM ended mid-way (no report came: perftest exits 1), and the one left waiting
    // when node1 was done, which the scenario stops.
    let loop_rc = run.file("node2", "loop-rc.txt");
    let statuses: Vec<&str> = loop_rc
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    let whole = statuses.len().saturating_sub(2);
    assert!(
        statuses[..whole].iter().all(|rc| *rc == "0"),
        "a stock server exited non-zero: {loop_rc}"
    );
    let served = statuses.iter().filter(|rc| **rc == "0").count();
    assert!(served as u64 >= successes, "{loop_rc}");
    eprintln!(
        "exporter, mode: perftest: {successes} successful probes, {served} of {} stock servers \
         exited 0 ({loop_rc:?})",
        statuses.len()
    );
}
