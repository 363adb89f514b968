//! Counter snapshots and their increases across a window (a burst): pure, no I/O.
//!
//! A counter that goes **backwards** between two readings was reset (driver reload, device
//! reset, a 32-bit hardware counter that wrapped): its increase for that window is **0**,
//! flagged [`IncreaseStatus::Reset`]. Counting the new value instead (as Prometheus' `rate()`
//! does) could add a huge number for a counter that only wrapped or was re-read after a reload,
//! and the window lost is one burst (docs/metrics.md, "Port counters"). A counter standing at
//! its saturation value (IBA PortCounters stop at their maximum) gives a lower bound, flagged
//! [`IncreaseStatus::Saturated`]. Data counters in 4-byte words come out in bytes.

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::allowlist::{self, CounterKind, CounterSource, CounterSpec};

/// The allowlisted counters of one port at one moment, raw as the kernel shows them, keyed by
/// label (a label appears once: the first reading of it wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    values: BTreeMap<&'static str, (&'static CounterSpec, u64)>,
}

impl CounterSnapshot {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `raw` for `spec`; `false` (and no change) when its label is already there.
    pub fn insert(&mut self, spec: &'static CounterSpec, raw: u64) -> bool {
        if self.values.contains_key(spec.label) {
            return false;
        }
        self.values.insert(spec.label, (spec, raw));
        true
    }

    /// The raw value of the counter labelled `label`.
    pub fn get(&self, label: &str) -> Option<u64> {
        self.values.get(label).map(|(_, v)| *v)
    }

    /// Counters in label order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static CounterSpec, u64)> + '_ {
        self.values.values().copied()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A map from label to raw value.
impl Serialize for CounterSnapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.values.len()))?;
        for (label, (_, value)) in &self.values {
            map.serialize_entry(label, value)?;
        }
        map.end()
    }
}

/// How an increase was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IncreaseStatus {
    /// `after - before`.
    Counted,
    /// The counter went backwards: reset; the increase is 0 for this window.
    Reset,
    /// The counter stands at its saturation value: the increase is a lower bound.
    Saturated,
}

/// One counter's increase over a window, in its natural unit (bytes for data counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CounterIncrease {
    #[serde(rename = "counter", serialize_with = "label_of")]
    pub spec: &'static CounterSpec,
    pub increase: u64,
    pub status: IncreaseStatus,
}

fn label_of<S: Serializer>(spec: &&'static CounterSpec, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(spec.label)
}

impl CounterIncrease {
    /// The `counter` label.
    pub fn label(&self) -> &'static str {
        self.spec.label
    }

    /// An increase reported by a peer, by label: `None` for a label not on the allowlist, so a
    /// peer cannot add label values.
    pub fn from_label(label: &str, increase: u64, status: IncreaseStatus) -> Option<Self> {
        Some(CounterIncrease {
            spec: allowlist::by_label(label)?,
            increase,
            status,
        })
    }
}

/// The increase of one counter from `before` to `after` (raw values).
pub fn increase(spec: &'static CounterSpec, before: u64, after: u64) -> CounterIncrease {
    let (raw, status) = match after.checked_sub(before) {
        None => (0, IncreaseStatus::Reset),
        Some(delta) if spec.saturates_at == Some(after) => (delta, IncreaseStatus::Saturated),
        Some(delta) => (delta, IncreaseStatus::Counted),
    };
    CounterIncrease {
        spec,
        increase: spec.unit.scale(raw),
        status,
    }
}

/// The increases of every counter present in both snapshots, in label order.
pub fn increases(before: &CounterSnapshot, after: &CounterSnapshot) -> Vec<CounterIncrease> {
    after
        .iter()
        .filter_map(|(spec, a)| {
            let (_, b) = before.values.get(spec.label)?;
            Some(increase(spec, *b, a))
        })
        .collect()
}

/// The non-zero increases from `before` to `after` as (label, increase), in label order: what a
/// burst's report carries (a reset counts 0, so it is not there). Empty unless both readings
/// exist.
pub fn nonzero_increases(
    before: Option<CounterSnapshot>,
    after: Option<CounterSnapshot>,
) -> Vec<(String, u64)> {
    let (Some(before), Some(after)) = (before, after) else {
        return Vec::new();
    };
    increases(&before, &after)
        .into_iter()
        .filter(|i| {
            if i.status == IncreaseStatus::Reset {
                tracing::debug!(counter = i.label(), "port counter went backwards: reset");
            }
            i.increase > 0
        })
        .map(|i| (i.label().to_owned(), i.increase))
        .collect()
}

