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
/// A guest kernel that panics is the lab failing, not the code under test (Debian's 6.12 rxe
/// has been seen to oops in `net_rx_action` and `kmalloc` under emulation, from once in fifty
/// boots to once in ten on a loaded host): `lab/run` stops such a run at once, and it is
/// reported loudly and run again, up to [`PANIC_RERUNS`] times. A panic after that, a boot
/// failure or a timeout fails the test.
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
    let _serial = LAB.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let root = repo_root();
    let dir = root.join("target").join("lab-runs").join(name);
    for bin in bins {
        assert_fresh(&root, &root.join(bin));
    }
    let lab = LabArgs {
        name,
        nodes,
        scenario,
        bins,
        files,
        timeout_s,
    };
    let mut run = run_once(&root, &dir, &lab);
    for attempt in 1..=PANIC_RERUNS {
        let Some(node) = guest_kernel_panic(&dir) else {
            break;
        };
        eprintln!(
            "LAB INFRASTRUCTURE: the guest kernel of {node} panicked during '{name}' (console \
             below); running the scenario again ({attempt} of {PANIC_RERUNS})\n{}",
            run.output
        );
        let panicked = dir.with_extension(format!("kernel-panic-{attempt}"));
        let _ = std::fs::remove_dir_all(&panicked);
        let _ = std::fs::rename(&dir, &panicked);
        run = run_once(&root, &dir, &lab);
    }
    assert_ne!(
        run.status, 3,
        "the lab could not boot or timed out (this is a failure, not a skip):\n{}",
        run.output
    );
    run
}

/// How many times a scenario whose guest kernel panicked is run again.
const PANIC_RERUNS: u32 = 2;

/// What one `lab/run` is given.
struct LabArgs<'a> {
    name: &'a str,
    nodes: u32,
    scenario: &'a str,
    bins: &'a [&'a Path],
    files: &'a [&'a Path],
    timeout_s: u32,
}

fn run_once(root: &Path, dir: &Path, lab: &LabArgs) -> LabRun {
    let (name, nodes, scenario) = (lab.name, lab.nodes, lab.scenario);
    let mut cmd = Command::new(root.join("lab").join("run"));
    cmd.arg("--nodes")
        .arg(nodes.to_string())
        .arg("--scenario")
        .arg(root.join("lab").join("scenarios").join(scenario))
        .arg("--out")
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
