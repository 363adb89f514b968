//! When each path is probed: pure scheduling logic, with time and randomness injected.
//!
//! The probed entity is the **path**: a local device, a peer, and the rail that picks the
//! peer's device ([`PathKey`]). The prober asks the peer for a rail; the peer answers with its
//! own device on that rail from its own config, and the results are labelled with it. So a
//! node with eight rails probes each peer eight times, once per rail, and a mis-cabled or slow
//! rail shows up as one path, not as a blurred node average.
//!
//! # Rules
//! - **One burst per local device at a time.** Two bursts on one NIC would measure each other.
//!   Different devices burst in parallel: they are different links.
//! - **Interval with jitter, random first phase.** Each path is probed every `interval`
//!   (× `1 ± jitter`, drawn anew each time), counted from the start of its previous burst, so
//!   a late start never makes the next gap shorter. A new path first comes due at a random
//!   point of its first interval: when every node restarts at once (a DaemonSet rollout), the
//!   bursts still spread out. Randomness comes from a small PRNG seeded per node, so a node's
//!   schedule is reproducible and different from its neighbours'.
//! - **Most overdue first.** When a device frees up, it takes its due path that has waited
//!   longest, so paths sharing a device take turns.
//! - **Failure is data.** A failing path is probed again at its next interval, never sooner:
//!   a dead peer costs no more than a healthy one.
//! - **Busy is not failure.** A responder serving someone else answers `busy`; the path retries
//!   after 1 s, 2 s, 4 s, … (capped), within the same interval, and gives up at its next
//!   regular probe. Each `busy` is counted as deferred, not failed.
//! - **Duty-cycle budget per device** (default 5% of wall time): when the paths of a device
//!   want more than that, all its intervals are stretched by the same factor, and a GCRA gate
//!   enforces the budget on the burst time actually spent (module `budget`).
//!
//! # Seams
//! The scheduler decides *when*, never *which*: the set of paths comes from outside
//! ([`Scheduler::set_paths`], fed by [`full_mesh`] or [`selection`]) and may change at any time (config reload,
//! discovery, a rotating sample of a large cluster) without losing the state of paths that
//! stay. It does no I/O and reads no clock: the caller passes `now` as a `Duration` since an
//! epoch of its choice, runs the [`Dispatch`]es it gets, and reports each [`Outcome`]. That
//! makes every rule testable in simulated time, hours in milliseconds.
//!
//! See `docs/schedule.md` for the arithmetic and the metrics.

mod budget;
pub mod full_mesh;
mod path;
mod rng;
mod scheduler;
pub mod selection;
#[cfg(test)]
mod test_harness;
#[cfg(test)]
mod tests;

pub use full_mesh::{rail_matched, LocalDevice};
pub use path::{
    Attempt, Dispatch, Outcome, OutcomeKind, PathKey, PathPlan, PathStats, ScheduleError,
    ScheduleKey, MAX_INTERVAL,
};
pub use rng::{seed_from_name, SplitMix64};
pub use scheduler::{
    Completion, DeviceStats, PathStatus, ScheduleConfig, Scheduler, DEFAULT_BUSY_BACKOFF,
    DEFAULT_BUSY_BACKOFF_MAX, DEFAULT_CREDIT_WINDOW, DEFAULT_DUTY_CYCLE, DEFAULT_MEASURE_WINDOW,
};
pub use selection::{
    fit_plans, Candidate, Coverage, Layout, PathIndex, Role, Rotation, RoundChange, Selected,
    SelectionConfig, Selector, Source,
};
