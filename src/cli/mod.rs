//! The command line: `responder`, `probe`, `devices` and `check-config` (docs/architecture.md,
//! "Modules").
//!
//! Three layers, so that each can be tested on its own and `main.rs` stays wiring:
//! - [`args`]: clap definitions, parsed once into validated settings ([`Action`]); every
//!   refusal is a usage error (exit status 2) that names the flag and what it accepts.
//! - [`report`]: pure formatting of what is printed (the ib_write_bw-like table, unit
//!   conversions) and [`devices`] (the device listing: verbs and sysfs merged), unit-tested
//!   without RDMA.
//! - [`run`]: carrying out an action (tokio; the burst itself runs on the engine's own thread).
//!
//! Exit status: 0 success; 1 the command ran and failed (probe failure, no RDMA device,
//! responder could not start); 2 the command line cannot be turned into settings, including a
//! PSK file that cannot be read: nothing was attempted.
//!
//! Output streams: results go to stdout (with `--json`, exactly one JSON document); logs and
//! errors go to stderr, so `probe --json | jq` always sees clean JSON.

pub mod args;
pub mod devices;
pub mod report;
pub mod run;

pub use args::{
    Action, Cli, Command, DevicesAction, LogFormat, Logging, ProbeAction, ResponderAction,
    DEFAULT_CONTROL_PORT,
};
pub use run::{execute, init_tracing};
