//! Black-box tests of the `rdma-probe-exporter` binary: help, usage errors, and behaviour on a
//! host without RDMA. Network traffic goes only to 127.0.0.1.
//!
//! Which error a probe reports first on a host without RDMA: `no_device`. The prober opens the
//! local device before it connects (prober/session.rs, `Session::establish`), so a node without RDMA
//! says so without touching the network, and the operator is not sent chasing a peer. On a host
//! with RDMA the same probe to a closed loopback port fails with `connect` (or `port_down` /
//! `no_device` if the local port is unusable); the tests below accept those there.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rdma-probe-exporter");

/// Every run is bounded: a hang is a failure, not a stuck test suite.
const LIMIT: Duration = Duration::from_secs(60);

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// No Rust panic reached the user, whatever the exit code.
    fn assert_no_panic(&self) {
        for text in [&self.stdout, &self.stderr] {
            assert!(
                !text.contains("panicked") && !text.contains("RUST_BACKTRACE"),
                "panic in output:\n{}",
                self.describe()
            );
        }
    }

    fn describe(&self) -> String {
        format!(
            "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("NODE_NAME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` at most `limit`, killing it if it overruns (and failing the test).
fn wait_bounded(mut child: Child, limit: Duration) -> Run {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{BIN} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn run(args: &[&str]) -> Run {
    let run = wait_bounded(command(args).spawn().expect("start the binary"), LIMIT);
    run.assert_no_panic();
    run
}

/// Whether this host has an RDMA device (then device-dependent tests check the other branch).
fn host_has_rdma() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
}

/// Whether some RDMA port of this host is ACTIVE: a responder, or an exporter on every active
/// device, runs until it is stopped exactly then, and fails at start otherwise.
fn host_has_active_rdma_port() -> bool {
    let Ok(devices) = std::fs::read_dir("/sys/class/infiniband") else {
        return false;
    };
    devices.flatten().any(|device| {
        let ports = std::fs::read_dir(device.path().join("ports"));
        ports.into_iter().flatten().flatten().any(|port| {
            std::fs::read_to_string(port.path().join("state")).is_ok_and(|s| s.contains("ACTIVE"))
        })
    })
}

/// A usage error: exit 2, a message on stderr containing every `needle`, nothing on stdout.
fn assert_usage_error(args: &[&str], needles: &[&str]) {
    let r = run(args);
    assert_eq!(r.code(), 2, "{args:?}: {}", r.describe());
    assert!(r.stdout.is_empty(), "{args:?}: {}", r.describe());
    assert!(
        r.stderr.starts_with("error: "),
        "{args:?}: {}",
        r.describe()
    );
    for needle in needles {
        assert!(
            r.stderr.contains(needle),
            "{args:?}: missing {needle:?}: {}",
            r.describe()
        );
    }
}

fn probe_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["probe", "127.0.0.1:1", "--node", "test"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn help_names_the_tool_and_its_subcommands() {
    let r = run(&["--help"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    for needle in [
        "RDMA WRITE bursts",
        "ib_write_bw",
        "responder",
        "probe",
        "devices",
        "check-config",
        "--log-format",
        "--log-level",
        "Exit status",
    ] {
        assert!(
            r.stdout.contains(needle),
            "missing {needle:?}: {}",
            r.describe()
        );
    }
}

#[test]
fn no_arguments_prints_help_and_fails() {
    let r = run(&[]);
    assert_eq!(r.code(), 2, "{}", r.describe());
    assert!(r.stderr.contains("Usage:"), "{}", r.describe());
}

#[test]
fn version() {
    let r = run(&["--version"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    assert!(
        r.stdout.contains(env!("CARGO_PKG_VERSION")),
        "{}",
        r.describe()
    );
}

#[test]
fn subcommand_help_teaches_units_defaults_and_examples() {
    let r = run(&["probe", "--help"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    for needle in [
        "Examples:",
        "--rate-limit",
        "Gbps",
        "MiB/s",
        "msg/s",
        "25%",
        "[default: 65536]",
        "[default: 128]",
        "--messages",
        "--duration",
        "--psk-file",
        "--no-auth",
        "--json",
        "--peer-rail <N>",
        "the responder's first device",
    ] {
        assert!(
            r.stdout.contains(needle),
            "missing {needle:?}: {}",
            r.describe()
        );
    }
    let r = run(&["responder", "--help"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    for needle in [
        "Examples:",
        "[default: 0.0.0.0:18516]",
        "[default: 16]",
        "[default: 1GiB]",
        "[default: 5m]",
        "[default: 64MiB]",
        "SIGTERM",
        "--device <NAME[:RAIL]>",
        "--device mlx5_0:0 --device mlx5_1:1",
    ] {
        assert!(
            r.stdout.contains(needle),
            "missing {needle:?}: {}",
            r.describe()
        );
    }
    let r = run(&["devices", "--help"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    assert!(r.stdout.contains("Examples:"), "{}", r.describe());
}

#[test]
fn probe_refuses_bad_flags_with_clear_messages() {
    assert_usage_error(
        &probe_args(&["--no-auth", "--size", "0"]),
        &["--size", "greater than zero"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--rate-limit", "5furlongs"]),
        &[
            "--rate-limit",
            "unknown unit \"furlongs\"",
            "Gbps",
            "MiB/s",
            "msg/s",
            "%",
        ],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--rate-limit", "10Gb/s"]),
        &["--rate-limit", "ambiguous"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--qps", "0"]),
        &["--qps", "1..=64"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--tx-depth", "0"]),
        &["--tx-depth"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--messages", "10", "--duration", "1s"]),
        &["--messages", "--duration", "cannot be used with"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--cq-mod", "500"]),
        &["do not combine", "--cq-mod"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--mtu", "1500"]),
        &["not an RDMA MTU"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--timeout", "0s"]),
        &["--timeout"],
    );
    assert_usage_error(&["probe", "--no-auth"], &["<HOST:PORT>"]);
    assert_usage_error(&["probe", "host:99999", "--no-auth"], &["invalid port"]);
}

#[test]
fn auth_choice_is_required() {
    assert_usage_error(
        &probe_args(&[]),
        &["authentication is required", "--psk-file", "--no-auth"],
    );
    assert_usage_error(
        &["responder", "--node", "test"],
        &["authentication is required", "--psk-file", "--no-auth"],
    );
    assert_usage_error(
        &probe_args(&["--no-auth", "--psk-file", "/nonexistent"]),
        &["cannot be used with"],
    );
}

/// A file only its owner can read, as a key file must be.
fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path =
        std::env::temp_dir().join(format!("rdma-probe-cli-test-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[test]
fn psk_file_problems_are_reported_without_the_key() {
    assert_usage_error(
        &probe_args(&["--psk-file", "/nonexistent/psk"]),
        &[
            "--psk-file",
            "cannot read pre-shared key file /nonexistent/psk",
        ],
    );
    // A key of an earlier version (a passphrase): refused, with the command for a new key.
    let old = temp_file("old", b"tiny-secret\n");
    let r = run(&probe_args(&["--psk-file", old.to_str().unwrap()]));
    std::fs::remove_file(&old).ok();
    assert_eq!(r.code(), 2, "{}", r.describe());
    for needle in [
        "is not base64",
        "at least 32 random bytes",
        &format!("head -c 32 /dev/urandom | base64 > {}", old.display())[..],
    ] {
        assert!(r.stderr.contains(needle), "{needle}: {}", r.describe());
    }
    assert!(
        !r.stderr.contains("tiny-secret"),
        "key leaked: {}",
        r.describe()
    );
    // Base64 of 16 bytes: too short.
    let short = temp_file("short", b"dGlueS1zZWNyZXQtMTZi\n");
    let r = run(&probe_args(&["--psk-file", short.to_str().unwrap()]));
    std::fs::remove_file(&short).ok();
    assert_eq!(r.code(), 2, "{}", r.describe());
    assert!(r.stderr.contains("at least 32"), "{}", r.describe());
}

#[test]
fn a_key_file_others_can_read_is_refused_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let path = temp_file("world-readable", b"a-secret-key-of-enough-length\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = run(&probe_args(&["--psk-file", path.to_str().unwrap()]));
    std::fs::remove_file(&path).ok();
    assert_eq!(r.code(), 2, "{}", r.describe());
    for needle in [
        &format!("pre-shared key file {} has mode 0644", path.display())[..],
        "users other than its owner and group can access it",
        &format!("chmod 600 {}", path.display()),
    ] {
        assert!(r.stderr.contains(needle), "{needle}: {}", r.describe());
    }
    assert!(
        !r.stderr.contains("a-secret-key"),
        "key leaked: {}",
        r.describe()
    );
}

#[test]
fn devices_without_rdma_says_so() {
    let r = run(&["devices"]);
    if host_has_rdma() {
        assert_eq!(r.code(), 0, "{}", r.describe());
        assert!(r.stdout.contains("port "), "{}", r.describe());
        return;
    }
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    assert!(
        r.stderr.starts_with("error: ") && r.stderr.contains("no RDMA device"),
        "{}",
        r.describe()
    );
}

#[test]
fn devices_json() {
    let r = run(&["devices", "--json", "--log-format", "json"]);
    if host_has_rdma() {
        assert_eq!(r.code(), 0, "{}", r.describe());
        let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("devices --json");
        assert!(v.is_array(), "{}", r.describe());
        return;
    }
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    assert!(r.stderr.contains("no RDMA device"), "{}", r.describe());
}

/// A fixture sysfs tree (tests/fixtures/sysfs): `devices` lists what it says even where verbs
/// has no device, and never touches an excluded one.
fn sysfs_fixture(tree: &str) -> String {
    format!("{}/tests/fixtures/sysfs/{tree}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn devices_from_a_sysfs_tree() {
    let root = sysfs_fixture("mlx5-roce");
    let r = run(&[
        "devices",
        "--json",
        "--sysfs-root",
        &root,
        "--exclude",
        "mlx5_8",
    ]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    if !host_has_rdma() {
        assert!(
            r.stderr.contains("no RDMA device") && r.stderr.contains("sysfs says only"),
            "{}",
            r.describe()
        );
    }
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("devices --json");
    let devices = v.as_array().expect("an array");
    let by_name = |name: &str| devices.iter().find(|d| d["name"] == name);
    let m0 = by_name("mlx5_0").unwrap_or_else(|| panic!("mlx5_0: {}", r.describe()));
    let port = &m0["ports"][0]["sysfs"];
    assert_eq!(
        port["link_rate_bits_per_second"], 100_000_000_000u64,
        "{m0}"
    );
    assert_eq!(port["state"], "active", "{m0}");
    assert_eq!(port["phys_state"], "link_up", "{m0}");
    assert_eq!(port["netdev"]["name"], "ens1f0np0", "{m0}");
    assert_eq!(port["counters"]["out_of_sequence"], 12, "{m0}");
    assert_eq!(m0["pci"]["numa_node"], 0, "{m0}");
    let m1 = by_name("mlx5_1").expect("mlx5_1");
    assert_eq!(m1["pci"]["link"]["width"], 8, "{m1}");
    assert_eq!(m1["pci"]["link"]["max_width"], 16, "{m1}");
    assert!(by_name("mlx5_8").is_none(), "excluded: {}", r.stdout);

    let r = run(&["devices", "--sysfs-root", &sysfs_fixture("rxe")]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    assert!(
        r.stdout
            .contains("rate 2.5 Gb/sec (1X SDR), netdev eth0 speed unknown MTU 1500"),
        "{}",
        r.describe()
    );
    assert!(
        r.stdout.contains("completer_retry_err=9"),
        "{}",
        r.describe()
    );
}

#[test]
fn devices_exclude_names_are_checked() {
    assert_usage_error(&["devices", "--exclude", ""], &["--exclude"]);
    assert_usage_error(&["devices", "--exclude", "a b"], &["--exclude"]);
}

#[test]
fn failed_probe_prints_one_json_object_and_exits_1() {
    // Port 1 on loopback: nothing listens there.
    let r = run(&probe_args(&["--no-auth", "--json", "--timeout", "5s"]));
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.describe());
    let v: serde_json::Value =
        serde_json::from_str(r.stdout.trim()).expect("stdout is one JSON object");
    assert!(v.is_object(), "{}", r.describe());
    let reason = v["error"].as_str().expect("error is set");
    if host_has_rdma() {
        assert!(
            ["connect", "no_device", "port_down"].contains(&reason),
            "{}",
            r.describe()
        );
    } else {
        assert_eq!(reason, "no_device", "{}", r.describe());
        assert!(
            v["message"]
                .as_str()
                .unwrap_or("")
                .contains("no RDMA device"),
            "{}",
            r.describe()
        );
    }
    assert_eq!(v["validated"], false, "{}", r.describe());
    assert_eq!(v["message_size"], 65536, "{}", r.describe());
    // The same error, with its reason, on stderr.
    assert!(
        r.stderr
            .contains(&format!("error: probe of 127.0.0.1:1 failed ({reason})")),
        "{}",
        r.describe()
    );
}

#[test]
fn failed_probe_in_table_mode_prints_the_error_only() {
    let r = run(&probe_args(&["--no-auth", "--timeout", "5s"]));
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    assert!(
        r.stderr.contains("error: probe of 127.0.0.1:1 failed ("),
        "{}",
        r.describe()
    );
}

/// An unauthenticated responder on an ephemeral loopback port.
const LOOPBACK_RESPONDER: [&str; 6] = [
    "responder",
    "--no-auth",
    "--node",
    "test",
    "--listen",
    "127.0.0.1:0",
];

/// A responder either fails to start with a clear error (no usable RDMA port here) or runs
/// until SIGTERM and then exits 0.
/// Starts a long-running command. On a host with an active RDMA port it must still be running
/// after 1.5 s: it gets SIGTERM and is waited for at most 15 s. Without one it must exit by
/// itself (within the usual limit) and is never signalled, so that a command that hangs there
/// fails instead of passing as stopped. Returns the run and whether it was stopped by the
/// signal. Never a panic either way.
fn run_until_sigterm(args: &[&str]) -> (Run, bool) {
    let mut child = command(args).spawn().expect("start the binary");
    let pid = child.id();
    let stopped = host_has_active_rdma_port();
    if stopped {
        std::thread::sleep(Duration::from_millis(1500));
        if let Some(status) = child.try_wait().unwrap() {
            let r = wait_bounded(child, LIMIT);
            panic!(
                "exited ({status}) before SIGTERM on a host with an active RDMA port:\n{}",
                r.describe()
            );
        }
    }
    let r = if stopped {
        let kill = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(kill.success());
        wait_bounded(child, Duration::from_secs(15))
    } else {
        wait_bounded(child, LIMIT)
    };
    r.assert_no_panic();
    (r, stopped)
}

#[test]
fn responder_fails_clearly_or_stops_gracefully_on_sigterm() {
    let (r, stopped) = run_until_sigterm(&LOOPBACK_RESPONDER);
    if stopped {
        assert_eq!(r.code(), 0, "{}", r.describe());
        assert!(r.stderr.contains("shutting down"), "{}", r.describe());
        return;
    }
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr.contains("error: responder failed: "),
        "{}",
        r.describe()
    );
    if !host_has_rdma() {
        assert!(r.stderr.contains("no RDMA device"), "{}", r.describe());
    }
}

#[test]
fn responder_refuses_bad_limits() {
    let base = ["responder", "--no-auth", "--node", "test"];
    for (extra, needle) in [
        (&["--max-sessions", "0"][..], "--max-sessions"),
        (&["--max-pinned", "0"], "--max-pinned"),
        (&["--max-pinned", "lots"], "--max-pinned"),
        (&["--idle-timeout", "0s"], "--idle-timeout"),
        (&["--listen", "not-an-address"], "--listen"),
        (&["--metrics-listen", "9587"], "--metrics-listen"),
        (&["--port", "0"], "--port"),
        (&["--device", "mlx5_0:zero"], "NAME:RAIL"),
        (
            &["--device", "a:0", "--device", "b:0"],
            "rail 0 is given to both a and b",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        assert_usage_error(&args, &[needle]);
    }
}

/// A metrics address already taken is a clear error before anything else starts.
#[test]
fn responder_reports_a_taken_metrics_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut args = LOOPBACK_RESPONDER.to_vec();
    args.extend(["--metrics-listen", &addr]);
    let r = run(&args);
    r.assert_no_panic();
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr
            .contains(&format!("cannot listen on {addr} (--metrics-listen)")),
        "{}",
        r.describe()
    );
}

#[test]
fn bad_log_flags_are_usage_errors() {
    assert_usage_error(&["--log-format", "xml", "devices"], &["--log-format"]);
    assert_usage_error(&["--log-level", "x=loud", "devices"], &["--log-level"]);
    // RUST_LOG feeds the same flag.
    let r = wait_bounded(
        command(&["devices"])
            .env("RUST_LOG", "x=loud")
            .spawn()
            .unwrap(),
        LIMIT,
    );
    r.assert_no_panic();
    assert_eq!(r.code(), 2, "{}", r.describe());
}

#[test]
fn node_name_comes_from_the_flag_then_node_name_then_the_host_name() {
    let probe = ["probe", "127.0.0.1:1", "--no-auth", "--log-level", "debug"];
    let with_env = |value: &str, extra: &[&str]| {
        let mut args = probe.to_vec();
        args.extend_from_slice(extra);
        let r = wait_bounded(
            command(&args).env("NODE_NAME", value).spawn().unwrap(),
            LIMIT,
        );
        r.assert_no_panic();
        r
    };
    let r = with_env("node-from-env", &[]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stderr.contains("node-from-env"), "{}", r.describe());
    let r = with_env("node-from-env", &["--node", "node-from-flag"]);
    assert!(r.stderr.contains("node-from-flag"), "{}", r.describe());
    assert!(!r.stderr.contains("node-from-env"), "{}", r.describe());
    // Empty means unset (a manifest without the field): the host name, no error.
    let r = with_env("", &[]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stderr.contains("probing"), "{}", r.describe());
    let r = with_env("two words", &[]);
    assert_eq!(r.code(), 2, "{}", r.describe());
    assert!(r.stderr.contains("NODE_NAME"), "{}", r.describe());
}

#[test]
fn check_config_prints_the_resolved_config() {
    let lab = concat!(env!("CARGO_MANIFEST_DIR"), "/config/lab.yaml");
    let r = wait_bounded(
        command(&["check-config", lab])
            .env("NODE_NAME", "node2")
            .spawn()
            .unwrap(),
        LIMIT,
    );
    r.assert_no_panic();
    assert_eq!(r.code(), 0, "{}", r.describe());
    for needle in [
        "node: node2",
        "auth: pre-shared key from /tmp/psk",
        "rxe0 port 1 rail 0",
        "node1 192.0.2.11:18516 mode exporter",
        "node2 192.0.2.12:18516 skipped: itself",
        "node3 192.0.2.13:18516 mode exporter",
        "rate_limit=20Mbps",
    ] {
        assert!(
            r.stdout.contains(needle),
            "missing {needle:?}: {}",
            r.describe()
        );
    }
    assert!(r.stderr.is_empty(), "{}", r.describe());
    let r = run(&["check-config", "--help"]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    assert!(r.stdout.contains("Examples:"), "{}", r.describe());
}

#[test]
fn check_config_names_the_line_and_column_of_an_error() {
    let bad = temp_file(
        "bad-config.yaml",
        b"node: a\nauth: none\npeers:\n  - {name: b, address: 10.0.0.2, rate_limit: 10Gb/s}\n",
    );
    let r = run(&["check-config", bad.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stdout.is_empty(), "{}", r.describe());
    let at = format!("{}:4:46: peers[0].rate_limit: ", bad.display());
    assert!(
        r.stderr.starts_with(&format!("error: {at}")),
        "{}",
        r.describe()
    );
    assert!(r.stderr.contains("ambiguous"), "{}", r.describe());
    let unset = temp_file("unset-config.yaml", b"node: ${NODE_NAME}\nauth: none\n");
    // `command` removes NODE_NAME from the environment.
    let r = run(&["check-config", unset.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr
            .contains(":1:7: node: environment variable NODE_NAME is not set"),
        "{}",
        r.describe()
    );
    std::fs::remove_file(&bad).ok();
    std::fs::remove_file(&unset).ok();
    let r = run(&["check-config", "/nonexistent/config.yaml"]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr.contains("/nonexistent/config.yaml: cannot read"),
        "{}",
        r.describe()
    );
    assert_usage_error(&["check-config"], &["FILE"]);
}

/// A loopback port free a moment ago (the config refuses port 0: peers need a fixed one).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A config for `run` on free loopback ports; `devices` as given.
fn run_config(name: &str, devices: &str) -> PathBuf {
    let (metrics, control) = (free_port(), free_port());
    temp_file(
        name,
        format!(
            "node: test\nauth: none\n\
             listen: {{metrics: 127.0.0.1:{metrics}, control: 127.0.0.1:{control}}}\n\
             {devices}\npeers:\n  - {{name: peer-a, address: 127.0.0.1:1}}\n"
        )
        .as_bytes(),
    )
}

/// Runs the binary with `args` as a process without any capability (an empty bounding set, so
/// not even root keeps CAP_IPC_LOCK) and RLIMIT_MEMLOCK at `memlock` bytes.
fn run_without_ipc_lock(memlock: u64, args: &[&str]) -> Run {
    let limit = format!("--memlock={memlock}:{memlock}");
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
        "prlimit",
        &limit,
        "--",
        BIN,
    ])
    .args(args)
    .env_remove("RUST_LOG")
    .env_remove("NODE_NAME")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let run = wait_bounded(cmd.spawn().expect("start prlimit (util-linux)"), LIMIT);
    run.assert_no_panic();
    run
}

#[test]
fn a_memlock_limit_below_what_sessions_may_pin_stops_the_start() {
    // The exporter: 1 GiB for the sessions it serves, one session per probed path.
    let file = run_config(
        "run-memlock.yaml",
        "devices:\n  - {name: rdma-probe-test-missing0, port: 1}\n\
         limits: {max_pinned: 4MiB, max_session_memory: 1MiB}",
    );
    let r = run_without_ipc_lock(64 << 10, &["run", "--config", file.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    for needle in [
        "RLIMIT_MEMLOCK is 64KiB and the process lacks CAP_IPC_LOCK",
        "may pin up to 5MiB (4MiB for the at most 16 sessions it serves and 1MiB for the \
         sessions of the 1 path it probes)",
        "ulimit -l unlimited",
        "LimitMEMLOCK=infinity",
        "lower limits.max_pinned",
    ] {
        assert!(r.stderr.contains(needle), "{needle}: {}", r.describe());
    }
    // Enough (within the 8 MiB a process may raise its limit to without privilege): the start
    // goes on to the (missing) device.
    let r = run_without_ipc_lock(6 << 20, &["run", "--config", file.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(!r.stderr.contains("RLIMIT_MEMLOCK"), "{}", r.describe());
    assert!(
        r.stderr.contains("rdma-probe-test-missing0"),
        "{}",
        r.describe()
    );

    // The responder: its pinned-memory budget.
    let listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "responder",
        "--no-auth",
        "--node",
        "b",
        "--listen",
        &listen,
        "--max-pinned",
        "8MiB",
    ];
    let r = run_without_ipc_lock(4 << 20, &args);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr.contains("RLIMIT_MEMLOCK is 4MiB")
            && r.stderr.contains("up to 8MiB")
            && r.stderr.contains("lower --max-pinned"),
        "{}",
        r.describe()
    );
}

#[test]
fn run_reports_a_bad_config_with_its_position_and_starts_nothing() {
    let file = temp_file(
        "run-bad.yaml",
        b"node: test\nauth: none\npeers: [ {name: a\n",
    );
    let r = run(&["run", "--config", file.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(r.stderr.contains("run-bad.yaml:"), "{}", r.describe());
    let missing = run(&["run", "--config", "/nonexistent/rdma-probe.yaml"]);
    assert_eq!(missing.code(), 1, "{}", missing.describe());
    assert!(
        missing.stderr.contains("/nonexistent/rdma-probe.yaml"),
        "{}",
        missing.describe()
    );
    assert_usage_error(&["run"], &["--config"]);
}

#[test]
fn run_without_the_configured_device_fails_clearly_or_stops_gracefully_on_sigterm() {
    let file = run_config(
        "run-device.yaml",
        "devices:\n  - {name: rdma-probe-test-missing0, port: 1}",
    );
    let r = run(&["run", "--config", file.to_str().unwrap()]);
    // No such device on any host: the exporter says which one and exits 1, never panics.
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr.contains("rdma-probe-test-missing0"),
        "{}",
        r.describe()
    );

    // Every active device (the default): none here fails the same way; with one, the exporter
    // runs until SIGTERM and exits 0.
    let file = run_config("run-all.yaml", "");
    let (r, stopped) = run_until_sigterm(&["run", "--config", file.to_str().unwrap()]);
    if stopped {
        assert_eq!(r.code(), 0, "{}", r.describe());
        return;
    }
    assert_eq!(r.code(), 1, "{}", r.describe());
    assert!(
        r.stderr.contains("error: exporter failed: "),
        "{}",
        r.describe()
    );
    if !host_has_rdma() {
        assert!(r.stderr.contains("RDMA"), "{}", r.describe());
    }
}

/// The value after `label` on the line that starts with it (after indentation), as a duration.
fn report_duration(report: &str, label: &str) -> Duration {
    let line = report
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{report}"));
    let value = line[label.len()..].trim();
    // A duration as humantime prints it, up to the first `(`.
    let value = value.split('(').next().unwrap().trim();
    humantime::parse_duration(value).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// The three figures of a `min / median / max` line.
fn report_summary(report: &str, label: &str) -> [f64; 3] {
    let line = report
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{report}"));
    let numbers: Vec<f64> = line[label.len()..]
        .split('/')
        .map(|v| {
            let v = v.split_whitespace().next().unwrap_or("");
            v.trim_end_matches('%').parse().unwrap()
        })
        .collect();
    [numbers[0], numbers[1], numbers[2]]
}

#[test]
fn simulate_a_small_cluster_within_its_bounds() {
    // 48 nodes in 6 ToRs of 8, 2 rails: every peer of the ToR each round, 10 paths per device to
    // other ToRs, every ToR pair within 2 rounds and every path within 5 (20 and 50 minutes).
    let r = run(&[
        "simulate",
        "--nodes",
        "48",
        "--nodes-per-tor",
        "8",
        "--rails",
        "2",
        "--max-peers",
        "8",
        "--duration",
        "2h",
    ]);
    assert_eq!(r.code(), 0, "{}", r.describe());
    let out = &r.stdout;
    assert!(
        out.contains(
            "cluster: 48 nodes, 2 rails, 6 groups of up to 8 (same group + sample), 2h simulated"
        ),
        "{out}"
    );
    assert!(
        out.contains("ToR pair per rail      within 2 rounds = 20m"),
        "{out}"
    );
    assert!(
        out.contains("every single path      within 5 rounds = 50m"),
        "{out}"
    );
    assert!(
        out.contains("sampled paths          10 per device and round"),
        "{out}"
    );
    // Measured against the bounds.
    let same = report_duration(out, "longest gap, same-group path");
    let bound = report_duration(out, "same-group path        every");
    assert!(
        same <= bound + Duration::from_secs(120),
        "{same:?} > {bound:?}: {out}"
    );
    assert!(same <= Duration::from_secs(600), "{out}");
    let pair = report_duration(out, "longest gap, ToR pair per rail");
    assert!(pair <= Duration::from_secs(20 * 60 + 60), "{out}");
    let any = report_duration(out, "longest gap, any path");
    assert!(any <= Duration::from_secs(50 * 60 + 60), "{out}");
    // Per node: 7 same-ToR peers and about 10 sampled paths per device.
    let paths = report_summary(out, "paths in the selection");
    assert!(paths[0] >= 2.0 * 17.0 && paths[2] <= 2.0 * 30.0, "{out}");
    let duty = report_summary(out, "duty cycle, whole run");
    assert!(duty[2] <= 5.0 && duty[0] > 1.0, "{out}");
    let series = report_summary(out, "series on /metrics");
    assert!(series[2] <= 5000.0, "{out}");
    assert!(
        out.contains("most bursts aimed at one responder device at once: "),
        "{out}"
    );
    assert!(out.contains("busy deferrals"), "{out}");
    assert!(
        r.stderr.is_empty() || !r.stderr.contains("error"),
        "{}",
        r.describe()
    );
}

#[test]
fn simulate_refuses_settings_that_cannot_run() {
    assert_usage_error(
        &["simulate", "--burst", "2m"],
        &["--burst", "shorter than --interval"],
    );
    assert_usage_error(
        &["simulate", "--round", "10s"],
        &["--round", "from 1m to 24h"],
    );
    assert_usage_error(&["simulate", "--nodes", "1"], &["--nodes"]);
    assert_usage_error(
        &["simulate", "--jitter", "80%"],
        &["--jitter", "out of range"],
    );
}
