//! The exporter's pings on three lab nodes (lab/scenarios/ping.sh): every node pings both others
//! every 100 ms over its device's UD QP, with targets and keys learnt from its burst sessions.
//! `netem delay 10ms` on node2's NIC raises the median RTT of exactly the paths to and from
//! node2 by 10 ms ± 3 ms within two windows net of the drift the other paths show (and by 6 to
//! 14 ms raw; the clean and delay windows are measured again, at most four times, while a path not
//! crossing node2 moved by more than 1.5 ms between them, and the last pair is judged); `netem loss 5%` there loses 2-10% of exactly those paths'
//! pings (over four windows); node2's exporter restarted (a new ping QP, new keys) is pinged and
//! answered again within seconds, without waiting for a burst to it (whether the engine relearnt
//! the target or node2's own first burst taught it is printed); node2
//! powered off loses every ping to it, counted by the first scrape after the cut; 200 pings a
//! second are all sent and answered. Timestamps are the CPU's: rxe has no completion timestamps.
//! Printouts, asserted only within sanity bounds: the round trip next to stock ib_write_lat's on
//! the same link (a ratio of figures that differ in kind) and the ping thread's CPU.

use std::collections::BTreeMap;

use crate::support::{self, LabRun};

const NODES: [&str; 3] = ["node1", "node2", "node3"];

/// A path's figures in one scrape.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    /// When the scrape was taken (the node's clock, ms): halfway through it (an emulated node
    /// takes a second or two to run curl).
    at_ms: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    sent: f64,
    lost: f64,
}

/// Every path's figures in `node`'s scrape `name`, by peer.
fn figures(run: &LabRun, node: &str, name: &str) -> BTreeMap<String, Figures> {
    let text = run.file(node, &format!("{name}-{node}.txt"));
    let at_ms = scrape_time_ms(&text, node, name);
    let mut out: BTreeMap<String, Figures> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("rdma_probe_ping_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(peer) = label(series, "peer") else {
            continue;
        };
        let value: f64 = value.parse().unwrap_or(f64::NAN);
        let f = out.entry(peer.to_owned()).or_insert(Figures {
            at_ms,
            ..Figures::default()
        });
        match (series.split('{').next(), label(series, "percentile")) {
            (Some("rdma_probe_ping_rtt_seconds"), Some("50")) => f.p50_ms = Some(value * 1e3),
            (Some("rdma_probe_ping_rtt_seconds"), Some("99")) => f.p99_ms = Some(value * 1e3),
            (Some("rdma_probe_ping_sent_total"), _) => f.sent = value,
            (Some("rdma_probe_ping_lost_total"), _) => f.lost = value,
            _ => {}
        }
    }
    out
}

/// Halfway between the times a scrape's file was stamped with before and after it (ms).
fn scrape_time_ms(text: &str, node: &str, name: &str) -> f64 {
    let stamp = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("{node}'s {name} has no {prefix}"))
    };
    (stamp("# scrape_start_ms ") + stamp("# scrape_end_ms ")) / 2.0
}

/// The exporter's CPU seconds in `node`'s scrape `name`, and the scrape's time (s).
fn cpu_seconds(run: &LabRun, node: &str, name: &str) -> (f64, f64) {
    let text = run.file(node, &format!("{name}-{node}.txt"));
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{node}'s {name} has no {prefix}"))
    };
    (
        value("process_cpu_seconds_total "),
        scrape_time_ms(&text, node, name) / 1e3,
    )
}

/// A time (ms) `node` wrote into the file `name`.
fn stamp_ms(run: &LabRun, name: &str, node: &str) -> f64 {
    run.file(node, name)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{node}'s {name}: {e}"))
}

