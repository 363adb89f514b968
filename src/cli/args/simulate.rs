//! `simulate`: the synthetic cluster and the config it runs, as the config file would set them.

use std::time::Duration;

use clap::error::ErrorKind;
use clap::Args;

use super::common::parse_duration_flag;
use super::usage_error;

/// Shown after `simulate --help`.
pub(super) const EXAMPLES: &str = "\
Examples:
  # The defaults: 10,000 nodes, 8 rails, 32 nodes per ToR, 6 hours (about a minute in release):
  rdma-probe-exporter simulate

  # A 100-node cluster with a longer round and a larger sample:
  rdma-probe-exporter simulate --nodes 100 --round 20m --sample 24

Prints, per node (min / median / max) and for the cluster: paths, series on /metrics, duty
cycle, the longest gaps between probes (same-ToR paths, ToR pairs per rail, any path) against
the bounds the selection guarantees, the most bursts aimed at one responder device at once and
the share of busy answers. See docs/scale.md.";

/// `simulate`: the cluster and the config, as the config file would set them.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Nodes in the cluster.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(2..=crate::simulate::MAX_NODES as i64))]
    pub nodes: u32,

    /// RDMA devices per node, one per rail.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub rails: u16,

    /// Nodes per ToR (the group label's value); the last ToR may hold fewer.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes_per_tor: u32,

    /// Virtual time to simulate, e.g. 6h.
    #[arg(long, value_name = "DURATION", default_value = "6h", value_parser = parse_duration_flag)]
    pub duration: Duration,

    /// `defaults.interval`: the wanted time between two probes of a path.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration_flag)]
    pub interval: Duration,

    /// `defaults.jitter`, a percentage of the interval (0% to 50%).
    #[arg(long, value_name = "PERCENT", default_value = "10%", value_parser = parse_jitter)]
    pub jitter: f64,

    /// `defaults.burst.duration`: device time of one burst.
    #[arg(long, value_name = "DURATION", default_value = "500ms", value_parser = parse_duration_flag)]
    pub burst: Duration,

    /// `schedule.duty_cycle`: share of wall time each device may burst (0.1% to 100%).
    #[arg(long, value_name = "PERCENT", default_value = "5%", value_parser = parse_duty_cycle)]
    pub duty_cycle: f64,

    /// `selection.max_peers`: up to this many peers, the full mesh.
    #[arg(long, value_name = "N", default_value_t = crate::config::DEFAULT_MAX_PEERS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_peers: u32,

    /// `selection.sample`: other-group paths per device and round.
    #[arg(long, value_name = "N", default_value_t = crate::config::DEFAULT_SAMPLE, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub sample: u32,

    /// `selection.round`: how often the sample changes.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_round)]
    pub round: Duration,

    /// `series.budget`: per-path series a node keeps on /metrics at most.
    #[arg(long, value_name = "N", default_value_t = crate::metrics::budget::DEFAULT_SERIES_BUDGET)]
    pub series_budget: usize,

    /// `series.ttl`: how long a path out of the selection stays on /metrics after its last probe.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration_flag)]
    pub series_ttl: Duration,

    /// Series of one path besides its port traffic and its derived series (a healthy path with
    /// a busy deferral: success, planned interval, last attempt, consecutive failures, the paced
    /// burst's bandwidth, min-window, gap and target gauges, runs, last success, deferred).
    #[arg(long, value_name = "N", default_value_t = 11)]
    pub series_per_path: usize,

    /// Series a path's first capacity burst (its `unpaced_every`-th probe) adds besides its
    /// message rate: the bandwidth, min-window, gap and target gauges of `kind="capacity"`.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub capacity_series: usize,

    /// Derived series of one path (message rate, setup time, byte and message totals; one
    /// more message rate after a capacity burst); the budget sheds them second.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub derived_series: usize,

    /// Series of one pinged path (the RTT quantiles, the responder's delay, pings sent and
    /// lost; 0: pings off). Every path on /metrics is pinged; its ping series, after each
    /// device's RTT histogram (16 series), take only the room its node's bursts leave in the
    /// budget.
    #[arg(long, value_name = "N", default_value_t = crate::metrics::ping::SERIES_PER_PATH)]
    pub ping_series: usize,

    /// Series of one path's port traffic (the bytes and packets counters of both ends: 8 on a
    /// hardware RoCE port; the other traffic, 4); the budget sheds them first.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub port_traffic_series: usize,

    /// Track every path's gaps (default: when the cluster has at most 20 million paths).
    #[arg(long, value_name = "BOOL")]
    pub track_paths: Option<bool>,

    /// Threads to run on (default: one per core). The rails of the cluster run side by side
    /// between rounds; the figures are the same whatever the count.
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
}

impl SimulateArgs {
    pub(super) fn into_config(self) -> Result<crate::simulate::SimulationConfig, clap::Error> {
        const SUB: &str = "simulate";
        if self.burst >= self.interval {
            return Err(usage_error(
                SUB,
                ErrorKind::ValueValidation,
                format!(
                    "--burst {} must be shorter than --interval {}",
                    humantime::format_duration(self.burst),
                    humantime::format_duration(self.interval)
                ),
            ));
        }
        Ok(crate::simulate::SimulationConfig {
            nodes: self.nodes as usize,
            rails: self.rails,
            nodes_per_group: self.nodes_per_tor as usize,
            interval: self.interval,
            jitter: self.jitter,
            burst: self.burst,
            duty_cycle: self.duty_cycle,
            duration: self.duration,
            selection: crate::schedule::SelectionConfig {
                max_peers: self.max_peers as usize,
                sample: self.sample as usize,
                round: self.round,
                ..crate::schedule::SelectionConfig::default()
            },
            series: crate::simulate::SeriesModel {
                per_path: self.series_per_path,
                capacity_per_path: self.capacity_series,
                unpaced_every: crate::config::DEFAULT_UNPACED_EVERY,
                detail_per_path: self.port_traffic_series,
                derived_per_path: self.derived_series,
                ping_per_path: self.ping_series,
                ping_per_device: crate::metrics::ping::SERIES_PER_DEVICE_HISTOGRAM,
                per_node: crate::simulate::SERIES_PER_NODE,
                per_device: crate::simulate::SERIES_PER_DEVICE,
                ttl: self.series_ttl,
                budget: self.series_budget,
            },
            track_all_paths: self.track_paths,
            threads: self.threads,
        })
    }
}

/// `N%` (decimals allowed) as a fraction, when `min ≤ N ≤ max`.
fn parse_percent(s: &str, min: f64, max: f64) -> Result<f64, String> {
    let number = s
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| format!("{s:?} is not a percentage; expected e.g. 5%"))?;
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| format!("{s:?} is not a percentage; expected e.g. 5%"))?;
    if !(min..=max).contains(&value) {
        return Err(format!("{s} is out of range: from {min}% to {max}%"));
    }
    Ok(value / 100.0)
}

fn parse_jitter(s: &str) -> Result<f64, String> {
    parse_percent(s, 0.0, crate::config::MAX_JITTER * 100.0)
}

fn parse_duty_cycle(s: &str) -> Result<f64, String> {
    parse_percent(s, 0.1, 100.0)
}

fn parse_round(s: &str) -> Result<Duration, String> {
    let round = parse_duration_flag(s)?;
    if round < Duration::from_secs(60) || round > Duration::from_secs(24 * 3600) {
        return Err(format!("{s} is out of range: from 1m to 24h"));
    }
    Ok(round)
}
