//! Runs lab scenarios from tests: boots real Soft-RoCE VMs through `lab/run` and reads back what
//! each node recorded. Lab runs are serialized (the machine has 2 cores and every VM is a full
//! emulation), and a lab that cannot boot fails the test with its reason: never a skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

static LAB: Mutex<()> = Mutex::new(());

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What a finished lab run left behind.
pub struct LabRun {
    pub dir: PathBuf,
    pub status: i32,
    pub output: String,
    /// The nodes whose guest kernel panicked in the runs before this one, one a rerun (at most
    /// [`PANIC_RERUNS`]): a result of the test, printed in its summary line and kept in the run
    /// directory's `lab-summary`.
    pub kernel_panics: Vec<String>,
}

impl LabRun {
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    /// The scenario's own log of a node.
    pub fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.node_dir(node).join("log")).unwrap_or_default()
    }

    /// A file a node wrote into its output directory.
    pub fn file(&self, node: &str, name: &str) -> String {
        let path = self.node_dir(node).join(name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), self.output))
    }

    /// `key=value` lines the node recorded with `lab_result`.
    pub fn results(&self, node: &str) -> BTreeMap<String, String> {
        std::fs::read_to_string(self.node_dir(node).join("results"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Panics unless the `NAME exit=STATUS` lines of `node`'s `file` (how scenarios record the
    /// exit status of each command they run) are exactly `expected`, in order: a command that
    /// failed, and one whose line is missing (it never ran, or died with its shell), fail alike.
    pub fn assert_exits(&self, node: &str, file: &str, expected: &[(&str, &str)]) {
        let path = self.node_dir(node).join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let got = exits(&text);
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(name, status)| ((*name).to_owned(), (*status).to_owned()))
            .collect();
        assert_eq!(
            got,
            want,
            "{node}'s exit statuses ({}):\n{text}\n---- {node}'s log ----\n{}",
            path.display(),
            self.log(node)
        );
    }

    /// Panics unless `node` recorded `key` (with `lab_result`) as `want`.
    pub fn assert_result(&self, node: &str, key: &str, want: &str) {
        let results = self.results(node);
        assert_eq!(
            results.get(key).map(String::as_str),
            Some(want),
            "{node}'s {key}: {results:?}\n---- {node}'s log ----\n{}",
            self.log(node)
        );
    }

    pub fn boot_seconds(&self, node: &str) -> f64 {
        self.file(node, "boot_seconds")
            .trim()
            .parse()
            .unwrap_or(f64::NAN)
    }

    /// Panics with every node's log unless the run succeeded.
    pub fn assert_success(&self) {
        assert_eq!(
            self.status,
            0,
            "lab run failed:\n{}\n{}",
            self.output,
            self.counters()
        );
    }

    /// The non-zero rxe port counters of every node after its scenario (retransmissions,
    /// sequence errors, ...), for failure messages.
    pub fn counters(&self) -> String {
        let mut text = String::new();
        let Ok(nodes) = std::fs::read_dir(self.dir.join("nodes")) else {
            return text;
        };
        for node in nodes.flatten() {
            let path = node.path().join("hw_counters");
            let counters = std::fs::read_to_string(path).unwrap_or_default();
            let nonzero: Vec<&str> = counters.lines().filter(|l| !l.ends_with("=0")).collect();
            text += &format!(
                "{} rxe0 counters: {}\n",
                node.file_name().to_string_lossy(),
                nonzero.join(" ")
            );
        }
        text
    }
}

/// Boots `nodes` VMs and runs `scenario` (a path under lab/scenarios) on each of them, giving
/// them `bins` (paths relative to the repo root). Keeps the run directory under target/lab-runs.
///
/// A guest kernel that panics is most likely the lab failing, not the code under test (Debian's
/// 6.12.117 rxe oopsed in `net_rx_action` and `kmalloc` under emulation, about once in ten
/// boots; the pinned kernel is chosen by a trial, lab/README.md "Kernel"): `lab/run` stops such a
/// run at once, and it is reported loudly and run again, [`PANIC_RERUNS`] time. The rerun is a
/// result, not a secret: every lab test prints a `LAB SUMMARY` line with its reruns, writes them
/// to `lab-summary` in its run directory, and appends them to `target/lab-runs/reruns.txt`
/// (scripts/test shows that file). The same scenario panicking again fails the test: a panic the code under test causes
/// must not pass. A boot failure or a timeout fails it too.
pub fn run(name: &str, nodes: u32, scenario: &str, bins: &[&Path], timeout_s: u32) -> LabRun {
    run_with_files(name, nodes, scenario, bins, &[], timeout_s)
}

/// [`run`], also giving every node `files` (at `/mnt/files/NAME` in the guest: configs, rules,
/// tools that are not built from this repository).
pub fn run_with_files(
    name: &str,
    nodes: u32,
    scenario: &str,
    bins: &[&Path],
    files: &[&Path],
    timeout_s: u32,
) -> LabRun {
    let lab = LabArgs {
        name,
        nodes,
        scenarios: &[scenario],
        bins,
        files,
        timeout_s,
    };
    run_lab(&lab)
}

/// Runs `lab` (its binaries checked fresh first) as [`run`] says, under the lab's lock.
fn run_lab(lab: &LabArgs) -> LabRun {
    let _serial = LAB.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let root = repo_root();
    let dir = root.join("target").join("lab-runs").join(lab.name);
    for bin in lab.bins {
        assert_fresh(&root, &root.join(bin));
    }
    run_guarded(lab.name, &dir, || run_once(&root, &dir, lab))
}

/// Scenarios that share one boot of the lab: `lab/run` runs them one after another on the same
/// VMs (resetting every node between two: lab/guest/node.sh), each in its own part of the run
/// directory, laid out as a run of its own. A boot takes 10-60 s of emulation (by load); the
/// scenarios of a test run share a few. Only the last may stop a node.
pub struct SharedBoot {
    pub name: &'static str,
    pub nodes: u32,
    /// The scenarios (under lab/scenarios), in the order they run.
    pub scenarios: &'static [&'static str],
    /// What any of them needs (paths relative to the repo root).
    pub bins: &'static [&'static str],
    /// For the whole boot: the sum of its scenarios' own limits.
    pub timeout_s: u32,
}

