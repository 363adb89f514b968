//! The port counters the exporter reads: a fixed allowlist, so the `counter` label takes values
//! from a closed set and nothing else under a device is read (docs/metrics.md, "Port counters").
//!
//! Names are spelled as the kernel and the drivers spell them:
//! - `counters/` (IBA PortCounters through the kernel's PMA, `drivers/infiniband/core/sysfs.c`;
//!   on mlx5 RoCE ports too). Widths are the PortCounters widths: these counters **stop** at their
//!   maximum instead of wrapping (`port_xmit_data`/`port_rcv_data` are 64-bit where the device
//!   has PortCountersExtended, else 32-bit), and the data counters count **4-byte words**;
//! - `hw_counters/` of mlx5 (`drivers/infiniband/hw/mlx5/counters.c`), rxe
//!   (`drivers/infiniband/sw/rxe/rxe_hw_counters.c`), bnxt_re
//!   (`drivers/infiniband/hw/bnxt_re/hw_counters.c`, older and newer names) and irdma
//!   (`drivers/infiniband/hw/irdma/verbs.c`, older and newer names);
//! - the netdev's `statistics/` of a RoCE port (labels prefixed `netdev_`): on rxe they are the
//!   only byte counters and include the RoCE traffic; on hardware RoCE NICs they count only the
//!   traffic that went through the kernel's network stack, not RDMA.

use serde::Serialize;

/// Where a counter file lives, relative to its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    /// `ports/<p>/counters/`
    Port,
    /// `ports/<p>/hw_counters/`
    Hw,
    /// `class/net/<netdev>/statistics/`
    Netdev,
}

impl CounterSource {
    /// The directory name under the port (or netdev).
    pub fn dir(self) -> &'static str {
        match self {
            CounterSource::Port => "counters",
            CounterSource::Hw => "hw_counters",
            CounterSource::Netdev => "statistics",
        }
    }
}

/// What a counter tells, across the drivers' different names for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// Retransmissions started by the requester.
    Retransmit,
    /// Retransmissions after the local ACK timer expired (no answer at all).
    AckTimeout,
    /// Transport or RNR retries exhausted: the QP went to the error state.
    RetryExceeded,
    /// Packets received out of sequence (the responder saw a gap).
    OutOfSequence,
    /// PSN-sequence-error NAKs received by the requester.
    SequenceNak,
    /// Duplicate requests received (the requester resent what had arrived).
    Duplicate,
    /// Receiver-not-ready NAKs.
    RnrNak,
    /// ECN-marked RoCE packets received (notification point).
    EcnMarked,
    /// Congestion notification packets sent (notification point).
    CnpSent,
    /// Congestion notification packets received (reaction point), handled or ignored.
    CnpReceived,
    LinkDowned,
    LinkErrorRecovery,
    SymbolError,
    /// Packets received with errors (CRC, physical, integrity, buffer overruns).
    ReceiveError,
    /// Packets dropped or discarded (port down or congested, no receive buffer).
    Discard,
    /// Ticks the port had data to send but no credits (InfiniBand congestion).
    XmitWait,
    XmitBytes,
    RcvBytes,
    XmitPackets,
    RcvPackets,
}

impl CounterKind {
    /// Every kind, in declaration order.
    pub const ALL: [CounterKind; 20] = [
        CounterKind::Retransmit,
        CounterKind::AckTimeout,
        CounterKind::RetryExceeded,
        CounterKind::OutOfSequence,
        CounterKind::SequenceNak,
        CounterKind::Duplicate,
        CounterKind::RnrNak,
        CounterKind::EcnMarked,
        CounterKind::CnpSent,
        CounterKind::CnpReceived,
        CounterKind::LinkDowned,
        CounterKind::LinkErrorRecovery,
        CounterKind::SymbolError,
        CounterKind::ReceiveError,
        CounterKind::Discard,
        CounterKind::XmitWait,
        CounterKind::XmitBytes,
        CounterKind::RcvBytes,
        CounterKind::XmitPackets,
        CounterKind::RcvPackets,
    ];

