//! What is scheduled: paths, their plans, and what the caller reports back.

use std::fmt;
use std::time::Duration;

/// The longest interval a [`PathPlan`] may ask for. Longer is almost certainly a unit mistake,
/// and the cap keeps every time the scheduler computes far away from `Duration` overflow.
pub const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A probed path: a local device, a peer, and the rail that picks the peer's device.
///
/// The peer device is not part of the key: the prober asks the peer for a rail and the peer
/// answers with its own device on that rail, from its own config. So the key is known before
/// the first probe, and stays the same if the peer renames or swaps the device on that rail
/// (the metric labels follow the answer; the schedule does not restart). `rail: None` means
/// "no rail matching": the responder picks its device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathKey {
    /// Local device name (e.g. `mlx5_0`), the `device` label.
    pub device: String,
    /// Peer name from the config or discovery, the `peer` label.
    pub peer: String,
    /// Rail asked of the peer.
    pub rail: Option<u16>,
}

impl PathKey {
    pub fn new(device: impl Into<String>, peer: impl Into<String>, rail: Option<u16>) -> Self {
        PathKey {
            device: device.into(),
            peer: peer.into(),
            rail,
        }
    }
}

impl fmt::Display for PathKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.device, self.peer)?;
        match self.rail {
            Some(r) => write!(f, " (rail {r})"),
            None => write!(f, " (any rail)"),
        }
    }
}

/// What the scheduler needs of a path's key: a total order (ties between equal due times go
/// to the smaller key, so a schedule is reproducible) and the local device the path bursts on.
/// [`PathKey`] is the exporter's; the cluster simulation uses small numbers instead of names,
/// with the same scheduling code.
pub trait ScheduleKey: Clone + Ord + fmt::Debug + fmt::Display {
    /// The local device: one burst at a time per device, and one budget each.
    type Device: Clone + Ord + fmt::Debug;
    fn device(&self) -> &Self::Device;
    /// A number for `device`, stable across restarts, that sets it apart from the node's other
    /// devices: each device draws its phases and jitter from its own generator, seeded by the
    /// node's seed and this, so that what one device does never shifts another's schedule.
    fn device_seed(device: &Self::Device) -> u64;
}

impl ScheduleKey for PathKey {
    type Device = String;
    fn device(&self) -> &String {
        &self.device
    }
    fn device_seed(device: &String) -> u64 {
        super::rng::seed_from_name(device)
    }
}

/// How often a path wants to be probed, and what a burst on it is expected to cost.
#[derive(Debug, Clone, PartialEq)]
pub struct PathPlan<K = PathKey> {
    pub key: K,
    /// Wanted time between the starts of two probes (before any budget stretch).
    pub interval: Duration,
    /// Each gap is `interval × (1 ± jitter)`, uniformly; `0 ≤ jitter < 1`.
    pub jitter: f64,
    /// Expected device time of one burst (the configured burst duration, or bytes / rate): the
    /// budget's estimate until real bursts have been measured.
    pub expected_burst: Duration,
}

impl<K: ScheduleKey> PathPlan<K> {
    /// A plan with no jitter and no expected cost; see [`PathPlan::with_jitter`] and
    /// [`PathPlan::with_expected_burst`].
    pub fn new(key: K, interval: Duration) -> Self {
        PathPlan {
            key,
            interval,
            jitter: 0.0,
            expected_burst: Duration::ZERO,
        }
    }

    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    pub fn with_expected_burst(mut self, expected_burst: Duration) -> Self {
        self.expected_burst = expected_burst;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ScheduleError<K>> {
        if self.interval.is_zero() || self.interval > MAX_INTERVAL {
            return Err(ScheduleError::Interval {
                key: self.key.clone(),
                interval: self.interval,
            });
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err(ScheduleError::Jitter {
                key: self.key.clone(),
                jitter: self.jitter,
            });
        }
        if self.expected_burst > MAX_INTERVAL {
            return Err(ScheduleError::ExpectedBurst {
                key: self.key.clone(),
                expected_burst: self.expected_burst,
            });
        }
        Ok(())
    }
}

/// How a dispatched burst ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeKind {
    /// The burst ran and passed.
    Success,
    /// The burst failed (any error reason); retried at the next interval, never sooner.
    Failure,
    /// The responder was serving someone else: not a failure, retried within the interval.
    Busy,
}

/// What the caller reports when a dispatched burst is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub kind: OutcomeKind,
    /// Device time the burst used, charged to the device's duty-cycle budget: the data phase
    /// (first post to last completion), or whatever the attempt actually held the link for.
    /// Zero for an attempt refused before any traffic.
    pub burst_time: Duration,
}

impl Outcome {
    pub fn success(burst_time: Duration) -> Self {
        Outcome {
            kind: OutcomeKind::Success,
            burst_time,
        }
    }

    pub fn failure(burst_time: Duration) -> Self {
        Outcome {
            kind: OutcomeKind::Failure,
            burst_time,
        }
    }

    pub fn busy(burst_time: Duration) -> Self {
        Outcome {
            kind: OutcomeKind::Busy,
            burst_time,
        }
    }
}

/// Why a dispatch happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attempt {
    /// The path's regular probe, once an interval.
    Regular,
    /// The n-th retry (1-based) after `busy` answers within the same interval.
    BusyRetry(u32),
}

/// A burst to run now: the caller probes `key` and reports back with
/// [`Scheduler::completed`](super::Scheduler::completed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch<K = PathKey> {
    pub key: K,
    pub attempt: Attempt,
    /// When the path became due (the dispatch may be later: device busy, budget).
    pub due: Duration,
    /// The device was idle when the path became due, but the duty-cycle budget held it back:
    /// counts once in `rdma_probe_deferred_total{reason="budget"}`.
    pub budget_deferred: bool,
}

/// Per-path counters, kept across [`Scheduler::set_paths`](super::Scheduler::set_paths) for as
/// long as the path stays in the set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// Bursts dispatched (every attempt, busy retries included).
    pub dispatched: u64,
    pub successes: u64,
    pub failures: u64,
    /// `busy` answers (`rdma_probe_deferred_total{reason="busy"}`).
    pub deferred_busy: u64,
    /// Dispatches held back by the budget (`rdma_probe_deferred_total{reason="budget"}`).
    pub deferred_budget: u64,
    /// Failures since the last success.
    pub consecutive_failures: u64,
    /// Start of the last dispatch.
    pub last_start: Option<Duration>,
    /// Start of the last successful burst.
    pub last_success: Option<Duration>,
}

/// Invalid scheduler configuration or path set; nothing is changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError<K: fmt::Display = PathKey> {
    #[error("duty cycle {0} is out of range: must be above 0 and at most 1")]
    DutyCycle(f64),
    #[error("{name} must be above zero (got {value:?})")]
    ZeroDuration { name: &'static str, value: Duration },
    #[error("busy backoff cap {max:?} is below the initial backoff {initial:?}")]
    Backoff { initial: Duration, max: Duration },
    #[error("path {key}: interval {interval:?} is out of range: must be above zero and at most {MAX_INTERVAL:?}")]
    Interval { key: K, interval: Duration },
    #[error("path {key}: jitter {jitter} is out of range: must be at least 0 and below 1")]
    Jitter { key: K, jitter: f64 },
    #[error("path {key}: expected burst {expected_burst:?} is longer than {MAX_INTERVAL:?}")]
    ExpectedBurst { key: K, expected_burst: Duration },
    #[error("path {0} is listed twice")]
    Duplicate(K),
}