const EXPORTER: &str = "target/release/rdma-probe-exporter";

/// Two nodes: the probe, the responder, perftest and the exporter's faults; `faults.sh` stops a
/// node, so it runs last.
pub static PAIR: SharedBoot = SharedBoot {
    name: "pair",
    nodes: 2,
    scenarios: &[
        "perftest-pair.sh",
        "probe-basic.sh",
        "probe-service.sh",
        "hostile.sh",
        "capacity.sh",
        "perftest-interop.sh",
        "faults-exporter.sh",
        "bench.sh",
        "faults.sh",
    ],
    bins: &[
        EXPORTER,
        "target/release/examples/hostile",
        "target/release/examples/ud_flood",
    ],
    timeout_s: 6300,
};

/// Three nodes: the exporter's mesh; `ping.sh` powers node2 off, so it runs last.
pub static MESH: SharedBoot = SharedBoot {
    name: "mesh",
    nodes: 3,
    scenarios: &[
        "perftest-mesh.sh",
        "exporter.sh",
        "traffic.sh",
        "discovery.sh",
        "ping.sh",
    ],
    bins: &[EXPORTER],
    timeout_s: 3300,
};

/// What a shared boot's `lab/run` gave, or why it did not run (its message).
type SharedOutcome = Result<LabRun, String>;

static SHARED: Mutex<BTreeMap<&'static str, SharedOutcome>> = Mutex::new(BTreeMap::new());

/// The part of `boot` that ran `scenario`: the first call runs the whole boot (every test of it
/// then reads its own part). A boot that could not run fails every part with its reason.
pub fn run_shared(boot: &'static SharedBoot, scenario: &str) -> LabRun {
    assert!(
        boot.scenarios.contains(&scenario),
        "{scenario} is not a scenario of the shared boot '{}'",
        boot.name
    );
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let whole = shared.entry(boot.name).or_insert_with(|| {
        let bins: Vec<&Path> = boot.bins.iter().map(Path::new).collect();
        let args = LabArgs {
            name: boot.name,
            nodes: boot.nodes,
            scenarios: boot.scenarios,
            bins: &bins,
            files: &[],
            timeout_s: boot.timeout_s,
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_lab(&args)))
            .map_err(|e| panic_message(&*e))
    });
    let whole = match whole {
        Ok(run) => run,
        Err(why) => panic!("the shared boot '{}' did not run: {why}", boot.name),
    };
    let part = part_of(whole, scenario);
    let took = part_seconds(&part);
    let line = format!(
        "LAB SUMMARY '{}': scenario {} in {took:.0} s (a part of the shared boot '{}')",
        scenario.trim_end_matches(".sh"),
        if part.status == 0 { "passed" } else { "failed" },
        boot.name
    );
    eprintln!("{line}");
    part
}

