//! The exporter against hostile clients on real Soft-RoCE (lab/scenarios/hostile.sh): node1
//! throws every attack of examples/hostile.rs at node2's control port, 1,000 connections at
//! once among them, while node2's exporter keeps probing node1 on its schedule. Checks that
//! node2 survives, counts each hostile connection exactly once under a refusal, keeps its
//! descriptors, threads and memory bounded, that its own probes keep succeeding, and that a
//! valid probe from node1 succeeds during the flood and right after it. First, node1 floods
//! node2's ping QP with 10,000 datagrams of 1,000 bytes, as a host on the fabric without the key
//! can (examples/ud_flood.rs): node2 counts those that arrived refused and never resets its ping
//! QP for them, and its pings to node1 go on being answered. Before the flood, node1 replays its
//! own pings to node2, captured on its NIC, 20 copies each: node2 answers each ping once and
//! refuses the copies.

use std::collections::BTreeMap;

use crate::support;

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

/// The attacks node1 runs, in the order of their reports: one after another, then the flood
/// with four rounds of stalled connections meanwhile (their reports interleave with its own).
const ATTACKS: [&str; 7] = [
    "random",
    "oversize",
    "truncated",
    "stall",
    "slow",
    "wrong-psk",
    "absurd",
];
const DURING_THE_FLOOD: [&str; 5] = ["flood", "stall", "stall", "stall", "stall"];

/// How much counter `key` rose from `before` to `after` (0 where it is missing or fell).
fn rise(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, key: &str) -> u64 {
    after
        .get(key)
        .unwrap_or(&0)
        .saturating_sub(*before.get(key).unwrap_or(&0))
}

/// Whether node2 took the flood of oversized datagrams as it should: most of them (the NIC may
/// drop some while every receive is taken) counted refused, its ping QP never reset for them
/// (the log line a reset writes, counted), and its pings to node1 sent and answered on, with at
/// most one of them lost over the attacks.
fn datagrams_refused_and_pinging_on(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    resets_logged: &str,
) -> bool {
    let rise = |k: &str| rise(before, after, k);
    rise("refused") >= 5_000 && resets_logged == "0" && rise("sent") >= 5 && rise("lost") <= 1
}

/// Whether node2 took node1's replayed pings as it should (its counters read once settled,
/// nothing else sent to its ping QP meanwhile): most of the probe's pings were captured (40 of
/// its 50) and each sent again 20 times; node2 answered at most one per ping the probe sent and
/// at least nine in ten of them, and refused at least nine in ten of the copies (the NIC may
/// drop some while every receive is taken) and not many more than them.
fn replays_refused_and_each_ping_answered_once(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    pings_sent: u64,
    (captured, copies_sent): (u64, u64),
) -> bool {
    let rise = |k: &str| rise(before, after, k);
    captured >= 40
        && copies_sent == captured * 20
        && rise("answered") <= pings_sent
        && rise("answered") * 10 >= pings_sent * 9
        && rise("refused") * 10 >= copies_sent * 9
        && rise("refused") <= copies_sent + 5
}

/// The JSON report node1's tool wrote to `FILE.json`, once its exit status (`NAME_exit`) says
/// it ran to the end; else the test fails with what it wrote to `FILE.err`.
fn tool_report(run: &support::LabRun, name: &str, file: &str) -> serde_json::Value {
    let err = || run.file("node1", &format!("{file}.err"));
    assert_eq!(
        run.results("node1")[&format!("{name}_exit")],
        "0",
        "{name}: {}",
        err()
    );
    serde_json::from_str(&run.file("node1", &format!("{file}.json")))
        .unwrap_or_else(|e| panic!("{name}'s report: {e}\n{}", err()))
}

