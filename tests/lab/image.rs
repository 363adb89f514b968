//! The container image's root file system, built without a container engine by
//! deploy/image/build-rootfs from the Dockerfile's own steps, runs the exporter in the lab as the
//! DaemonSet runs it (lab/scenarios/image.sh): unpacked from one tar with its extended
//! attributes, read-only, as uid 65532 with no new privileges, IPC_LOCK its only capability and
//! RLIMIT_MEMLOCK at 64 KiB. Two nodes measure their path to each other; then the image's binary
//! without IPC_LOCK is refused by the kernel, and the plain binary without any capability probes
//! with RLIMIT_MEMLOCK unlimited (the systemd unit's way) and refuses to start at 64 KiB.

use std::collections::BTreeMap;
use std::process::Command;

use crate::promtool;
use crate::support::{self, LabRun};

const BIN: &str = "target/release/rdma-probe-exporter";
const OUT: &str = "target/image";

fn result(run: &LabRun, node: &str, key: &str) -> String {
    run.results(node)
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("{node} recorded no {key}:\n{}", run.log(node)))
}

/// `key=value` lines of build-rootfs' size file.
fn sizes() -> BTreeMap<String, u64> {
    let path = support::repo_root().join(OUT).join("size");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.parse().expect("a byte count")))
        .collect()
}

#[test]
fn the_image_root_runs_the_exporter_unprivileged_with_only_ipc_lock() {
    let root = support::repo_root();
    let built = Command::new(root.join("deploy/image/build-rootfs"))
        .args(["--binary", BIN, "--out", OUT])
        .current_dir(&root)
        .output()
        .expect("run deploy/image/build-rootfs");
    assert!(
        built.status.success(),
        "deploy/image/build-rootfs failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let size = sizes();
    let mib = |k: &str| size[k] as f64 / 1048576.0;
    eprintln!(
        "image root file system: {:.1} MiB (the exporter {:.1} MiB of it), {:.1} MiB gzip'd",
        mib("rootfs_bytes"),
        mib("binary_bytes"),
        mib("gzip_bytes")
    );

    let tar = format!("{OUT}/rootfs.tar");
    let run = support::run_with_files(
        "image",
        2,
        "image.sh",
        &[BIN.as_ref()],
        &[tar.as_ref()],
        600,
    );
    run.assert_success();

    for (node, other) in [("node1", "node2"), ("node2", "node1")] {
        // Who runs: the DaemonSet's user, no new privileges, IPC_LOCK (bit 14) alone, from the
        // binary's file capability, under a 64 KiB RLIMIT_MEMLOCK.
        assert_eq!(result(&run, node, "uid"), "65532");
        assert_eq!(result(&run, node, "gid"), "65532");
        assert_eq!(result(&run, node, "no_new_privs"), "1");
        assert_eq!(result(&run, node, "cap_eff"), "0000000000004000");
        assert_eq!(result(&run, node, "cap_bnd"), "0000000000004000");
        assert_eq!(result(&run, node, "memlock"), "65536");
        assert!(
            result(&run, node, "getcap").ends_with("cap_ipc_lock=ep"),
            "{}",
            result(&run, node, "getcap")
        );
        // No set-user-ID or set-group-ID file, and none of the debug image's tools.
        assert_eq!(result(&run, node, "setuid_files"), "0");
        assert_eq!(result(&run, node, "debug_tools"), "");
        // What it loaded: the image's libibverbs and provider, not the host's.
        for lib in ["libibverbs", "provider"] {
            let path = result(&run, node, lib);
            assert!(path.starts_with("/tmp/image/"), "{node} {lib}: {path}");
        }

        let scrape = run.file(node, "metrics.txt");
        promtool::assert_promtool_accepts(&scrape);
        let series = format!(
            "rdma_probe_success{{device=\"rxe0\",peer=\"{other}\",peer_device=\"rxe0\"}} 1"
        );
        assert!(scrape.lines().any(|l| l == series), "{node}:\n{scrape}");
        assert!(
            !scrape.contains(&format!("peer=\"{node}\",peer_device")),
            "{node} skips itself:\n{scrape}"
        );
        assert_eq!(run.file(node, "healthz.txt").trim(), "ok");
        assert_eq!(run.file(node, "readyz.txt").trim(), "ready");
        assert_eq!(result(&run, node, "stop_status"), "0", "SIGTERM: exit 0");
        eprintln!(
            "{node}: image unpacked in {} s, {node}->{other} measured {} s after ready",
            result(&run, node, "unpack_seconds"),
            result(&run, node, "up_seconds")
        );
    }

    // Without IPC_LOCK in the container's bounding set the kernel refuses the binary.
    assert_eq!(result(&run, "node1", "no_ipc_lock_exit"), "126");
    assert!(run
        .file("node1", "no-ipc-lock.txt")
        .contains("Operation not permitted"));
    // The systemd way: no capability, RLIMIT_MEMLOCK unlimited, and a probe validates...
    assert_eq!(result(&run, "node1", "bare_unlimited_exit"), "0");
    let ok = run.file("node1", "unlimited.json");
    assert!(ok.contains("\"validated\":true"), "{ok}");
    // ... while at 64 KiB it refuses to start, naming the limit and the fix, before a memory
    // registration could fail.
    assert_eq!(result(&run, "node1", "bare_limited_exit"), "1");
    let limited = run.file("node1", "limited.json.err");
    assert!(
        limited.contains("RLIMIT_MEMLOCK is 64KiB") && limited.contains("ulimit -l unlimited"),
        "{limited}"
    );
}
