//! The configs the deployment ships pass `check-config` as each node would run them: the
//! Kubernetes ConfigMap's (deploy/kubernetes/base/config.yaml: one file for every node, each node
//! `NODE_NAME` = its node name, skipping its own entry) and the systemd example
//! (deploy/systemd/config.yaml, its key from the service's credentials directory). deploy/check
//! proves that the rendered ConfigMap holds exactly the first file. The exporter's `judge:`
//! defaults are the alert rules' thresholds (deploy/prometheus/generate).

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-probe-exporter");
const KUBERNETES: &str = "deploy/kubernetes/base/config.yaml";
const SYSTEMD: &str = "deploy/systemd/config.yaml";

struct Checked {
    code: i32,
    stdout: String,
    stderr: String,
}

fn check_config(file: &str, env: &[(&str, &str)]) -> Checked {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["check-config", file])
        .env_remove("NODE_NAME")
        .env_remove("HOST_IP")
        .env_remove("CREDENTIALS_DIRECTORY")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run check-config");
    Checked {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The peer lines of check-config's output: `NAME ADDRESS ...`.
fn peer_line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no peer {name} in:\n{stdout}"))
}

#[test]
fn the_configmap_config_passes_on_every_listed_node_which_skips_itself() {
    for (node, address) in [
        ("gpu-a01", "192.0.2.1"),
        ("gpu-a02", "192.0.2.2"),
        ("gpu-a03", "192.0.2.3"),
    ] {
        let r = check_config(KUBERNETES, &[("NODE_NAME", node), ("HOST_IP", address)]);
        assert_eq!(r.code, 0, "{node}:\n{}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains(&format!("node: {node}\n")),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout
                .contains("auth: pre-shared key from /etc/rdma-probe/secret/psk"),
            "the key is the Secret's mount:\n{}",
            r.stdout
        );
        assert!(
            r.stdout.contains("peers: 3 (2 probed, 1 skipped"),
            "{}",
            r.stdout
        );
        assert!(
            peer_line(&r.stdout, node).ends_with("skipped: itself"),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn the_configmap_config_passes_on_a_node_not_yet_listed() {
    let r = check_config(
        KUBERNETES,
        &[("NODE_NAME", "gpu-new"), ("HOST_IP", "192.0.2.9")],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("peers: 3 (3 probed, 0 skipped"),
        "{}",
        r.stdout
    );
}

#[test]
fn the_configmap_config_refuses_to_run_without_node_name() {
    // The DaemonSet sets NODE_NAME from spec.nodeName; without it a node would not know itself.
    let r = check_config(KUBERNETES, &[("HOST_IP", "192.0.2.1")]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("NODE_NAME"), "{}", r.stderr);
}

#[test]
fn the_configmap_config_refuses_to_run_without_the_host_address() {
    // The DaemonSet sets HOST_IP from status.hostIP: the servers listen on the node's address,
    // never on every address of the host network.
    let r = check_config(KUBERNETES, &[("NODE_NAME", "gpu-a01")]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("HOST_IP"), "{}", r.stderr);
}

#[test]
fn the_systemd_config_reads_the_key_from_the_credentials_directory() {
    let r = check_config(
        SYSTEMD,
        &[
            ("NODE_NAME", "hpc-002"),
            (
                "CREDENTIALS_DIRECTORY",
                "/run/credentials/rdma-probe-exporter.service",
            ),
        ],
    );
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("auth: pre-shared key from /run/credentials/rdma-probe-exporter.service/psk"),
        "{}",
        r.stdout
    );
    assert!(
        peer_line(&r.stdout, "hpc-002").ends_with("skipped: itself"),
        "{}",
        r.stdout
    );
    // By hand, outside the service: the file itself.
    let r = check_config(SYSTEMD, &[("NODE_NAME", "hpc-001")]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("auth: pre-shared key from /etc/rdma-probe/psk"),
        "{}",
        r.stdout
    );
}

/// The exporter judges each path by the alert rules' own thresholds and windows: its `judge:`
/// defaults are the generator's (deploy/prometheus/generate --print-judge-defaults).
#[test]
fn the_exporters_judge_defaults_are_the_alert_rules_thresholds() {
    let out = Command::new("python3")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["deploy/prometheus/generate", "--print-judge-defaults"])
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/prometheus/generate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rules: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("JSON from --print-judge-defaults");
    let j = rdma_probe_exporter::config::Judge::default();
    let ours: serde_json::Map<String, serde_json::Value> = serde_json::json!({
        "probes_bad": j.probes_bad,
        "degraded_ratio": j.degraded_ratio,
        "baseline_drop": j.baseline_drop,
        "stall_min_window_ratio": j.stall_min_window_ratio,
        "gap_factor": j.gap_factor,
        "gap_floor_seconds": j.gap_floor.as_secs_f64(),
        "stale_probes": j.stale_probes,
        "baseline": j.baseline,
        "validation_window": j.validation_window,
        "responder_window": j.responder_window,
        "ping_loss_ratio": j.ping_loss_ratio,
        "ping_loss_min": j.ping_loss_min,
        "ping_loss_below": j.ping_loss_below,
        "ping_loss_window": j.ping_loss_window,
        "ping_rtt_factor": j.ping_rtt_factor,
        "ping_rtt_floor_seconds": j.ping_rtt_floor.as_secs_f64(),
        "ping_baseline": j.ping_baseline,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    let keys = |m: &serde_json::Map<String, serde_json::Value>| -> Vec<String> {
        m.keys().cloned().collect()
    };
    assert_eq!(keys(&ours), keys(&rules), "the same settings on both sides");
    for (name, value) in &rules {
        let (a, b) = (value.as_f64(), ours[name].as_f64());
        assert!(
            a.is_some() && a == b,
            "judge.{name}: the rules say {value}, the exporter {}",
            ours[name]
        );
    }
}
