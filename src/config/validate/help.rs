//! What each field accepts, by field path, for the error messages of every check.

use crate::burst::plan::{MAX_QPS, MAX_TX_DEPTH};
use crate::config::address::{host_port_forms, DEFAULT_CONTROL_PORT, PERFTEST_PORT};
use crate::config::model::*;
use crate::units::{BYTE_SIZE_FORMS, RATE_LIMIT_FORMS};

/// What a field accepts, by field path (`peers[2].rate_limit`), for error messages.
pub(crate) fn field_help(path: &str) -> Option<String> {
    // `peers[2].burst.duration` → ["peers", "burst", "duration"]
    let mut parts: Vec<&str> = path
        .split('.')
        .map(|p| p.split('[').next().unwrap_or(p))
        .filter(|p| !p.is_empty())
        .collect();
    let field = parts.pop()?;
    let parent = parts.last().copied().unwrap_or("");
    let probe_level = matches!(parent, "defaults" | "peers");
    let s = |s: &str| Some(s.to_owned());
    match (parent, field) {
        ("", "node") => s("this node's name (no spaces), e.g. node-a or ${NODE_NAME}"),
        (_, "labels") => s("a mapping of label names to values, e.g. {rack: r1, tor: tor-3}"),
        ("", "listen") => s("a mapping {metrics: IP:PORT, control: IP:PORT}"),
        ("listen", "metrics") => s("IP:PORT to serve /metrics on, e.g. 0.0.0.0:9587 or [::]:9587"),
        ("listen", "control") => s("IP:PORT for the control channel, e.g. 0.0.0.0:18516"),
        ("", "auth") => {
            s("`auth: {psk_file: PATH}` or, to run without authentication, `auth: none`")
        }
        ("auth", "psk_file") => s("the path of the file holding the pre-shared key"),
        ("", "topology") => s("`topology: {slurm: PATH}`, a Slurm topology.conf (tree or block plugin)"),
        ("topology", "slurm") => s(
            "the path of a Slurm topology.conf: each node it names takes its leaf switch as its \
             `tor` label and the switch above as `spine` (or its block as `block`)",
        ),
        ("auth", "previous_psk_file") => s(
            "during a key rollover, the path of the file holding the previous pre-shared key \
             (also accepted; docs/security.md)",
        ),
        ("", "devices") => s(
            "a list of {name: DEVICE, port: N, rail: N, gid_index: auto | N}; \
                               without it every active RDMA device is used",
        ),
        ("devices", "name") => s("an RDMA device name, e.g. mlx5_0"),
        ("devices", "port") => s("a port number from 1 to 255 (default 1)"),
        ("devices", "rail") => s("a rail number from 0 to 65535"),
        ("devices", "gid_index") => s("auto or a GID table index (a whole number)"),
        ("", "exclude_devices") => s("a list of RDMA device names, e.g. [mlx5_8]"),
        ("", "rdma_networks") => s(
            "a list of networks in CIDR form, e.g. [10.1.0.0/16]: where peers' RDMA addresses \
             may be besides their control addresses",
        ),
        ("", "defaults") => s("a mapping of probe settings (interval, burst, rate_limit, ...)"),
        ("", "peers") => s("a list of {name: NAME, address: HOST:PORT, ...}"),
        ("peers", "name") => s(
            "the peer's name (no spaces), unique in the file; optional: a peer without one is \
             named by its address",
        ),
        ("peers", "address") => Some(format!(
            "{} ({PERFTEST_PORT} with mode: perftest)",
            host_port_forms(DEFAULT_CONTROL_PORT)
        )),
        ("peers", "mode") => s("exporter (the default) or perftest (a stock ib_write_bw server)"),
        ("", "discovery") => {
            s("a mapping {dns: [HOST:PORT, ...], files: [GLOB, ...], forget_after: DURATION, \
               refresh_interval: DURATION}")
        }
        ("discovery", "dns") => s("a list of HOST:PORT names to resolve"),
        ("discovery", "files") => {
            s("a list of file paths or globs, e.g. [/etc/rdma-probe/peers/*.yaml]")
        }
        ("discovery", "forget_after") => s("a duration greater than zero, e.g. 1h"),
        ("discovery", "refresh_interval") => s("a duration from 1s to 1h, e.g. 30s"),
        ("", "selection") => {
            s("a mapping {group_by: LABEL, max_peers: N, sample: N, round: DURATION}")
        }
        ("", "schedule") => s("a mapping {duty_cycle: PERCENT}"),
        ("", "series") => s("a mapping {budget: N, ttl: DURATION}"),
        ("", "judge") => s(
            "a mapping of the thresholds and windows each path is judged by (probes_bad, \
             degraded_ratio, ..., ping_baseline); docs/architecture.md, \"Judging paths\"",
        ),
        ("judge", f) => judge_field_help(f),
        ("series", "budget") => s("a whole number of per-path series from 1 to 10000000, e.g. 4750"),
        ("series", "ttl") => s("a duration from 1m to 7d, e.g. 10m"),
        ("", "limits") => s(
            "a mapping {max_sessions: N, max_pinned: SIZE, max_session_memory: SIZE}",
        ),
        ("limits", "max_sessions") => s(&format!(
            "the sessions this node serves at once, 1 to {MAX_MAX_SESSIONS} (default \
             {DEFAULT_MAX_SESSIONS})"
        )),
        ("limits", "max_pinned") => s(
            "the memory all served sessions pin together, e.g. 1GiB (the default), at least \
             max_session_memory",
        ),
        ("limits", "max_session_memory") => {
            s("the memory one session pins on each end, e.g. 64MiB (the default)")
        }
        ("schedule", "duty_cycle") => {
            s("a percentage of wall time each local device may spend bursting, from 0.1% to 100%, e.g. 5%")
        }
        ("selection", "group_by") => s("a label name, e.g. tor"),
        ("selection", "sample") => {
            s("a whole number of other-group peers per device and round, from 0 to 100000, e.g. 10")
        }
        ("selection", "max_peers") => s("a whole number of peers from 1 to 100000, e.g. 32"),
        ("selection", "round") => s("a duration from 1m to 24h, e.g. 10m"),
        ("burst", "duration") => s("a duration greater than zero and at most 1h, e.g. 500ms"),
        ("burst", "bytes") => Some(format!("{BYTE_SIZE_FORMS}; at least 1 byte")),
        ("burst", "messages") => s("a whole number of messages greater than zero, e.g. 4096"),
        _ if probe_level => probe_field_help(field),
        _ => None,
    }
}