/// The total increase of `kind` from the most direct source that has a counter of that kind
/// (`counters/`, then `hw_counters/`, then the netdev), with that source; `None` when no
/// counter of `kind` is there. Counters of one source add up (irdma counts IPv4 and IPv6
/// octets apart).
pub fn total(increases: &[CounterIncrease], kind: CounterKind) -> Option<(CounterSource, u64)> {
    [
        CounterSource::Port,
        CounterSource::Hw,
        CounterSource::Netdev,
    ]
    .into_iter()
    .find_map(|source| {
        let mut of_kind = increases
            .iter()
            .filter(|i| i.spec.kind == kind && i.spec.source == source)
            .peekable();
        of_kind.peek()?;
        Some((
            source,
            of_kind.fold(0u64, |sum, i| sum.saturating_add(i.increase)),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::allowlist::lookup;

    fn spec(source: CounterSource, name: &str) -> &'static CounterSpec {
        lookup(source, name).unwrap_or_else(|| panic!("{name} not allowlisted"))
    }

    #[test]
    fn increases_count_forward_and_never_backwards() {
        let retrans = spec(CounterSource::Hw, "completer_retry_err");
        assert_eq!(increase(retrans, 10, 15).increase, 5);
        assert_eq!(increase(retrans, 10, 15).status, IncreaseStatus::Counted);
        assert_eq!(increase(retrans, 7, 7).increase, 0);
        // Reset (driver reload) or a 32-bit hardware counter that wrapped: 0, flagged.
        for (before, after) in [(15, 3), (u64::from(u32::MAX) - 2, 5), (u64::MAX, 0)] {
            let i = increase(retrans, before, after);
            assert_eq!((i.increase, i.status), (0, IncreaseStatus::Reset));
        }
    }

    #[test]
    fn data_counters_come_out_in_bytes_and_saturation_is_flagged() {
        let xmit = spec(CounterSource::Port, "port_xmit_data");
        let i = increase(xmit, 1000, 1256);
        assert_eq!((i.increase, i.status), (1024, IncreaseStatus::Counted));
        let stuck = u64::from(u32::MAX);
        let i = increase(xmit, stuck - 10, stuck);
        assert_eq!((i.increase, i.status), (40, IncreaseStatus::Saturated));
        let i = increase(xmit, stuck, stuck);
        assert_eq!((i.increase, i.status), (0, IncreaseStatus::Saturated));
        // 64-bit extended counters go past the 32-bit maximum.
        let i = increase(xmit, stuck, stuck + 1);
        assert_eq!((i.increase, i.status), (4, IncreaseStatus::Counted));
        let downed = spec(CounterSource::Port, "link_downed");
        assert_eq!(increase(downed, 254, 255).status, IncreaseStatus::Saturated);
        let bytes = spec(CounterSource::Netdev, "tx_bytes");
        assert_eq!(increase(bytes, 0, u64::MAX).increase, u64::MAX);
        assert_eq!(
            increase(xmit, 0, u64::MAX).increase,
            u64::MAX,
            "saturating scale"
        );
    }

    #[test]
    fn snapshots_pair_by_label() {
        let mut before = CounterSnapshot::new();
        let mut after = CounterSnapshot::new();
        assert!(before.insert(spec(CounterSource::Port, "link_downed"), 1));
        // The rxe hw_counters entry of the same label is not taken twice.
        assert!(!before.insert(spec(CounterSource::Hw, "link_downed"), 9));
        before.insert(spec(CounterSource::Port, "port_xmit_data"), 100);
        before.insert(spec(CounterSource::Hw, "out_of_sequence"), 50);
        after.insert(spec(CounterSource::Port, "link_downed"), 1);
        after.insert(spec(CounterSource::Port, "port_xmit_data"), 350);
        after.insert(spec(CounterSource::Hw, "out_of_sequence"), 2);
        after.insert(spec(CounterSource::Hw, "np_cnp_sent"), 8); // not in `before`: skipped
        let got: Vec<(&str, u64, IncreaseStatus)> = increases(&before, &after)
            .iter()
            .map(|i| (i.label(), i.increase, i.status))
            .collect();
        assert_eq!(
            got,
            [
                ("link_downed", 0, IncreaseStatus::Counted),
                ("out_of_sequence", 0, IncreaseStatus::Reset),
                ("port_xmit_data", 1000, IncreaseStatus::Counted),
            ]
        );
        assert_eq!(before.get("link_downed"), Some(1));
        assert_eq!(after.len(), 4);
        let json = serde_json::to_value(&after).unwrap();
        assert_eq!(json["port_xmit_data"], 350, "raw, as the kernel shows it");
    }

    #[test]
    fn totals_prefer_the_most_direct_source() {
        let incs = [
            increase(spec(CounterSource::Netdev, "tx_bytes"), 0, 5000),
            increase(spec(CounterSource::Hw, "ip4OutOctets"), 0, 1000),
            increase(spec(CounterSource::Hw, "ip6OutOctets"), 0, 24),
            increase(spec(CounterSource::Hw, "sent_pkts"), 0, 3),
        ];
        assert_eq!(
            total(&incs, CounterKind::XmitBytes),
            Some((CounterSource::Hw, 1024))
        );
        assert_eq!(
            total(&incs[..1], CounterKind::XmitBytes),
            Some((CounterSource::Netdev, 5000))
        );
        assert_eq!(total(&incs, CounterKind::RcvBytes), None);
        let json = serde_json::to_value(incs[3]).unwrap();
        assert_eq!(json["counter"], "sent_pkts");
        assert_eq!(json["increase"], 3);
        assert_eq!(json["status"], "counted");
    }

    #[test]
    fn reports_carry_the_non_zero_increases_and_resets_count_nothing() {
        let mut before = CounterSnapshot::new();
        let mut after = CounterSnapshot::new();
        for (name, b, a) in [
            ("sent_pkts", 100, 1100),
            ("completer_retry_err", 5, 5),
            ("rcvd_seq_err", 9, 2),
            ("duplicate_request", 0, 4),
        ] {
            before.insert(spec(CounterSource::Hw, name), b);
            after.insert(spec(CounterSource::Hw, name), a);
        }
        assert_eq!(
            nonzero_increases(Some(before.clone()), Some(after)),
            [
                ("duplicate_request".to_owned(), 4),
                ("sent_pkts".to_owned(), 1000)
            ]
        );
        assert!(nonzero_increases(Some(before), None).is_empty());
        assert!(nonzero_increases(None, None).is_empty());
    }

    #[test]
    fn peer_reports_only_map_to_allowlisted_labels() {
        let i = CounterIncrease::from_label("rcvd_seq_err", 4, IncreaseStatus::Counted).unwrap();
        assert_eq!(i.spec.kind, CounterKind::SequenceNak);
        assert!(CounterIncrease::from_label("rm -rf", 1, IncreaseStatus::Counted).is_none());
    }
}
