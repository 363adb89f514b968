//! The command line (docs/architecture.md, "Modules"). Six subcommands:
//! - `run`: the exporter: probes the config's peers on a schedule, serves other nodes' probes
//!   and exports the results (module [`crate::exporter`]);
//! - `responder`: serves probe sessions only, with optional /metrics;
//! - `probe`: one burst (or a few on one warm session) against a responder or a stock
//!   `ib_write_bw` server, printed as a table or JSON;
//! - `devices`: the local RDMA devices, ports, link rates, PCIe links, counters and GIDs;
//! - `check-config`: a config file validated and printed as the exporter resolves it;
//! - `simulate`: a synthetic cluster's scheduling and selection in virtual time
//!   (module [`crate::simulate`]).
//!
//! Three layers, so that each can be tested on its own and `main.rs` stays wiring:
//! - [`args`]: clap definitions, one file per subcommand, parsed once into validated settings
//!   ([`Action`]); every refusal is a usage error (exit status 2) that names the flag and what
//!   it accepts.
//! - [`report`]: pure formatting of what is printed (the ib_write_bw-like table, unit
//!   conversions) and [`devices`] (the device listing: verbs and sysfs merged), unit-tested
//!   without RDMA.
//! - [`run`]: carrying out an action: `run`, `responder` and `probe` on a tokio runtime started
//!   for them (the burst itself runs on the engine's own thread); `devices`, `check-config` and
//!   `simulate` without one.
//!
//! Exit status: 0 success; 1 the command ran and failed (probe failure, no RDMA device,
//! responder could not start); 2 the command line cannot be turned into settings, including a
//! PSK file that cannot be read: nothing was attempted.
//!
//! Output streams: results go to stdout (with `--json`, exactly one JSON document); logs and
//! errors go to stderr, so `probe --json | jq` always sees clean JSON.

pub mod args;
pub mod devices;
mod ping;
pub mod report;
pub mod run;

pub use args::{
    Action, Cli, Command, DevicesAction, LogFormat, Logging, ProbeAction, ResponderAction,
    DEFAULT_CONTROL_PORT,
};
pub use run::{execute, init_tracing};
