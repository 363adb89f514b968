//! What the CLI prints, as pure functions of the results (unit-tested without RDMA).
//!
//! The probe table follows `ib_write_bw`'s report (docs/architecture.md, "ib_write_bw
//! semantics") so numbers can be compared side by side: a header block, then
//! `#bytes #iterations BW average MsgRate`. perftest prints one bandwidth unit per run (MiB/s, or
//! Gb/s with `--report_gbits`); we print both, since operators think in Gb/s (link rates) and
//! perftest users are used to MiB/s. There is no
//! "BW peak" column: perftest's peak is a per-message best case that is off (0.00) in most
//! modes; the minimum short-window bandwidth that follows the table is the figure that catches
//! stalls and PFC pauses.

use std::fmt::Write as _;

use crate::burst::BurstLength;
use crate::prober::ProbeOutcome;
use crate::units::RateLimit;

/// Bytes in a MiB, perftest's default bandwidth unit (2^20 B/s).
pub const BYTES_PER_MIB: f64 = 1_048_576.0;

/// Bits in a Gb, perftest's `--report_gbits` unit (10^9 bit/s).
pub const BITS_PER_GBIT: f64 = 1e9;

/// Column titles; the data row below uses the same widths (" {:<10} {:<14} {:<21} {:<22} ").
const COLUMNS: &str =
    " #bytes     #iterations    BW average[Gb/sec]    BW average[MiB/sec]    MsgRate[Mpps]";

const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Payload bytes per second → Gb/s (10^9 bit/s), as perftest's `--report_gbits`.
pub fn gbits_per_second(bytes_per_second: f64) -> f64 {
    bytes_per_second * 8.0 / BITS_PER_GBIT
}

/// Payload bytes per second → MiB/s (2^20 B/s), perftest's default unit.
pub fn mib_per_second(bytes_per_second: f64) -> f64 {
    bytes_per_second / BYTES_PER_MIB
}

/// Messages per second → Mpps, perftest's MsgRate column.
pub fn mpps(messages_per_second: f64) -> f64 {
    messages_per_second / 1e6
}

/// Decimals for bandwidth figures: perftest's `%.2f`, or `%.6f` when the average is below
/// 0.1 Gb/s (`REPORT_FMT_EXT`), so a slow paced burst does not print as 0.00.
pub fn bandwidth_decimals(average_bytes_per_second: f64) -> usize {
    if gbits_per_second(average_bytes_per_second) < 0.1 {
        6
    } else {
        2
    }
}

/// `12.345 ms` below a second, else `1.234 s`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{seconds:.3} s")
    }
}

/// A link rate in bit/s as `100.00 Gb/s`, or `unknown`.
pub fn format_link_rate(bits_per_second: Option<u64>) -> String {
    match bits_per_second {
        Some(bits) => format!("{:.2} Gb/s", bits as f64 / BITS_PER_GBIT),
        None => "unknown".to_owned(),
    }
}

/// What the probe report says about the request, next to what [`ProbeOutcome`] says about the
/// result: the flags as the plan resolved them.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportHeader {
    pub target: String,
    pub tx_depth: u32,
    /// The effective CQ moderation (the default resolved by the burst plan).
    pub cq_mod: u32,
    pub post_list: u32,
    pub length: BurstLength,
    pub rate_limit: Option<RateLimit>,
    pub traffic_class: u8,
    pub service_level: u8,
}

impl ReportHeader {
    /// The header of a validated `probe` command.
    pub fn from_action(action: &super::ProbeAction) -> Self {
        let s = &action.settings;
        ReportHeader {
            target: s.target.clone(),
            tx_depth: action.plan.tx_depth(),
            cq_mod: action.plan.cq_mod(),
            post_list: action.plan.post_list(),
            length: s.length,
            rate_limit: s.rate_limit,
            traffic_class: s.traffic_class,
            service_level: s.service_level,
        }
    }
}