/// Checks that every attack ran to its end and reported: each exit status, and the attacks of
/// the reports exactly (an attack that died without a report would otherwise drop out of both
/// sides of the count of hostile connections).
fn assert_every_attack_ran(run: &support::LabRun, reports: &[serde_json::Value]) {
    let mut exits: Vec<(&str, &str)> = ATTACKS.iter().map(|a| (*a, "0")).collect();
    exits.extend([
        ("flood", "0"),
        ("stalls", "0"),
        ("http-flood", "0"),
        ("responder", "0"),
    ]);
    run.assert_exits("node1", "exits", &exits);
    run.assert_exits("node1", "stall-exits", &[("stall", "0"); 4]);
    let attacks: Vec<&str> = reports
        .iter()
        .map(|r| r["attack"].as_str().unwrap_or("(no attack name)"))
        .collect();
    assert!(
        attacks.len() == ATTACKS.len() + DURING_THE_FLOOD.len(),
        "{} reports, not {}: {attacks:?}",
        attacks.len(),
        ATTACKS.len() + DURING_THE_FLOOD.len()
    );
    let (first, rest) = attacks.split_at(ATTACKS.len());
    assert_eq!(first, ATTACKS, "{attacks:?}");
    let mut rest = rest.to_vec();
    rest.sort_unstable();
    let mut during = DURING_THE_FLOOD.to_vec();
    during.sort_unstable();
    assert_eq!(rest, during, "{attacks:?}");
}

#[test]
fn the_exporter_survives_hostile_clients_and_keeps_probing() {
    let run = support::run_shared(&support::PAIR, "hostile.sh");
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
    assert_every_attack_ran(&run, &reports);
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
            // Stalled connections time out, or give way to newer ones during the flood: either
            // is a refusal, which the count below checks.
            "stall" => {}
            other => panic!("an attack the scenario does not run: {other}: {report}"),
        }
    }

    eprintln!(
        "admin port flood: {}",
        run.file("node1", "http-flood.jsonl")
    );

    // The datagrams of a host without the key: refused, the ping QP never reset.
    let flood = tool_report(&run, "ud_flood", "ud-flood");
    assert_eq!(flood["sent"], 10_000, "{flood}");
    assert_eq!(flood["failed"], 0, "{flood}");
    let (pings_before, pings_after) = (
        fields(&target["pings_before"]),
        fields(&target["pings_after"]),
    );
    eprintln!("node2's pings: before {pings_before:?}, after {pings_after:?}; ud_flood {flood}");
    assert!(
        datagrams_refused_and_pinging_on(&pings_before, &pings_after, &target["ping_qp_resets"]),
        "before {pings_before:?}, after {pings_after:?}, ping QP resets logged: {}",
        target["ping_qp_resets"]
    );

    // node1's pings replayed: each answered once, the copies refused.
    let probe = tool_report(&run, "replay_probe", "replay-probe");
    let replay = tool_report(&run, "replay", "replay");
    let (replay_before, replay_after) = (
        fields(&attacker["replay_before"]),
        fields(&attacker["replay_after"]),
    );
    eprintln!(
        "replayed pings: probe {probe}; replayer {replay}; node2 before {replay_before:?}, after {replay_after:?}"
    );
    let count = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    assert!(
        replays_refused_and_each_ping_answered_once(
            &replay_before,
            &replay_after,
            count(&probe, "sent"),
            (count(&replay, "captured"), count(&replay, "sent")),
        ),
        "probe {probe}; replayer {replay}; node2 before {replay_before:?}, after {replay_after:?}"
    );

    // Every hostile connection counted once, under a refusal; no hostile session accepted.
    let before = fields(&target["sessions_before"]);
    let after = fields(&target["sessions_after"]);
    let rise = |r: &str| after.get(r).unwrap_or(&0) - before.get(r).unwrap_or(&0);
    let refused: u64 = REFUSALS.iter().map(|r| rise(r)).sum();
    assert_eq!(refused, connections, "before {before:?}, after {after:?}");
    assert_eq!(
        rise("accepted"),
        3,
        "node1's three valid probes (the replayed pings', during the flood, after it): {after:?}"
    );
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

