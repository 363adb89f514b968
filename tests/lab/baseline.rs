//! The lab itself: nodes come up with Soft-RoCE, stock `ib_write_bw` runs between them, and the
//! fault injection and node-stopping the later tests rely on do what they say.

use crate::support::{self, parse_perftest};

#[test]
fn two_nodes_run_stock_ib_write_bw() {
    let run = support::run_shared(&support::PAIR, "perftest-pair.sh");
    run.assert_success();
    let client = parse_perftest(&run.log("node1"))
        .unwrap_or_else(|| panic!("no perftest table in node1's log:\n{}", run.log("node1")));
    assert_eq!(client.bytes, 65536);
    assert_eq!(client.iterations, 500);
    assert!(client.bw_average > 0.0, "zero bandwidth: {client:?}");
    eprintln!(
        "ib_write_bw node1->node2: {:.4} Gb/s average, {:.4} Gb/s peak, {:.6} Mpps, boot {:.1} s / {:.1} s",
        client.bw_average,
        client.bw_peak,
        client.msg_rate_mpps,
        run.boot_seconds("node1"),
        run.boot_seconds("node2")
    );
}

#[test]
fn three_nodes_reach_each_other_with_ib_write_bw() {
    let run = support::run_shared(&support::MESH, "perftest-mesh.sh");
    run.assert_success();
    for node in ["node1", "node2", "node3"] {
        let results = run.results(node);
        assert!(
            results["gid1"].starts_with("0000:0000:0000:0000:0000:ffff:"),
            "{node}: GID 1 not IPv4-mapped: {results:?}"
        );
        assert_eq!(results["gid1_type"], "RoCE v2", "{node}");
    }
    for (round, client, server) in [
        (1, "node1", "node2"),
        (2, "node2", "node3"),
        (3, "node3", "node1"),
    ] {
        let text = run.file(client, &format!("perftest-{round}-client.txt"));
        let row = parse_perftest(&text)
            .unwrap_or_else(|| panic!("round {round}: no perftest table from {client}:\n{text}"));
        assert_eq!(row.iterations, 300, "round {round}");
        assert!(
            row.bw_average > 0.0,
            "round {round} {client}->{server}: {row:?}"
        );
        eprintln!("ib_write_bw {client}->{server}: {:.4} Gb/s", row.bw_average);
    }
}

#[test]
fn fault_injection_and_stopping_a_node_work() {
    let run = support::run_shared(&support::PAIR, "faults.sh");
    run.assert_success();
    let r = run.results("node1");
    let expect = [
        ("baseline", "yes"),
        ("netem_loss_100", "no"),
        ("cleared", "yes"),
        ("tbf", "installed"),
        ("link_down", "no"),
        ("link_up", "yes"),
        ("after_stop", "no"),
    ];
    for (key, want) in expect {
        assert_eq!(r.get(key).map(String::as_str), Some(want), "{key}: {r:?}");
    }
    assert!(run.output.contains("node2  stopped"), "{}", run.output);
}
