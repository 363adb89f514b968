//! Paced RDMA WRITE bursts: the pure parts (plan, pacing, signaling, statistics, data pattern).
//!
//! A burst is what `ib_write_bw` does in one run — a stream of RDMA WRITEs on a set of RC QPs,
//! timed from the start to the last completion — made suitable for running every minute on
//! production nodes: paced accurately instead of spinning, measured beyond the mean, and checked
//! for data integrity (docs/architecture.md: "ib_write_bw semantics", "Pacing and waiting",
//! "Data integrity").
//!
//! Everything here is pure: no verbs calls, no clock reads, no allocation that grows with the
//! burst. The engine (the I/O part, on its own OS thread) owns the QPs and the clock and asks
//! these pieces what to do:
//! - [`plan`]: the validated [`BurstPlan`] (perftest defaults, limits, length, rate);
//! - [`pacing`]: the [`Pacer`] token bucket and the [`WaitPolicy`] (spin, sleep or block);
//! - [`signal`]: which WRs are signaled and the per-QP [`SendWindow`] that always drains;
//! - [`stats`]: [`BurstStats`] → [`BurstReport`] (bandwidth, message rate, lowest short-window
//!   bandwidth, longest completion gap, per-QP minimum);
//! - [`pattern`]: the seeded data pattern the responder verifies.
//!
//! A paced engine loop, in outline: `pacer.poll(now)` → post up to `n` WRs on QPs whose
//! `window.can_post`, each flagged by `window.post(is_last)`, then `pacer.consume(posted)`;
//! poll the CQ and feed `window.on_completion` and `stats.on_completion`; when nothing can be
//! done, ask `WaitPolicy::decide`. In duration mode, at the stop time post one more signaled WR
//! on each QP whose `window.drain_needed()`, then drain.

pub mod engine;
pub mod pacing;
pub mod pattern;
pub mod plan;
pub mod run;
pub mod signal;
pub mod stats;

pub use pacing::{Completions, PaceDecision, Pacer, WaitAction, WaitPolicy};
pub use pattern::Mismatch;
pub use plan::{BurstLength, BurstPlan, BurstPlanBuilder, PlanError};
pub use run::{BurstRun, PlannedWrite, StallClock};
pub use signal::{PostedWr, SendWindow, SignalPolicy, WindowError};
pub use stats::{BurstReport, BurstStats};
