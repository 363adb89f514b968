//! The discovery families (docs/metrics.md, "Discovery"): per source, the peers of its last
//! good set, its errors and its last success; and the discovered candidates, vanished ones
//! among them. Written by the discovery task alone, through these handles.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::PREFIX;

type FloatGauge = Gauge<f64, AtomicU64>;

/// A discovery source: `dns:NAME:PORT` or `file:PATH_OR_GLOB`, as in the config.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

/// Handles of the discovery families.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryMetrics {
    pub peers: Family<SourceLabels, Gauge>,
    pub errors: Family<SourceLabels, Counter>,
    pub last_success: Family<SourceLabels, FloatGauge>,
    pub candidates: Gauge,
    pub vanished: Gauge,
}

impl DiscoveryMetrics {
    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            format!("{PREFIX}_discovery_peers"),
            "Peers in the last good set of a discovery source",
            self.peers.clone(),
        );
        registry.register(
            format!("{PREFIX}_discovery_errors"),
            "Discovery runs that failed (unreadable or malformed file, failed DNS lookup); the \
             source keeps its last good set",
            self.errors.clone(),
        );
        registry.register(
            format!("{PREFIX}_discovery_last_success_timestamp_seconds"),
            "When a discovery source last brought a set (unix time)",
            self.last_success.clone(),
        );
        registry.register(
            format!("{PREFIX}_discovery_candidates"),
            "Discovered peers that are candidates, vanished ones until forget_after included \
             (before the static peers and the node itself are taken out)",
            self.candidates.clone(),
        );
        registry.register(
            format!("{PREFIX}_discovery_vanished_peers"),
            "Discovered peers no source reports any more, still candidates until forget_after",
            self.vanished.clone(),
        );
    }
}