    /// The `counter_kind` label value (snake_case, as the JSON output spells it): one name per
    /// kind whatever the driver calls the counter (docs/metrics.md, "Port counters").
    pub fn as_str(self) -> &'static str {
        match self {
            CounterKind::Retransmit => "retransmit",
            CounterKind::AckTimeout => "ack_timeout",
            CounterKind::RetryExceeded => "retry_exceeded",
            CounterKind::OutOfSequence => "out_of_sequence",
            CounterKind::SequenceNak => "sequence_nak",
            CounterKind::Duplicate => "duplicate",
            CounterKind::RnrNak => "rnr_nak",
            CounterKind::EcnMarked => "ecn_marked",
            CounterKind::CnpSent => "cnp_sent",
            CounterKind::CnpReceived => "cnp_received",
            CounterKind::LinkDowned => "link_downed",
            CounterKind::LinkErrorRecovery => "link_error_recovery",
            CounterKind::SymbolError => "symbol_error",
            CounterKind::ReceiveError => "receive_error",
            CounterKind::Discard => "discard",
            CounterKind::XmitWait => "xmit_wait",
            CounterKind::XmitBytes => "xmit_bytes",
            CounterKind::RcvBytes => "rcv_bytes",
            CounterKind::XmitPackets => "xmit_packets",
            CounterKind::RcvPackets => "rcv_packets",
        }
    }
}

/// The unit of a counter's raw value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterUnit {
    Count,
    Bytes,
    /// Octets divided by 4 (`port_xmit_data` / `port_rcv_data`).
    FourByteWords,
}

impl CounterUnit {
    /// Raw value to the counter's natural unit (bytes for the data counters), saturating.
    pub fn scale(self, raw: u64) -> u64 {
        match self {
            CounterUnit::Count | CounterUnit::Bytes => raw,
            CounterUnit::FourByteWords => raw.saturating_mul(4),
        }
    }
}

/// One allowlisted counter.
#[derive(Debug, PartialEq, Eq, Hash, Serialize)]
pub struct CounterSpec {
    pub source: CounterSource,
    /// The file name.
    pub name: &'static str,
    /// The `counter` label value: the file name (spaces as `_`), prefixed `netdev_` for netdev
    /// statistics.
    pub label: &'static str,
    pub kind: CounterKind,
    pub unit: CounterUnit,
    /// The value at which the counter stops counting (IBA PortCounters saturate rather than
    /// wrap); `None` for counters that wrap or are wide enough not to matter.
    pub saturates_at: Option<u64>,
}

const fn spec(
    source: CounterSource,
    name: &'static str,
    label: &'static str,
    kind: CounterKind,
    unit: CounterUnit,
    saturates_at: Option<u64>,
) -> CounterSpec {
    CounterSpec {
        source,
        name,
        label,
        kind,
        unit,
        saturates_at,
    }
}

/// A PortCounters entry of `bits` width.
const fn pma(name: &'static str, kind: CounterKind, unit: CounterUnit, bits: u32) -> CounterSpec {
    spec(
        CounterSource::Port,
        name,
        name,
        kind,
        unit,
        Some((1u64 << bits) - 1),
    )
}

const fn hw(name: &'static str, kind: CounterKind) -> CounterSpec {
    spec(
        CounterSource::Hw,
        name,
        name,
        kind,
        CounterUnit::Count,
        None,
    )
}

/// An `hw_counters/` entry whose file name has spaces (irdma): its label has `_` instead, so
/// that it is a valid name on the control channel and in logs.
const fn hw_spaced(name: &'static str, label: &'static str, kind: CounterKind) -> CounterSpec {
    spec(
        CounterSource::Hw,
        name,
        label,
        kind,
        CounterUnit::Count,
        None,
    )
}

const fn hw_bytes(name: &'static str, kind: CounterKind) -> CounterSpec {
    spec(
        CounterSource::Hw,
        name,
        name,
        kind,
        CounterUnit::Bytes,
        None,
    )
}

const fn netdev(
    name: &'static str,
    label: &'static str,
    kind: CounterKind,
    unit: CounterUnit,
) -> CounterSpec {
    spec(CounterSource::Netdev, name, label, kind, unit, None)
}

use CounterKind as K;
use CounterUnit as U;

