//! Fuzz the config parser (`src/config/`): bad input gets a located error, never a panic.
//!
//! The same checks as `check_config_properties` in `src/config/fuzz_corpus.rs`, which `cargo test`
//! runs on the seeds: the bytes (as text, lossily) are a config or an error; an error's position
//! lies within the text; a config renders, and its limits and keys hold what validation promises.
//!
//! Seeds: `fuzz/seeds/config_parse/`, the shipped configs and a few that reach the rarer keys.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::config::Config;

fn env(name: &str) -> Option<String> {
    match name {
        "NODE_NAME" => Some("gpu-a01".to_owned()),
        "HOST_IP" => Some("192.0.2.1".to_owned()),
        "CREDENTIALS_DIRECTORY" => Some("/run/credentials/rdma-probe-exporter.service".to_owned()),
        _ => None,
    }
}

/// Lines as YAML counts them: LF, CR LF, or a CR alone.
fn yaml_lines(text: &str) -> u64 {
    let bytes = text.as_bytes();
    let breaks = bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
        .count();
    breaks as u64 + 1
}

fuzz_target!(|data: &[u8]| {
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
});
