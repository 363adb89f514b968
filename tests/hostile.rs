//! The responder's control plane against hostile clients, over loopback, in two processes: this
//! test runs the attacks of `examples/hostile.rs` against a child process that serves the
//! responder's control port (`responder::run_without_devices`: no RDMA device needed, every
//! check up to the session's limits as in production) and `/metrics`, and checks that the child
//! never fails, answers a valid prober during and after the attacks, keeps its descriptors,
//! memory and threads bounded (read from `/proc/PID`), closes idle connections at its
//! deadlines, and counts every refusal in `rdma_probe_responder_sessions_total{result}`.
//!
//! The child is this test binary itself, run with `--ignored --exact serve_for_attacks` and
//! [`SERVE_ENV`] set, so the attacker's sockets never count against the measured process.

#[path = "../examples/hostile.rs"]
#[allow(dead_code)]
mod hostile;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hostile::{Args, Attack};
use serde_json::Value;

/// Set in the child: serve instead of attack.
const SERVE_ENV: &str = "RDMA_PROBE_HOSTILE_SERVE";
/// The key both ends use (the attacks that need it read it from a file, as a node does).
const KEY: &[u8] = b"hostile-test key, 32 bytes long!";
/// [`KEY`] as its key file holds it: base64.
const KEY_FILE: &[u8] = b"aG9zdGlsZS10ZXN0IGtleSwgMzIgYnl0ZXMgbG9uZyE=\n";
/// The child's handshake and request deadline: short, so that the slow attacks end quickly.
const IO_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_HANDSHAKES: usize = 8;
const MAX_SESSIONS: usize = 4;
const FLOOD: usize = 1000;

/// The child: the responder's control plane and `/metrics` on loopback until stdin closes.
#[test]
#[ignore = "the process under attack; started by the_responder_survives_hostile_clients"]
fn serve_for_attacks() {
    if std::env::var_os(SERVE_ENV).is_none() {
        return;
    }
    use rdma_probe_exporter::control::{AuthMode, Psk};
    use rdma_probe_exporter::metrics::Metrics;
    use rdma_probe_exporter::readiness::Readiness;
    use rdma_probe_exporter::responder::{self, ResponderSettings};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let control = responder::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!(
            "control={} metrics={}",
            control.local_addr().unwrap(),
            http.local_addr().unwrap()
        );
        let metrics = Metrics::new();
        let settings = ResponderSettings {
            node_name: "under-attack".into(),
            devices: Vec::new(),
            auth: AuthMode::psk(Psk::from_bytes(KEY).unwrap()),
            max_sessions: MAX_SESSIONS,
            max_pinned_bytes: 1 << 30,
            max_session_bytes: 64 << 20,
            max_handshakes: MAX_HANDSHAKES,
            idle_timeout: Duration::from_secs(2),
            io_timeout: IO_TIMEOUT,
            labels: Default::default(),
            rdma_networks: Vec::new(),
            pingers: Default::default(),
        };
        // Stdin closing (the test ending, however) stops the child.
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .await;
        };
        tokio::spawn(rdma_probe_exporter::http::serve(
            http,
            metrics.clone(),
            Readiness::default(),
            std::future::pending(),
        ));
        responder::run_without_devices(control, settings, metrics.responder, stdin_closed).await;
    });
}

/// The child process, killed when dropped.
struct Target {
    child: Child,
    control: String,
    metrics: String,
}

