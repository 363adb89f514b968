//! Units operators write in configs and on the command line: rates, sizes, durations.
//!
//! Parsing lives here, once, so that the YAML config, the CLI flags and error messages agree on
//! what `64K`, `10Gbps` or `25%` mean (see [`units`] for the exact grammar and why it is strict).

pub mod units;

pub use units::{
    parse_duration, parse_positive_duration, ByteSize, RateLimit, ResolveError, ResolvedRate,
    UnitError,
};