fn panic_message(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The run of one scenario of a shared boot: its part of the run directory, and its status:
/// 0 when every node's part exited 0 (a node the part stopped counts as done), else the first
/// node's other status (-1 for a node that recorded none).
fn part_of(whole: &LabRun, scenario: &str) -> LabRun {
    let dir = whole
        .dir
        .join("parts")
        .join(scenario.trim_end_matches(".sh"));
    let mut status = 0;
    let mut nodes: Vec<PathBuf> = std::fs::read_dir(dir.join("nodes"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    nodes.sort();
    for node in nodes {
        // The boot's own facts, where a part's reader looks for them.
        if let Some(name) = node.file_name() {
            let boot = whole.dir.join("nodes").join(name).join("boot_seconds");
            let _ = std::fs::copy(boot, node.join("boot_seconds"));
        }
        let recorded = std::fs::read_to_string(node.join("status"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        let stopped = node
            .file_name()
            .is_some_and(|n| whole.dir.join("nodes").join(n).join("stopped").exists());
        let this = match recorded {
            Some(s) => s,
            None if stopped => 0,
            None => -1,
        };
        if status == 0 {
            status = this;
        }
    }
    LabRun {
        dir,
        status,
        output: whole.output.clone(),
        kernel_panics: whole.kernel_panics.clone(),
    }
}

/// How long a part ran on node1 (the `started` and `ended` times lab/guest/node.sh writes).
fn part_seconds(part: &LabRun) -> f64 {
    let at = |name: &str| -> Option<f64> {
        std::fs::read_to_string(part.node_dir("node1").join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    match (at("started"), at("ended")) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    }
}

/// How many times a scenario whose guest kernel panicked is run again: once. A second panic of
/// the same scenario fails its test.
const PANIC_RERUNS: usize = 1;

/// Runs a scenario with `once` (which leaves its run in `dir`), again after a guest kernel panic
/// as [`run`] says, and records the reruns (see [`LabRun::kernel_panics`]).
fn run_guarded(name: &str, dir: &Path, mut once: impl FnMut() -> LabRun) -> LabRun {
    let started = std::time::Instant::now();
    let mut panics = Vec::new();
    let mut run = once();
    while let Some(node) = guest_kernel_panic(dir) {
        panics.push(node.clone());
        let kept = dir.with_extension(format!("kernel-panic-{}", panics.len()));
        let _ = std::fs::remove_dir_all(&kept);
        let _ = std::fs::rename(dir, &kept);
        if panics.len() > PANIC_RERUNS {
            record_reruns(name, dir, &panics, "failed", started.elapsed());
            panic!(
                "the guest kernel panicked in every run of '{name}' ({} runs, on {}; the runs are \
                 kept in {}.kernel-panic-N): the code under test may cause it, so this fails\n{}",
                panics.len(),
                panics.join(", "),
                dir.display(),
                run.output
            );
        }
        eprintln!(
            "LAB INFRASTRUCTURE: the guest kernel of {node} panicked during '{name}' (console \
             below, run kept in {}); running the scenario again (rerun {} of {PANIC_RERUNS}, \
             recorded as a result)\n{}",
            kept.display(),
            panics.len(),
            run.output
        );
        run = once();
    }
    run.kernel_panics = panics;
    let verdict = if run.status == 0 { "passed" } else { "failed" };
    record_reruns(name, dir, &run.kernel_panics, verdict, started.elapsed());
    assert_ne!(
        run.status, 3,
        "the lab could not boot or timed out (this is a failure, not a skip):\n{}",
        run.output
    );
    run
}

/// Prints the summary line of a lab run (with its wall time, reruns included) and writes it to `lab-summary` in `dir` (created if a
/// panic left none), and, when the scenario was rerun, to `target/lab-runs/reruns.txt` next to
/// it (scripts/test prints that file after the lab tests).
fn record_reruns(
    name: &str,
    dir: &Path,
    panics: &[String],
    verdict: &str,
    took: std::time::Duration,
) {
    let line = format!(
        "LAB SUMMARY '{name}': scenario {verdict} in {} s; guest kernel panics: {} ({}); \
         reruns: {}",
        took.as_secs(),
        panics.len(),
        if panics.is_empty() {
            "none".to_owned()
        } else {
            panics.join(", ")
        },
        panics.len().min(PANIC_RERUNS)
    );
    eprintln!("{line}");
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(dir.join("lab-summary"), format!("{line}\n"));
    if !panics.is_empty() {
        if let Some(parent) = dir.parent() {
            use std::io::Write as _;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(parent.join("reruns.txt"));
            if let Ok(mut file) = file {
                let _ = writeln!(file, "{line}");
            }
        }
    }
}

/// What one `lab/run` is given.
struct LabArgs<'a> {
    name: &'a str,
    nodes: u32,
    /// One, or several sharing the boot.
    scenarios: &'a [&'a str],
    bins: &'a [&'a Path],
    files: &'a [&'a Path],
    timeout_s: u32,
}

fn run_once(root: &Path, dir: &Path, lab: &LabArgs) -> LabRun {
    let (name, nodes) = (lab.name, lab.nodes);
    let scenario = lab.scenarios.join(", ");
    let mut cmd = Command::new(root.join("lab").join("run"));
    cmd.arg("--nodes").arg(nodes.to_string());
    for scenario in lab.scenarios {
        cmd.arg("--scenario")
            .arg(root.join("lab").join("scenarios").join(scenario));
    }
    cmd.arg("--out")
        .arg(dir)
        .arg("--timeout")
        .arg(lab.timeout_s.to_string());
    for bin in lab.bins {
        cmd.arg("--bin").arg(root.join(bin));
    }
    for file in lab.files {
        cmd.arg("--file").arg(root.join(file));
    }
    let started = std::time::Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start lab/run: {e}"));
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let status = out.status.code().unwrap_or(-1);
    eprintln!(
        "lab run '{name}' ({nodes} nodes, {scenario}): exit {status} in {:.1} s\n{output}",
        started.elapsed().as_secs_f64()
    );
    LabRun {
        dir: dir.to_path_buf(),
        status,
        output,
        kernel_panics: Vec::new(),
    }
}

/// The first node whose guest kernel panicked in the run in `dir`, if any.
fn guest_kernel_panic(dir: &Path) -> Option<String> {
    let nodes = std::fs::read_dir(dir.join("nodes")).ok()?;
    nodes.flatten().find_map(|node| {
        let console = std::fs::read_to_string(node.path().join("console.log")).unwrap_or_default();
        console
            .contains("Kernel panic - not syncing")
            .then(|| node.file_name().to_string_lossy().into_owned())
    })
}

/// Panics unless `bin` exists and is newer than every source it is built from: a lab test must
/// never pass or fail on a stale build (scripts/test builds the release binaries first).
fn assert_fresh(root: &Path, bin: &Path) {
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}: build it first (cargo build --release --bins --examples)",
                bin.display()
            )
        });
    let mut sources = vec![root.join("Cargo.toml"), root.join("Cargo.lock")];
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                sources.push(path);
            }
        }
    }
    for source in sources {
        let changed = std::fs::metadata(&source).and_then(|m| m.modified());
        if let Ok(changed) = changed {
            assert!(
                changed <= built,
                "{} is older than {}: rebuild it (cargo build --release --bins --examples)",
                bin.display(),
                source.display()
            );
        }
    }
}

