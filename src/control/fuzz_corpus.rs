//! The committed seed corpus of the control cargo-fuzz targets, and its replay as plain unit
//! tests.
//!
//! Random bytes almost never get a consistent length header past the framing checks, so without
//! seeds a fuzzer spends its time on the first 12 bytes and never reaches the message checks.
//! `fuzz/seeds/control_decode/` holds one valid frame per sample message of the codec tests,
//! `fuzz/seeds/control_sealed/` the same messages sealed under the fuzz target's key and as the
//! JSON a key holder would seal; [`seed_corpus_is_current`] fails when they no longer match what
//! `encode` and `seal` produce, and [`write_seed_corpus`] (ignored, run on demand) rewrites them.
//!
//! The replay runs every file under `fuzz/seeds/control_*/` and, where a local fuzz run left
//! one, `fuzz/corpus/control_*/`, through its target's checks (`control_sealed`'s for that
//! target, the decoder's for the others), so an input that once crashed a target and was kept as
//! a seed is rerun by every `cargo test`, with no nightly toolchain. The config parser's target
//! has its own replay (`src/config/fuzz_corpus.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::codec::tests::{all_messages, check_decode_properties};
use super::codec::{decode, encode};
use super::message::{BurstOutcome, BurstResult, Message};
use super::seal::tests::{check_sealed_properties, sealed_seeds};
use crate::reason::ErrorReason;

const SEEDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/seeds");
const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus");

/// The seed frames of `control_decode` by file name: every sample message, and free text with
/// the characters the decoder escapes, so the fuzzer starts from the escaping path too.
fn control_decode_seeds() -> BTreeMap<String, Vec<u8>> {
    let mut messages = all_messages();
    messages.push(Message::Error {
        reason: ErrorReason::PeerError,
        message: "\u{1b}[2J\r\nlevel=info\0\u{7f}\u{9b}\u{202e}\u{2028}".into(),
    });
    messages.push(Message::BurstEnd {
        burst_id: 5,
        outcome: BurstOutcome::Failed {
            reason: ErrorReason::WcFlush,
            detail: "\u{1b}]0;title\u{7}".into(),
        },
        posted_per_qp: vec![],
    });
    messages.push(Message::BurstResult(BurstResult {
        burst_id: 5,
        validated: false,
        detail: Some("\u{1b}[31mred\u{1b}[0m".into()),
        counters: vec![("port_xmit_wait".into(), 1)],
        verified_messages: 0,
    }));
    messages
        .iter()
        .enumerate()
        .map(|(i, msg)| {
            let frame = encode(msg).expect("a sample message encodes");
            (format!("{i:02}-{}.bin", msg.kind()), frame)
        })
        .collect()
}

/// The regular files directly under `dir`, sorted; none if `dir` does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
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

/// The subdirectories of `dir` (one per fuzz target), sorted; none if `dir` does not exist.
fn target_dirs(dir: &str) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// Every committed seed directory of the control targets and what it must hold.
fn expected_seeds() -> Vec<(&'static str, BTreeMap<String, Vec<u8>>)> {
    vec![
        ("control_decode", control_decode_seeds()),
        ("control_sealed", sealed_seeds().into_iter().collect()),
    ]
}

#[test]
fn seed_corpus_is_current() {
    for (target, expected) in expected_seeds() {
        let dir = Path::new(SEEDS).join(target);
        let found: BTreeMap<String, Vec<u8>> = files_in(&dir)
            .into_iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, fs::read(&p).unwrap())
            })
            .collect();
        assert!(
            found == expected,
            "{} is out of date (files {:?}, expected {:?}); rewrite it with \
             `cargo test --lib write_seed_corpus -- --ignored`",
            dir.display(),
            found.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>()
        );
    }
    for (name, frame) in &control_decode_seeds() {
        let (_, used) = decode(frame).unwrap().expect("a whole frame");
        assert_eq!(used, frame.len(), "{name}");
    }
}

/// Rewrites the seed corpora from the sample messages; run after adding a message or a field.
#[test]
#[ignore = "writes fuzz/seeds/control_*; run on demand"]
fn write_seed_corpus() {
    for (target, seeds) in expected_seeds() {
        let dir = Path::new(SEEDS).join(target);
        fs::create_dir_all(&dir).unwrap();
        for stale in files_in(&dir) {
            fs::remove_file(stale).unwrap();
        }
        for (name, data) in seeds {
            fs::write(dir.join(name), data).unwrap();
        }
    }
}

#[test]
fn every_corpus_file_passes_its_targets_checks() {
    let mut replayed = 0;
    for dir in target_dirs(SEEDS).into_iter().chain(target_dirs(CORPUS)) {
        let target = dir.file_name().unwrap().to_string_lossy().into_owned();
        let check: fn(&[u8]) = match target.as_str() {
            "control_sealed" => check_sealed_properties,
            t if t.starts_with("control_") => check_decode_properties,
            _ => continue,
        };
        for file in files_in(&dir) {
            let data = fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{} fails the {target} checks",
                file.display()
            );
            replayed += 1;
        }
    }
    let seeds: usize = expected_seeds().iter().map(|(_, s)| s.len()).sum();
    assert!(
        replayed >= seeds,
        "only {replayed} corpus files under {SEEDS}"
    );
}
