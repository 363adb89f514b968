//! Interoperability with perftest: `probe --perftest HOST:PORT` is a client of a stock
//! `ib_write_bw` server (docs/perftest.md).
//!
//! - [`wire`]: the out-of-band messages, encoded and parsed without I/O;
//! - [`channel`]: the exchange sequence over a byte stream, with a timeout on every read;
//! - [`probe`]: the probe itself: QPs, the exchange over TCP, our engine's burst into the
//!   server's buffer, the report and the close.

pub mod channel;
pub mod probe;
pub mod wire;

#[cfg(test)]
mod tests;

pub use probe::{probe_perftest, probe_perftest_on, PerftestOptions, DEFAULT_PORT};
