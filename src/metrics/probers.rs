//! The responder's side of "into this port": per served device, how many probers it served
//! recently and how each one's last burst there ended (docs/metrics.md, "Probers served").
//!
//! A prober's judgement of its path counts its own probes; a port that cannot receive is seen
//! from the other end, by every prober of it. The rules' denominator for that direction was
//! every prober's every path into the port; here the port's own responder counts it, per
//! device: a few series however many probers a node has.
//!
//! [`ProberTally`] is pure (given the time); [`ProbersCollector`] shows it at each scrape, so a
//! prober leaves the counts once its window has passed without a burst, with no task to age it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::PREFIX;
use crate::config::{Judge, DEFAULT_INTERVAL};

/// How a prober's burst on a device ended, as the responder saw it (the `last_burst` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BurstEnded {
    /// Its data arrived and verified.
    Completed,
    /// The prober reported it failed, or it never ended (no `burst_end` in time, the connection
    /// lost mid-burst).
    Failed,
    /// Its data arrived wrong.
    Corrupt,
}

impl BurstEnded {
    pub const ALL: [BurstEnded; 3] = [
        BurstEnded::Completed,
        BurstEnded::Failed,
        BurstEnded::Corrupt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BurstEnded::Completed => "completed",
            BurstEnded::Failed => "failed",
            BurstEnded::Corrupt => "corrupt",
        }
    }
}

/// Most probers a device keeps: past it the one with the oldest last burst is forgotten first.
/// A prober's name is what its handshake said (any key holder chooses it), so the tally is
/// bounded; a node of a 10,000-node fleet is probed by a few hundred.
pub const MAX_PROBERS_PER_DEVICE: usize = 16_384;

#[derive(Debug, Clone, Copy, PartialEq)]
struct LastBurst {
    at: f64,
    ended: BurstEnded,
}

/// What one device's probers count now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DeviceProbers {
    /// Probers whose last burst within the window ended each way, in [`BurstEnded::ALL`]'s
    /// order.
    pub by_end: [u64; 3],
    /// Unix time of the newest completed burst of any prober within the window; 0 if none.
    pub last_completed: f64,
}

/// Each served device's probers and their last burst (Unix seconds).
#[derive(Debug, Clone)]
pub struct ProberTally {
    window: f64,
    devices: BTreeMap<String, BTreeMap<String, LastBurst>>,
}

impl Default for ProberTally {
    /// The window of the config's defaults.
    fn default() -> Self {
        ProberTally {
            window: window_seconds(&Judge::default(), DEFAULT_INTERVAL),
            devices: BTreeMap::new(),
        }
    }
}

/// `judge.responder_window` probe intervals of `interval`, in seconds.
pub fn window_seconds(judge: &Judge, interval: Duration) -> f64 {
    f64::from(judge.responder_window) * interval.as_secs_f64()
}

impl ProberTally {
    /// How long a prober counts after its last burst, in seconds.
    pub fn set_window(&mut self, seconds: f64) {
        self.window = seconds;
    }

