//! The GRH flow label of each QP of a session, burst by burst: pure, no verbs.
//!
//! On RoCE v2 a switch spreads flows over equal-cost paths (ECMP) by a hash of addresses and UDP
//! ports, and the one field an endpoint may choose is the UDP source port. The drivers derive it
//! from the QP's flow label, as the kernel's `rdma_flow_label_to_udp_sport` does (rxe, mlx5,
//! irdma, bnxt_re): `0xC000 | (label & 0x3fff) ^ ((label & 0xfc000) >> 14)`, and from a hash of
//! both QP numbers when the label is 0. So a session gives each of its QPs its own label, one of
//! the 16,383 labels below 0x4000, whose source port is `0xC000 | label` (ports 0xC001 to
//! 0xFFFF), and moves every QP to new labels after each burst: over time a path's bursts cover
//! ports, and so ECMP paths, that one fixed set of QPs never would (docs/architecture.md,
//! "Every ECMP path").

/// Labels 1..=LABELS map one to one onto the UDP source ports 0xC001..=0xFFFF.
pub const LABELS: u32 = 0x3fff;

/// The first UDP source port of RoCE v2 flows (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
const PORT_MIN: u16 = 0xc000;

/// Where a session's walk through the labels starts; burst `b` of `q` QPs takes the `q` labels
/// after the `b × q` taken before it, so successive bursts use ports no earlier burst of the
/// session used until the 16,383 have all been used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLabels {
    start: u32,
}

impl FlowLabels {
    /// A walk starting at `start` (taken modulo [`LABELS`]).
    pub fn starting_at(start: u32) -> Self {
        FlowLabels {
            start: start % LABELS,
        }
    }

    /// A walk starting at a random label: sessions (and nodes) start at different ports.
    pub fn random() -> Self {
        let mut b = [0u8; 4];
        // A fixed start costs only the spread between sessions: never fail for it.
        let _ = getrandom::getrandom(&mut b);
        FlowLabels::starting_at(u32::from_le_bytes(b))
    }

    /// The labels of burst `burst` (0-based) of a session with `qps` QPs, one per QP: distinct
    /// within a burst (`qps` is at most 64), each in 1..=[`LABELS`].
    pub fn for_burst(&self, burst: u64, qps: u16) -> Vec<u32> {
        let labels = u64::from(LABELS);
        let qps64 = u64::from(qps);
        let first = (u64::from(self.start) + (burst % labels) * qps64) % labels;
        (0..qps64)
            .map(|q| 1 + ((first + q) % labels) as u32)
            .collect()
    }
}

/// The UDP source port a RoCE v2 driver derives from a non-zero flow label (the kernel's
/// `rdma_flow_label_to_udp_sport`).
pub fn udp_source_port(label: u32) -> u16 {
    let low = label & 0x3fff;
    let high = label & 0xf_c000;
    PORT_MIN | ((low ^ (high >> 14)) as u16)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_kernels_mapping_from_label_to_port() {
        assert_eq!(udp_source_port(1), 0xc001);
        assert_eq!(udp_source_port(LABELS), 0xffff);
        assert_eq!(udp_source_port(0x1234), 0xd234);
        // The high six bits fold onto the low ones.
        assert_eq!(udp_source_port(0x4000), 0xc001);
        assert_eq!(udp_source_port(0xf_ffff), 0xc000 | (0x3fff ^ 0x3f));
    }

    #[test]
    fn each_qp_of_a_burst_gets_its_own_port() {
        for start in [0, 1, LABELS - 3, LABELS - 1, 77_777] {
            let walk = FlowLabels::starting_at(start);
            for burst in [0, 1, 255, u64::MAX] {
                let labels = walk.for_burst(burst, 64);
                assert_eq!(labels.len(), 64);
                assert!(
                    labels.iter().all(|l| (1..=LABELS).contains(l)),
                    "{labels:?}"
                );
                let ports: BTreeSet<u16> = labels.iter().map(|&l| udp_source_port(l)).collect();
                assert_eq!(ports.len(), 64, "start {start}, burst {burst}: {labels:?}");
                // Below 0x4000 the port is 0xC000 | label.
                assert!(labels
                    .iter()
                    .all(|&l| u32::from(udp_source_port(l)) == 0xc000 | l));
            }
        }
    }

    #[test]
    fn bursts_move_on_to_ports_the_session_has_not_used() {
        let walk = FlowLabels::starting_at(LABELS - 5);
        let qps = 4;
        let mut seen = BTreeSet::new();
        // 16,383 / 4 = 4095 whole bursts before a port comes round again.
        for burst in 0..4095 {
            for label in walk.for_burst(burst, qps) {
                assert!(seen.insert(label), "burst {burst} reused label {label}");
            }
        }
        assert_eq!(walk.for_burst(0, 1), [LABELS - 4]);
        assert_eq!(walk.for_burst(1, 2), [LABELS - 2, LABELS - 1]);
        assert_eq!(
            walk.for_burst(2, 2),
            [LABELS, 1],
            "wraps past the last label to 1"
        );
        // A single QP still moves from burst to burst.
        assert_ne!(walk.for_burst(7, 1), walk.for_burst(8, 1));
    }
}