fn probe_field_help(field: &str) -> Option<String> {
    let s = |s: &str| Some(s.to_owned());
    match field {
        "interval" => s("a duration greater than zero, e.g. 60s or 5m"),
        "jitter" => s("a percentage of the interval from 0% to 50%, e.g. 10%"),
        "message_size" => Some(format!("{BYTE_SIZE_FORMS}; from 1 B to 1 GiB")),
        "burst" => s("exactly one of {duration: 500ms}, {bytes: 256MiB} or {messages: 4096}"),
        "rate_limit" => Some(format!("{RATE_LIMIT_FORMS}; or `unpaced`")),
        "unpaced_every" => s("a whole number N: every Nth burst of a path runs unpaced (0: never)"),
        "qps" => Some(format!("a whole number from 1 to {MAX_QPS}")),
        "tx_depth" => Some(format!("a whole number from 1 to {MAX_TX_DEPTH}")),
        "cq_mod" => s("auto or a whole number from 1 to tx_depth"),
        "post_list" => s("a whole number from 1 to tx_depth"),
        "mtu" => s("auto, 256, 512, 1024, 2048 or 4096"),
        "traffic_class" => s("a whole number from 0 to 255 (RoCE v2: DSCP << 2)"),
        "service_level" => s("a whole number from 0 to 15"),
        "qp_timeout" => s("a whole number from 0 to 31 (4.096 µs × 2^N)"),
        "timeout" => s("a duration greater than zero, e.g. 10s"),
        _ => None,
    }
}

fn judge_field_help(field: &str) -> Option<String> {
    let count = |what: &str| {
        Some(format!(
            "{what}, a whole number from 1 to {MAX_JUDGE_COUNT}"
        ))
    };
    let window = |what: &str| {
        Some(format!(
            "{what}, a whole number from 1 to {MAX_JUDGE_WINDOW}"
        ))
    };
    let share = |what: &str| Some(format!("{what}, a percentage above 0% and at most 100%"));
    match field {
        "probes_bad" => count("bad probes in a row that make a path failing, slow, ... e.g. 3"),
        "degraded_ratio" => share("achieved / target bandwidth under which a path is slow, e.g. 70%"),
        "baseline_drop" => share("the share of its usual bandwidth under which a path is below its baseline, e.g. 85%"),
        "stall_min_window_ratio" => share("a burst's lowest / average bandwidth under which it stalled, e.g. 25%"),
        "gap_factor" => count("how many times its median gap a path's longest gap must be, e.g. 10"),
        "gap_floor" => Some("the shortest gap judged, a duration, e.g. 10ms".to_owned()),
        "stale_probes" => count("planned intervals without a probe after which a path is stale, e.g. 3"),
        "baseline" => window("probe intervals a path's own medians cover, e.g. 60"),
        "validation_window" => window("probe intervals a path stays corrupt after bad data, e.g. 10"),
        "responder_window" => window("probe intervals the responder counts a prober after its last burst, e.g. 30"),
        "ping_loss_ratio" => share("the share of pings lost from which a path is lossy, e.g. 2%"),
        "ping_loss_min" => window("the fewest lost pings that make a path lossy, e.g. 3"),
        "ping_loss_below" => share("the share of pings lost from which a total fault owns it, above ping_loss_ratio, e.g. 50%"),
        "ping_loss_window" => window("pings the loss share is taken over, e.g. 60"),
        "ping_rtt_factor" => count("how many times its usual median RTT a path's must be, e.g. 3"),
        "ping_rtt_floor" => Some("the lowest median RTT judged high, a duration, e.g. 100us".to_owned()),
        "ping_baseline" => window("pings a path's own RTT median covers, e.g. 720"),
        _ => None,
    }
}
