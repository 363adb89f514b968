//! The status page at `/` as a real browser renders it: the exporter's HTTP server over loopback,
//! fed by a [`ProbeRecorder`] with synthetic probe events, loaded by Debian's headless `chromium`.
//! The DOM chromium dumps after parsing is checked cell by cell (html5ever, through `scraper`),
//! and a screenshot is decoded to check that the page was drawn, colours of the results included.
//!
//! Needs `chromium` on PATH (scripts/install-deps installs it); without it the test fails, it
//! never skips. Run with `cargo test --features browser-tests --test browser` (scripts/test does).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdma_probe_exporter::http;
use rdma_probe_exporter::metrics::probe::{
    BurstFigures, DeferReason, PathLabels, ProbeEvent, ProbeRecord, ProbeRecorder, ProbeResult,
};
use rdma_probe_exporter::metrics::Metrics;
use rdma_probe_exporter::prober::BurstKind;
use rdma_probe_exporter::readiness::Readiness;
use rdma_probe_exporter::reason::ErrorReason;
use scraper::{ElementRef, Html, Selector};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const CHROMIUM: &str = "chromium";
/// One chromium run (about 2 s here); a hung browser fails the test instead of hanging it. A page
/// that opens a JavaScript dialog (an injected `alert()`) never finishes loading in headless
/// chromium: that is how a broken escape shows up, as this deadline passing.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(30);
const WINDOW: (u32, u32) = (1400, 700);

const EVIL_MESSAGE: &str = r#"<script>alert(1)</script> & "quotes" 'too'"#;
const COLUMNS: [&str; 11] = [
    "device",
    "peer",
    "peer device",
    "last result",
    "bandwidth",
    "target",
    "of target",
    "last probe",
    "last error",
    "runs",
    "failures",
];

fn path(device: &str, peer: &str, peer_device: &str) -> PathLabels {
    PathLabels {
        device: device.into(),
        peer: peer.into(),
        peer_device: peer_device.into(),
    }
}

fn ok_path() -> PathLabels {
    path("mlx5_0", "node-b", "mlx5_1")
}
fn failing_path() -> PathLabels {
    path("mlx5_0", "node-c", "mlx5_2")
}
fn attempted_path() -> PathLabels {
    path("mlx5_1", "node-d", "rxe0")
}
fn deferred_path() -> PathLabels {
    path("mlx5_1", "node-e", "mlx5_3")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

fn figures(bandwidth: f64) -> BurstFigures {
    BurstFigures {
        bytes: 500_000_000,
        messages: 7630,
        elapsed_seconds: 0.5,
        bandwidth_bytes_per_second: bandwidth,
        min_window_bandwidth_bytes_per_second: bandwidth * 0.9,
        completion_gap_max_seconds: 0.001,
        message_rate_per_second: 15260.0,
        qp_bandwidth_min_bytes_per_second: None,
        qp_bandwidth_max_bytes_per_second: None,
    }
}

/// The recorder's table after one probe of each kind, as the exporter's probers would report them.
fn recorder(metrics: &Metrics) -> ProbeRecorder {
    let families = metrics
        .probes
        .clone()
        .expect("exporter metrics have probe families");
    let mut recorder = ProbeRecorder::new(families);
    let at = now() - 30.0;
    let record = |result, target| ProbeRecord {
        result,
        kind: BurstKind::Paced,
        target_bytes_per_second: target,
        setup_seconds: Some(0.02),
        at_unix_seconds: at,
        counters: Vec::new(),
        other_traffic: Vec::new(),
    };
    for p in [ok_path(), failing_path(), attempted_path(), deferred_path()] {
        recorder.apply(ProbeEvent::Attempt(p));
    }
    recorder.apply(ProbeEvent::completed(
        ok_path(),
        record(
            ProbeResult::Success {
                figures: figures(1.0e9),
            },
            Some(1.25e9),
        ),
    ));
    recorder.apply(ProbeEvent::completed(
        failing_path(),
        record(
            ProbeResult::Failure {
                reason: ErrorReason::WcRetryExceeded,
                message: EVIL_MESSAGE.into(),
                figures: None,
            },
            Some(1.25e9),
        ),
    ));
    recorder.apply(ProbeEvent::completed(
        deferred_path(),
        record(
            ProbeResult::Deferred {
                reason: DeferReason::Busy,
            },
            None,
        ),
    ));
    recorder
}

/// Where this test's files go: under cargo's scratch directory for integration tests, so the
/// screenshot stays there to look at after a run.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-status-page");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Runs headless chromium on `url` with `args`; returns its stdout. Fails the test when chromium
/// is missing, exits non-zero, or outlives [`CHROMIUM_DEADLINE`] (`hint` says what may be why).
fn chromium(dir: &Path, name: &str, args: &[String], url: &str, hint: &str) -> String {
    let stdout_path = dir.join(format!("{name}.stdout"));
    let stderr_path = dir.join(format!("{name}.stderr"));
    let profile = dir.join(format!("{name}.profile"));
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            // The test runs as root (scripts/test), which chromium's sandbox refuses.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            // Its own profile: no lock shared with another run, nothing left in $HOME.
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).expect("create stdout file"))
        .stderr(File::create(&stderr_path).expect("create stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}: {}", install_hint(&e)));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if started.elapsed() > CHROMIUM_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{CHROMIUM} {name} ran past {CHROMIUM_DEADLINE:?} ({hint}); its stderr:\n{}",
                read_lossy(&stderr_path)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "{CHROMIUM} {name} exited with {status}; its stderr:\n{}",
        read_lossy(&stderr_path)
    );
    let _ = std::fs::remove_dir_all(&profile);
    read_lossy(&stdout_path)
}

