//! `simulate`'s reports, byte for byte: 10, 100 and 1,000 nodes for 6 hours, every other
//! setting the default, against the reports in `tests/fixtures/simulate/` (as the simulation
//! printed them before it was rewritten on plain collections; the line with the wall time it
//! took left out). The 1,000-node run takes minutes in a debug build, so it is ignored by
//! default: `cargo test --release --test simulate -- --include-ignored` runs all three.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rdma-probe-exporter");

/// The report of `simulate --nodes <nodes> --duration 6h`, without its wall time.
fn report(nodes: u32) -> String {
    let out = Command::new(BIN)
        .args([
            "simulate",
            "--nodes",
            &nodes.to_string(),
            "--duration",
            "6h",
        ])
        .output()
        .expect("runs the exporter");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("a UTF-8 report");
    stdout
        .lines()
        .filter(|line| !line.starts_with("simulated in "))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn fixture(nodes: u32) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/simulate")
        .join(format!("nodes-{nodes}-6h.txt"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn ten_nodes_as_before() {
    assert_eq!(report(10), fixture(10));
}

#[test]
fn a_hundred_nodes_as_before() {
    assert_eq!(report(100), fixture(100));
}

#[test]
#[ignore = "minutes in a debug build: run with --release"]
fn a_thousand_nodes_as_before() {
    assert_eq!(report(1000), fixture(1000));
}
