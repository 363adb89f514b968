//! `simulate`'s reports, byte for byte: 10, 100 and 1,000 nodes for 6 hours, every other
//! setting the default, against the reports in `tests/fixtures/simulate/` (the line with the
//! wall time it took left out). The 1,000-node run takes minutes in a debug build, so it is
//! ignored by default: `cargo test --release --test simulate -- --include-ignored` runs all
//! three.
//!
//! A pin only says the figures did not change; the pinned reports are also held to the targets
//! docs/scale.md states ("Against the targets"), so a change that moves a figure past its target
//! cannot be pinned: every same-ToR path at least every 10 minutes, every ordered pair of ToRs
//! per rail at least every 30 minutes, at most 5,000 series on a node, a device's duty cycle at
//! most 5% over the run (and at most the 5.5% the budget's credit allows over 10 minutes). And
//! each report's gaps must be within what it prints as their bounds: the plan's, plus the
//! longest wait it measured for a same-group probe.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

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

/// The pinned reports held to the targets.
const PINNED: [u32; 3] = [10, 100, 1000];

/// The text after `label` on the report's line that starts with it (leading spaces ignored).
fn field<'a>(report: &'a str, label: &str) -> Option<&'a str> {
    report
        .lines()
        .find_map(|line| line.trim_start().strip_prefix(label))
        .map(str::trim)
}

fn required<'a>(report: &'a str, label: &str) -> &'a str {
    field(report, label).unwrap_or_else(|| panic!("no line {label:?} in\n{report}"))
}

/// A duration as the report prints it ("9m 37s"), up to the first character that is not part
/// of one.
fn duration(text: &str) -> Duration {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == ' '))
        .unwrap_or(text.len());
    let words: Vec<&str> = text[..end].split_whitespace().collect();
    // "7m 2s + 10% jitter": the duration is the leading words that parse as one.
    (1..=words.len())
        .rev()
        .find_map(|n| humantime::parse_duration(&words[..n].join(" ")).ok())
        .unwrap_or_else(|| panic!("no duration at the start of {text:?}"))
}

/// The last of "min / median / max", as a number.
fn max_of(summary: &str) -> f64 {
    let max = summary.split('/').nth(2).expect("min / median / max");
    let number = max.split_whitespace().next().expect("a figure");
    number.trim_end_matches('%').parse().expect("a number")
}

/// The documented targets (docs/scale.md, "Against the targets"), checked on one report; the
/// reasons it misses them.
fn missed_targets(report: &str) -> Vec<String> {
    let mut missed = Vec::new();
    let mut check = |met: bool, what: String| {
        if !met {
            missed.push(what);
        }
    };
    let minutes = |m: u64| Duration::from_secs(60 * m);
    let same_tor = duration(required(report, "longest gap, same-group path"));
    check(
        same_tor <= minutes(10),
        format!("same-ToR gap {same_tor:?} > 10 min"),
    );
    // With one ToR there is no pair of ToRs.
    if let Some(pair) = field(report, "longest gap, ToR pair per rail") {
        let pair = duration(pair);
        check(
            pair <= minutes(30),
            format!("ToR-pair gap {pair:?} > 30 min"),
        );
    }
    let series = max_of(required(report, "series on /metrics"));
    check(
        series <= 5000.0,
        format!("{series} series on a node > 5,000"),
    );
    let duty = max_of(required(report, "duty cycle, whole run"));
    check(duty <= 5.0, format!("duty cycle {duty}% over the run > 5%"));
    // The budget banks up to a minute of idle time (credit_window): over 10 minutes a device
    // may burst d × (600 s + 60 s) / 600 s = 5.5%.
    let peak = max_of(required(report, "duty cycle, 10 min"));
    check(
        peak <= 5.5,
        format!("duty cycle {peak}% over 10 min > 5.5%"),
    );
    missed
}

/// The same-group gap past the bound the report prints for it: the plan's, plus the longest
/// wait it measured for a same-group probe; one second of slack for the rounding of each
/// printed figure down to the second.
fn beyond_bound(report: &str) -> Option<String> {
    let plan = duration(required(report, "same-group path        every"));
    let wait = duration(required(report, "longest wait, same-group probe"));
    let gap = duration(required(report, "longest gap, same-group path"));
    (gap > plan + wait + Duration::from_secs(1))
        .then(|| format!("same-group gap {gap:?} > plan {plan:?} + longest wait {wait:?}"))
}

#[test]
fn the_pinned_reports_meet_the_documented_targets() {
    for nodes in PINNED {
        let report = fixture(nodes);
        let missed = missed_targets(&report);
        assert!(missed.is_empty(), "{nodes} nodes: {missed:?}\n{report}");
    }
}

#[test]
fn the_pinned_reports_same_group_gaps_are_within_their_printed_bound() {
    for nodes in PINNED {
        let report = fixture(nodes);
        assert_eq!(beyond_bound(&report), None, "{nodes} nodes:\n{report}");
    }
}

/// `report` with the figures after `label` on its line replaced by `figures`.
fn with_figures(report: &str, label: &str, figures: &str) -> String {
    let mut found = false;
    let text = report
        .lines()
        .map(|line| match line.find(label) {
            Some(at) => {
                found = true;
                format!("{} {figures}\n", &line[..at + label.len()])
            }
            None => format!("{line}\n"),
        })
        .collect();
    assert!(found, "no line {label:?}");
    text
}

/// The checks above read what they check: a report past each target, or a gap past its
/// printed bound, is caught.
#[test]
fn a_report_past_a_target_or_its_bound_is_caught() {
    let report = fixture(1000);
    assert!(missed_targets(&report).is_empty() && beyond_bound(&report).is_none());
    let worse = |label, figures| missed_targets(&with_figures(&report, label, figures));
    assert_eq!(worse("longest gap, same-group path", "10m 1s").len(), 1);
    assert_eq!(
        worse("longest gap, ToR pair per rail", "30m 1s (median: 5m)").len(),
        1
    );
    assert_eq!(worse("series on /metrics", "4877 / 4934 / 5001").len(), 1);
    assert_eq!(
        worse("duty cycle, whole run", "4.51% / 4.53% / 5.01%").len(),
        1
    );
    assert_eq!(
        worse("duty cycle, 10 min", "4.83% / 5.08% / 5.51%").len(),
        1
    );
    let plan = duration(required(&report, "same-group path        every"));
    let wait = duration(required(&report, "longest wait, same-group probe"));
    let past = humantime::format_duration(plan + wait + Duration::from_secs(2)).to_string();
    let beyond = with_figures(&report, "longest gap, same-group path", &past);
    assert!(beyond_bound(&beyond).is_some(), "{past} passed");
}
