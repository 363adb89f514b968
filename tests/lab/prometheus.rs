//! The shipped alert rules, Alertmanager configuration and dashboards on a real Prometheus and
//! Alertmanager with the three lab exporters (lab/scenarios/prometheus.sh). Notifications are
//! counted: a clean run sends none, and Prometheus fires no alert in it (an alert that fires and
//! clears within Alertmanager's `group_wait` sends nothing, so notifications alone cannot show
//! it); a rate cap on one node sends one, naming that
//! node's port (RdmaProbePortDegraded); a port that drops every RoCE packet sends one
//! (RdmaProbePortFailing); a node powered off sends one (RdmaProbeNodeDown); no notification
//! carries a template error; and every dashboard query returns data.
//!
//! The rules are generated for the probe and ping intervals of config/lab.yaml (the parameters
//! that scale their windows, deploy/README.md). The clean phase lasts
//! `LAB_PROMETHEUS_CLEAN_SECONDS` (by default the longest `for:` of the rules plus
//! `HOLD_INTERVALS`, never less than that `for:`: an alert that takes that long to fire could not
//! show in a shorter one; `scripts/lab-prometheus` runs it for 10 minutes).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{self, repo_root, LabRun};

const BIN: &str = "target/release/rdma-probe-exporter";
const PROMETHEUS: &str = ".cache/tools/prometheus";
const ALERTMANAGER: &str = ".cache/tools/alertmanager";
const JOB: &str = "rdma-probe-exporter";
/// config/lab.yaml paces every path at 20 Mb/s; the cap leaves node2 40% of that.
const CAP: &str = "8mbit";
/// How long a phase goes on after its alert fired, in probe intervals: time for a wrong alert
/// (one whose `for:` is as long as the right one's) to show.
const HOLD_INTERVALS: u32 = 3;

/// What a notification names: (alertname, component, node, device).
type Named = (String, String, String, String);

/// A firing notification as the webhook receiver logged it.
#[derive(Debug, Clone)]
struct Notification {
    /// node1's clock (Prometheus's), seconds since the epoch.
    received: f64,
    named: Named,
}

fn lab_interval_seconds() -> u32 {
    lab_seconds("  interval: ", "defaults.interval")
}

/// config/lab.yaml's `ping: {interval: ...}`: the rules' ping windows are counted in it.
fn lab_ping_interval_seconds() -> u32 {
    lab_seconds("ping: {interval: ", "ping.interval")
}

/// The whole seconds of config/lab.yaml's line that starts with `prefix`.
fn lab_seconds(prefix: &str, what: &str) -> u32 {
    let config = std::fs::read_to_string(repo_root().join("config/lab.yaml")).unwrap();
    let value = config
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("config/lab.yaml has no {what} (a line starting {prefix:?})"));
    let value = value.trim().trim_end_matches('}');
    value
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("config/lab.yaml: {what} {value:?} is not whole seconds"))
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
            "--ping-interval",
            &format!("{}s", lab_ping_interval_seconds()),
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
        root.join("lab/tools/alert_receiver.py"),
        root.join(PROMETHEUS),
        root.join(ALERTMANAGER),
        root.join("deploy/alertmanager/alertmanager.yaml"),
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

/// The firing notifications the receiver logged, in order; panics on a notification whose
/// annotations hold a template error or a relative runbook link (what an operator would read).
fn notifications(log: &str) -> Vec<Notification> {
    let mut out = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let entry: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let body = &entry["body"];
        for alert in body["alerts"].as_array().into_iter().flatten() {
            for (key, text) in alert["annotations"].as_object().into_iter().flatten() {
                let text = text.as_str().unwrap_or("");
                assert!(
                    !text.contains("error expanding") && !text.contains("<error"),
                    "a notification's {key} has a template error: {text}"
                );
                if key.ends_with("_url") {
                    assert!(text.starts_with("http"), "{key} is not absolute: {text}");
                }
            }
        }
        if body["status"] != "firing" {
            continue;
        }
        let label = |k: &str| body["commonLabels"][k].as_str().unwrap_or("").to_owned();
        out.push(Notification {
            received: entry["received"].as_f64().unwrap(),
            named: (
                label("alertname"),
                label("component"),
                label("node"),
                label("device"),
            ),
        });
    }
    out
}

/// The firing notifications received in [from, to).
fn received_within(all: &[Notification], from: f64, to: f64) -> Vec<&Notification> {
    all.iter()
        .filter(|n| (from..to).contains(&n.received))
        .collect()
}

fn named(alert: &str, component: &str, node: &str, device: &str) -> Named {
    (alert.into(), component.into(), node.into(), device.into())
}