/// When `node`'s last burst to `peer` began, as of its scrape `name` (unix seconds; 0 if none).
fn last_attempt_s(run: &LabRun, node: &str, name: &str, peer: &str) -> f64 {
    let text = run.file(node, &format!("{name}-{node}.txt"));
    text.lines()
        .filter(|l| l.starts_with("rdma_probe_last_attempt_timestamp_seconds{"))
        .filter(|l| label(l, "peer") == Some(peer))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

/// What `node`'s ping thread used between its scrapes `from` and `to`: CPU seconds in user and
/// system mode, the pings it sent and answered, and the seconds between the scrapes.
struct PingThreadCost {
    user_s: f64,
    system_s: f64,
    pings: f64,
    answered: f64,
    seconds: f64,
}

fn ping_thread_cost(run: &LabRun, node: &str, from: &str, to: &str) -> PingThreadCost {
    let read = |name: &str| -> (f64, f64, f64, f64, f64) {
        let text = run.file(node, &format!("{name}-{node}.txt"));
        let (user, system) = text
            .lines()
            .find_map(|l| l.strip_prefix("# ping_thread_ticks "))
            .and_then(|t| t.split_once(' '))
            .and_then(|(u, s)| Some((u.parse::<f64>().ok()?, s.trim().parse::<f64>().ok()?)))
            .unwrap_or_else(|| panic!("{node}'s {name} has no ping thread ticks"));
        let sum = |metric: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(metric))
                .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum()
        };
        let answered = sum("rdma_probe_ping_answered_total{");
        (
            user / 100.0,
            system / 100.0,
            sum("rdma_probe_ping_sent_total{") + answered,
            answered,
            scrape_time_ms(&text, node, name) / 1e3,
        )
    };
    let (u0, s0, p0, a0, t0) = read(from);
    let (u1, s1, p1, a1, t1) = read(to);
    PingThreadCost {
        user_s: u1 - u0,
        system_s: s1 - s0,
        pings: p1 - p0,
        answered: a1 - a0,
        seconds: t1 - t0,
    }
}

fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    let len = series[start..].find('"')?;
    Some(&series[start..start + len])
}

/// Whether an exporter log holds the line of a ping target to `peer` learnt again without a
/// burst (exporter/device.rs logs it with the path's labels).
fn relearnt_within(log: &str, peer: &str) -> bool {
    log.lines()
        .any(|l| l.contains("their target learnt again") && l.contains(&format!("peer={peer} ")))
}

#[test]
fn relearning_is_judged_for_the_restarted_peer_only() {
    let line = |peer: &str| {
        format!("2026-12-07T02:00:00Z  INFO rdma_probe_exporter::exporter::device: pings unanswered: their target learnt again device=rxe0 peer={peer} peer_device=rxe0")
    };
    assert!(relearnt_within(&line("node2"), "node2"));
    assert!(!relearnt_within(&line("node3"), "node2"));
    assert!(!relearnt_within(&line("node22"), "node2"));
    assert!(!relearnt_within("peer=node2 connected", "node2"));
}

/// Whether a path's median rise under `netem delay 10ms` shows that delay: 10 ms ± 3 ms net of
/// the drift of the paths that do not cross the delayed node, and 6 to 14 ms raw. The emulated
/// nodes stamp pings on CPUs the host shares out: a window's median moves by a millisecond or two
/// on its own, and a delay partly overlaps the waits for a CPU already in the clean median (a run
/// saw a 3 ms delay raise a median by 0.80 ms with the others 0.57 ms faster), so the delay is set
/// well above that noise. The net figure is allowed the drift's own bound;
/// the raw bound keeps a drift from making up for a delay not seen, or half of it (a one-way
/// figure).
fn shows_the_delay(rise_ms: f64, drift_ms: f64) -> bool {
    (7.0..=13.0).contains(&(rise_ms - drift_ms)) && (6.0..=14.0).contains(&rise_ms)
}

/// Our round trip's median over ib_write_lat's on the same link, at most: a sanity bound (the
/// two differ in kind; measured 1.04 to 1.40), not a speed goal.
const MEDIAN_RATIO_TO_IB_WRITE_LAT_MAX: f64 = 2.5;

/// Whether `probe --ping 2000` was all sent and answered: its own count of lost pings within
/// 1%, and the answering node's count of answers (which also holds other nodes' pings) at least
/// the probe's answered ones.
fn rate_probe_answered(sent: f64, lost: f64, answered_by_peer: f64) -> bool {
    sent == 2000.0 && lost <= 0.01 * sent && answered_by_peer >= sent - lost
}