/// The check above on synthetic records: the whole set passes; an attack that died (its exit
/// status, no report) fails it, and so does a missing flood or stall report.
#[test]
fn an_attack_that_dies_without_a_report_fails_the_check() {
    let report = |attack: &str| serde_json::json!({ "attack": attack });
    let all: Vec<serde_json::Value> = ATTACKS
        .iter()
        .chain(&DURING_THE_FLOOD)
        .map(|a| report(a))
        .collect();
    let exits = "random exit=0\noversize exit=0\ntruncated exit=0\nstall exit=0\nslow exit=0\n\
                 wrong-psk exit=0\nabsurd exit=0\nflood exit=0\nstalls exit=0\n\
                 http-flood exit=0\nresponder exit=0\n";
    let stalls = "stall exit=0\n".repeat(4);
    let run = support::synthetic_run(
        "hostile",
        &[("node1", "exits", exits), ("node1", "stall-exits", &stalls)],
    );
    assert_every_attack_ran(&run, &all);
    // truncated died (a panic: exit 101) and wrote no report.
    let without: Vec<serde_json::Value> = all
        .iter()
        .filter(|r| r["attack"] != "truncated")
        .cloned()
        .collect();
    assert!(support::panics(|| assert_every_attack_ran(&run, &without)));
    let died = support::synthetic_run(
        "hostile-died",
        &[
            (
                "node1",
                "exits",
                &exits.replace("truncated exit=0", "truncated exit=101"),
            ),
            ("node1", "stall-exits", &stalls),
        ],
    );
    assert!(support::panics(|| assert_every_attack_ran(&died, &all)));
    // One stall round of the flood lost its report.
    let mut one_stall_less = all.clone();
    one_stall_less.pop();
    assert!(support::panics(|| assert_every_attack_ran(
        &run,
        &one_stall_less
    )));
    let _ = std::fs::remove_dir_all(&run.dir);
    let _ = std::fs::remove_dir_all(&died.dir);
}

/// The datagram flood's check on synthetic counters: passes as node2 should take it; fails on a
/// ping QP reset for the datagrams, on datagrams not counted, and on pings stopped or lost.
#[test]
fn the_datagram_flood_check_fails_on_a_reset_or_lost_pings() {
    let counts = |refused: u64, sent: u64, lost: u64| -> BTreeMap<String, u64> {
        [("refused", refused), ("sent", sent), ("lost", lost)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    };
    let before = counts(3, 40, 0);
    assert!(datagrams_refused_and_pinging_on(
        &before,
        &counts(10_003, 60, 1),
        "0"
    ));
    // The QP reset for what a stranger sent (the engine before receive slots took any
    // datagram): the log line counts.
    assert!(!datagrams_refused_and_pinging_on(
        &before,
        &counts(10_003, 60, 0),
        "1"
    ));
    // The datagrams not counted, the pings stopped, or lost.
    assert!(!datagrams_refused_and_pinging_on(
        &before,
        &counts(103, 60, 0),
        "0"
    ));
    assert!(!datagrams_refused_and_pinging_on(
        &before,
        &counts(10_003, 42, 0),
        "0"
    ));
    assert!(!datagrams_refused_and_pinging_on(
        &before,
        &counts(10_003, 60, 3),
        "0"
    ));
}

/// The replay check on synthetic counters: passes as node2 should take it; fails when a copy
/// was answered, when the copies were not refused (never arrived), when the probe's own pings
/// went unanswered, and when too few pings were captured to show anything.
#[test]
fn the_replay_check_fails_on_an_answered_copy_or_nothing_replayed() {
    let counts = |refused: u64, answered: u64| -> BTreeMap<String, u64> {
        [("refused", refused), ("answered", answered)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    };
    let before = counts(10_000, 7);
    let check = |after: BTreeMap<String, u64>, captured: u64| {
        replays_refused_and_each_ping_answered_once(&before, &after, 50, (captured, captured * 20))
    };
    assert!(check(counts(10_980, 57), 49));
    // Copies answered (the engine before its replay window answered every one).
    assert!(!check(counts(10_000, 57 + 980), 49));
    assert!(!check(counts(10_979, 58), 49));
    // The copies never arrived, or the probe's own pings were not answered.
    assert!(!check(counts(10_100, 57), 49));
    assert!(!check(counts(10_980, 40), 49));
    // Too few pings captured.
    assert!(!check(counts(10_400, 57), 20));
    // Refused from elsewhere too (a flood's tail): the copies' share is not shown.
    assert!(!check(counts(13_000, 57), 49));
}
