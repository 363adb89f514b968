//! Black-box tests of the admin HTTP server over a real loopback socket: status codes, content
//! negotiation, and `promtool check metrics` on what a scrape returns.

use std::net::SocketAddr;

#[path = "common/promtool.rs"]
mod promtool;

use rdma_probe_exporter::http;
use rdma_probe_exporter::metrics::probers::BurstEnded;
use rdma_probe_exporter::metrics::{Metrics, SessionResult};
use rdma_probe_exporter::prober::BurstKind;
use rdma_probe_exporter::readiness::Readiness;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

struct Reply {
    status: u16,
    content_type: String,
    body: String,
}

async fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header end");
    let status = head
        .split(' ')
        .nth(1)
        .expect("status")
        .parse()
        .expect("status code");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    Reply {
        status,
        content_type,
        body: body.to_owned(),
    }
}

struct Server {
    addr: SocketAddr,
    metrics: Metrics,
    readiness: Readiness,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), http::HttpError>>,
}

async fn start() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Metrics::for_exporter();
    let readiness = Readiness::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(http::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        metrics,
        readiness,
        stop,
        task,
    }
}

#[tokio::test]
async fn health_readiness_and_unknown_paths() {
    let server = start().await;
    let health = get(server.addr, "/healthz", None).await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let ready = get(server.addr, "/readyz", None).await;
    assert_eq!(ready.status, 503, "not ready before the device is open");
    assert!(ready.body.starts_with("not ready:\n"), "{}", ready.body);
    server.readiness.condition("device rxe0 port 1").set(true);
    let ready = get(server.addr, "/readyz", None).await;
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    assert_eq!(get(server.addr, "/no-such-page", None).await.status, 404);
    let index = get(server.addr, "/", None).await;
    assert_eq!(index.status, 200);
    assert!(index.body.contains("href=\"/metrics\""), "{}", index.body);
    server.stop.send(()).unwrap();
    server.task.await.unwrap().expect("clean shutdown");
}

/// One line per condition that does not hold, and none for those that do.
#[tokio::test]
async fn readiness_names_what_is_not_ready() {
    let server = start().await;
    let rxe0 = server.readiness.condition("device rxe0 port 1");
    let rxe1 = server.readiness.condition("device rxe1 port 1");
    rxe0.set(true);
    rxe1.set_not_ready("port is down, not active");
    let ready = get(server.addr, "/readyz", None).await;
    assert_eq!(ready.status, 503);
    assert_eq!(
        ready.body, "not ready:\ndevice rxe1 port 1: port is down, not active\n",
        "{}",
        ready.body
    );
    rxe1.set(true);
    let ready = get(server.addr, "/readyz", None).await;
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    rxe0.set(false);
    rxe1.set(false);
    let ready = get(server.addr, "/readyz", None).await;
    assert_eq!(ready.status, 503);
    assert_eq!(
        ready.body,
        "not ready:\ndevice rxe0 port 1: not ready\ndevice rxe1 port 1: not ready\n"
    );
    server.stop.send(()).unwrap();
    server.task.await.unwrap().expect("clean shutdown");
}

