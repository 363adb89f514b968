//! The seed corpus of the `config_parse` cargo-fuzz target, and its replay as plain unit tests.
//!
//! The config is the one input that comes from an operator rather than the network, but it is
//! still bad input to be refused with a located error, never a panic (docs/config.md). Random
//! bytes rarely look like YAML, so the fuzzer starts from real configs: the shipped ones and a
//! few that reach the rarer keys. [`seed_corpus_is_current`] fails when `fuzz/seeds/config_parse/`
//! lacks one of them or holds an outdated sample; [`write_seed_corpus`] (ignored, run on demand)
//! rewrites it.
//!
//! The replay runs every file under `fuzz/seeds/config_parse/` and, where a local fuzz run left
//! one, `fuzz/corpus/config_parse/`, through [`check_config_properties`], the checks the fuzz
//! target makes (fuzz/fuzz_targets/config_parse.rs).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::Config;

const SEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds/config_parse");
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/config_parse");

/// The environment the fuzz target interpolates from.
fn env(name: &str) -> Option<String> {
    match name {
        "NODE_NAME" => Some("gpu-a01".to_owned()),
        "HOST_IP" => Some("192.0.2.1".to_owned()),
        "CREDENTIALS_DIRECTORY" => Some("/run/credentials/rdma-probe-exporter.service".to_owned()),
        _ => None,
    }
}

/// What the target checks for any input: the bytes, as text (lossily, as a file would be read
/// by an editor), are a config or an error; an error's position, if it has one, lies within
/// the text; a config renders, and its limits and keys hold what validation promises.
pub(crate) fn check_config_properties(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Config::from_str(&text, "fuzz.yaml", env) {
        Ok(config) => {
            let _ = config.render();
            let limits = config.limits();
            assert!(limits.max_sessions >= 1);
            assert!(limits.max_pinned_bytes >= limits.max_session_bytes);
            if let (Some(current), Some(previous)) =
                (config.auth().psk_file(), config.auth().previous_psk_file())
            {
                assert_ne!(current, previous);
            }
        }
        Err(e) => {
            let _ = e.to_string();
            if let Some(at) = e.located() {
                assert!(at.line >= 1 && at.column >= 1, "{e}");
                assert!(at.line <= yaml_lines(&text) + 1, "{e}");
            }
        }
    }
}

/// Lines as YAML counts them: a line break is LF, CR LF, or a CR alone (YAML 1.2, 5.4), so a
/// file with old Mac line ends has its errors on the lines an editor shows, not on line 1.
fn yaml_lines(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let breaks = bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
        .count();
    breaks as u64 + 1
}

/// Seeds copied from the shipped configs (seed name, file). The copies are snapshots: a stale one
/// is still a good place to start, so a change to a shipped config does not make the corpus
/// out of date ([`write_seed_corpus`] refreshes them).
const SHIPPED: [(&str, &str); 4] = [
    ("example.yaml", "config/example.yaml"),
    ("lab.yaml", "config/lab.yaml"),
    ("systemd.yaml", "deploy/systemd/config.yaml"),
    ("kubernetes.yaml", "deploy/kubernetes/base/config.yaml"),
];

/// The shipped configs as they are now, by seed name.
fn shipped_seeds() -> BTreeMap<String, Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    SHIPPED
        .iter()
        .map(|(name, file)| {
            let text = fs::read(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            ((*name).to_owned(), text)
        })
        .collect()
}

/// The first `config_parse` finding (a 10-minute run): CR-only line ends, on which an error's
/// line is counted as YAML counts lines. The property was wrong, not the parser.
const BARE_CR_LINE_ENDS: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fuzz/seeds/config_parse/finding-bare-cr-line-ends.yaml"
));

#[test]
fn errors_on_cr_only_line_ends_are_on_the_lines_yaml_counts() {
    check_config_properties(BARE_CR_LINE_ENDS);
    let text = "node: a\rauth: none\rbogus: 1\r";
    let e = Config::from_str(text, "cr.yaml", env).unwrap_err();
    let at = e.located().expect("a located error");
    assert_eq!((at.line, at.column), (3, 1), "{e}");
    assert_eq!(yaml_lines(text), 4);
    assert_eq!(yaml_lines("a\r\nb\nc\rd"), 4);
    assert_eq!(yaml_lines(""), 1);
}