/// The `NAME exit=STATUS` lines of a scenario's record of exit statuses, in order.
pub fn exits(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(" exit="))
        .map(|(name, status)| (name.to_owned(), status.trim().to_owned()))
        .collect()
}

/// One result row of perftest's bandwidth table.
#[derive(Debug, Clone, Copy)]
pub struct PerftestRow {
    pub bytes: u64,
    pub iterations: u64,
    pub bw_peak: f64,
    pub bw_average: f64,
    pub msg_rate_mpps: f64,
}

/// Parses the row under perftest's `#bytes #iterations BW peak ... MsgRate` header.
pub fn parse_perftest(text: &str) -> Option<PerftestRow> {
    let mut lines = text.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let fields: Vec<&str> = lines.next()?.split_whitespace().collect();
    if fields.len() < 5 {
        return None;
    }
    Some(PerftestRow {
        bytes: fields[0].parse().ok()?,
        iterations: fields[1].parse().ok()?,
        bw_peak: fields[2].parse().ok()?,
        bw_average: fields[3].parse().ok()?,
        msg_rate_mpps: fields[4].parse().ok()?,
    })
}

#[test]
fn parses_perftest_table() {
    let text = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      500           0.028759            0.026425            0.000050\n";
    let row = parse_perftest(text).unwrap();
    assert_eq!(row.bytes, 65536);
    assert_eq!(row.iterations, 500);
    assert!((row.bw_average - 0.026425).abs() < 1e-9);
    assert!(parse_perftest("no table here").is_none());
}

