//! The config file (YAML) → a validated [`Config`], parsed once. The units operators write in it
//! (and on the command line) are [`crate::units`].
//!
//! Three steps, each in its own file, so each can be tested alone (ripgrep's "low args → high
//! args"):
//! 1. `file.rs`: YAML → raw serde structs. Only the document's shape is checked here: unknown
//!    keys, lists vs mappings, duplicate keys, and the parser budgets against hostile input. Every
//!    value is kept as text with its position.
//! 2. `interpolate.rs`: `${VAR}` / `${VAR:-default}` in each value, from the environment
//!    (injected, so tests do not touch the process environment).
//! 3. `validate.rs`: every value parsed with this crate's parsers ([`crate::units`] for sizes,
//!    rates and durations; the same ones the CLI uses) and every cross-check done, including
//!    building each peer's burst plan, so a config mistake is a config error at load, never a
//!    failed probe.
//!
//! Errors ([`ConfigError`]) name the file, line, column and field path and say what would be
//! valid. The file format is documented by `config/example.yaml`; design notes in
//! `docs/config.md`.

mod address;
mod error;
mod file;
#[cfg(test)]
mod fuzz_corpus;
mod interpolate;
mod model;
mod render;
mod validate;

#[cfg(test)]
mod tests;

use std::io::Read as _;
use std::path::Path;

use crate::topology::{self, Topology};

pub use address::{
    host_port_forms, parse_host_port, HostPort, DEFAULT_CONTROL_PORT, PERFTEST_PORT,
};
pub use error::{ConfigError, Located};
pub use model::{
    Auth, Config, Device, Devices, Discovery, GidIndex, Judge, Labels, Limits, Listen, Peer,
    PeerMode, Ping, ProbeConfig, Schedule, Selection, Series, SkipReason, TopologySource,
    DEFAULT_BURST_DURATION, DEFAULT_CONTROL_LISTEN, DEFAULT_FORGET_AFTER, DEFAULT_INTERVAL,
    DEFAULT_JITTER, DEFAULT_MAX_PEERS, DEFAULT_METRICS_LISTEN, DEFAULT_QP_TIMEOUT,
    DEFAULT_REFRESH_INTERVAL, DEFAULT_ROUND, DEFAULT_SAMPLE, DEFAULT_TIMEOUT,
    DEFAULT_UNPACED_EVERY, MAX_JITTER,
};

/// Largest config file accepted (1 MiB): a 1,000-peer list with labels is about 100 KiB; beyond
/// this a file is a mistake or hostile, and is refused before it is parsed. (Large clusters use
/// `discovery`.)
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Largest topology file accepted (16 MiB): a 10,000-node tree is a few hundred KiB.
pub const MAX_TOPOLOGY_BYTES: u64 = 16 << 20;

impl Config {
    /// Reads and validates the config file at `path`, interpolating from the process environment,
    /// and the topology file it names (applied to the node's and its peers' labels).
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let config = Self::load_file(path.as_ref())?;
        let Some(source) = config.topology_source() else {
            return Ok(config);
        };
        let topology = read_topology(&source.slurm, config.origin())?;
        Ok(config.with_topology(topology))
    }

    fn load_file(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let read_error = |error| ConfigError::Read {
            origin: origin.clone(),
            error,
        };
        let bytes = read_at_most(path, MAX_CONFIG_BYTES).map_err(read_error)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            let size = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
            return Err(ConfigError::TooLarge {
                origin,
                size,
                max: MAX_CONFIG_BYTES,
            });
        }
        let text = utf8_text(bytes).map_err(read_error)?;
        Config::from_str(&text, &origin, |name| std::env::var(name).ok())
    }

    /// Validates config `text`; `origin` names it in errors (usually the file name), `env` looks
    /// up `${VAR}` references (`None`: unset).
    pub fn from_str(
        text: &str,
        origin: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                origin: origin.to_owned(),
                size: text.len() as u64,
                max: MAX_CONFIG_BYTES,
            });
        }
        let origin = error::Origin {
            name: origin.to_owned(),
        };
        let raw = file::parse(text, &origin)?;
        validate::validate(raw, text, &origin, &env)
    }
}

/// The file at `path`, read up to one byte past `max`: that byte tells "at the limit" from "over
/// it" without reading more.
fn read_at_most(path: &Path, max: u64) -> Result<Vec<u8>, std::io::Error> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A file's bytes as text, or why they are not.
fn utf8_text(bytes: Vec<u8>) -> Result<String, std::io::Error> {
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// The Slurm topology file at `path`, which the config `origin` names.
fn read_topology(path: &Path, origin: &str) -> Result<Topology, ConfigError> {
    let file = path.display().to_string();
    let read_error = |error| ConfigError::TopologyRead {
        origin: origin.to_owned(),
        file: file.clone(),
        error,
    };
    let bytes = read_at_most(path, MAX_TOPOLOGY_BYTES).map_err(read_error)?;
    if bytes.len() as u64 > MAX_TOPOLOGY_BYTES {
        return Err(read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than the {MAX_TOPOLOGY_BYTES} bytes accepted"),
        )));
    }
    let text = utf8_text(bytes).map_err(read_error)?;
    topology::parse(&text).map_err(|error| ConfigError::Topology {
        origin: origin.to_owned(),
        file,
        error,
    })
}
