//! The status page at `/`: every probed path with its last result, bandwidth against target,
//! and its last error and when. Plain HTML that reads without JavaScript or a stylesheet from
//! elsewhere, so it works from a node's shell through `curl` or a port-forward.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::metrics::probe::{PathLabels, PathStatus, ProbeResult};
use crate::prober::BurstKind;

/// The page for `paths` as of `now_unix_seconds`.
pub fn render(paths: &BTreeMap<PathLabels, PathStatus>, now_unix_seconds: f64) -> String {
    let mut page = String::with_capacity(1024 + paths.len() * 400);
    page.push_str(concat!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<title>rdma-probe-exporter</title><style>",
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}",
        // Names (`node-b`) and figures (`10.000 Gb/s`) stay on one line; only the last error,
        // free text of any length, wraps.
        "th,td{border:1px solid #999;padding:.25em .6em;text-align:left;white-space:nowrap}",
        "td.num{text-align:right}td.err{white-space:normal}",
        ".ok{color:#060}.fail{color:#a00}.defer{color:#850}",
        "</style></head><body><h1>rdma-probe-exporter ",
        env!("CARGO_PKG_VERSION"),
        "</h1><p><a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a> · ",
        "<a href=\"/readyz\">/readyz</a></p>"
    ));
    let failing = paths.values().filter(|p| is_failing(p)).count();
    let _ = write!(
        page,
        "<h2>Paths</h2><p>{} paths, {} failing</p>",
        paths.len(),
        failing
    );
    if paths.is_empty() {
        page.push_str("<p>No path has been probed yet.</p></body></html>\n");
        return page;
    }
    page.push_str(concat!(
        "<table><thead><tr><th>device</th><th>peer</th><th>peer device</th><th>last result</th>",
        "<th>bandwidth</th><th>target</th><th>of target</th><th>last probe</th>",
        "<th>last error</th><th>runs</th><th>failures</th></tr></thead><tbody>"
    ));
    for state in paths.values() {
        row(&mut page, state, now_unix_seconds);
    }
    page.push_str("</tbody></table></body></html>\n");
    page
}

fn is_failing(state: &PathStatus) -> bool {
    matches!(
        state.last.as_ref().map(|r| &r.result),
        Some(ProbeResult::Failure { .. })
    )
}

fn row(page: &mut String, state: &PathStatus, now: f64) {
    let p = &state.path;
    let (class, result, figures) = match state.last.as_ref().map(|r| &r.result) {
        None => ("", "not probed yet".to_string(), None),
        Some(ProbeResult::Success { figures }) => ("ok", "success".to_string(), Some(figures)),
        Some(ProbeResult::Failure {
            reason, figures, ..
        }) => ("fail", format!("failure: {reason}"), figures.as_ref()),
        Some(ProbeResult::Deferred { reason }) => {
            ("defer", format!("deferred: {}", reason.as_str()), None)
        }
    };
    // A capacity burst's target is the link rate, not the pace: say which one the row shows.
    let result = match state.last.as_ref().map(|r| r.kind) {
        Some(BurstKind::Capacity) if figures.is_some() => format!("{result} (capacity)"),
        _ => result,
    };
    let target = state.last.as_ref().and_then(|r| r.target_bytes_per_second);
    let bandwidth = figures.map(|f| f.bandwidth_bytes_per_second);
    let ratio = match (bandwidth, target) {
        (Some(b), Some(t)) if t > 0.0 => format!("{:.0}%", b / t * 100.0),
        _ => "-".into(),
    };
    let last_probe = state
        .last
        .as_ref()
        .map_or("-".into(), |r| ago(now, r.at_unix_seconds));
    let last_error = state
        .last_error
        .as_ref()
        .map_or("-".into(), |(reason, message, at)| {
            format!("{reason}: {} ({})", escape(message), ago(now, *at))
        });
    let _ = write!(
        page,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td>\
         <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{ratio}</td>\
         <td>{last_probe}</td><td class=\"err\">{last_error}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td></tr>",
        escape(&p.device),
        escape(&p.peer),
        escape(&p.peer_device),
        escape(&result),
        bandwidth.map_or("-".into(), gbps),
        target.map_or("-".into(), gbps),
        state.runs,
        state.failures,
    );
}

