//! The shipped alert rules and dashboards on a real Prometheus scraping the three lab exporters
//! (lab/scenarios/prometheus.sh): a clean run fires nothing, a rate cap on one node fires
//! RdmaProbeLinkDegraded for exactly that node's paths, a node powered off fires
//! RdmaProbeNodeIsolated and no per-pair alert, and every dashboard query returns data.
//!
//! The rules are generated for the probe interval of config/lab.yaml (the one parameter that
//! scales their windows, deploy/README.md). The clean phase lasts
//! `LAB_PROMETHEUS_CLEAN_SECONDS` (by default the longest `for:` of the rules plus
//! `HOLD_INTERVALS`, never less than that `for:`: an alert that takes that long to fire could not
//! show in a shorter one; `scripts/lab-prometheus` runs it for 10 minutes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{self, repo_root, LabRun};

const BIN: &str = "target/release/rdma-probe-exporter";
const PROMETHEUS: &str = ".cache/tools/prometheus";
const JOB: &str = "rdma-probe-exporter";
/// config/lab.yaml paces every path at 20 Mb/s; the cap leaves node2 40% of that.
const CAP: &str = "8mbit";
/// How long a phase goes on after its alert fired, in probe intervals: time for a wrong alert
/// (one whose `for:` is as long as the right one's) to show.
const HOLD_INTERVALS: u32 = 3;

/// One alert on one path (or node): (alertname, instance, peer).
type AlertKey = (String, String, String);

fn lab_interval_seconds() -> u32 {
    let config = std::fs::read_to_string(repo_root().join("config/lab.yaml")).unwrap();
    let value = config
        .lines()
        .find_map(|l| l.strip_prefix("  interval: "))
        .expect("config/lab.yaml has defaults.interval");
    value
        .trim()
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("config/lab.yaml: interval {value:?} is not whole seconds"))
}

/// The longest `for:` of a rules file, in seconds.
fn longest_for_seconds(rules: &str) -> u32 {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("for: "))
        .map(|d| {
            let (n, unit) = d.split_at(d.find(|c: char| !c.is_ascii_digit()).unwrap_or(d.len()));
            let n: u32 = n.parse().unwrap_or_else(|e| panic!("for: {d}: {e}"));
            match unit {
                "s" => n,
                "m" => n * 60,
                "h" => n * 3600,
                _ => panic!("for: {d}: not whole seconds, minutes or hours"),
            }
        })
        .max()
        .expect("the rules have a for:")
}

fn run_tool(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The files every node gets: config, generated rules, dashboard queries, the Prometheus server
/// and the scenario's parameters (written by [`write_parameters`]).
fn prepare(dir: &Path, interval_s: u32) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let at = |name: &str| dir.join(name);
    let rules = at("rules.yaml");
    run_tool(
        "deploy/prometheus/generate",
        &[
            "--interval",
            &format!("{interval_s}s"),
            "-o",
            rules.to_str().unwrap(),
        ],
    );
    // The dashboards as opened (every variable "All"), and one path: node1 to the node that is
    // powered off (it has errors as well as successes).
    let dashboards: Vec<String> = std::fs::read_dir(repo_root().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".json"))
        .collect();
    let mut queries = Vec::new();
    for (view, vars) in [
        ("all", vec![]),
        (
            "node1 rxe0 -> node3",
            vec!["node=node1", "device=rxe0", "peer=node3"],
        ),
    ] {
        let out = at(&format!("queries-{}.json", queries.len()));
        let mut args = vec!["deploy/lib/checks.py", "queries", out.to_str().unwrap()];
        let job = format!("job={JOB}");
        let rate = format!("__rate_interval={}s", 4 * interval_s);
        let step = format!("__interval={interval_s}s");
        args.extend([job.as_str(), rate.as_str(), step.as_str(), "__range=15m"]);
        args.extend(vars);
        args.extend(dashboards.iter().map(String::as_str));
        run_tool("python3", &args);
        let list: Vec<Value> =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        queries.extend(list.into_iter().map(|mut q| {
            let where_ = format!("[{view}] {}", q["where"].as_str().unwrap());
            q["where"] = where_.into();
            q
        }));
    }
    std::fs::write(
        at("dashboard-queries.json"),
        serde_json::to_string_pretty(&queries).unwrap(),
    )
    .unwrap();
    let root = repo_root();
    vec![
        root.join("config/lab.yaml"),
        root.join("lab/tools/prometheus_queries.py"),
        root.join(PROMETHEUS),
        rules,
        at("dashboard-queries.json"),
        at("prometheus-lab.env"),
    ]
}

