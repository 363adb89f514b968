//! Lab tests: real kernel Soft-RoCE (rdma_rxe) in small VMs booted by `lab/run`.
//! Each test boots its own lab; they run one at a time.

mod support;

#[path = "../common/promtool.rs"]
mod promtool;

mod baseline;
mod bench;
mod capacity;
mod discovery;
mod exporter;
mod hostile;
mod image;
mod leaks;
mod perftest;
mod ping;
mod port;
mod probe;
mod prometheus;
mod traffic;