fn or_unknown(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// Two `name : value` pairs on one line, as perftest's header does.
fn pair(out: &mut String, left: (&str, String), right: Option<(&str, String)>) {
    match right {
        Some((name, value)) => {
            let _ = writeln!(
                out,
                " {:<16}: {:<18}{:<16}: {}",
                left.0, left.1, name, value
            );
        }
        None => {
            let _ = writeln!(out, " {:<16}: {}", left.0, left.1);
        }
    }
}

/// The ib_write_bw-like report of one probe. `None` when no burst ran (the probe failed before
/// it): then only the error is worth printing.
pub fn format_probe_report(header: &ReportHeader, outcome: &ProbeOutcome) -> Option<String> {
    let report = outcome.report.as_ref()?;
    let mut out = String::new();
    let _ = writeln!(out, "{RULE}");
    let _ = writeln!(
        out,
        "                    RDMA_Write BW Test (rdma-probe-exporter)"
    );
    pair(&mut out, ("Peer", header.target.clone()), None);
    pair(
        &mut out,
        ("Device", or_unknown(outcome.device.as_deref())),
        Some(("Peer device", or_unknown(outcome.peer_device.as_deref()))),
    );
    pair(
        &mut out,
        ("Number of qps", outcome.qps.to_string()),
        Some(("Connection type", "RC".to_owned())),
    );
    pair(
        &mut out,
        ("Message size", format!("{}[B]", outcome.message_size)),
        Some(("Burst length", header.length.to_string())),
    );
    pair(
        &mut out,
        ("TX depth", header.tx_depth.to_string()),
        Some(("Post list", header.post_list.to_string())),
    );
    pair(&mut out, ("CQ Moderation", header.cq_mod.to_string()), None);
    pair(
        &mut out,
        ("Mtu", or_unknown(outcome.mtu.map(|m| format!("{m}[B]")))),
        None,
    );
    pair(
        &mut out,
        ("Traffic class", header.traffic_class.to_string()),
        Some(("Service level", header.service_level.to_string())),
    );
    pair(
        &mut out,
        (
            "Link rate",
            format_link_rate(outcome.local_link_rate_bits_per_second),
        ),
        Some((
            "Peer link rate",
            format_link_rate(outcome.peer_link_rate_bits_per_second),
        )),
    );
    let target = outcome
        .target_bandwidth_bytes_per_second
        .map(|t| format!("{:.*} Gb/sec", bandwidth_decimals(t), gbits_per_second(t)));
    pair(
        &mut out,
        (
            "Rate limit",
            header
                .rate_limit
                .map_or_else(|| "unpaced (capacity)".to_owned(), |r| r.to_string()),
        ),
        Some(("Target BW", or_unknown(target))),
    );
    let _ = writeln!(out, "{RULE}");

    let avg = report.bandwidth_bytes_per_second;
    let d = bandwidth_decimals(avg);
    let _ = writeln!(out, "{COLUMNS}");
    let _ = writeln!(
        out,
        " {:<10} {:<14} {:<21} {:<22} {:.6}",
        outcome.message_size,
        report.messages,
        format!("{:.d$}", gbits_per_second(avg)),
        format!("{:.d$}", mib_per_second(avg)),
        mpps(report.message_rate_per_second),
    );
    let _ = writeln!(out, "{RULE}");

    let bw = |bytes_per_second: f64| {
        format!(
            "{:.d$} Gb/sec  {:.d$} MiB/sec",
            gbits_per_second(bytes_per_second),
            mib_per_second(bytes_per_second)
        )
    };
    let _ = writeln!(
        out,
        " {:<23}: {}  ({} windows)",
        "Min-window BW",
        bw(report.min_window_bandwidth_bytes_per_second),
        format_seconds(report.window.as_secs_f64())
    );
    if let Some(min_qp) = report.per_qp_bandwidth_min_bytes_per_second {
        let _ = writeln!(out, " {:<23}: {}", "Lowest per-QP BW", bw(min_qp));
        // Each QP with the UDP source port that picked its ECMP path, to trace a slow one.
        for (q, qp_bw) in report.per_qp_bandwidth_bytes_per_second.iter().enumerate() {
            let name = match outcome.udp_source_ports.get(q) {
                Some(port) => format!("QP {q} (UDP port {port})"),
                None => format!("QP {q}"),
            };
            let _ = writeln!(out, " {name:<23}: {}", bw(*qp_bw));
        }
    }
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "Longest completion gap",
        format_seconds(report.completion_gap_max.as_secs_f64())
    );
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "Burst time",
        format_seconds(report.elapsed.as_secs_f64())
    );
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "Setup time",
        or_unknown(outcome.setup_seconds.map(format_seconds))
    );
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "CPU seconds, burst",
        or_unknown(report.cpu_seconds.map(|c| format!("{c:.4}")))
    );
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "CPU seconds, process",
        or_unknown(outcome.process_cpu_seconds.map(|c| format!("{c:.4}")))
    );
    let _ = writeln!(
        out,
        " {:<23}: {}",
        "Validated",
        match (outcome.validated, outcome.verified_messages) {
            (true, Some(n)) => format!("yes ({n} messages checked, each at its own offset)"),
            (true, None) => "yes".to_string(),
            (false, _) => "no".to_string(),
        }
    );
    for (side, counters) in [
        ("Local", &outcome.local_counters),
        ("Peer", &outcome.remote_counters),
    ] {
        if counters.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            " {side} port counters during the burst (also count other traffic):"
        );
        for (name, increase) in counters {
            let _ = writeln!(out, "   {name:<36} +{increase}");
        }
    }
    for (side, traffic) in [
        ("Local", outcome.local_other_traffic),
        ("Peer", outcome.remote_other_traffic),
    ] {
        let Some(t) = traffic else { continue };
        let bytes = |b: Option<u64>| b.map_or_else(|| "unknown".to_owned(), |b| format!("{b} B"));
        let _ = writeln!(
            out,
            " {:<23}: sent {}, received {}",
            format!("{side} other traffic"),
            bytes(t.transmit_bytes),
            bytes(t.receive_bytes)
        );
    }
    let _ = writeln!(out, "{RULE}");
    Some(out)
}