/// A run directory of synthetic node files, for the tests of the helpers above.
#[cfg(test)]
pub fn synthetic_run(test: &str, files: &[(&str, &str, &str)]) -> LabRun {
    let dir = std::env::temp_dir().join(format!("lab-support-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (node, name, text) in files {
        let node_dir = dir.join("nodes").join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        std::fs::write(node_dir.join(name), text).unwrap();
    }
    LabRun {
        dir,
        status: 0,
        output: String::new(),
        kernel_panics: Vec::new(),
    }
}

#[cfg(test)]
pub fn panics(f: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err()
}

#[test]
fn exit_statuses_are_asserted_exactly() {
    let run = synthetic_run(
        "exits",
        &[
            ("node1", "exits", "probe exit=0\nexporter exit=0\n"),
            ("node2", "exits", "responder exit=143\n"),
            ("node3", "exits", "probe exit=0\n"),
        ],
    );
    run.assert_exits("node1", "exits", &[("probe", "0"), ("exporter", "0")]);
    // A failed command, a missing one, an unexpected one, the order, a missing file.
    let wrong: [(&str, &[(&str, &str)]); 5] = [
        ("node2", &[("responder", "0")]),
        ("node3", &[("probe", "0"), ("exporter", "0")]),
        ("node1", &[("probe", "0")]),
        ("node1", &[("exporter", "0"), ("probe", "0")]),
        ("node4", &[("probe", "0")]),
    ];
    for (node, expected) in wrong {
        assert!(
            panics(|| run.assert_exits(node, "exits", expected)),
            "{node}: {expected:?} passed"
        );
    }
    let _ = std::fs::remove_dir_all(&run.dir);
}

/// What [`run_guarded`] sees of one run: the console of node1, panicked or not.
#[cfg(test)]
fn fake_run(dir: &Path, panicked: bool) -> LabRun {
    let node = dir.join("nodes").join("node1");
    std::fs::create_dir_all(&node).unwrap();
    let console = if panicked {
        "[ 12.3] Kernel panic - not syncing: Fatal exception in interrupt\n"
    } else {
        "[ 1.0] booted\n"
    };
    std::fs::write(node.join("console.log"), console).unwrap();
    LabRun {
        dir: dir.to_path_buf(),
        status: if panicked { 3 } else { 0 },
        output: String::new(),
        kernel_panics: Vec::new(),
    }
}

#[test]
fn a_guest_kernel_panic_reruns_once_as_a_recorded_result() {
    let base = std::env::temp_dir().join(format!("lab-support-{}-rerun", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("synthetic-panic-once");
    let mut attempts = 0;
    let run = run_guarded("synthetic-panic-once", &dir, || {
        attempts += 1;
        fake_run(&dir, attempts == 1)
    });
    assert_eq!(attempts, 2);
    assert_eq!(run.kernel_panics, ["node1"]);
    let summary = std::fs::read_to_string(dir.join("lab-summary")).unwrap();
    assert!(
        summary.contains("guest kernel panics: 1 (node1); reruns: 1"),
        "{summary}"
    );
    let reruns = std::fs::read_to_string(base.join("reruns.txt")).unwrap();
    assert!(
        reruns.contains("LAB SUMMARY 'synthetic-panic-once'"),
        "{reruns}"
    );
    // No panic: nothing rerun, a summary all the same, nothing added to reruns.txt.
    let quiet = base.join("synthetic-quiet");
    let run = run_guarded("synthetic-quiet", &quiet, || fake_run(&quiet, false));
    assert!(run.kernel_panics.is_empty());
    let summary = std::fs::read_to_string(quiet.join("lab-summary")).unwrap();
    assert!(
        summary.contains("guest kernel panics: 0 (none); reruns: 0"),
        "{summary}"
    );
    assert_eq!(
        std::fs::read_to_string(base.join("reruns.txt")).unwrap(),
        reruns
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn the_same_scenario_panicking_twice_fails() {
    let base = std::env::temp_dir().join(format!("lab-support-{}-twice", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("synthetic-panic-twice");
    let mut attempts = 0;
    // Panics twice, then would pass: it must fail at the second panic, never run a third time.
    let failed = panics(|| {
        run_guarded("synthetic-panic-twice", &dir, || {
            attempts += 1;
            fake_run(&dir, attempts <= 2)
        });
    });
    assert!(failed, "a second panic of the same scenario passed");
    assert_eq!(attempts, 2);
    let summary = std::fs::read_to_string(dir.join("lab-summary")).unwrap();
    assert!(
        summary.contains("scenario failed in ") && summary.contains("; guest kernel panics: 2 "),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