#[tokio::test]
async fn scrape_negotiates_the_format_and_passes_promtool() {
    let server = start().await;
    server
        .metrics
        .responder
        .session("rxe0", SessionResult::Accepted);
    server
        .metrics
        .responder
        .session("rxe0", SessionResult::Busy);
    server
        .metrics
        .responder
        .validation_failure("rxe0", "node-a");
    for (prober, ended) in [
        ("node-a", BurstEnded::Corrupt),
        ("node-b", BurstEnded::Completed),
        ("node-c", BurstEnded::Failed),
        ("node-c", BurstEnded::Completed),
    ] {
        server.metrics.responder.burst_ended("rxe0", prober, ended);
    }

    let open = get(
        server.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .await;
    assert_eq!(open.status, 200);
    assert!(
        open.content_type
            .starts_with("application/openmetrics-text"),
        "{}",
        open.content_type
    );
    assert!(open.body.ends_with("# EOF\n"));

    let text = get(server.addr, "/metrics", None).await;
    assert_eq!(text.status, 200);
    assert!(
        text.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        text.content_type
    );
    for (series, want) in [
        (
            concat!(
                "rdma_probe_build_info{version=\"",
                env!("CARGO_PKG_VERSION"),
                "\"}"
            ),
            1.0,
        ),
        (
            r#"rdma_probe_responder_sessions_total{device="rxe0",result="accepted"}"#,
            1.0,
        ),
        (
            r#"rdma_probe_responder_sessions_total{device="rxe0",result="busy"}"#,
            1.0,
        ),
        (
            r#"rdma_probe_responder_validation_failures_total{device="rxe0",peer="node-a"}"#,
            1.0,
        ),
        // Each prober once, by its last burst.
        (
            r#"rdma_probe_responder_probers{device="rxe0",last_burst="completed"}"#,
            2.0,
        ),
        (
            r#"rdma_probe_responder_probers{device="rxe0",last_burst="corrupt"}"#,
            1.0,
        ),
    ] {
        assert_eq!(
            promtool::sample(&text.body, series),
            Some(want),
            "{series} in:\n{}",
            text.body
        );
    }
    let cpu = promtool::sample(&text.body, "process_cpu_seconds_total").expect("process CPU");
    assert!(cpu > 0.0, "process_cpu_seconds_total {cpu}");
    assert_eq!(
        promtool::sample(
            &text.body,
            r#"rdma_probe_responder_probers{device="rxe0",last_burst="failed"}"#
        ),
        None,
        "present while nonzero"
    );
    let completed = promtool::sample(
        &text.body,
        r#"rdma_probe_responder_last_completed_burst_timestamp_seconds{device="rxe0"}"#,
    )
    .expect("the newest completed burst");
    assert!(completed > 1.7e9, "a Unix time, not {completed}");

    promtool::assert_promtool_accepts(&text.body);
    server.stop.send(()).unwrap();
    server.task.await.unwrap().expect("clean shutdown");
}

#[tokio::test]
async fn probe_families_of_many_paths_pass_promtool() {
    use rdma_probe_exporter::metrics::probe::{
        BurstFigures, CounterRecord, DeferReason, PathLabels, ProbeEvent, ProbeRecord,
        ProbeRecorder, ProbeResult, Side,
    };
    use rdma_probe_exporter::reason::ErrorReason;
    let server = start().await;
    let mut recorder = ProbeRecorder::new(server.metrics.probes.clone().expect("exporter metrics"));
    let figures = BurstFigures {
        bytes: 1 << 20,
        messages: 16,
        elapsed_seconds: 0.5,
        bandwidth_bytes_per_second: 2e6,
        min_window_bandwidth_bytes_per_second: 1e6,
        completion_gap_max_seconds: 0.01,
        message_rate_per_second: 32.0,
        qp_bandwidth_min_bytes_per_second: None,
        qp_bandwidth_max_bytes_per_second: None,
    };
    // Every path's planned interval (rdma_probe_path_interval_seconds).
    recorder.apply(ProbeEvent::Intervals(
        (0..50)
            .map(|i| {
                (
                    (format!("mlx5_{}", i % 4), format!("node-{i}")),
                    std::time::Duration::from_secs(60 + i),
                )
            })
            .collect(),
    ));
    for i in 0..50 {
        let path = PathLabels {
            device: format!("mlx5_{}", i % 4),
            peer: format!("node-{i}"),
            peer_device: format!("mlx5_{}", i % 4),
        };
        recorder.apply(ProbeEvent::Attempt(path.clone()));
        let result = match i % 3 {
            0 => ProbeResult::Success { figures },
            1 => ProbeResult::Failure {
                reason: ErrorReason::WcRetryExceeded,
                message: "retry exceeded".into(),
                figures: Some(figures),
            },
            _ => ProbeResult::Deferred {
                reason: DeferReason::Busy,
            },
        };
        recorder.apply(ProbeEvent::completed(
            path,
            ProbeRecord {
                result,
                // Both kinds of burst, so promtool sees their gauges side by side.
                kind: if i % 2 == 0 {
                    BurstKind::Paced
                } else {
                    BurstKind::Capacity
                },
                target_bytes_per_second: Some(1.25e9),
                setup_seconds: Some(0.1),
                at_unix_seconds: 1.7e9,
                // Port counters with their kind (counter_kind).
                counters: [
                    CounterRecord::new(Side::Local, "port_xmit_data", 4096),
                    CounterRecord::new(Side::Remote, "out_of_seq_request", 2),
                ]
                .into_iter()
                .flatten()
                .collect(),
                other_traffic: Vec::new(),
            },
        ));
    }
    recorder.apply(ProbeEvent::ConfigLoaded {
        ok: true,
        at_unix_seconds: 1.7e9,
    });
    // Ping figures of ten of the paths: their percentile gauges, counters and device families.
    recorder.apply(ProbeEvent::Pings(ping_reports(10)));
    let text = get(server.addr, "/metrics", None).await;
    assert_eq!(text.status, 200);
    assert_eq!(
        text.body.matches("rdma_probe_ping_rtt_seconds{").count(),
        30
    );
    assert_eq!(text.body.matches("rdma_probe_success{").count(), 50);
    assert_eq!(
        text.body
            .matches("rdma_probe_path_interval_seconds{")
            .count(),
        50
    );
    assert!(text.body.contains(r#"counter_kind="out_of_sequence""#));
    promtool::assert_promtool_accepts(&text.body);
    let _ = server.stop.send(());
}

#[tokio::test]
async fn port_families_from_every_fixture_tree_pass_promtool() {
    use rdma_probe_exporter::exporter::ports::report;
    use rdma_probe_exporter::metrics::probe::{ProbeEvent, ProbeRecorder};
    use rdma_probe_exporter::port::Sysfs;
    let server = start().await;
    let mut recorder = ProbeRecorder::new(server.metrics.probes.clone().expect("exporter metrics"));
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs");
    let mut ports = 0;
    for tree in ["mlx5-roce", "mlx5-ib", "rxe"] {
        let sysfs = Sysfs::new(fixtures.join(tree)).excluding(["mlx5_8"]);
        let wanted: Vec<(String, u8)> = sysfs
            .devices()
            .unwrap()
            .into_iter()
            .map(|d| (d, 1))
            .collect();
        ports += wanted.len();
        // One recorder per node in production; here the trees share one, so each report
        // replaces the last: check each scrape.
        let (report, failed) = report(&sysfs, &wanted);
        assert!(failed.is_empty(), "{failed:?}");
        recorder.apply(ProbeEvent::Ports(report));
        // A scrape within this of the last is served the same body.
        tokio::time::sleep(rdma_probe_exporter::http::scrape::FRESH_FOR).await;
        let text = get(server.addr, "/metrics", None).await;
        assert_eq!(text.status, 200);
        assert_eq!(
            text.body.matches("rdma_probe_port_up{").count(),
            wanted.len(),
            "{}",
            text.body
        );
        promtool::assert_promtool_accepts(&text.body);
        let om = get(
            server.addr,
            "/metrics",
            Some("application/openmetrics-text"),
        )
        .await;
        assert!(
            om.body.contains("# TYPE rdma_probe_port_up gauge"),
            "{}",
            om.body
        );
    }
    assert_eq!(ports, 5);
    let _ = server.stop.send(());
}

#[tokio::test]
async fn the_status_page_lists_every_probed_path() {
    use rdma_probe_exporter::metrics::probe::{
        PathLabels, ProbeEvent, ProbeRecord, ProbeRecorder, ProbeResult,
    };
    use rdma_probe_exporter::reason::ErrorReason;
    let metrics = Metrics::for_exporter();
    let mut recorder = ProbeRecorder::new(metrics.probes.clone().expect("exporter metrics"));
    let path = PathLabels {
        device: "rxe0".into(),
        peer: "node-<b>".into(),
        peer_device: "rxe0".into(),
    };
    recorder.apply(ProbeEvent::completed(
        path,
        ProbeRecord {
            result: ProbeResult::Failure {
                reason: ErrorReason::Connect,
                message: "connection refused".into(),
                figures: None,
            },
            kind: BurstKind::Paced,
            target_bytes_per_second: None,
            setup_seconds: None,
            at_unix_seconds: 1.7e9,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(http::serve_with_status(
        listener,
        metrics,
        Readiness::new(),
        Some(recorder.snapshot()),
        async move {
            let _ = stopped.await;
        },
    ));
    let page = get(addr, "/", None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    assert!(page.body.contains("1 paths, 1 failing"), "{}", page.body);
    assert!(page.body.contains("node-&lt;b&gt;"), "{}", page.body);
    assert!(
        page.body.contains("connect: connection refused"),
        "{}",
        page.body
    );
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// Discovery end to end over the file system and a real scrape: the discovery task reads a
/// file_sd list, publishes its peers (this node's own address left out), and `/metrics` shows
/// the source's figures, promtool-clean.
#[tokio::test]
async fn discovered_peers_and_their_source_show_on_metrics() {
    use rdma_probe_exporter::config::Discovery;
    use rdma_probe_exporter::discovery;
    use std::time::Duration;

    let dir = std::env::temp_dir().join(format!("rpe-http-discovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("peers.yaml"),
        "- targets: ['198.51.100.2', '127.0.0.1']\n  labels: {tor: t1}\n\
         - targets: ['198.51.100.3:18600']\n  labels: {name: gpu-b, tor: t2}\n",
    )
    .unwrap();
    let server = start().await;
    let config = Discovery {
        dns: Vec::new(),
        files: vec![format!("{}/*.yaml", dir.display())],
        forget_after: Duration::from_secs(3600),
        refresh_interval: Duration::from_secs(30),
    };
    let (mut peers, tasks) = discovery::spawn(&config, 18516, server.metrics.discovery.clone());
    tokio::time::timeout(Duration::from_secs(10), peers.changed())
        .await
        .expect("the file is read at once")
        .unwrap();
    let names: Vec<String> = peers.borrow().iter().map(|p| p.name.clone()).collect();
    assert_eq!(
        names,
        ["198.51.100.2", "gpu-b"],
        "127.0.0.1:18516 is this node"
    );

    let text = get(server.addr, "/metrics", None).await.body;
    let source = format!("source=\"file:{}/*.yaml\"", dir.display());
    assert_eq!(
        promtool::sample(&text, &format!("rdma_probe_discovery_peers{{{source}}}")),
        Some(3.0),
        "{text}"
    );
    let last = promtool::sample(
        &text,
        &format!("rdma_probe_discovery_last_success_timestamp_seconds{{{source}}}"),
    );
    assert!(last.is_some_and(|t| t > 1.7e9), "{text}");
    assert_eq!(
        promtool::sample(&text, "rdma_probe_discovery_candidates"),
        Some(3.0)
    );
    assert_eq!(
        promtool::sample(&text, "rdma_probe_discovery_vanished_peers"),
        Some(0.0)
    );
    promtool::assert_promtool_accepts(&text);
    drop(tasks);
    server.stop.send(()).unwrap();
    server.task.await.unwrap().expect("clean shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends one request with `headers` (each `Name: value`) and returns the status and body.
async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header end");
    let status = head.split(' ').nth(1).expect("status").parse().unwrap();
    (status, body.to_owned())
}

/// An exporter's admin server with `access`, whose service loop answers every reload with
/// `answer` and counts them.
async fn reload_server(
    access: http::ReloadAccess,
    answer: Result<(), String>,
) -> (
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    oneshot::Sender<()>,
) {
    use rdma_probe_exporter::metrics::probe::ProbeRecorder;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let metrics = Metrics::for_exporter();
    let recorder = ProbeRecorder::new(metrics.probes.clone().expect("exporter metrics"));
    let (tx, mut rx) = rdma_probe_exporter::exporter::reload_channel();
    let count = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Some(request) = rx.recv().await {
            counted.fetch_add(1, Ordering::SeqCst);
            if let Some(reply) = request.reply {
                let _ = reply.send(answer.clone());
            }
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(http::serve_exporter(
        listener,
        metrics,
        Readiness::new(),
        http::ExporterPages {
            paths: recorder.snapshot(),
            reload: http::ReloadEndpoint::new(tx, access),
        },
        async move {
            let _ = stopped.await;
        },
    ));
    (addr, count, stop)
}

/// `POST /-/reload` is off by default, and when on takes neither a request a browser could send
/// cross-site (no custom header) nor a loop of requests; a refused file's error stays in the log.
#[tokio::test]
async fn the_reload_endpoint_is_off_by_default_and_limited_when_on() {
    use std::sync::atomic::Ordering;
    let header = "X-Rdma-Probe-Reload: 1";
    let (addr, count, _stop) = reload_server(http::ReloadAccess::Disabled, Ok(())).await;
    let (status, body) = request(addr, "POST", "/-/reload", &[header]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--enable-reload-endpoint"), "{body}");
    assert_eq!(count.load(Ordering::SeqCst), 0);

    let detail = "config.yaml:3:7: peers[0].address: secret detail";
    let (addr, count, _stop) =
        reload_server(http::ReloadAccess::Loopback, Err(detail.into())).await;
    // A simple cross-site request (a form POST) carries no custom header.
    let form = "Content-Type: application/x-www-form-urlencoded";
    let (status, _) = request(addr, "POST", "/-/reload", &[form]).await;
    assert_eq!(status, 403);
    assert_eq!(count.load(Ordering::SeqCst), 0);
    let (status, body) = request(addr, "POST", "/-/reload", &[header]).await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.contains("secret detail"), "{body}");
    assert!(body.contains("log"), "{body}");
    // A loop: at most one reload per second reaches the service loop.
    let mut limited = 0;
    for _ in 0..20 {
        let (status, _) = request(addr, "POST", "/-/reload", &[header]).await;
        if status == 429 {
            limited += 1;
        }
    }
    assert!(limited >= 18, "{limited} of 20 limited");
    assert!(count.load(Ordering::SeqCst) <= 3, "{count:?}");
    tokio::time::sleep(http::reload::MIN_INTERVAL).await;
    let (status, _) = request(addr, "POST", "/-/reload", &[header]).await;
    assert_eq!(status, 400);

    let token = http::ReloadAccess::token("0123456789abcdef-token".to_owned());
    let (addr, count, _stop) = reload_server(token, Ok(())).await;
    let (status, _) = request(addr, "POST", "/-/reload", &[header]).await;
    assert_eq!(status, 401);
    let (status, body) = request(
        addr,
        "POST",
        "/-/reload",
        &["Authorization: Bearer 0123456789abcdef-token"],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// One ping engine's report on `paths` paths of device `mlx5_0`.
fn ping_reports(
    paths: usize,
) -> rdma_probe_exporter::ping::PingReports<rdma_probe_exporter::metrics::probe::PathLabels> {
    use rdma_probe_exporter::metrics::probe::PathLabels;
    use rdma_probe_exporter::ping::delay::Source;
    use rdma_probe_exporter::ping::path::{Counts, WindowSummary};
    use rdma_probe_exporter::ping::{PingReport, PingReports};
    let us = std::time::Duration::from_micros;
    let window = WindowSummary {
        samples: 12,
        rtt_min: us(3),
        rtt_p50: us(4),
        rtt_p90: us(6),
        rtt_p99: us(9),
        rtt_max: us(40),
        responder_p50: us(1),
    };
    PingReports {
        device: "mlx5_0".into(),
        timestamps: Source::Software,
        answered: 24,
        refused: 1,
        rtts: vec![us(4), us(6), us(40)],
        paths: (0..paths)
            .map(|i| PingReport {
                path: PathLabels {
                    device: "mlx5_0".into(),
                    peer: format!("node-{}", 4 * i),
                    peer_device: "mlx5_0".into(),
                },
                counts: Counts {
                    sent: 12,
                    lost: 1,
                    ..Counts::default()
                },
                lost_in_a_row: 0,
                window: Some(window),
                gone: false,
            })
            .collect(),
    }
}