/// The page as served, over a plain HTTP/1.1 request: kept next to the DOM, and used only to
/// explain a browser that never finished loading it.
fn page_source(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the page");
    String::from_utf8_lossy(&raw).into_owned()
}

fn install_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == ErrorKind::NotFound {
        "chromium is not installed: run scripts/install-deps (as root), which installs Debian's \
         chromium package"
    } else {
        "is Debian's chromium package installed properly? scripts/install-deps installs it"
    }
}

fn read_lossy(path: &Path) -> String {
    let mut bytes = Vec::new();
    let _ = File::open(path).and_then(|mut f| f.read_to_end(&mut bytes));
    String::from_utf8_lossy(&bytes).into_owned()
}

fn chromium_version() -> String {
    let out = Command::new(CHROMIUM)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{CHROMIUM} --version`: {e}: {}",
                install_hint(&e)
            )
        });
    assert!(
        out.status.success(),
        "`{CHROMIUM} --version` failed ({}): {}; run scripts/install-deps",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn sel(selector: &str) -> Selector {
    Selector::parse(selector).unwrap_or_else(|e| panic!("selector {selector:?}: {e}"))
}

/// The text of an element as a reader sees it, whitespace runs folded.
fn text(element: ElementRef<'_>) -> String {
    element
        .text()
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// One body row of the table: its cells by column name, with each cell's class.
struct Row {
    cells: BTreeMap<&'static str, (String, Option<String>)>,
}

impl Row {
    fn text(&self, column: &str) -> &str {
        &self.cells[column].0
    }
    fn class(&self, column: &str) -> Option<&str> {
        self.cells[column].1.as_deref()
    }
}

fn rows_by_path(dom: &Html) -> BTreeMap<PathLabels, Row> {
    let tables: Vec<_> = dom.select(&sel("table")).collect();
    assert_eq!(tables.len(), 1, "one table of paths");
    let table = tables[0];
    let header: Vec<String> = table.select(&sel("thead tr th")).map(text).collect();
    assert_eq!(header, COLUMNS, "the table's columns");
    let header_rows = table.select(&sel("thead tr")).count();
    assert_eq!(header_rows, 1, "one header row");
    let all_rows = table.select(&sel("tr")).count();
    let body: Vec<_> = table.select(&sel("tbody tr")).collect();
    assert_eq!(
        all_rows,
        header_rows + body.len(),
        "rows outside thead and tbody"
    );
    let mut rows = BTreeMap::new();
    for tr in body {
        let cells: Vec<_> = tr.child_elements().collect();
        assert!(
            cells.iter().all(|c| c.value().name() == "td"),
            "a body row holds only td cells: {}",
            tr.html()
        );
        assert_eq!(cells.len(), COLUMNS.len(), "cells of {}", tr.html());
        let cells: BTreeMap<_, _> = COLUMNS
            .iter()
            .zip(&cells)
            .map(|(column, cell)| {
                let class = cell.value().attr("class").map(str::to_owned);
                (*column, (text(*cell), class))
            })
            .collect();
        let row = Row { cells };
        let key = path(
            row.text("device"),
            row.text("peer"),
            row.text("peer device"),
        );
        assert!(
            rows.insert(key.clone(), row).is_none(),
            "{key:?} has two rows"
        );
    }
    rows
}

/// No script can run on the page: no script element, no inline event handler, no `javascript:`
/// link, nothing that embeds another document.
fn assert_no_javascript(dom: &Html) {
    let scripts: Vec<_> = dom.select(&sel("script")).map(|s| s.html()).collect();
    assert!(
        scripts.is_empty(),
        "script elements on the page: {scripts:?}"
    );
    for element in dom.select(&sel("*")) {
        let name = element.value().name();
        assert!(
            !matches!(name, "iframe" | "object" | "embed" | "frame"),
            "embedded document: {}",
            element.html()
        );
        for (attr, value) in element.value().attrs() {
            assert!(
                !attr.to_ascii_lowercase().starts_with("on"),
                "event handler attribute {attr}={value:?} on <{name}>"
            );
            assert!(
                !value.trim().to_ascii_lowercase().starts_with("javascript:"),
                "javascript: URL in {attr} of <{name}>"
            );
        }
    }
}

fn check_dom(dump: &str) {
    let dom = Html::parse_document(dump);
    assert_no_javascript(&dom);
    let title: Vec<String> = dom.select(&sel("head title")).map(text).collect();
    assert_eq!(title, ["rdma-probe-exporter"], "page title");
    let summary: Vec<String> = dom
        .select(&sel("p"))
        .map(text)
        .filter(|t| t.contains("paths,"))
        .collect();
    assert_eq!(summary, ["4 paths, 1 failing"], "the summary line");
    let links: Vec<&str> = dom
        .select(&sel("a[href]"))
        .filter_map(|a| a.value().attr("href"))
        .collect();
    assert_eq!(links, ["/metrics", "/healthz", "/readyz"], "links");

    let rows = rows_by_path(&dom);
    let want = BTreeSet::from([ok_path(), failing_path(), attempted_path(), deferred_path()]);
    assert_eq!(
        rows.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "one row per path, with its device, peer and peer device"
    );

    let ok = &rows[&ok_path()];
    assert_eq!(ok.text("last result"), "success");
    assert_eq!(ok.class("last result"), Some("ok"));
    assert_eq!(ok.text("bandwidth"), "8.000 Gb/s", "1e9 B/s");
    assert_eq!(ok.text("target"), "10.000 Gb/s", "1.25e9 B/s");
    assert_eq!(ok.text("of target"), "80%");
    assert_eq!(ok.class("bandwidth"), Some("num"));
    assert_eq!(ok.text("last error"), "-");
    assert_eq!((ok.text("runs"), ok.text("failures")), ("1", "0"));
    assert!(
        ok.text("last probe").ends_with("s ago"),
        "{}",
        ok.text("last probe")
    );

    let bad = &rows[&failing_path()];
    assert_eq!(bad.text("last result"), "failure: wc_retry_exceeded");
    assert_eq!(bad.class("last result"), Some("fail"));
    let error = bad.text("last error");
    let want_error = format!("wc_retry_exceeded: {EVIL_MESSAGE} (");
    assert!(
        error.starts_with(&want_error) && error.ends_with("s ago)"),
        "the failure's reason and message, as text: {error:?}"
    );
    assert!(
        error.contains("<script>"),
        "literal <script> text: {error:?}"
    );
    assert_eq!(bad.text("bandwidth"), "-", "no figures");
    assert_eq!(bad.text("target"), "10.000 Gb/s");
    assert_eq!(bad.text("of target"), "-");
    assert_eq!((bad.text("runs"), bad.text("failures")), ("1", "1"));
    // The message is text in its cell, not markup: the cell has no element inside.
    let error_cells: Vec<_> = dom
        .select(&sel("tbody td"))
        .filter(|td| text(*td).contains("alert(1)"))
        .collect();
    assert_eq!(error_cells.len(), 1, "one cell shows the message");
    assert_eq!(
        error_cells[0].child_elements().count(),
        0,
        "the message became markup: {}",
        error_cells[0].html()
    );

    let attempted = &rows[&attempted_path()];
    assert_eq!(attempted.text("last result"), "not probed yet");
    for column in [
        "bandwidth",
        "target",
        "of target",
        "last probe",
        "last error",
    ] {
        assert_eq!(
            attempted.text(column),
            "-",
            "{column} of a path never completed"
        );
    }
    assert_eq!(
        (attempted.text("runs"), attempted.text("failures")),
        ("0", "0")
    );

    let deferred = &rows[&deferred_path()];
    assert_eq!(deferred.text("last result"), "deferred: busy");
    assert_eq!(deferred.class("last result"), Some("defer"));
    assert_eq!(deferred.text("bandwidth"), "-");
    assert_eq!(deferred.text("last error"), "-");
    assert_eq!(
        (deferred.text("runs"), deferred.text("failures")),
        ("0", "0"),
        "a deferral is not a run"
    );
}

/// Pixels of the screenshot near `rgb` (anti-aliased glyph edges blend into the background; the
/// strokes keep the colour).
fn count_near(pixels: &[[u8; 3]], rgb: [u8; 3]) -> usize {
    pixels
        .iter()
        .filter(|p| p.iter().zip(rgb).all(|(a, b)| a.abs_diff(b) <= 24))
        .count()
}

fn check_screenshot(png_path: &Path) {
    let bytes = std::fs::metadata(png_path)
        .unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png_path.display()))
        .len();
    let mut decoder = png::Decoder::new(BufReader::new(
        File::open(png_path).expect("open the screenshot"),
    ));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut buffer = vec![0; reader.output_buffer_size().expect("frame size")];
    let info = reader
        .next_frame(&mut buffer)
        .expect("decode the screenshot");
    assert_eq!((info.width, info.height), WINDOW, "screenshot size");
    let channels = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected colour type {other:?}"),
    };
    let pixels: Vec<[u8; 3]> = buffer[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let white = count_near(&pixels, [255, 255, 255]);
    let drawn = pixels.len() - white;
    // Headings, a table of four rows with borders: thousands of pixels that are not background.
    assert!(
        drawn > 5_000 && white > pixels.len() / 2,
        "screenshot {} ({bytes} bytes): {drawn} drawn pixels of {}",
        png_path.display(),
        pixels.len()
    );
    // The table's horizontal borders (1 px, #999, across the table): above the header, below it
    // and below each of the four rows (sorted by path: ok, failing, attempted, deferred). Names
    // and figures do not wrap: the header and every row without an error message are one line
    // of text tall (a peer `node-b` broken at its hyphen, or `10.000 Gb/s` broken from its unit,
    // once made every row two lines tall). Only the last error, free text, may wrap.
    let width = info.width as usize;
    let border_rows: Vec<usize> = pixels
        .chunks_exact(width)
        .enumerate()
        .filter(|(_, line)| count_near(line, [0x99, 0x99, 0x99]) > width / 2)
        .map(|(y, _)| y)
        .collect();
    let mut borders: Vec<usize> = Vec::new();
    for y in border_rows {
        if borders.last().is_none_or(|last| y > last + 1) {
            borders.push(y);
        }
    }
    let heights: Vec<usize> = borders.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(
        heights.len(),
        5,
        "screenshot {}: horizontal table borders at y = {borders:?}",
        png_path.display()
    );
    let one_line = [heights[0], heights[1], heights[3], heights[4]];
    assert!(
        one_line.iter().all(|h| *h < 40) && heights[2] >= heights[1],
        "screenshot {}: a cell without free text wrapped: heights of header, ok, failing, \
         attempted, deferred: {heights:?} px",
        png_path.display()
    );
    // The result cells' colours (status.rs's style: .ok #060, .fail #a00, .defer #850): the
    // stylesheet applied and the text was drawn in it.
    for (class, rgb) in [
        ("ok", [0x00, 0x66, 0x00]),
        ("fail", [0xaa, 0x00, 0x00]),
        ("defer", [0x88, 0x55, 0x00]),
    ] {
        let n = count_near(&pixels, rgb);
        assert!(
            n >= 20,
            "screenshot {}: only {n} pixels in the colour of .{class}",
            png_path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_headless_chromium() {
    let started = Instant::now();
    let version = chromium_version();
    eprintln!("browser: {version}");

    let metrics = Metrics::for_exporter();
    let recorder = recorder(&metrics);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(http::serve_with_status(
        listener,
        metrics,
        Readiness::default(),
        Some(recorder.snapshot()),
        async move {
            let _ = stopped.await;
        },
    ));

    let dir = scratch();
    let url = format!("http://{addr}/");
    let (dump, shot) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            let source = page_source(addr);
            std::fs::write(dir.join("page-source.http"), &source).expect("keep the source");
            let hint = if source.to_ascii_lowercase().contains("<script") {
                "the page as served has a <script> element: a name or message went out unescaped, \
                 and an alert() blocks headless chromium"
            } else {
                "the page as served has no <script> element"
            };
            let dump = chromium(&dir, "dump-dom", &["--dump-dom".into()], &url, hint);
            let shot = dir.join("status-page.png");
            chromium(
                &dir,
                "screenshot",
                &[
                    format!("--screenshot={}", shot.display()),
                    format!("--window-size={},{}", WINDOW.0, WINDOW.1),
                ],
                &url,
                hint,
            );
            (dump, shot)
        }
    })
    .await
    .expect("the chromium runs");

    std::fs::write(dir.join("dom.html"), &dump).expect("keep the DOM");
    check_dom(&dump);
    check_screenshot(&shot);
    eprintln!(
        "browser: DOM and screenshot ({}) checked in {:.1} s",
        shot.display(),
        started.elapsed().as_secs_f64()
    );

    stop.send(()).unwrap();
    server.await.unwrap().expect("clean shutdown");
}