/// Every counter the exporter may read, in reading order (a `counters/` entry wins over an
/// `hw_counters/` one with the same label).
pub static ALLOWLIST: &[CounterSpec] = &[
    // counters/ (IBA PortCounters; widths from the kernel's PMA attribute table)
    pma("symbol_error", K::SymbolError, U::Count, 16),
    pma("link_error_recovery", K::LinkErrorRecovery, U::Count, 8),
    pma("link_downed", K::LinkDowned, U::Count, 8),
    pma("port_rcv_errors", K::ReceiveError, U::Count, 16),
    pma(
        "port_rcv_remote_physical_errors",
        K::ReceiveError,
        U::Count,
        16,
    ),
    pma("local_link_integrity_errors", K::ReceiveError, U::Count, 4),
    pma(
        "excessive_buffer_overrun_errors",
        K::ReceiveError,
        U::Count,
        4,
    ),
    pma("port_xmit_discards", K::Discard, U::Count, 16),
    pma("port_xmit_wait", K::XmitWait, U::Count, 32),
    // 64-bit where the device has PortCountersExtended: a value at the 32-bit maximum is the
    // only sign of a 32-bit counter that stopped.
    pma("port_xmit_data", K::XmitBytes, U::FourByteWords, 32),
    pma("port_rcv_data", K::RcvBytes, U::FourByteWords, 32),
    pma("port_xmit_packets", K::XmitPackets, U::Count, 32),
    pma("port_rcv_packets", K::RcvPackets, U::Count, 32),
    // hw_counters/: mlx5 (and bnxt_re's newer names)
    hw("out_of_sequence", K::OutOfSequence),
    hw("packet_seq_err", K::SequenceNak),
    hw("implied_nak_seq_err", K::SequenceNak),
    hw("duplicate_request", K::Duplicate),
    hw("local_ack_timeout_err", K::AckTimeout),
    hw("rnr_nak_retry_err", K::RnrNak),
    hw("out_of_buffer", K::Discard),
    hw("req_transport_retries_exceeded", K::RetryExceeded),
    hw("req_rnr_retries_exceeded", K::RetryExceeded),
    hw("roce_adp_retrans", K::Retransmit),
    hw("roce_adp_retrans_to", K::AckTimeout),
    hw("np_ecn_marked_roce_packets", K::EcnMarked),
    hw("np_cnp_sent", K::CnpSent),
    hw("rp_cnp_handled", K::CnpReceived),
    hw("rp_cnp_ignored", K::CnpReceived),
    hw("rx_icrc_encapsulated", K::ReceiveError),
    // hw_counters/: rxe
    hw("sent_pkts", K::XmitPackets),
    hw("rcvd_pkts", K::RcvPackets),
    hw("out_of_seq_request", K::OutOfSequence),
    hw("rcvd_seq_err", K::SequenceNak),
    hw("completer_retry_err", K::Retransmit),
    hw("retry_exceeded_err", K::RetryExceeded),
    hw("retry_rnr_exceeded_err", K::RetryExceeded),
    hw("rcvd_rnr_err", K::RnrNak),
    hw("send_rnr_err", K::RnrNak),
    hw("link_downed", K::LinkDowned),
    // hw_counters/: bnxt_re
    hw("to_retransmits", K::Retransmit),
    hw("seq_err_naks_rcvd", K::SequenceNak),
    hw("max_retry_exceeded", K::RetryExceeded),
    hw("rnr_naks_rcvd", K::RnrNak),
    hw("missing_resp", K::AckTimeout),
    hw("dup_req", K::Duplicate),
    hw("res_oos_drop_count", K::OutOfSequence),
    hw("rx_roce_errors", K::ReceiveError),
    hw("rx_roce_discards", K::Discard),
    hw("tx_roce_discards", K::Discard),
    hw("tx_cnp_pkts", K::CnpSent),
    hw("np_cnp_pkts", K::CnpSent),
    hw("rx_cnp_pkts", K::CnpReceived),
    hw("rx_ecn_marked_pkts", K::EcnMarked),
    hw_bytes("tx_bytes", K::XmitBytes),
    hw_bytes("rx_bytes", K::RcvBytes),
    hw("tx_pkts", K::XmitPackets),
    hw("rx_pkts", K::RcvPackets),
    // hw_counters/: irdma (older and newer names)
    hw("cnpSent", K::CnpSent),
    hw("cnpHandled", K::CnpReceived),
    hw("cnpIgnored", K::CnpReceived),
    hw("RxECNMrkd", K::EcnMarked),
    hw("tcpRetransSegs", K::Retransmit),
    hw("RetransSegs", K::Retransmit),
    hw("RTO", K::AckTimeout),
    hw_spaced("Nak Sequence Error", "Nak_Sequence_Error", K::SequenceNak),
    hw_spaced(
        "Nak Sequence Error Implied",
        "Nak_Sequence_Error_Implied",
        K::SequenceNak,
    ),
    hw_spaced(
        "Rcvd Out of order packets",
        "Rcvd_Out_of_order_packets",
        K::OutOfSequence,
    ),
    hw_spaced("CRC errors", "CRC_errors", K::ReceiveError),
    hw_spaced("RNR sent", "RNR_sent", K::RnrNak),
    hw_spaced("RNR received", "RNR_received", K::RnrNak),
    hw("ip4InDiscards", K::Discard),
    hw("ip6InDiscards", K::Discard),
    hw_bytes("ip4OutOctets", K::XmitBytes),
    hw_bytes("ip6OutOctets", K::XmitBytes),
    hw_bytes("ip4InOctets", K::RcvBytes),
    hw_bytes("ip6InOctets", K::RcvBytes),
    // class/net/<netdev>/statistics/ of a RoCE port
    netdev("tx_bytes", "netdev_tx_bytes", K::XmitBytes, U::Bytes),
    netdev("rx_bytes", "netdev_rx_bytes", K::RcvBytes, U::Bytes),
    netdev("tx_packets", "netdev_tx_packets", K::XmitPackets, U::Count),
    netdev("rx_packets", "netdev_rx_packets", K::RcvPackets, U::Count),
    netdev("rx_errors", "netdev_rx_errors", K::ReceiveError, U::Count),
    netdev(
        "rx_crc_errors",
        "netdev_rx_crc_errors",
        K::ReceiveError,
        U::Count,
    ),
    netdev("rx_dropped", "netdev_rx_dropped", K::Discard, U::Count),
    netdev("tx_dropped", "netdev_tx_dropped", K::Discard, U::Count),
];