    /// `prober`'s burst on `device` ended `ended` at `at`.
    pub fn record(&mut self, device: &str, prober: &str, ended: BurstEnded, at: f64) {
        let probers = self.devices.entry(device.to_owned()).or_default();
        if !probers.contains_key(prober) && probers.len() >= MAX_PROBERS_PER_DEVICE {
            let oldest = probers
                .iter()
                .min_by(|a, b| a.1.at.total_cmp(&b.1.at))
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                probers.remove(&oldest);
            }
        }
        probers.insert(prober.to_owned(), LastBurst { at, ended });
    }

    /// Forgets the probers whose last burst is older than the window at `now`, then counts each
    /// device's; a device none of whose probers is left is left out.
    pub fn counts(&mut self, now: f64) -> BTreeMap<String, DeviceProbers> {
        let since = now - self.window;
        self.devices.retain(|_, probers| {
            probers.retain(|_, last| last.at >= since);
            !probers.is_empty()
        });
        self.devices
            .iter()
            .map(|(device, probers)| {
                let mut counts = DeviceProbers::default();
                for last in probers.values() {
                    let i = BurstEnded::ALL.iter().position(|e| *e == last.ended);
                    counts.by_end[i.unwrap_or_default()] += 1;
                    if last.ended == BurstEnded::Completed {
                        counts.last_completed = counts.last_completed.max(last.at);
                    }
                }
                (device.clone(), counts)
            })
            .collect()
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    device: String,
    last_burst: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

/// Shows the tally at each scrape: `rdma_probe_responder_probers{device, last_burst}` and
/// `rdma_probe_responder_last_completed_burst_timestamp_seconds{device}`, each series present
/// while nonzero (a healthy device shows two).
#[derive(Debug, Clone, Default)]
pub struct ProbersCollector(pub Arc<Mutex<ProberTally>>);

impl Collector for ProbersCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = super::probe::unix_now().as_secs_f64();
        let counts = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .counts(now);
        if counts.is_empty() {
            return Ok(());
        }
        let name = format!("{PREFIX}_responder_probers");
        let mut family = encoder.encode_descriptor(
            &name,
            "Probers whose last burst on the device, within judge.responder_window, ended this \
             way (completed, failed, corrupt); present while at least one",
            None,
            MetricType::Gauge,
        )?;
        for (device, c) in &counts {
            for (ended, n) in BurstEnded::ALL.iter().zip(c.by_end) {
                if n == 0 {
                    continue;
                }
                let labels = EndLabels {
                    device: device.clone(),
                    last_burst: ended.as_str(),
                };
                ConstGauge::new(n as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        let name = format!("{PREFIX}_responder_last_completed_burst_timestamp");
        let mut family = encoder.encode_descriptor(
            &name,
            "Unix time of the newest completed burst of any prober on the device within \
             judge.responder_window",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for (device, c) in counts.iter().filter(|(_, c)| c.last_completed > 0.0) {
            let labels = DeviceLabels {
                device: device.clone(),
            };
            ConstGauge::new(c.last_completed).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(window: f64) -> ProberTally {
        let mut t = ProberTally::default();
        t.set_window(window);
        t
    }

    #[test]
    fn each_prober_counts_once_by_its_last_burst() {
        let mut t = tally(100.0);
        t.record("mlx5_0", "n1", BurstEnded::Completed, 10.0);
        t.record("mlx5_0", "n1", BurstEnded::Failed, 20.0);
        t.record("mlx5_0", "n2", BurstEnded::Completed, 30.0);
        t.record("mlx5_0", "n3", BurstEnded::Corrupt, 40.0);
        t.record("mlx5_1", "n1", BurstEnded::Completed, 50.0);
        let counts = t.counts(60.0);
        assert_eq!(
            counts["mlx5_0"],
            DeviceProbers {
                by_end: [1, 1, 1],
                last_completed: 30.0
            }
        );
        assert_eq!(counts["mlx5_1"].by_end, [1, 0, 0]);
        // n1 again on mlx5_0, completed: it moves, it is not counted twice.
        t.record("mlx5_0", "n1", BurstEnded::Completed, 61.0);
        assert_eq!(t.counts(62.0)["mlx5_0"].by_end, [2, 0, 1]);
        assert_eq!(t.counts(62.0)["mlx5_0"].last_completed, 61.0);
    }

    #[test]
    fn a_prober_leaves_once_its_window_passed_and_a_device_with_none_is_left_out() {
        let mut t = tally(100.0);
        t.record("mlx5_0", "n1", BurstEnded::Failed, 0.0);
        t.record("mlx5_0", "n2", BurstEnded::Completed, 50.0);
        assert_eq!(t.counts(100.0)["mlx5_0"].by_end, [1, 1, 0], "at the edge");
        let later = t.counts(120.0);
        assert_eq!(later["mlx5_0"].by_end, [1, 0, 0], "n1's failure aged out");
        assert!(t.counts(151.0).is_empty(), "every prober aged out");
        // The last completed burst goes with its prober.
        t.record("mlx5_0", "n3", BurstEnded::Failed, 200.0);
        assert_eq!(t.counts(201.0)["mlx5_0"].last_completed, 0.0);
    }

    #[test]
    fn the_tally_of_a_device_is_bounded_and_forgets_the_oldest_first() {
        let mut t = tally(1e12);
        for i in 0..MAX_PROBERS_PER_DEVICE + 10 {
            t.record("mlx5_0", &format!("n{i}"), BurstEnded::Completed, i as f64);
        }
        let c = t.counts(1e6);
        assert_eq!(c["mlx5_0"].by_end[0], MAX_PROBERS_PER_DEVICE as u64);
        // The ten oldest went: a newer failure of n0 comes back as a new prober.
        t.record("mlx5_0", "n0", BurstEnded::Failed, 1e6);
        assert_eq!(
            t.counts(1e6)["mlx5_0"].by_end,
            [MAX_PROBERS_PER_DEVICE as u64 - 1, 1, 0]
        );
    }

    #[test]
    fn the_window_counts_probe_intervals() {
        let judge = Judge {
            responder_window: 30,
            ..Judge::default()
        };
        assert_eq!(window_seconds(&judge, Duration::from_secs(10)), 300.0);
    }
}