/// The samples that reach the rarer keys, and past findings, by seed name.
fn config_seeds() -> BTreeMap<String, Vec<u8>> {
    let mut seeds = BTreeMap::new();
    seeds.insert(
        "finding-bare-cr-line-ends.yaml".to_owned(),
        BARE_CR_LINE_ENDS.to_vec(),
    );
    for (name, text) in [
        ("minimal.yaml", "node: a\nauth: none\n"),
        (
            "rollover.yaml",
            "node: a\nauth: {psk_file: /k/new, previous_psk_file: /k/old}\n",
        ),
        (
            "limits.yaml",
            "node: a\nauth: none\nlimits: {max_sessions: 4, max_pinned: 256MiB, \
             max_session_memory: 8MiB}\n",
        ),
        (
            "anchors.yaml",
            "node: ${NODE_NAME}\nauth: none\ndefaults: &d {interval: 10s, rate_limit: 25%}\n\
             peers:\n  - {name: b, address: 192.0.2.2, labels: {rack: r1}}\n  \
             - {name: c, address: '[2001:db8::3]:18516', mode: perftest}\n",
        ),
    ] {
        seeds.insert(name.to_owned(), text.as_bytes().to_vec());
    }
    seeds
}

fn files_in(dir: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn seed_corpus_is_current() {
    let found: BTreeMap<String, Vec<u8>> = files_in(SEEDS)
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect();
    let samples = config_seeds();
    let fresh = samples
        .iter()
        .all(|(name, data)| found.get(name) == Some(data))
        && SHIPPED.iter().all(|(name, _)| found.contains_key(*name))
        && found.len() == samples.len() + SHIPPED.len();
    assert!(
        fresh,
        "{SEEDS} is out of date (files {:?}); rewrite it with \
         `cargo test --lib config::fuzz_corpus::write_seed_corpus -- --ignored`",
        found.keys().collect::<Vec<_>>(),
    );
}

/// Rewrites the seed corpus from the shipped configs and the samples above.
#[test]
#[ignore = "writes fuzz/seeds/config_parse; run on demand"]
fn write_seed_corpus() {
    fs::create_dir_all(SEEDS).unwrap();
    for stale in files_in(SEEDS) {
        fs::remove_file(stale).unwrap();
    }
    for (name, data) in config_seeds().into_iter().chain(shipped_seeds()) {
        fs::write(Path::new(SEEDS).join(name), data).unwrap();
    }
}

#[test]
fn every_corpus_file_passes_the_targets_checks() {
    let mut replayed = 0;
    for file in files_in(SEEDS).into_iter().chain(files_in(CORPUS)) {
        // A fuzz run going on beside the tests replaces corpus files as it shrinks them.
        let Some(data) = read_unless_gone(&file) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(|| check_config_properties(&data));
        assert!(
            outcome.is_ok(),
            "{} fails the config_parse checks",
            file.display()
        );
        replayed += 1;
    }
    assert!(
        replayed >= config_seeds().len(),
        "only {replayed} files under {SEEDS}"
    );
}

#[test]
fn the_seeds_are_valid_configs() {
    // Where the fuzzer starts matters: every seed parses, so mutations begin inside the checks.
    for (name, data) in config_seeds().into_iter().chain(shipped_seeds()) {
        if name.starts_with("finding-") {
            continue;
        }
        let text = String::from_utf8(data).unwrap();
        if let Err(e) = Config::from_str(&text, &name, env) {
            panic!("{name}: {e}");
        }
    }
}

/// The file's bytes, or `None` if it was removed since it was listed.
fn read_unless_gone(file: &Path) -> Option<Vec<u8>> {
    match fs::read(file) {
        Ok(data) => Some(data),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("{}: {e}", file.display()),
    }
}
