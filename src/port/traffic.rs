//! Other traffic: how much a port sent and received during a burst beyond the burst itself,
//! from the port's byte counters (pure, docs/metrics.md, "Other traffic").
//!
//! The port's bytes come from the most direct counters it has ([`total`]): the IBA PortCounters
//! (`port_xmit_data`, RDMA traffic only; on mlx5 RoCE ports too), a driver's byte counters, or,
//! for a device with neither (rxe, siw), its netdev's, which count everything that went through
//! the kernel's network stack: RoCE and IP alike. Against them stands an **upper bound** of what
//! the burst put on the wire (payload, every packet's headers, one acknowledgement per packet),
//! so the excess is never the burst's own: other traffic below that slack is not seen, and none
//! is invented. A counter that was reset counts 0 ([`increases`]), so the excess is never
//! negative and never a wrap's huge number.
//!
//! [`increases`]: super::increases

use serde::Serialize;

use super::allowlist::CounterKind;
use super::counters::{total, CounterIncrease};

/// Most header bytes of one data packet beyond its payload: Ethernet with a VLAN tag (18), IPv6
/// (40), UDP (8), BTH (12) and ICRC (4). InfiniBand's LRH, GRH, BTH, ICRC and VCRC (66) fit too.
const DATA_PACKET_HEADER_BYTES: u64 = 82;
/// Per message: the RETH of its first packet (16) and the immediate data of a closing write (4).
const MESSAGE_HEADER_BYTES: u64 = 20;
/// Most bytes of one acknowledgement: the headers above with an AETH (4) and no payload.
const ACK_PACKET_BYTES: u64 = 86;

/// The most a burst can have put on the wire in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BurstTraffic {
    /// The data direction (prober to responder): payload and headers.
    pub data_bytes: u64,
    /// The other direction: one acknowledgement per data packet at most.
    pub ack_bytes: u64,
}

impl BurstTraffic {
    /// `messages` RDMA WRITEs of `message_size` bytes at path MTU `mtu` bytes.
    pub fn of(messages: u64, message_size: u64, mtu: u32) -> Self {
        let per_message = message_size.div_ceil(u64::from(mtu.max(1))).max(1);
        let packets = messages.saturating_mul(per_message);
        let data_bytes = messages
            .saturating_mul(message_size.saturating_add(MESSAGE_HEADER_BYTES))
            .saturating_add(packets.saturating_mul(DATA_PACKET_HEADER_BYTES));
        BurstTraffic {
            data_bytes,
            ack_bytes: packets.saturating_mul(ACK_PACKET_BYTES),
        }
    }
}

/// Which end of the burst a port was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BurstEnd {
    /// The prober: sent the data, received the acknowledgements.
    Sender,
    /// The responder: received the data, sent the acknowledgements.
    Receiver,
}

/// A port's bytes beyond the burst's during the burst, per direction; `None` where the port has
/// no byte counter for that direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OtherTraffic {
    pub transmit_bytes: Option<u64>,
    pub receive_bytes: Option<u64>,
}

