//! Each path judged where its probes are (docs/architecture.md, "Judging paths"): from a path's
//! own burst results and ping reports, whether it is failing, slow, stalled, gapped, below its
//! baseline, stale, corrupting data, losing pings, slow to answer them or not answering at all,
//! by the thresholds and windows the alert rules use (`config::Judge`). Pure: no clock, no I/O;
//! every call is given the time.
//!
//! A streak counts the path's own probes in a row that were bad that way, every probe, whatever
//! its interval; the rules page on a streak of `probes_bad`. Medians are the path's own, over
//! its recent past ([`Baseline`]).

mod baseline;
mod path;
mod pings;

use std::time::Duration;

pub use baseline::{median, Baseline};
pub use path::{PacedFigures, PathJudge, Probe};
pub use pings::{PingJudge, PingSample};

use crate::config::{Judge, Ping, DEFAULT_INTERVAL};

/// The ways a path can be bad, as the `state` label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BadState {
    /// Its last probes failed.
    Failed,
    /// Its paced bursts reach less than `degraded_ratio` of their target.
    Slow,
    /// Its bursts stop moving for a while within the burst.
    Stalled,
    /// Its bursts' longest completion gap is far above its usual one.
    Gapped,
    /// Below its own and its node's usual bandwidth, though above `degraded_ratio`.
    BelowBaseline,
    /// Not probed for several of its planned intervals.
    Stale,
    /// A burst's data arrived wrong within `validation_window`.
    Corrupt,
    /// It loses a share of its pings that no total fault explains.
    Lossy,
    /// Its median ping RTT is far above its usual one.
    RttHigh,
    /// Its last pings all went unanswered.
    Unanswered,
}

impl BadState {
    pub const ALL: [BadState; 10] = [
        BadState::Failed,
        BadState::Slow,
        BadState::Stalled,
        BadState::Gapped,
        BadState::BelowBaseline,
        BadState::Stale,
        BadState::Corrupt,
        BadState::Lossy,
        BadState::RttHigh,
        BadState::Unanswered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BadState::Failed => "failed",
            BadState::Slow => "slow",
            BadState::Stalled => "stalled",
            BadState::Gapped => "gapped",
            BadState::BelowBaseline => "below_baseline",
            BadState::Stale => "stale",
            BadState::Corrupt => "corrupt",
            BadState::Lossy => "lossy",
            BadState::RttHigh => "rtt_high",
            BadState::Unanswered => "unanswered",
        }
    }
}

/// One way a path is bad now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub state: BadState,
    /// Its probes (or pings, for `Unanswered`) in a row that were bad that way; 0 for states
    /// judged by time (`Stale`, `Corrupt`) or over a window (`Lossy`, `RttHigh`).
    pub in_a_row: u32,
    /// What made it bad: the bandwidth ratio (`Slow`, `BelowBaseline`), the short-window ratio
    /// (`Stalled`), the gap in seconds (`Gapped`), the seconds since the last probe (`Stale`)
    /// or since the data arrived wrong (`Corrupt`), the share of pings lost (`Lossy`), the
    /// median RTT in seconds (`RttHigh`); `None` where there is no such figure.
    pub figure: Option<f64>,
}

impl Verdict {
    /// Whether the rules would call the path bad this way: after `probes_bad` probes in a row
    /// for the bursts' streaks, at once for the others.
    pub fn is_bad(&self, criteria: &Criteria) -> bool {
        match self.state {
            BadState::Failed
            | BadState::Slow
            | BadState::Stalled
            | BadState::Gapped
            | BadState::BelowBaseline => self.in_a_row >= criteria.settings.probes_bad,
            BadState::Stale
            | BadState::Corrupt
            | BadState::Lossy
            | BadState::RttHigh
            | BadState::Unanswered => true,
        }
    }
}

/// The judge's settings with its windows in seconds: the probe windows count the probe interval
/// (`defaults.interval`), the ping windows the ping interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Criteria {
    pub settings: Judge,
    probe_interval: f64,
    ping_interval: f64,
}

impl Criteria {
    /// With pings off, the ping windows count the default ping interval (no ping is judged).
    pub fn new(settings: Judge, probe_interval: Duration, ping_interval: Option<Duration>) -> Self {
        let ping_interval = ping_interval
            .or(Ping::default().interval)
            .unwrap_or_default();
        Criteria {
            settings,
            probe_interval: probe_interval.as_secs_f64(),
            ping_interval: ping_interval.as_secs_f64(),
        }
    }

    /// The config's defaults: the rules' thresholds, the default probe and ping intervals.
    pub fn defaults() -> Self {
        Criteria::new(Judge::default(), DEFAULT_INTERVAL, Ping::default().interval)
    }

    /// How far back a path's own bandwidth and gap medians look.
    pub fn baseline_seconds(&self) -> f64 {
        f64::from(self.settings.baseline) * self.probe_interval
    }

    /// How long a burst whose data arrived wrong keeps its path `Corrupt`.
    pub fn validation_seconds(&self) -> f64 {
        f64::from(self.settings.validation_window) * self.probe_interval
    }

    /// The window a path's ping loss is taken over.
    pub fn ping_loss_seconds(&self) -> f64 {
        f64::from(self.settings.ping_loss_window) * self.ping_interval
    }

    /// How far back a path's own RTT median looks.
    pub fn ping_baseline_seconds(&self) -> f64 {
        f64::from(self.settings.ping_baseline) * self.ping_interval
    }
}

#[cfg(test)]
mod tests;