/// The one-line error of an unsuccessful probe: the reason (the metric label) and message, or
/// why it was deferred (`busy`: not a failure of the link, but no figure either).
pub fn format_probe_error(target: &str, outcome: &ProbeOutcome) -> String {
    let message = outcome.message.as_deref().unwrap_or("no detail given");
    match (&outcome.error, &outcome.deferred) {
        (None, Some(deferred)) => format!("probe of {target} deferred ({deferred}): {message}"),
        (error, _) => {
            let reason = error.map_or("unknown", |r| r.as_str());
            format!("probe of {target} failed ({reason}): {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::burst::BurstReport;
    use crate::reason::ErrorReason;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn unit_conversions_match_perftest() {
        // 100 Gb/s line rate = 12.5e9 B/s.
        assert!(close(gbits_per_second(12.5e9), 100.0));
        assert!(close(mib_per_second(1_048_576.0), 1.0));
        // perftest's F constants: 1,048,576 for MiB/s and 125,000,000 for Gb/s.
        assert!(close(gbits_per_second(125_000_000.0), 1.0));
        assert!(close(mpps(175_758.0), 0.175758));
        assert_eq!(bandwidth_decimals(12.5e9), 2);
        assert_eq!(bandwidth_decimals(12_499_999.0), 6); // just under 0.1 Gb/s
        assert_eq!(bandwidth_decimals(12_500_000.0), 2);
    }

    #[test]
    fn small_formats() {
        assert_eq!(format_seconds(0.0123), "12.300 ms");
        assert_eq!(format_seconds(1.5), "1.500 s");
        assert_eq!(format_link_rate(Some(100_000_000_000)), "100.00 Gb/s");
        assert_eq!(format_link_rate(None), "unknown");
    }

    fn header() -> ReportHeader {
        ReportHeader {
            target: "10.0.0.2:18516".into(),
            tx_depth: 128,
            cq_mod: 1,
            post_list: 1,
            length: BurstLength::Messages(5000),
            rate_limit: None,
            traffic_class: 0,
            service_level: 0,
        }
    }

    fn report() -> BurstReport {
        // 5000 x 64 KiB in 28.4 ms.
        let elapsed = Duration::from_micros(28_400);
        let bytes = 5000 * 65536;
        BurstReport {
            bytes,
            messages: 5000,
            completions: 5000,
            elapsed,
            bandwidth_bytes_per_second: bytes as f64 / elapsed.as_secs_f64(),
            message_rate_per_second: 5000.0 / elapsed.as_secs_f64(),
            min_window_bandwidth_bytes_per_second: 10e9,
            window: Duration::from_millis(10),
            completion_gap_max: Duration::from_micros(52),
            cpu_seconds: Some(0.0123),
            per_qp_bandwidth_min_bytes_per_second: None,
            per_qp_bandwidth_max_bytes_per_second: None,
            per_qp_bandwidth_bytes_per_second: Vec::new(),
        }
    }

    fn outcome() -> ProbeOutcome {
        ProbeOutcome {
            report: Some(report()),
            target_bandwidth_bytes_per_second: Some(12.5e9),
            setup_seconds: Some(0.01231),
            validated: true,
            device: Some("mlx5_0".into()),
            peer_device: Some("mlx5_1".into()),
            mtu: Some(4096),
            message_size: 65536,
            qps: 1,
            local_link_rate_bits_per_second: Some(100_000_000_000),
            peer_link_rate_bits_per_second: Some(200_000_000_000),
            remote_counters: vec![],
            process_cpu_seconds: Some(0.015),
            ..ProbeOutcome::default()
        }
    }

    #[test]
    fn probe_table() {
        let text = format_probe_report(&header(), &outcome()).unwrap();
        println!("{text}");
        for needle in [
            "RDMA_Write BW Test",
            "Peer            : 10.0.0.2:18516",
            "Device          ",
            "mlx5_0",
            "Peer device     : mlx5_1",
            "Number of qps   : 1",
            "Message size    : 65536[B]",
            "Burst length    : 5000 messages",
            "TX depth        : 128",
            "CQ Moderation   : 1",
            "Mtu             : 4096[B]",
            "Link rate       : 100.00 Gb/s",
            "Peer link rate  : 200.00 Gb/s",
            "Rate limit      : unpaced (capacity)",
            "Target BW       : 100.00 Gb/sec",
            "#bytes     #iterations    BW average[Gb/sec]    BW average[MiB/sec]    MsgRate[Mpps]",
            "Min-window BW          : 80.00 Gb/sec  9536.74 MiB/sec  (10.000 ms windows)",
            "Longest completion gap : 0.052 ms",
            "Burst time             : 28.400 ms",
            "Setup time             : 12.310 ms",
            "CPU seconds, burst     : 0.0123",
            "CPU seconds, process   : 0.0150",
            "Validated              : yes",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        // 327,680,000 B / 28.4 ms = 11.538e9 B/s = 92.30 Gb/s = 11003.52 MiB/s; 0.176056 Mpps.
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("65536"))
            .unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols, ["65536", "5000", "92.30", "11003.52", "0.176056"]);
        assert!(!text.contains("per-QP"));
    }

    #[test]
    fn slow_bursts_get_six_decimals_and_rate_limit_is_shown() {
        let mut o = outcome();
        let r = o.report.as_mut().unwrap();
        r.bandwidth_bytes_per_second = 1_000_000.0; // 0.008 Gb/s
        r.min_window_bandwidth_bytes_per_second = 900_000.0;
        r.per_qp_bandwidth_min_bytes_per_second = Some(450_000.0);
        r.per_qp_bandwidth_bytes_per_second = vec![550_000.0, 450_000.0];
        o.udp_source_ports = vec![49153, 49154];
        o.remote_counters = vec![("port_rcv_data".into(), 42)];
        o.local_counters = vec![("completer_retry_err".into(), 3)];
        o.validated = false;
        let h = ReportHeader {
            rate_limit: Some("8Mbps".parse().unwrap()),
            ..header()
        };
        let text = format_probe_report(&h, &o).unwrap();
        assert!(text.contains(" 0.008000 "), "{text}");
        assert!(text.contains("0.953674"), "{text}"); // MiB/s with 6 decimals
        assert!(text.contains("Rate limit      : 8Mbps"), "{text}");
        o.target_bandwidth_bytes_per_second = Some(1e6);
        let text = format_probe_report(&h, &o).unwrap();
        assert!(text.contains("Target BW       : 0.008000 Gb/sec"), "{text}");
        assert!(
            text.contains("Lowest per-QP BW       : 0.003600 Gb/sec"),
            "{text}"
        );
        assert!(
            text.contains("QP 1 (UDP port 49154)  : 0.003600 Gb/sec"),
            "{text}"
        );
        assert!(
            text.contains("port_rcv_data") && text.contains("+42"),
            "{text}"
        );
        assert!(
            text.contains(" Local port counters during the burst")
                && text.contains("completer_retry_err")
                && text.contains("+3"),
            "{text}"
        );
        assert!(text.contains("Validated              : no"), "{text}");
        assert!(!text.contains("Local other traffic"), "{text}");
        o.local_other_traffic = Some(crate::port::OtherTraffic {
            transmit_bytes: Some(0),
            receive_bytes: None,
        });
        let text = format_probe_report(&h, &o).unwrap();
        assert!(
            text.contains("Local other traffic    : sent 0 B, received unknown"),
            "{text}"
        );
    }

    #[test]
    fn missing_figures_print_as_unknown_and_failed_probes_print_no_table() {
        let mut o = outcome();
        o.device = None;
        o.mtu = None;
        o.setup_seconds = None;
        o.target_bandwidth_bytes_per_second = None;
        o.local_link_rate_bits_per_second = None;
        let text = format_probe_report(&header(), &o).unwrap();
        assert!(text.contains("Device          : unknown"), "{text}");
        assert!(text.contains("Mtu             : unknown"), "{text}");
        assert!(text.contains("Setup time             : unknown"), "{text}");

        let failed = ProbeOutcome {
            error: Some(ErrorReason::Connect),
            message: Some("connection refused".into()),
            ..ProbeOutcome::default()
        };
        assert_eq!(format_probe_report(&header(), &failed), None);
        assert_eq!(
            format_probe_error("127.0.0.1:1", &failed),
            "probe of 127.0.0.1:1 failed (connect): connection refused"
        );
        let busy = ProbeOutcome {
            deferred: Some("busy".into()),
            message: Some("the responder is busy".into()),
            ..ProbeOutcome::default()
        };
        assert_eq!(
            format_probe_error("h:1", &busy),
            "probe of h:1 deferred (busy): the responder is busy"
        );
    }
}
