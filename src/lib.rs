//! rdma-probe-exporter: continuous, paced `ib_write_bw`-style RDMA WRITE probing of a cluster's links.
//!
//! One module per job (docs/architecture.md, "Modules"). `verbs` is the only module allowed to use
//! `unsafe`; every other module is `#![forbid(unsafe_code)]`-clean by the crate-wide deny below
//! being lifted only there.
#![deny(unsafe_code)]

pub mod burst;
pub mod cli;
pub mod config;
pub mod control;
pub mod cpu_time;
pub mod discovery;
pub mod exporter;
pub mod flow;
pub mod http;
pub mod judge;
pub mod label;
pub mod memlock;
pub mod metrics;
pub mod perftest;
pub mod ping;
pub mod placement;
pub mod port;
pub mod prober;
pub mod rdma_address;
pub mod readiness;
pub mod reason;
pub mod reload;
pub mod responder;
pub mod schedule;
pub mod session;
pub mod simulate;
pub mod text;
pub mod topology;
pub mod units;
pub mod verbs;