/// The other traffic of a port that was `end` of `burst`, from its counter increases over the
/// burst.
pub fn other_traffic(
    increases: &[CounterIncrease],
    burst: BurstTraffic,
    end: BurstEnd,
) -> OtherTraffic {
    let (transmitted, received) = match end {
        BurstEnd::Sender => (burst.data_bytes, burst.ack_bytes),
        BurstEnd::Receiver => (burst.ack_bytes, burst.data_bytes),
    };
    let beyond =
        |kind, own: u64| total(increases, kind).map(|(_, bytes)| bytes.saturating_sub(own));
    OtherTraffic {
        transmit_bytes: beyond(CounterKind::XmitBytes, transmitted),
        receive_bytes: beyond(CounterKind::RcvBytes, received),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::{increase, lookup, CounterSource};

    fn counted(source: CounterSource, name: &str, before: u64, after: u64) -> CounterIncrease {
        increase(lookup(source, name).unwrap(), before, after)
    }

    #[test]
    fn a_burst_is_bounded_by_its_packets_headers() {
        // 100 x 64 KiB at MTU 1024: 6400 packets.
        let b = BurstTraffic::of(100, 65536, 1024);
        assert_eq!(b.data_bytes, 100 * (65536 + 20) + 6400 * 82);
        assert_eq!(b.ack_bytes, 6400 * 86);
        // A message below the MTU is one packet; an empty one still is.
        assert_eq!(BurstTraffic::of(10, 0, 4096).ack_bytes, 10 * 86);
        assert_eq!(
            BurstTraffic::of(10, 100, 4096).data_bytes,
            10 * (100 + 20 + 82)
        );
        // Never overflows.
        assert_eq!(
            BurstTraffic::of(u64::MAX, u64::MAX, 256).data_bytes,
            u64::MAX
        );
    }

    #[test]
    fn other_traffic_is_what_the_port_carried_beyond_the_burst() {
        let burst = BurstTraffic::of(100, 65536, 1024);
        // The prober's port (netdev counters, as on rxe): 1 MB more sent than the burst, and
        // 1 MB received besides its acknowledgements.
        let port = [
            counted(
                CounterSource::Netdev,
                "tx_bytes",
                1000,
                1000 + burst.data_bytes + 1_000_000,
            ),
            counted(
                CounterSource::Netdev,
                "rx_bytes",
                5,
                5 + 700 * 62 + 1_000_000,
            ),
        ];
        let other = other_traffic(&port, burst, BurstEnd::Sender);
        assert_eq!(other.transmit_bytes, Some(1_000_000));
        // 700 real ACKs of 62 bytes sit well inside the bound of one per packet: the rest
        // shows only where it exceeds that slack.
        let slack = burst.ack_bytes - 700 * 62;
        assert_eq!(other.receive_bytes, Some(1_000_000 - slack));
        // The same counters on the responder's port: the data came in, the ACKs went out.
        let other = other_traffic(&port, burst, BurstEnd::Receiver);
        assert_eq!(
            other.transmit_bytes,
            Some(burst.data_bytes + 1_000_000 - burst.ack_bytes)
        );
        assert_eq!(other.receive_bytes, Some(0));
    }

    #[test]
    fn never_negative_never_a_wrap_and_unknown_without_counters() {
        let burst = BurstTraffic::of(1000, 65536, 4096);
        // Less than the bound (an idle port but for the burst): 0.
        let idle = [counted(CounterSource::Port, "port_xmit_data", 0, 1000)];
        assert_eq!(
            other_traffic(&idle, burst, BurstEnd::Sender).transmit_bytes,
            Some(0)
        );
        // A counter that went backwards (reset, or a 32-bit counter that wrapped): 0.
        let wrapped = [counted(
            CounterSource::Port,
            "port_xmit_data",
            u64::from(u32::MAX) - 10,
            5,
        )];
        assert_eq!(
            other_traffic(&wrapped, burst, BurstEnd::Sender).transmit_bytes,
            Some(0)
        );
        // No byte counters for a direction: unknown, not 0.
        assert_eq!(
            other_traffic(&wrapped, burst, BurstEnd::Sender).receive_bytes,
            None
        );
        assert_eq!(
            other_traffic(&[], burst, BurstEnd::Receiver),
            OtherTraffic::default()
        );
    }

    #[test]
    fn the_most_direct_counters_win() {
        let burst = BurstTraffic::of(1, 1024, 1024);
        // port_xmit_data counts 4-byte words: 1,000,000 words are 4 MB. The netdev's larger
        // figure (IP traffic too) is not used when the port has its own.
        let port = [
            counted(CounterSource::Port, "port_xmit_data", 0, 1_000_000),
            counted(CounterSource::Netdev, "tx_bytes", 0, 9_000_000),
        ];
        assert_eq!(
            other_traffic(&port, burst, BurstEnd::Sender).transmit_bytes,
            Some(4_000_000 - burst.data_bytes)
        );
    }
}