/// The allowlisted counter `name` of `source`, if it is one.
pub fn lookup(source: CounterSource, name: &str) -> Option<&'static CounterSpec> {
    ALLOWLIST
        .iter()
        .find(|s| s.source == source && s.name == name)
}

/// The allowlisted counter whose label is `label` (e.g. from a peer's report); a `counters/`
/// entry before an `hw_counters/` one of the same label.
pub fn by_label(label: &str) -> Option<&'static CounterSpec> {
    ALLOWLIST.iter().find(|s| s.label == label)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn counter_kind_labels_are_the_json_names_and_every_kind_is_allowlisted() {
        for kind in CounterKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json.as_str(), Some(kind.as_str()), "{kind:?}");
            assert!(
                ALLOWLIST.iter().any(|s| s.kind == kind),
                "{kind:?} has no counter"
            );
        }
        let labels: BTreeSet<&str> = CounterKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), CounterKind::ALL.len());
        assert!(ALLOWLIST.iter().all(|s| CounterKind::ALL.contains(&s.kind)));
    }

    #[test]
    fn entries_are_unique_per_source_and_labels_bounded() {
        let mut seen = BTreeSet::new();
        for s in ALLOWLIST {
            assert!(
                seen.insert((s.source, s.name)),
                "duplicate {:?} {}",
                s.source,
                s.name
            );
            assert!(!s.label.is_empty() && s.label.len() <= 40, "{}", s.label);
            match s.source {
                CounterSource::Netdev => assert_eq!(s.label, format!("netdev_{}", s.name)),
                _ => assert_eq!(s.label, s.name.replace(' ', "_")),
            }
            // Labels travel on the control channel, whose names have no whitespace.
            assert!(
                s.label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{}",
                s.label
            );
        }
        // A label is shared only by a `counters/` and an `hw_counters/` entry of one meaning.
        let mut labels = std::collections::BTreeMap::new();
        for s in ALLOWLIST {
            if let Some(first) = labels.insert(s.label, s) {
                assert_eq!(first.kind, s.kind, "{}", s.label);
                assert_eq!(first.source, CounterSource::Port, "{}", s.label);
            }
        }
    }

    #[test]
    fn lookups_and_units() {
        let data = lookup(CounterSource::Port, "port_xmit_data").unwrap();
        assert_eq!(data.unit.scale(10), 40);
        assert_eq!(data.saturates_at, Some(u64::from(u32::MAX)));
        assert_eq!(
            lookup(CounterSource::Port, "link_downed")
                .unwrap()
                .saturates_at,
            Some(255)
        );
        assert_eq!(lookup(CounterSource::Hw, "port_xmit_data"), None);
        assert_eq!(lookup(CounterSource::Hw, "lifespan"), None);
        assert_eq!(by_label("link_downed").unwrap().source, CounterSource::Port);
        assert_eq!(
            by_label("netdev_tx_bytes").unwrap().source,
            CounterSource::Netdev
        );
        assert_eq!(by_label("no_such_counter"), None);
        assert_eq!(CounterUnit::FourByteWords.scale(u64::MAX), u64::MAX);
        for (name, kind) in [
            ("out_of_sequence", K::OutOfSequence),
            ("packet_seq_err", K::SequenceNak),
            ("local_ack_timeout_err", K::AckTimeout),
            ("np_cnp_sent", K::CnpSent),
            ("rp_cnp_handled", K::CnpReceived),
            ("np_ecn_marked_roce_packets", K::EcnMarked),
            ("retry_exceeded_err", K::RetryExceeded),
            ("rcvd_seq_err", K::SequenceNak),
            ("duplicate_request", K::Duplicate),
        ] {
            assert_eq!(
                lookup(CounterSource::Hw, name).map(|s| s.kind),
                Some(kind),
                "{name}"
            );
        }
    }
}
