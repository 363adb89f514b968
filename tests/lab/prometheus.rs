//! The shipped alert rules and dashboards on a real Prometheus scraping the three lab exporters
//! (lab/scenarios/prometheus.sh): a clean run fires nothing, a rate cap on one node fires
//! RdmaProbeLinkDegraded for exactly that node's paths, a node powered off fires
//! RdmaProbeNodeIsolated and no per-pair alert, and every dashboard query returns data.
//!
//! The rules are generated for the probe interval of config/lab.yaml (the one parameter that
//! scales their windows, deploy/README.md). The clean phase lasts
//! `LAB_PROMETHEUS_CLEAN_SECONDS` (default 150; `scripts/lab-prometheus` runs it for 10 minutes).

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
/// and the scenario's parameters.
fn prepare(dir: &Path, interval_s: u32, clean_s: u32) -> Vec<PathBuf> {
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
    std::fs::write(
        at("prometheus-lab.env"),
        format!(
            "INTERVAL_SECONDS={interval_s}\nCLEAN_SECONDS={clean_s}\nCAP={CAP}\n\
             HOLD_INTERVALS={HOLD_INTERVALS}\n"
        ),
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
    let clean_s: u32 = std::env::var("LAB_PROMETHEUS_CLEAN_SECONDS")
        .ok()
        .map(|v| {
            v.parse()
                .expect("LAB_PROMETHEUS_CLEAN_SECONDS: whole seconds")
        })
        .unwrap_or(150);
    let files = prepare(
        &repo_root().join("target/lab-runs/prometheus-files"),
        interval_s,
        clean_s,
    );
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
    let between = firing_within(&alerts, cap_resolved + interval, stop_start);
    assert!(
        between.is_empty(),
        "alerts fired between the faults: {}",
        show(&between, cap_resolved, interval)
    );
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

    // 4. Every dashboard query returns data, but for a query of event counters (created at the
    // first event: errors, deferrals, validation failures) when no such event happened in its
    // selection, which Prometheus confirms.
    let queries = json(&run, "dashboard-results.json");
    let queries = queries.as_array().unwrap();
    let no_events = |q: &Value| {
        let events = q["events"].as_object().unwrap();
        !events.is_empty() && events.values().all(|n| n.as_u64() == Some(0))
    };
    let (quiet, empty): (Vec<&Value>, Vec<&Value>) = queries
        .iter()
        .filter(|q| q["series"].as_u64().unwrap_or(0) == 0)
        .partition(|q| no_events(q));
    let describe = |qs: &[&Value]| {
        qs.iter()
            .map(|q| format!("{}: {} ({})", q["where"], q["expr"], q["error"]))
            .collect::<Vec<_>>()
            .join("\n")
    };
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