/// Bytes per second as Gb/s (10^9 bit/s), as the probe table prints it.
fn gbps(bytes_per_second: f64) -> String {
    format!("{:.3} Gb/s", bytes_per_second * 8e-9)
}

fn ago(now: f64, then: f64) -> String {
    let seconds = (now - then).max(0.0);
    if seconds < 120.0 {
        format!("{seconds:.0} s ago")
    } else if seconds < 7200.0 {
        format!("{:.0} min ago", seconds / 60.0)
    } else {
        format!("{:.1} h ago", seconds / 3600.0)
    }
}

/// HTML text escaping: names and messages come from configs and peers.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::probe::{BurstFigures, ProbeRecord};
    use crate::reason::ErrorReason;

    fn state(peer: &str, result: ProbeResult, at: f64) -> PathStatus {
        PathStatus {
            path: PathLabels {
                device: "mlx5_0".into(),
                peer: peer.into(),
                peer_device: "mlx5_1".into(),
            },
            last: Some(ProbeRecord {
                result,
                kind: BurstKind::Paced,
                target_bytes_per_second: Some(1.25e9),
                setup_seconds: None,
                at_unix_seconds: at,
                counters: Vec::new(),
                other_traffic: Vec::new(),
            }),
            last_success_unix_seconds: None,
            last_error: Some((ErrorReason::Timeout, "deadline <passed>".into(), at - 600.0)),
            runs: 7,
            failures: 2,
        }
    }

    fn figures(bandwidth: f64) -> BurstFigures {
        BurstFigures {
            bytes: 1,
            messages: 1,
            elapsed_seconds: 0.5,
            bandwidth_bytes_per_second: bandwidth,
            min_window_bandwidth_bytes_per_second: bandwidth,
            completion_gap_max_seconds: 0.0,
            message_rate_per_second: 1.0,
            qp_bandwidth_min_bytes_per_second: None,
            qp_bandwidth_max_bytes_per_second: None,
        }
    }

    #[test]
    fn every_path_shows_result_bandwidth_against_target_and_last_error() {
        let ok = state(
            "node-b",
            ProbeResult::Success {
                figures: figures(1e9),
            },
            1000.0,
        );
        let bad = state(
            "node-c",
            ProbeResult::Failure {
                reason: ErrorReason::WcRetryExceeded,
                message: "retry".into(),
                figures: None,
            },
            1030.0,
        );
        let paths: BTreeMap<_, _> = [ok, bad].into_iter().map(|s| (s.path.clone(), s)).collect();
        let page = render(&paths, 1060.0);
        assert!(page.contains("2 paths, 1 failing"), "{page}");
        assert!(page.contains("<td class=\"ok\">success</td>"), "{page}");
        assert!(
            page.contains("8.000 Gb/s") && page.contains("10.000 Gb/s") && page.contains("80%"),
            "{page}"
        );
        assert!(page.contains("failure: wc_retry_exceeded"), "{page}");
        assert!(
            page.contains("timeout: deadline &lt;passed&gt; (11 min ago)"),
            "{page}"
        );
        assert!(page.contains("60 s ago"), "{page}");
    }

    #[test]
    fn names_from_configs_and_peers_are_escaped() {
        let evil = state(
            "<script>alert(1)</script>",
            ProbeResult::Success {
                figures: figures(1.0),
            },
            0.0,
        );
        let paths: BTreeMap<_, _> = [(evil.path.clone(), evil)].into();
        let page = render(&paths, 0.0);
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}"
        );
    }

    #[test]
    fn a_capacity_burst_says_so_next_to_its_link_rate_target() {
        let mut capacity = state(
            "node-b",
            ProbeResult::Success {
                figures: figures(1e9),
            },
            1000.0,
        );
        if let Some(last) = capacity.last.as_mut() {
            last.kind = BurstKind::Capacity;
        }
        let paths: BTreeMap<_, _> = [(capacity.path.clone(), capacity)].into();
        let page = render(&paths, 1060.0);
        assert!(
            page.contains("<td class=\"ok\">success (capacity)</td>"),
            "{page}"
        );
    }

    #[test]
    fn an_empty_table_says_so() {
        let page = render(&BTreeMap::new(), 0.0);
        assert!(page.contains("No path has been probed yet."), "{page}");
    }
}