/// The scenario's parameters, in `dir` next to [`prepare`]'s files.
fn write_parameters(dir: &Path, interval_s: u32, clean_s: u32) {
    std::fs::write(
        dir.join("prometheus-lab.env"),
        format!(
            "INTERVAL_SECONDS={interval_s}\nCLEAN_SECONDS={clean_s}\nCAP={CAP}\n\
             HOLD_INTERVALS={HOLD_INTERVALS}\n"
        ),
    )
    .unwrap();
}

/// A node1 phase time (its clock is Prometheus's), in seconds since the epoch.
fn phase(run: &LabRun, key: &str) -> f64 {
    let v = run
        .results("node1")
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("node1 recorded no {key}:\n{}", run.log("node1")));
    v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}"))
}

fn json(run: &LabRun, name: &str) -> Value {
    serde_json::from_str(&run.file("node1", name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Panics unless nothing fired between the end of the rate cap (`cap_resolved`; its last
/// samples may trail it by an interval) and node3's loss, and that window held
/// `HOLD_INTERVALS` intervals at least (back to back, it would show nothing).
fn assert_quiet_between_faults(
    alerts: &BTreeMap<AlertKey, Vec<f64>>,
    cap_resolved: f64,
    stop_start: f64,
    interval: f64,
) {
    let from = cap_resolved + interval;
    let held = stop_start - from;
    assert!(
        held >= f64::from(HOLD_INTERVALS) * interval,
        "only {held:.0} s between the faults: not {HOLD_INTERVALS} intervals of {interval} s"
    );
    let between = firing_within(alerts, from, stop_start);
    assert!(
        between.is_empty(),
        "alerts fired between the faults: {}",
        show(&between, cap_resolved, interval)
    );
    eprintln!("between the faults: {held:.0} s, no alert fired");
}

/// The dashboard queries that returned no data, and those of them that had no events to show:
/// a query of event counters (created at the first event: errors, deferrals, validation
/// failures) when no such event happened in its selection, which Prometheus confirms. Panics
/// on a query Prometheus answered with an error (which returns no data but is no evidence of
/// anything).
fn queries_without_data(queries: &[Value]) -> (Vec<&Value>, Vec<&Value>) {
    let failed: Vec<&Value> = queries.iter().filter(|q| !q["error"].is_null()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} dashboard queries failed:\n{}",
        failed.len(),
        queries.len(),
        describe(&failed)
    );
    let no_events = |q: &Value| {
        let events = q["events"].as_object().unwrap();
        !events.is_empty() && events.values().all(|n| n.as_u64() == Some(0))
    };
    queries
        .iter()
        .filter(|q| q["series"].as_u64().unwrap_or(0) == 0)
        .partition(|q| no_events(q))
}

fn describe(qs: &[&Value]) -> String {
    qs.iter()
        .map(|q| format!("{}: {} ({})", q["where"], q["expr"], q["error"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every firing alert of the run, with the times (Prometheus's) of its firing samples.
fn firing_alerts(run: &LabRun) -> BTreeMap<AlertKey, Vec<f64>> {
    let body = json(run, "alerts-firing.json");
    assert_eq!(body["status"], "success", "{body}");
    let mut alerts = BTreeMap::new();
    for series in body["data"]["result"].as_array().unwrap() {
        let label = |k: &str| series["metric"][k].as_str().unwrap_or("").to_owned();
        let key = (label("alertname"), label("instance"), label("peer"));
        let times = series["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v[0].as_f64().unwrap());
        alerts.entry(key).or_insert_with(Vec::new).extend(times);
    }
    alerts
}

/// The alerts with a firing sample in [from, to], and the first such sample's time.
fn firing_within(
    alerts: &BTreeMap<AlertKey, Vec<f64>>,
    from: f64,
    to: f64,
) -> BTreeMap<AlertKey, f64> {
    alerts
        .iter()
        .filter_map(|(k, times)| {
            let first = times
                .iter()
                .copied()
                .filter(|t| (from..=to).contains(t))
                .reduce(f64::min)?;
            Some((k.clone(), first))
        })
        .collect()
}

fn key(alert: &str, instance: &str, peer: &str) -> AlertKey {
    (alert.to_owned(), instance.to_owned(), peer.to_owned())
}

fn show(alerts: &BTreeMap<AlertKey, f64>, since: f64, interval: f64) -> String {
    alerts
        .iter()
        .map(|((name, instance, peer), t)| {
            format!(
                "{name}{{instance={instance:?},peer={peer:?}}} after {:.0} s ({:.1} intervals)",
                t - since,
                (t - since) / interval
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn shipped_rules_and_dashboards_on_a_real_prometheus_detect_the_injected_faults() {
    let interval_s = lab_interval_seconds();
    let dir = repo_root().join("target/lab-runs/prometheus-files");
    let files = prepare(&dir, interval_s);
    let longest_for =
        longest_for_seconds(&std::fs::read_to_string(dir.join("rules.yaml")).unwrap());
    let clean_s: u32 = std::env::var("LAB_PROMETHEUS_CLEAN_SECONDS")
        .ok()
        .map(|v| {
            v.parse()
                .expect("LAB_PROMETHEUS_CLEAN_SECONDS: whole seconds")
        })
        .unwrap_or(longest_for + HOLD_INTERVALS * interval_s);
    assert!(
        clean_s >= longest_for,
        "a clean phase of {clean_s} s is shorter than the longest for: of the rules \
         ({longest_for} s): an alert that slow could not fire in it"
    );
    write_parameters(&dir, interval_s, clean_s);
    let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let run = support::run_with_files(
        "prometheus",
        3,
        "prometheus.sh",
        &[BIN.as_ref()],
        &files,
        clean_s + 1200,
    );
    run.assert_success();
    let interval = f64::from(interval_s);
    let alerts = firing_alerts(&run);

    // Every rule evaluates without error on real scrapes.
    let rules = json(&run, "rules.json");
    let mut evaluated = 0;
    for group in rules["data"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(
                rule["health"], "ok",
                "rule {} of {}: {rule}",
                rule["name"], group["name"]
            );
            evaluated += 1;
        }
    }
    eprintln!("{evaluated} rules evaluated, all healthy");

    // 1. A clean run fires nothing.
    let (clean_start, clean_end) = (phase(&run, "clean_start"), phase(&run, "clean_end"));
    let clean = firing_within(&alerts, clean_start, clean_end);
    assert!(
        clean.is_empty(),
        "alerts fired in a clean run of {:.0} s: {}",
        clean_end - clean_start,
        show(&clean, clean_start, interval)
    );
    eprintln!(
        "clean: {:.0} s ({:.0} intervals), no alert fired",
        clean_end - clean_start,
        (clean_end - clean_start) / interval
    );

    // 2. The rate cap on node2: RdmaProbeLinkDegraded for node2's two paths, nothing else.
    let (cap_start, cap_resolved) = (phase(&run, "cap_start"), phase(&run, "cap_resolved"));
    let capped = firing_within(&alerts, cap_start, cap_resolved);
    let want: BTreeSet<AlertKey> = [
        key("RdmaProbeLinkDegraded", "node2", "node1"),
        key("RdmaProbeLinkDegraded", "node2", "node3"),
    ]
    .into();
    eprintln!(
        "rate cap {CAP} on node2: {} (resolved {:.0} s after the cap was lifted)",
        show(&capped, cap_start, interval),
        cap_resolved - phase(&run, "cap_end")
    );
    assert_eq!(
        capped.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "the alerts of the rate cap: {}",
        show(&capped, cap_start, interval)
    );

    // 3. node3 powered off: RdmaProbeNodeIsolated, and no per-pair alert about it.
    let (stop_start, stop_end) = (phase(&run, "stop_start"), phase(&run, "stop_end"));
    assert_quiet_between_faults(&alerts, cap_resolved, stop_start, interval);
    let stopped = firing_within(&alerts, stop_start, stop_end);
    eprintln!(
        "node3 powered off: {} (held {:.0} s)",
        show(&stopped, stop_start, interval),
        stop_end - stop_start
    );
    assert_eq!(
        stopped.keys().cloned().collect::<BTreeSet<_>>(),
        [key("RdmaProbeNodeIsolated", "", "node3")].into(),
        "the alerts of node3's loss: {}",
        show(&stopped, stop_start, interval)
    );

    // 4. Every dashboard query runs without error and returns data, but for a query of event
    // counters when no such event happened in its selection (queries_without_data).
    let queries = json(&run, "dashboard-results.json");
    let queries = queries.as_array().unwrap();
    let (quiet, empty) = queries_without_data(queries);
    assert!(
        empty.is_empty(),
        "{} of {} dashboard queries returned no data:\n{}",
        empty.len(),
        queries.len(),
        describe(&empty)
    );
    eprintln!(
        "{} dashboard queries (all variables \"All\", and one path): {} returned data, {} had no \
         events to show:\n{}",
        queries.len(),
        queries.len() - quiet.len(),
        quiet.len(),
        describe(&quiet)
    );
}

#[test]
fn the_clean_phase_is_sized_by_the_longest_for() {
    let rules = "      - alert: A\n        for: 30s\n      - alert: B\n        for: 5m\n";
    assert_eq!(longest_for_seconds(rules), 300);
    assert_eq!(
        longest_for_seconds("        for: 1h\n        for: 50s\n"),
        3600
    );
}

/// The check between the faults: a window held for the intervals passes; a firing sample in
/// it fails, and so does a window with nothing in it (the faults back to back).
#[test]
fn the_window_between_the_faults_is_held_and_quiet() {
    let interval = 10.0;
    let (cap_resolved, stop_start) = (1000.0, 1000.0 + f64::from(HOLD_INTERVALS + 1) * interval);
    let mut alerts = BTreeMap::new();
    // The cap's alert, last seen just before it resolved, and node3's, after the stop began.
    alerts.insert(
        key("RdmaProbeLinkDegraded", "node2", "node1"),
        vec![990.0, 1000.0],
    );
    alerts.insert(
        key("RdmaProbeNodeIsolated", "", "node3"),
        vec![stop_start + 60.0],
    );
    assert_quiet_between_faults(&alerts, cap_resolved, stop_start, interval);
    // Back to back: nothing could show.
    assert!(support::panics(|| assert_quiet_between_faults(
        &alerts,
        cap_resolved,
        cap_resolved,
        interval
    )));
    let mut fired = alerts.clone();
    fired.insert(key("RdmaProbeStale", "node1", "node3"), vec![1030.0]);
    assert!(support::panics(|| assert_quiet_between_faults(
        &fired,
        cap_resolved,
        stop_start,
        interval
    )));
}

/// A query Prometheus answered with an error fails the check, even where its event counters
/// say there was nothing to show.
#[test]
fn a_dashboard_query_that_failed_is_not_one_without_events() {
    let query = |series: u64, error: Value, events: Value| serde_json::json!({ "where": "w", "expr": "e", "series": series, "error": error, "events": events });
    let fine = vec![
        query(3, Value::Null, serde_json::json!({})),
        query(
            0,
            Value::Null,
            serde_json::json!({ "rdma_probe_errors_total{}": 0 }),
        ),
        query(0, Value::Null, serde_json::json!({})),
    ];
    let (quiet, empty) = queries_without_data(&fine);
    assert_eq!((quiet.len(), empty.len()), (1, 1));
    let failed = vec![query(
        0,
        "bad_data: parse error".into(),
        serde_json::json!({ "rdma_probe_errors_total{}": 0 }),
    )];
    assert!(support::panics(|| {
        queries_without_data(&failed);
    }));
}