fn show(ns: &[&Notification], since: f64, interval: f64) -> String {
    if ns.is_empty() {
        return "none".into();
    }
    ns.iter()
        .map(|n| {
            let (alert, component, node, device) = &n.named;
            format!(
                "{alert}{{component={component:?},node={node:?},device={device:?}}} after {:.0} s \
                 ({:.1} intervals)",
                n.received - since,
                (n.received - since) / interval
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What each path measured in [from, to), from the range queries node1 saved
/// (path-history-*.json): per path, the ratio of each sample to its pace and the age of its last
/// attempt, one sample an interval; to tell on a failure what the rules saw.
fn path_history(run: &LabRun, (from, to): (f64, f64)) -> String {
    let mut out = String::new();
    for (file, what) in [
        ("path-history-ratio.json", "paced burst / pace"),
        (
            "path-history-attempt-age.json",
            "seconds since its last attempt",
        ),
    ] {
        let text = std::fs::read_to_string(run.node_dir("node1").join(file)).unwrap_or_default();
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            out.push_str(&format!("\n(no {file})"));
            continue;
        };
        out.push_str(&format!("\n{what}, from {from:.0}:"));
        for series in v["data"]["result"].as_array().into_iter().flatten() {
            let m = &series["metric"];
            let samples: Vec<String> = series["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| Some((p[0].as_f64()?, p[1].as_str()?.parse::<f64>().ok()?)))
                .filter(|(t, _)| (from..to).contains(t))
                .map(|(t, v)| format!("{:.0}:{v:.2}", t - from))
                .collect();
            out.push_str(&format!(
                "\n  {} -> {}: {}",
                m["instance"].as_str().unwrap_or("?"),
                m["peer"].as_str().unwrap_or("?"),
                samples.join(" ")
            ));
        }
    }
    out
}

/// The first time within [from, to) that Prometheus evaluated `alert` as firing, from every
/// firing sample of the run (alerts-firing.json): with the notification's time, it tells the
/// rules' part of the delay (probes, `for:`) from Alertmanager's (group_wait).
fn first_firing(firing: &Value, alert: &str, within: (f64, f64)) -> Option<f64> {
    firing["data"]["result"]
        .as_array()?
        .iter()
        .filter(|s| s["metric"]["alertname"] == alert)
        .filter_map(|s| first_sample_within(s, within))
        .reduce(f64::min)
}

/// The first time one series of a range query has a sample within [from, to).
fn first_sample_within(series: &Value, (from, to): (f64, f64)) -> Option<f64> {
    series["values"]
        .as_array()?
        .iter()
        .filter_map(|p| p[0].as_f64())
        .filter(|t| (from..to).contains(t))
        .reduce(f64::min)
}

/// Every alert Prometheus evaluated as firing within [from, to), with its first such time, from
/// every firing sample of the run (alerts-firing.json).
fn fired_within(firing: &Value, within: (f64, f64)) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for series in firing["data"]["result"].as_array().into_iter().flatten() {
        if let Some(t) = first_sample_within(series, within) {
            let m = &series["metric"];
            let name = |k: &str| m[k].as_str().unwrap_or("").to_owned();
            out.push((
                format!(
                    "{}{{node={:?},device={:?},peer={:?}}}",
                    name("alertname"),
                    name("node"),
                    name("device"),
                    name("peer")
                ),
                t,
            ));
        }
    }
    out
}

/// Panics if any alert fired in Prometheus within the clean stretch [from, to). Notifications
/// alone cannot show it: an alert that fires and clears within Alertmanager's `group_wait` is
/// never sent, though it fired.
fn assert_none_fired(firing: &Value, what: &str, (from, to): (f64, f64), interval: f64) {
    let fired = fired_within(firing, (from, to));
    eprintln!(
        "{what}: {} alert(s) firing in Prometheus over {:.0} s",
        fired.len(),
        to - from
    );
    if !fired.is_empty() {
        let list: Vec<String> = fired
            .iter()
            .map(|(alert, t)| {
                format!(
                    "{alert} from {:.0} s ({:.1} intervals)",
                    t - from,
                    (t - from) / interval
                )
            })
            .collect();
        panic!("{what}: alerts fired in Prometheus: {}", list.join("; "));
    }
}

/// The notifications less those of `RdmaProbeDutyCycleExhausted` (info, component exporter)
/// received within [from, to), which are printed: while a fault makes the bursts to a node run
/// into their timeout, each such burst costs the prober its full time and the probing nodes'
/// intervals stretch (docs/runbook.md, "RdmaProbeDutyCycleExhausted"): a consequence the
/// runbook describes, not a second fault, and not a notification naming the wrong component.
fn explained_by_timeouts(all: &[Notification], (from, to): (f64, f64)) -> Vec<Notification> {
    let (explained, rest): (Vec<Notification>, Vec<Notification>) =
        all.iter().cloned().partition(|n| {
            (from..to).contains(&n.received)
                && n.named.0 == "RdmaProbeDutyCycleExhausted"
                && n.named.1 == "exporter"
        });
    for n in &explained {
        eprintln!(
            "  explained by bursts running into their timeout: {:?} at {:.0} s into the fault",
            n.named,
            n.received - from
        );
    }
    rest
}

/// Panics unless the window [from, to) received exactly the `want` notification (or none);
/// `history` (path_history) goes into the message.
fn assert_one_notification(
    all: &[Notification],
    what: &str,
    (from, to): (f64, f64),
    want: Option<Named>,
    interval: f64,
    history: &dyn Fn((f64, f64)) -> String,
) {
    let got = received_within(all, from, to);
    eprintln!(
        "{what}: {} notification(s): {}",
        got.len(),
        show(&got, from, interval)
    );
    let names: Vec<&Named> = got.iter().map(|n| &n.named).collect();
    if names != want.iter().collect::<Vec<_>>() {
        panic!(
            "{what}: the notifications: {}; want {want:?}\nwhat the paths measured:{}",
            show(&got, from, interval),
            history((from, to))
        );
    }
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
    let sent = notifications(&run.file("node1", "notifications.jsonl"));
    let history = |window| path_history(&run, window);

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

    // 1. A clean run sends nothing (from the moment every target was up).
    let (up, clean_end) = (phase(&run, "up_start"), phase(&run, "clean_end"));
    eprintln!(
        "clean: {:.0} s ({:.0} intervals)",
        clean_end - phase(&run, "clean_start"),
        (clean_end - phase(&run, "clean_start")) / interval
    );
    assert_one_notification(&sent, "clean", (up, clean_end), None, interval, &history);
    // ... and no alert fired in Prometheus.
    let firing = json(&run, "alerts-firing.json");
    assert_none_fired(&firing, "clean", (up, clean_end), interval);

    // 2.-4. One notification per fault, naming its component; each fault's window runs to the
    // next fault's start, so a late or second notification counts against it.
    let (cap, port, stop) = (
        phase(&run, "cap_start"),
        phase(&run, "port_start"),
        phase(&run, "stop_start"),
    );
    // From a fault's clearing to the next fault, an alert that fires is printed, not failed: a
    // path's first bursts after the fault may read low while its session is set up again (a
    // port's degradation for one evaluation was seen so); a notification there still fails.
    for (cleared, next) in [("cap_cleared", port), ("port_cleared", stop)] {
        let from = phase(&run, cleared);
        for (alert, t) in fired_within(&firing, (from, next)) {
            eprintln!(
                "after {cleared}: {alert} firing in Prometheus {:.0} s after the clearing ({:.1} \
                 intervals), not notified",
                t - from,
                (t - from) / interval
            );
        }
    }
    let show_firing =
        |alert: &str, start: f64, window: (f64, f64)| match first_firing(&firing, alert, window) {
            Some(t) => eprintln!(
                "  {alert} firing in Prometheus {:.0} s after the fault ({:.1} intervals)",
                t - start,
                (t - start) / interval
            ),
            None => eprintln!("  {alert} never firing in Prometheus"),
        };
    assert_one_notification(
        &sent,
        &format!("rate cap {CAP} on node2"),
        (clean_end, port),
        Some(named("RdmaProbePortDegraded", "port", "node2", "rxe0")),
        interval,
        &history,
    );
    eprintln!(
        "  (the cap began {:.0} s into that window)",
        cap - clean_end
    );
    show_firing("RdmaProbePortDegraded", cap, (cap, port));
    // Bursts to node3 now run until their timeout, which the duty-cycle budget counts: the
    // probing nodes' intervals may stretch long enough to raise the exporter's info alert
    // (explained_by_timeouts).
    let sent = explained_by_timeouts(&sent, (port, phase(&run, "stop_end") + 1.0));
    assert_one_notification(
        &sent,
        "node3's RoCE port dropping every packet",
        (port, stop),
        Some(named("RdmaProbePortFailing", "port", "node3", "rxe0")),
        interval,
        &history,
    );
    show_firing("RdmaProbePortFailing", port, (port, stop));
    assert_one_notification(
        &sent,
        "node3 powered off",
        (stop, phase(&run, "stop_end") + 1.0),
        Some(named("RdmaProbeNodeDown", "node", "node3", "")),
        interval,
        &history,
    );
    show_firing(
        "RdmaProbeNodeDown",
        stop,
        (stop, phase(&run, "stop_end") + 1.0),
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

/// The notification check: exactly the one wanted passes; a second one, another component, a
/// missing one, or one outside the window fails; resolved notifications and ones with template
/// errors are told apart.
#[test]
fn one_fault_must_send_exactly_one_notification_naming_it() {
    let line = |t: f64, status: &str, alert: &str, node: &str, annotation: &str| {
        serde_json::json!({"received": t, "receiver": "/warning", "body": {
            "status": status,
            "commonLabels": {"alertname": alert, "component": "port", "node": node, "device": "rxe0"},
            "alerts": [{"annotations": {"summary": annotation, "runbook_url": "https://x/r#a"}}]}})
        .to_string()
    };
    let port = named("RdmaProbePortFailing", "port", "node3", "rxe0");
    // The window [from, 500) at a 10 s interval.
    let judge = |sent: &[Notification], from: f64, want: Option<Named>| {
        assert_one_notification(sent, "t", (from, 500.0), want, 10.0, &|_| String::new())
    };
    let refused = |sent: &[Notification], from: f64, want: Option<Named>| {
        support::panics(|| judge(sent, from, want))
    };
    let log = [
        line(100.0, "firing", "RdmaProbePortFailing", "node3", "fine"),
        line(400.0, "resolved", "RdmaProbePortFailing", "node3", "fine"),
    ]
    .join("\n");
    let sent = notifications(&log);
    assert_eq!(sent.len(), 1, "a resolved notification is not a firing one");
    judge(&sent, 50.0, Some(port.clone()));
    assert!(refused(&sent, 150.0, Some(port.clone())));
    assert!(refused(&sent, 50.0, None));
    let other = named("RdmaProbePortFailing", "port", "node2", "rxe0");
    assert!(refused(&sent, 50.0, Some(other)));
    let twice = [
        line(100.0, "firing", "RdmaProbePortFailing", "node3", "fine"),
        line(130.0, "firing", "RdmaProbePathFailing", "node1", "fine"),
    ]
    .join("\n");
    assert!(refused(&notifications(&twice), 50.0, Some(port.clone())));
    // The exporter's stretched intervals beside the port's notification, within the fault:
    // explained; alone, or outside the fault, they are not the port's notification.
    let exporter_line = |t: f64| {
        serde_json::json!({"received": t, "receiver": "/info", "body": {
            "status": "firing",
            "commonLabels": {"alertname": "RdmaProbeDutyCycleExhausted", "component": "exporter",
                             "instance": "node1:9587", "device": "rxe0"},
            "alerts": [{"annotations": {"summary": "fine", "runbook_url": "https://x/r#a"}}]}})
        .to_string()
    };
    let stretched = [
        line(100.0, "firing", "RdmaProbePortFailing", "node3", "fine"),
        exporter_line(130.0),
    ]
    .join("\n");
    let stretched = notifications(&stretched);
    judge(
        &explained_by_timeouts(&stretched, (50.0, 500.0)),
        50.0,
        Some(port.clone()),
    );
    assert!(refused(
        &explained_by_timeouts(&stretched, (120.0, 125.0)),
        50.0,
        Some(port.clone())
    ));
    let alone = notifications(&exporter_line(130.0));
    assert!(refused(
        &explained_by_timeouts(&alone, (50.0, 500.0)),
        50.0,
        Some(port)
    ));
    let broken = line(100.0, "firing", "A", "n", "<error expanding template: x>");
    assert!(support::panics(|| {
        notifications(&broken);
    }));
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

/// The clean check reads Prometheus's firing samples: an alert that fired for one evaluation
/// inside the stretch fails it (though it sent no notification); one firing before or after it
/// does not.
#[test]
fn an_alert_firing_in_a_clean_stretch_fails_it_without_a_notification() {
    let firing = serde_json::json!({"data": {"result": [
        {"metric": {"alertname": "RdmaProbePathSlow", "node": "node1", "device": "rxe0", "peer": "node2"},
         "values": [[95.0, "1"], [205.0, "1"]]},
    ]}});
    assert_none_fired(&firing, "t", (100.0, 200.0), 5.0);
    assert!(fired_within(&firing, (100.0, 200.0)).is_empty());
    assert!(support::panics(|| assert_none_fired(
        &firing,
        "t",
        (90.0, 200.0),
        5.0
    )));
    assert_eq!(
        fired_within(&firing, (200.0, 300.0)),
        vec![(
            "RdmaProbePathSlow{node=\"node1\",device=\"rxe0\",peer=\"node2\"}".to_owned(),
            205.0
        )]
    );
}
