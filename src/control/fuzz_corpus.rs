//! The committed seed corpus of the cargo-fuzz targets, and its replay as plain unit tests.
//!
//! Random bytes almost never get a consistent length header past the framing checks, so without
//! seeds a fuzzer spends its time on the first 12 bytes and never reaches the message checks.
//! `fuzz/seeds/control_decode/` holds one valid frame per sample message of the codec tests;
//! [`seed_corpus_is_current`] fails when it no longer matches what `encode` produces, and
//! [`write_seed_corpus`] (ignored, run on demand) rewrites it.
//!
//! The replay decodes every file under `fuzz/seeds/*/` and, where a local fuzz run left one,
//! `fuzz/corpus/*/`, with the same checks as the property tests, so an input that once crashed
//! the decoder and was kept as a seed is rerun by every `cargo test`, with no nightly toolchain.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::codec::tests::{all_messages, check_decode_properties};
use super::codec::{decode, encode};
use super::message::{BurstOutcome, BurstResult, Message};
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

#[test]
fn seed_corpus_is_current() {
    let dir = Path::new(SEEDS).join("control_decode");
    let expected = control_decode_seeds();
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
    for (name, frame) in &expected {
        let (_, used) = decode(frame).unwrap().expect("a whole frame");
        assert_eq!(used, frame.len(), "{name}");
    }
}

/// Rewrites the seed corpus from the sample messages; run after adding a message or a field.
#[test]
#[ignore = "writes fuzz/seeds/control_decode; run on demand"]
fn write_seed_corpus() {
    let dir = Path::new(SEEDS).join("control_decode");
    fs::create_dir_all(&dir).unwrap();
    for stale in files_in(&dir) {
        fs::remove_file(stale).unwrap();
    }
    for (name, frame) in control_decode_seeds() {
        fs::write(dir.join(name), frame).unwrap();
    }
}

#[test]
fn every_corpus_file_decodes_without_panic() {
    let mut replayed = 0;
    for dir in target_dirs(SEEDS).into_iter().chain(target_dirs(CORPUS)) {
        for file in files_in(&dir) {
            let data = fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| check_decode_properties(&data));
            assert!(
                outcome.is_ok(),
                "{} fails the decode checks",
                file.display()
            );
            replayed += 1;
        }
    }
    assert!(
        replayed >= control_decode_seeds().len(),
        "only {replayed} corpus files under {SEEDS}"
    );
}
