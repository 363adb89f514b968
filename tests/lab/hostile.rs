//! The exporter against hostile clients on real Soft-RoCE (lab/scenarios/hostile.sh): node1
//! throws every attack of examples/hostile.rs at node2's control port, 1,000 connections at
//! once among them, while node2's exporter keeps probing node1 on its schedule. Checks that
//! node2 survives, counts each hostile connection exactly once under a refusal, keeps its
//! descriptors, threads and memory bounded, that its own probes keep succeeding, and that a
//! valid probe from node1 succeeds during the flood and right after it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support;

const BIN: &str = "target/release/rdma-probe-exporter";
const HOSTILE: &str = "target/release/examples/hostile";

/// `key=value` pairs of one result line.
fn fields(line: &str) -> BTreeMap<String, u64> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// Results that refuse a connection in `rdma_probe_responder_sessions_total`.
const REFUSALS: [&str; 7] = [
    "handshake_limit",
    "connection_limit",
    "limit",
    "auth",
    "protocol",
    "timeout",
    "closed",
];

#[test]
fn the_exporter_survives_hostile_clients_and_keeps_probing() {
    let bins = [Path::new(BIN), Path::new(HOSTILE)];
    let run = support::run("hostile", 2, "hostile.sh", &bins, 600);
    eprintln!("---- node1 ----\n{}", run.log("node1"));
    eprintln!("---- node2 ----\n{}", run.log("node2"));
    run.assert_success();
    let attacker = run.results("node1");
    let target = run.results("node2");
    eprintln!("node1: {attacker:#?}\nnode2: {target:#?}");

    // What each attack got back.
    let reports: Vec<serde_json::Value> = run
        .file("node1", "hostile.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut connections = 0;
    for report in &reports {
        eprintln!("{report}");
        let outcomes = report["outcomes"].as_object().unwrap();
        for bad in ["open", "connect_failed", "write_failed", "task_failed"] {
            assert!(!outcomes.contains_key(bad), "{bad}: {report}");
        }
        connections += report["connections"].as_u64().unwrap();
        let only = |outcome: &str| {
            assert_eq!(outcomes.len(), 1, "{report}");
            assert!(outcomes.contains_key(outcome), "{report}");
        };
        match report["attack"].as_str().unwrap() {
            "random" | "oversize" => only("error:protocol"),
            "truncated" => only("closed"),
            "slow" => only("error:timeout"),
            "wrong-psk" => only("error:auth"),
            "absurd" => {
                assert_eq!(outcomes["error:peer_error"], 2, "{report}");
                assert_eq!(outcomes["error:protocol"], 4, "{report}");
            }
            "flood" => assert_eq!(report["connections"], 1000, "{report}"),
            _ => {}
        }
    }

    eprintln!(
        "admin port flood: {}",
        run.file("node1", "http-flood.jsonl")
    );

    // Every hostile connection counted once, under a refusal; no hostile session accepted.
    let before = fields(&target["sessions_before"]);
    let after = fields(&target["sessions_after"]);
    let rise = |r: &str| after.get(r).unwrap_or(&0) - before.get(r).unwrap_or(&0);
    let refused: u64 = REFUSALS.iter().map(|r| rise(r)).sum();
    assert_eq!(refused, connections, "before {before:?}, after {after:?}");
    assert_eq!(rise("accepted"), 2, "node1's two valid probes: {after:?}");
    assert!(rise("auth") >= 24 && rise("protocol") >= 52 && rise("limit") >= 2);

    // A valid probe during the flood and right after it.
    assert_eq!(attacker["probe_during_exit"], "0", "{attacker:?}");
    assert_eq!(attacker["probe_after_exit"], "0", "{attacker:?}");
    // node2 alive, its own schedule probing on during and after the attack.
    assert_eq!(target.get("alive").map(String::as_str), Some("yes"));
    assert_eq!(target["exit"], "0", "SIGTERM ends it cleanly");
    let own = fields(&target["own_schedule"]);
    assert!(own["success_during"] >= 2, "{own:?}");
    assert!(fields(&target["own_schedule_after"])["success_after"] >= 1);

    // Bounded: descriptors by the connection cap, memory and threads near their baseline.
    let (baseline, peak, end) = (
        fields(&target["baseline"]),
        fields(&target["peak"]),
        fields(&target["after"]),
    );
    eprintln!("node2 process: baseline {baseline:?}, peak {peak:?}, after {end:?}");
    assert!(
        peak["fds"] <= baseline["fds"] + 8 + 16 + 64 + 16,
        "{peak:?}"
    );
    assert!(end["fds"] <= baseline["fds"] + 4, "{end:?}");
    assert!(
        // With the region of node1's valid probe's session: up to `max_session_memory`
        // (64 MiB), pinned while the session lasts.
        peak["rss_kib"] <= baseline["rss_kib"] + (64 + 16) * 1024,
        "{peak:?}"
    );
    assert!(end["rss_kib"] <= baseline["rss_kib"] + 32 * 1024, "{end:?}");
    assert!(end["threads"] <= baseline["threads"] + 8, "{end:?}");
}