#[test]
fn the_ping_checks_fail_on_what_they_guard_against() {
    // A 10 ms delay, with the others drifting 1 ms: seen; a raw rise of 5 ms (half the delay, a
    // one-way figure) made to look like 10 ms by a drift of -5 ms, and 15 ms by one of +5 ms: not.
    assert!(shows_the_delay(11.0, 1.0));
    assert!(shows_the_delay(8.4, -0.57));
    assert!(!shows_the_delay(5.0, -5.0));
    assert!(!shows_the_delay(15.0, 5.0));
    // Beyond the drift's bound net of it, or beyond 14 ms raw: not.
    assert!(!shows_the_delay(12.5, -0.7));
    assert!(!shows_the_delay(7.5, 0.7));
    assert!(!shows_the_delay(14.5, 1.5));
    assert!(!shows_the_delay(1.0, 0.0));
    // 15% of the probe's pings unanswered, hidden before by node3's count of answers to its
    // other peers' pings: fails; 1% passes.
    assert!(!rate_probe_answered(2000.0, 300.0, 2100.0));
    assert!(rate_probe_answered(2000.0, 20.0, 2080.0));
    assert!(!rate_probe_answered(1990.0, 0.0, 2080.0));
    assert!(!rate_probe_answered(2000.0, 0.0, 1500.0));
}

fn touches_node2(node: &str, peer: &str) -> bool {
    node == "node2" || peer == "node2"
}