impl Target {
    fn start() -> Target {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "serve_for_attacks", "--nocapture"])
            .env(SERVE_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.starts_with("control="))
            .expect("the child prints its addresses");
        let mut addrs = line.split(' ').filter_map(|kv| kv.split_once('='));
        let control = addrs.next().unwrap().1.to_owned();
        let metrics = addrs.next().unwrap().1.to_owned();
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Target {
            child,
            control,
            metrics,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// `rdma_probe_responder_sessions_total` by `result`.
    fn sessions(&self) -> BTreeMap<String, u64> {
        let mut stream = TcpStream::connect(&self.metrics).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        body.lines()
            .filter_map(|l| l.strip_prefix("rdma_probe_responder_sessions_total{"))
            .filter_map(|l| {
                let (labels, value) = l.split_once("} ")?;
                let result = labels.split("result=\"").nth(1)?.split('"').next()?;
                Some((result.to_owned(), value.trim().parse().ok()?))
            })
            .collect()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `/proc/PID` says of the child.
#[derive(Debug, Clone, Copy)]
struct Usage {
    fds: usize,
    rss_kib: u64,
    threads: u64,
}

fn usage(pid: u32) -> Usage {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Usage {
        fds,
        rss_kib: field("VmRSS:"),
        threads: field("Threads:"),
    }
}

fn key_file(dir: &Path) -> PathBuf {
    let path = dir.join("psk");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    file.write_all(KEY_FILE).unwrap();
    path
}

fn args(target: &Target, attack: Attack, count: usize, psk: &Path) -> Args {
    Args {
        addr: target.control.clone(),
        attack,
        count,
        parallel: MAX_HANDSHAKES,
        wait: 5.0,
        hold: 3.0,
        interval: 0.2,
        psk_file: Some(psk.to_owned()),
        no_auth: false,
    }
}

/// `report.outcomes[outcome]`, 0 when absent.
fn outcome(report: &Value, outcome: &str) -> u64 {
    report["outcomes"][outcome].as_u64().unwrap_or(0)
}

/// How much each `result` rose from `before` to `after`.
fn rises(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// A valid prober's handshake and session request: with no device, `no_device` is the answer
/// that proves it was let in and its request read.
async fn valid_prober_gets_in(args: &Args) {
    let report = hostile::run(args, Attack::Valid).await.unwrap();
    assert_eq!(outcome(&report, "error:no_device"), 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responder_survives_hostile_clients() {
    hostile::raise_fd_limit();
    let dir = std::env::temp_dir().join(format!("rdma-probe-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let psk = key_file(&dir);
    let mut target = Target::start();
    let started = Instant::now();
    let valid = args(&target, Attack::Valid, 1, &psk);
    valid_prober_gets_in(&valid).await;
    let baseline = usage(target.pid());
    let counted = target.sessions();
    println!("baseline: {baseline:?}");

    // Each attack, and what it must get: its answer on every connection, and its count.
    let cases: [(Attack, usize, &str, &str); 7] = [
        (Attack::Random, 24, "error:protocol", "protocol"),
        (Attack::Oversize, 24, "error:protocol", "protocol"),
        (Attack::Truncated, 24, "closed", "closed"),
        (Attack::Stall, 8, "error:timeout", "timeout"),
        (Attack::Slow, 1, "error:timeout", "timeout"),
        (Attack::WrongPsk, 24, "error:auth", "auth"),
        (Attack::Absurd, 6, "", ""),
    ];
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (attack, count, answer, result) in cases {
        let report = hostile::run(&args(&target, attack, count, &psk), attack)
            .await
            .unwrap();
        println!("{report}");
        assert!(target.alive(), "the responder died during {attack:?}");
        if attack == Attack::Absurd {
            // Two asked for more memory than may be pinned; four for what the protocol refuses.
            assert_eq!(outcome(&report, "error:peer_error"), 2, "{report}");
            assert_eq!(outcome(&report, "error:protocol"), 4, "{report}");
            *expected.entry("limit".into()).or_default() += 2;
            *expected.entry("protocol".into()).or_default() += 4;
            continue;
        }
        assert_eq!(outcome(&report, answer), count as u64, "{report}");
        *expected.entry(result.into()).or_default() += count as u64;
        if matches!(attack, Attack::Stall | Attack::Slow) {
            // Closed at the deadline, not before and not much after.
            let closed = &report["closed_after_ms"];
            let (min, max) = (
                closed["min"].as_u64().unwrap(),
                closed["max"].as_u64().unwrap(),
            );
            assert!(
                min >= 900 && max < 2500,
                "closed after {min}..{max} ms: {report}"
            );
        }
    }
    let after_attacks = target.sessions();
    assert_eq!(rises(&counted, &after_attacks), expected);
    valid_prober_gets_in(&valid).await;

    // The flood: 1,000 connections held open, a valid prober during it, the child's descriptors
    // sampled throughout.
    let pid = target.pid();
    let peak = std::sync::Arc::new(std::sync::Mutex::new(baseline));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let now = usage(pid);
                let mut peak = peak.lock().unwrap();
                peak.fds = peak.fds.max(now.fds);
                peak.rss_kib = peak.rss_kib.max(now.rss_kib);
                peak.threads = peak.threads.max(now.threads);
                drop(peak);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // Held until the responder closes them; 15 s is only the bound on a loaded machine.
    let flood_args = Args {
        hold: 15.0,
        ..args(&target, Attack::Flood, FLOOD, &psk)
    };
    let flood = tokio::spawn(async move { hostile::run(&flood_args, Attack::Flood).await });
    let flood_started = Instant::now();
    let mut during = 0;
    while flood_started.elapsed() < Duration::from_millis(2500) {
        tokio::time::sleep(Duration::from_millis(400)).await;
        valid_prober_gets_in(&valid).await;
        during += 1;
    }
    let report = flood.await.unwrap().unwrap();
    println!("{report}");
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = *peak.lock().unwrap();
    assert!(target.alive(), "the responder died in the flood");
    assert_eq!(
        report["connections"].as_u64(),
        Some(FLOOD as u64),
        "{report}"
    );
    assert_eq!(
        outcome(&report, "open"),
        0,
        "a flood connection outlived the deadline: {report}"
    );
    assert_eq!(outcome(&report, "connect_failed"), 0, "{report}");
    let flood_counts = rises(&after_attacks, &target.sessions());
    let refused: u64 = ["handshake_limit", "timeout", "connection_limit"]
        .iter()
        .filter_map(|r| flood_counts.get(*r))
        .sum();
    assert_eq!(refused, FLOOD as u64, "{flood_counts:?}");
    assert_eq!(flood_counts.get("protocol"), None, "{flood_counts:?}");

    // Right after it: a prober gets in, and the child is back near its baseline.
    valid_prober_gets_in(&valid).await;
    let settle = Instant::now();
    let mut after = usage(pid);
    while after.fds > baseline.fds + 2 && settle.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        after = usage(pid);
    }
    println!(
        "responder under attack: baseline {baseline:?}, peak during the flood {peak:?}, after \
         {after:?} ({} ms to settle); {during} valid probers admitted during the flood; flood \
         refusals {flood_counts:?}; all in {:.1} s",
        settle.elapsed().as_millis(),
        started.elapsed().as_secs_f64()
    );
    // Descriptors: the handshakes and sessions, the connections on their way out, and a few
    // for /metrics scrapes; never one per flood connection.
    let bound = MAX_HANDSHAKES + MAX_SESSIONS + 64 + 8;
    assert!(
        peak.fds <= baseline.fds + bound,
        "peak fds {peak:?}, baseline {baseline:?}"
    );
    assert!(
        after.fds <= baseline.fds + 2,
        "fds after {after:?}, baseline {baseline:?}"
    );
    assert!(
        peak.rss_kib <= baseline.rss_kib + 32 * 1024,
        "peak RSS {peak:?}, baseline {baseline:?}"
    );
    assert!(
        after.rss_kib <= baseline.rss_kib + 16 * 1024,
        "RSS after {after:?}, baseline {baseline:?}"
    );
    assert!(
        after.threads <= baseline.threads + 4,
        "{after:?} vs {baseline:?}"
    );

    // The admin port: a flood of silent connections holds at most its cap of descriptors, and
    // /metrics answers once it is over.
    let http_flood = Args {
        addr: target.metrics.clone(),
        hold: 2.0,
        ..args(&target, Attack::Flood, 300, &psk)
    };
    let sampled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (sampled, sampling) = (sampled.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                sampled.fetch_max(usage(pid).fds, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let report = hostile::run(&http_flood, Attack::Flood).await.unwrap();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let http_peak = sampled.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "admin port flood: {report}; peak fds {http_peak}, baseline {}",
        baseline.fds
    );
    assert!(
        http_peak <= baseline.fds + rdma_probe_exporter::http::limit::MAX_CONNECTIONS + 8,
        "peak fds {http_peak} in the admin port flood, baseline {baseline:?}"
    );
    assert!(target.sessions().contains_key("protocol"));
    assert!(target.alive());
    let _ = std::fs::remove_dir_all(&dir);
}
