//! `promtool check metrics`, shared by the test crates that scrape `/metrics`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// promtool from `scripts/install-deps` (`.cache/tools`), `$PROMTOOL`, or `PATH`.
fn promtool() -> PathBuf {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return p.into();
    }
    let cached = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/tools/promtool");
    if cached.exists() {
        return cached;
    }
    "promtool".into()
}

/// Panics with promtool's complaints unless `exposition` passes `promtool check metrics`.
pub fn assert_promtool_accepts(exposition: &str) {
    let tool = promtool();
    let mut child = Command::new(&tool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (scripts/install-deps fetches promtool)",
                tool.display()
            )
        });
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\non:\n{exposition}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
}

/// The value of the sample whose name and labels are exactly `series`.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