#[test]
fn pings_show_the_delay_and_loss_of_exactly_the_faulty_nodes_paths_and_print_their_cost_beside_ib_write_lat(
) {
    let run = support::run_shared(&support::MESH, "ping.sh");
    run.assert_success();
    // A bound missed is told at the end, after every figure of the run.
    let mut failures: Vec<String> = Vec::new();
    macro_rules! check {
        ($ok:expr, $($message:tt)+) => {
            let ok: bool = $ok;
            if !ok {
                failures.push(format!($($message)+));
            }
        };
    }
    let phase = |name: &str| -> BTreeMap<&str, BTreeMap<String, Figures>> {
        NODES.iter().map(|n| (*n, figures(&run, n, name))).collect()
    };
    let (start, clean, delay) = (phase("clean-start"), phase("clean"), phase("delay"));
    let (recovered, loss) = (phase("recovered"), phase("loss-end"));
    let icmp = run
        .results("node1")
        .get("icmp_rtt_ms")
        .cloned()
        .unwrap_or_default();
    // The emulated nodes stamp pings on their CPUs, which all slow down and speed up with the
    // host's load: the paths that do not cross node2 measure that drift of the medians between
    // the clean and the delay window, and the rise of node2's paths is judged net of it.
    let rise = |node: &str, peer: &str| -> f64 {
        delay[node][peer].p50_ms.unwrap_or(f64::NAN) - clean[node][peer].p50_ms.unwrap_or(f64::NAN)
    };
    let drift = (rise("node1", "node3") + rise("node3", "node1")) / 2.0;
    // The delay is judged net of that drift (within 3 ms of 10 ms), and the raw rise on its own
    // (6 to 14 ms: a drift of the others cannot make up for a delay not seen, nor excuse a rise
    // far beyond it); the drift itself is bounded as each path not crossing node2 is.
    check!(
        drift.abs() <= 1.5,
        "the medians of the paths not crossing node2 drifted {drift:.2} ms between the clean and \
         the delay window: the lab is too noisy to judge the delay"
    );
    // ping.sh measures the clean and delay windows again (at most four tries) while either path
    // not crossing node2 moved by more than 1.5 ms between them (the bound checked of each such
    // path below); the last try is judged.
    let tries: Vec<String> = (1..=4)
        .filter_map(|n| {
            let results = run.results("node1");
            let drift = results.get(&format!("delay_try_{n}_control_drift_ms"))?;
            let moved = results.get(&format!("delay_try_{n}_control_moved_ms"))?;
            Some(format!("{drift} (larger move {moved})"))
        })
        .collect();
    check!(
        !tries.is_empty(),
        "ping.sh recorded no try of the clean and delay windows"
    );
    let mut table = format!(
        "ICMP node1 -> node2: {icmp} ms; drift of the medians not crossing node2, clean to delay window: {drift:.2} ms (tries: {} ms)\npath            clean p50/p99 ms  delay p50 ms  clean lost/sent  loss lost/sent\n",
        tries.join(", ")
    );
    for node in NODES {
        let (cpu0, t0) = cpu_seconds(&run, node, "clean-start");
        let (cpu1, t1) = cpu_seconds(&run, node, "clean");
        // The ping thread alone, from the clean window to the end of the loss phase: per ping
        // sent or answered, and what 1,000 paths pinged every 5 s (200 pings sent and 200
        // answered a second) would take at that rate. System time is mostly Soft-RoCE's: the
        // emulated NIC builds and checks every packet in the kernel, in the posting thread.
        let cost = ping_thread_cost(&run, node, "clean-start", "loss-end");
        let per_ping_us = |s: f64| 1e6 * s / cost.pings;
        table += &format!(
            "{node}: the exporter used {:.1}% of a CPU over the clean window (pinging 2 paths, answering 2); its ping thread {:.2}% over {:.0} s, {:.0} pings sent or answered: {:.0} us user + {:.0} us system a ping, so 1,000 paths every 5 s would take {:.1}% of a core in user mode ({:.1}% with the emulated NIC's system time)\n",
            100.0 * (cpu1 - cpu0) / (t1 - t0),
            100.0 * (cost.user_s + cost.system_s) / cost.seconds,
            cost.seconds,
            cost.pings,
            per_ping_us(cost.user_s),
            per_ping_us(cost.system_s),
            400.0 * per_ping_us(cost.user_s) / 1e4,
            400.0 * per_ping_us(cost.user_s + cost.system_s) / 1e4,
        );
        // Event-driven: a thread that polled would use a whole CPU.
        check!(
            cost.pings > 1000.0 && (cost.user_s + cost.system_s) < 0.25 * cost.seconds,
            "{node}'s ping thread used {:.1} s of CPU over {:.0} s for {} pings",
            cost.user_s + cost.system_s,
            cost.seconds,
            cost.pings
        );
        assert_eq!(
            clean[node].len(),
            2,
            "{node} pings both others: {:?}\n{}",
            clean[node],
            run.log(node)
        );
        for (peer, c) in &clean[node] {
            let s = start[node][peer];
            let d = delay[node][peer];
            let (r, l) = (recovered[node][peer], loss[node][peer]);
            let (clean_sent, clean_lost) = (c.sent - s.sent, c.lost - s.lost);
            let (loss_sent, loss_lost) = (l.sent - r.sent, l.lost - r.lost);
            table += &format!(
                "{node} -> {peer}   {:.2}/{:.2}       {:.2}          {clean_lost}/{clean_sent}          {loss_lost}/{loss_sent}\n",
                c.p50_ms.unwrap_or(f64::NAN),
                c.p99_ms.unwrap_or(f64::NAN),
                d.p50_ms.unwrap_or(f64::NAN),
            );
            // A ping every 100 ms, each period jittered by up to 10%: 10 a second (the scrape
            // times are known to a few hundred ms of the 10 s).
            let rate = clean_sent / ((c.at_ms - s.at_ms) / 1e3);
            check!(
                (8.0..=12.0).contains(&rate),
                "{node} -> {peer}: {rate:.1} pings a second ({clean_sent} in the clean window)"
            );
            check!(
                clean_lost <= 0.01 * clean_sent,
                "{node} -> {peer}: {clean_lost} of {clean_sent} lost on a clean link"
            );
            let (clean_p50, delay_p50) = (c.p50_ms.unwrap(), d.p50_ms.unwrap());
            // Soft-RoCE in VMs is slow (the ICMP RTT is printed): a sanity bound, not a target.
            check!(
                clean_p50 < 10.0,
                "{node} -> {peer}: clean median {clean_p50} ms"
            );
            let rise = delay_p50 - clean_p50;
            let lost_share = loss_lost / loss_sent;
            if touches_node2(node, peer) {
                let net = rise - drift;
                check!(
                    shows_the_delay(rise, drift),
                    "{node} -> {peer}: median rose {rise:.2} ms under netem delay 10ms, {net:.2} ms net of the lab's drift ({drift:.2} ms)"
                );
                check!(
                    (0.02..=0.10).contains(&lost_share),
                    "{node} -> {peer}: {loss_lost} of {loss_sent} lost under netem loss 5%"
                );
            } else {
                // The emulated nodes stamp pings on their CPUs: a median moves by a millisecond
                // or so from one window to the next on its own.
                check!(
                    rise.abs() <= 1.5,
                    "{node} -> {peer} does not cross node2, but its median moved {rise:.2} ms"
                );
                check!(
                    lost_share <= 0.01,
                    "{node} -> {peer} does not cross node2, but lost {loss_lost} of {loss_sent}"
                );
            }
        }
    }
    // node2's exporter restarted: a new ping QP and new keys. Each other node's pings to it go
    // unanswered until its engine names the path silent and a session without a burst learns
    // the new target (the bursts are a minute apart).
    let mut restarted = BTreeMap::new();
    let mut resumed_without_burst = 0;
    for node in ["node1", "node3"] {
        let start_ms = stamp_ms(&run, &format!("restart-start-{node}"), node);
        let scrapes: Vec<Figures> = (1..=15)
            .map(|n| figures(&run, node, &format!("restart-{n}"))["node2"])
            .collect();
        // Answered again: the first two scrapes in a row between which pings went out and none
        // was lost (the window a ping's timeout ends in is past both).
        let first = scrapes
            .windows(2)
            .position(|w| w[1].sent > w[0].sent && w[1].lost == w[0].lost)
            .map(|i| scrapes[i].at_ms - start_ms);
        let (a, b) = (scrapes[9], scrapes[14]);
        let (sent, lost) = (b.sent - a.sent, b.lost - a.lost);
        // The exporter's log from the restart on (ping.sh notes its length then).
        let log = run.file(node, "exporter.log");
        let offset: usize = run
            .file(node, &format!("restart-log-offset-{node}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{node}'s restart-log-offset: {e}"));
        let log = log.get(offset..).unwrap_or_default();
        let burst_s = last_attempt_s(&run, node, "restart-15", "node2");
        // Whether a burst to node2 ended between the restart and the first answer (its session
        // would have taught the new target too).
        let burst_ms = burst_s * 1e3 - start_ms;
        let burst_ran = first.is_some_and(|ms| (0.0..ms).contains(&burst_ms));
        table += &format!(
            "{node} -> node2 after node2's exporter restarted: answered again {} ms after it was ready (no ping lost from then on); {lost} of {sent} lost over the last 5 s; {}\n",
            first.map_or("never".into(), |ms| format!("{ms:.0}")),
            if burst_ran {
                format!("a burst to node2 ended {burst_ms:.0} ms after the restart, before that")
            } else {
                "no burst to node2 before that".to_owned()
            },
        );
        check!(
            first.is_some() && sent >= 20.0 && lost <= 0.1 * sent,
            "{node}: pings to node2 not answered again within 15 s of its exporter's restart \
             ({lost} of {sent} lost over the last 5 s)\n{log}"
        );
        // How they were answered again is printed: the engine's relearning (its log line since
        // the restart, naming node2), or node2's own first burst to this node, whose session
        // teaches the target too (seen once, node2's burst coming first).
        table += &format!(
            "{node}: target to node2 learnt again by the engine since the restart: {}\n",
            if relearnt_within(log, "node2") {
                "yes"
            } else {
                "no"
            }
        );
        if !burst_ran && first.is_some() {
            resumed_without_burst += 1;
        }
        restarted.insert(node, b);
    }
    // A burst of this node's to node2 between the restart and the first answer (a minute
    // apart, about one run in sixty a node) would have taught the target itself: the claim needs
    // one node answered again without it.
    check!(
        resumed_without_burst > 0,
        "a burst to node2 ran before the first answer on both nodes: answering again without \
         waiting for a burst is not shown"
    );
    // node2 powered off: the first scrape after the cut (the runner says the VM is gone a
    // moment after it is) has counted lost pings; from then on every ping to node2 is lost (but
    // the last timeout's, still outstanding), and the path to the third node loses none.
    for node in ["node1", "node3"] {
        let start_ms = stamp_ms(&run, &format!("off-start-{node}"), node);
        let off: Vec<BTreeMap<String, Figures>> = (1..=10)
            .map(|n| figures(&run, node, &format!("off-{n}")))
            .collect();
        let before = restarted[node].lost;
        let (first, last) = (off[0]["node2"], off[9]["node2"]);
        check!(
            first.lost > before,
            "{node}: the first scrape after node2 was powered off counted no lost ping"
        );
        let (sent, lost) = (last.sent - first.sent, last.lost - first.lost);
        table += &format!(
            "{node}: {} lost pings to powered-off node2 in the first scrape ({:.0} ms after the runner said it was off); then {lost} of {sent} lost over {:.1} s\n",
            first.lost - before,
            first.at_ms - start_ms,
            (last.at_ms - first.at_ms) / 1e3,
        );
        check!(
            sent >= 50.0,
            "{node}: only {sent} pings to node2 after the cut"
        );
        check!(
            lost >= sent - 6.0,
            "{node}: {lost} of {sent} pings to node2 lost"
        );
        let other = if node == "node1" { "node3" } else { "node1" };
        let other_lost = off[9][other].lost - off[0][other].lost;
        check!(
            other_lost <= 1.0,
            "{node} -> {other} lost {other_lost} pings"
        );
    }
    // `probe --ping` next to stock ib_write_lat on node1's link to node3.
    run.assert_result("node1", "lat_client_exit", "0");
    run.assert_result("node3", "lat_server_exit", "0");
    run.assert_result("node1", "probe_ping_exit", "0");
    let lat = run.file("node1", "lat-client.txt");
    // #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (usec, half the trip).
    let row: Vec<f64> = lat
        .lines()
        .skip_while(|l| !l.contains("#bytes"))
        .nth(1)
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(row.len() >= 8, "no figures from ib_write_lat:\n{lat}");
    let probe: serde_json::Value = serde_json::from_str(&run.file("node1", "probe-ping.json"))
        .unwrap_or_else(|e| panic!("probe --ping: {e}: {}", run.file("node1", "probe-ping.err")));
    let n = |k: &str| {
        probe[k]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k} in {probe}"))
    };
    assert_eq!(n("sent"), 1000.0, "{probe}");
    assert!(n("lost") <= 10.0, "{probe}");
    assert_eq!(probe["timestamps"], "software", "{probe}");
    table += &format!(
        "node1 -> node3, round trip in usec: ib_write_lat min {:.1} median {:.1} p99 {:.1} max {:.1} (2 x its half-trip figures); probe --ping min {:.1} median {:.1} p99 {:.1} max {:.1}, {} of 1000 lost: median ratio {:.2}\n",
        2.0 * row[2],
        2.0 * row[4],
        2.0 * row[7],
        2.0 * row[3],
        n("rtt_min_us"),
        n("rtt_p50_us"),
        n("rtt_p99_us"),
        n("rtt_max_us"),
        n("lost"),
        n("rtt_p50_us") / (2.0 * row[4]),
    );
    // The ratio is a printout: the two figures differ in kind (ours takes the responder's hold
    // time out; ib_write_lat busy-polls, our engine is woken by events, which on an emulated CPU
    // costs a wake-up at each end). Only a sanity bound is asserted: a median several times
    // ib_write_lat's on the same link is a ping engine that waits where it should not.
    let median_ratio = n("rtt_p50_us") / (2.0 * row[4]);
    check!(
        median_ratio <= MEDIAN_RATIO_TO_IB_WRITE_LAT_MAX,
        "probe --ping's median round trip is {median_ratio:.2} times ib_write_lat's on the same link"
    );
    // 200 pings a second on node1's link to node3: the rate of 1,000 paths pinged every 5 s.
    let rate: serde_json::Value = serde_json::from_str(&run.file("node1", "probe-rate.json"))
        .unwrap_or_else(|e| {
            panic!(
                "probe --ping at 5ms: {e}: {}",
                run.file("node1", "probe-rate.err")
            )
        });
    let times = run.file("node1", "probe-rate-times.txt");
    assert!(times.contains("exit 0"), "probe --ping at 5ms: {times}");
    let probe_cpu_s: f64 = times
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|t| {
            let (m, s) = t.strip_suffix('s')?.split_once('m')?;
            Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
        })
        .sum();
    let answering = ping_thread_cost(&run, "node3", "rate-start", "rate-end");
    let sent = rate["sent"].as_f64().unwrap_or(0.0);
    table += &format!(
        "200 pings a second node1 -> node3 for {:.1} s ({sent} sent, {} lost): node3's ping thread (answering them, and its own pings) {:.1}% of a CPU ({:.1}% in user mode), {:.0} us a ping; probe (the prober, its session setup included) {:.2} CPU-s, {:.0} us a ping\n",
        answering.seconds,
        rate["lost"],
        100.0 * (answering.user_s + answering.system_s) / answering.seconds,
        100.0 * answering.user_s / answering.seconds,
        1e6 * (answering.user_s + answering.system_s) / answering.pings,
        probe_cpu_s,
        1e6 * probe_cpu_s / sent,
    );
    // Every ping sent and (but for 1%) answered, as the prober counted them: node3's own count
    // of answers also holds node1's exporter's pings to it, so it bounds from below only.
    let lost = rate["lost"].as_f64().unwrap_or(f64::NAN);
    check!(
        rate_probe_answered(sent, lost, answering.answered),
        "probe --ping at 5ms: {rate}; node3 answered {} pings over the run",
        answering.answered
    );
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    run.assert_result("node1", "exporter_exit", "0");
    run.assert_result("node3", "exporter_exit", "0");
}
