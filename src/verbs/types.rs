//! Pure value types of the verbs layer: port/GID descriptions, MTU and link-rate arithmetic, GID
//! auto-selection and work-completion statuses.
//!
//! Nothing here touches libibverbs, so all of it is unit-tested on hosts without RDMA. Every
//! conversion from a raw hardware code is total: an unknown code becomes an `Unknown(raw)` variant
//! or `None`, never a panic, because new NIC generations add new codes every year (sideway's own
//! typed conversions `panic!` on unknown values, which is why this module exists).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Serialize, Serializer};

use crate::reason::ErrorReason;

// ---------------------------------------------------------------------------------------------
// Port state / link layer
// ---------------------------------------------------------------------------------------------

/// Logical port state (`ibv_port_attr.state`, `enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// `IBV_PORT_NOP` (0): reserved, should not be seen.
    Nop,
    /// `IBV_PORT_DOWN` (1).
    Down,
    /// `IBV_PORT_INIT` (2): physical link up, subnet manager has not configured it yet.
    Init,
    /// `IBV_PORT_ARMED` (3).
    Armed,
    /// `IBV_PORT_ACTIVE` (4): the only state in which data traffic flows.
    Active,
    /// `IBV_PORT_ACTIVE_DEFER` (5): was active, physical link failed, may recover.
    ActiveDefer,
    /// A code this build does not know.
    Unknown(u32),
}

impl PortState {
    /// Decodes the raw `enum ibv_port_state` value; never panics.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            other => PortState::Unknown(other),
        }
    }

    /// Whether data traffic can flow (only `ACTIVE`, as perftest requires).
    pub fn is_active(self) -> bool {
        self == PortState::Active
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Nop => f.write_str("nop"),
            PortState::Down => f.write_str("down"),
            PortState::Init => f.write_str("init"),
            PortState::Armed => f.write_str("armed"),
            PortState::Active => f.write_str("active"),
            PortState::ActiveDefer => f.write_str("active_defer"),
            PortState::Unknown(raw) => write!(f, "unknown({raw})"),
        }
    }
}

impl Serialize for PortState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Link layer of a port (`ibv_port_attr.link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_INFINIBAND` (1); also reported as 0 ("unspecified") by old drivers, which
    /// libibverbs documents as meaning InfiniBand.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (2): RoCE (v1/v2) or iWARP.
    Ethernet,
    /// Any other code.
    Unknown(u8),
}

impl LinkLayer {
    /// Decodes the raw link-layer code; `0` (unspecified) means InfiniBand per libibverbs.
    pub fn from_raw(raw: u8) -> Self {
        match raw {
            0 | 1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            other => LinkLayer::Unknown(other),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkLayer::InfiniBand => f.write_str("infiniband"),
            LinkLayer::Ethernet => f.write_str("ethernet"),
            LinkLayer::Unknown(raw) => write!(f, "unknown({raw})"),
        }
    }
}

impl Serialize for LinkLayer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

// ---------------------------------------------------------------------------------------------
// MTU
// ---------------------------------------------------------------------------------------------

/// One of the five RDMA path MTUs (`enum ibv_mtu`). RDMA MTUs count payload only; the netdev
/// MTU must be larger (e.g. 4200 for a 4096 RoCE MTU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathMtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

impl PathMtu {
    /// All MTUs in ascending order.
    pub const ALL: [PathMtu; 5] = [
        PathMtu::Mtu256,
        PathMtu::Mtu512,
        PathMtu::Mtu1024,
        PathMtu::Mtu2048,
        PathMtu::Mtu4096,
    ];

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            PathMtu::Mtu256 => 256,
            PathMtu::Mtu512 => 512,
            PathMtu::Mtu1024 => 1024,
            PathMtu::Mtu2048 => 2048,
            PathMtu::Mtu4096 => 4096,
        }
    }

    /// The `enum ibv_mtu` code (1..=5).
    pub fn code(self) -> u32 {
        match self {
            PathMtu::Mtu256 => 1,
            PathMtu::Mtu512 => 2,
            PathMtu::Mtu1024 => 3,
            PathMtu::Mtu2048 => 4,
            PathMtu::Mtu4096 => 5,
        }
    }

    /// Decodes an `enum ibv_mtu` code; `None` for codes this build does not know.
    pub fn from_code(code: u32) -> Option<Self> {
        PathMtu::ALL.into_iter().find(|m| m.code() == code)
    }

    /// Exact byte count to MTU; `None` unless `bytes` is 256, 512, 1024, 2048 or 4096.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        PathMtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }

    /// The largest MTU not above `bytes` (e.g. a configured 9000 gives 4096, 1500 gives 1024);
    /// `None` below 256. Used for "path MTU = min(local, peer, configured)".
    pub fn largest_at_most(bytes: u32) -> Option<Self> {
        PathMtu::ALL.into_iter().rev().find(|m| m.bytes() <= bytes)
    }
}

impl fmt::Display for PathMtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// `enum ibv_mtu` code to bytes; `None` for unknown codes.
pub fn mtu_to_bytes(code: u32) -> Option<u32> {
    PathMtu::from_code(code).map(PathMtu::bytes)
}

/// Bytes to `PathMtu`; `None` unless `bytes` is exactly one of the five RDMA MTUs.
pub fn bytes_to_mtu(bytes: u32) -> Option<PathMtu> {
    PathMtu::from_bytes(bytes)
}

// ---------------------------------------------------------------------------------------------
// Link rate
// ---------------------------------------------------------------------------------------------

/// Lane count for an `ibv_port_attr.active_width` code (1=1X, 2=4X, 4=8X, 8=12X, 16=2X).
pub fn width_lanes(width_code: u8) -> Option<u32> {
    match width_code {
        1 => Some(1),
        2 => Some(4),
        4 => Some(8),
        8 => Some(12),
        16 => Some(2),
        _ => None,
    }
}

/// Human width name ("4X") for a width code.
pub fn width_name(width_code: u8) -> Option<&'static str> {
    match width_code {
        1 => Some("1X"),
        2 => Some("4X"),
        4 => Some("8X"),
        8 => Some("12X"),
        16 => Some("2X"),
        _ => None,
    }
}

/// Human speed name ("EDR") for an `active_speed`/`active_speed_ex` code.
pub fn speed_name(speed_code: u32) -> Option<&'static str> {
    match speed_code {
        1 => Some("SDR"),
        2 => Some("DDR"),
        4 => Some("QDR"),
        8 => Some("FDR10"),
        16 => Some("FDR"),
        32 => Some("EDR"),
        64 => Some("HDR"),
        128 => Some("NDR"),
        256 => Some("XDR"),
        _ => None,
    }
}

/// Effective data rate of one lane, in bit/s, for a speed code.
///
/// Convention chosen: the **data rate after line encoding** (what the link can carry), not the
/// signaling rate: SDR/DDR/QDR use 8b/10b (2.5/5/10 GBd → 2/4/8 Gb/s), FDR10/FDR/EDR use
/// 64b/66b (10.3125/14.0625/25.78125 GBd → 10/13.636…/25 Gb/s), HDR/NDR/XDR (PAM4 with FEC) are
/// their nominal 50/100/200 Gb/s per lane. This makes RoCE ports, whose width/speed drivers derive
/// from the Ethernet speed (100GbE = 4X EDR, 25GbE = 1X EDR, 200GbE = 4X HDR), come out at the
/// Ethernet speed exactly. Note the kernel's sysfs `rate` file (which the `port` module prefers)
/// and `ibstat` use a mixed convention (4X QDR = 40, 4X FDR = 56), so they can be up to 25% above
/// this value for 8b/10b generations.
pub fn lane_rate_bits_per_second(speed_code: u32) -> Option<u64> {
    match speed_code {
        1 => Some(2_000_000_000),
        2 => Some(4_000_000_000),
        4 => Some(8_000_000_000),
        8 => Some(10_000_000_000),
        // 14.0625 GBd × 64/66, rounded down to whole bit/s.
        16 => Some(14_062_500_000 * 64 / 66),
        32 => Some(25_000_000_000),
        64 => Some(50_000_000_000),
        128 => Some(100_000_000_000),
        256 => Some(200_000_000_000),
        _ => None,
    }
}

/// Link rate (width × per-lane effective data rate, see [`lane_rate_bits_per_second`]) in bit/s;
/// `None` if either code is unknown. Never panics.
pub fn link_rate_bits_per_second(width_code: u8, speed_code: u32) -> Option<u64> {
    let lanes = u64::from(width_lanes(width_code)?);
    lanes.checked_mul(lane_rate_bits_per_second(speed_code)?)
}

/// The speed code to use: `active_speed_ex` when the driver fills it (XDR and later do not fit
/// the 8-bit `active_speed`), otherwise `active_speed`.
pub fn effective_speed_code(active_speed: u8, active_speed_ex: u32) -> u32 {
    if active_speed_ex != 0 {
        active_speed_ex
    } else {
        u32::from(active_speed)
    }
}

// ---------------------------------------------------------------------------------------------
// GIDs
// ---------------------------------------------------------------------------------------------

/// A 128-bit GID. For RoCE it is the IPv6 (or IPv4-mapped IPv6) address of the netdev; it is
/// displayed and serialized as an IPv6 address (`::ffff:192.0.2.1` for IPv4-mapped ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The raw 16 bytes, network order.
    pub fn octets(&self) -> [u8; 16] {
        self.0
    }

    /// All-zero GIDs are empty table entries.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// `::ffff:a.b.c.d`, the form RoCE uses for IPv4 addresses.
    pub fn to_ipv4_mapped(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// Whether this is an IPv4-mapped GID.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.to_ipv4_mapped().is_some()
    }

    /// Link-local in perftest's sense: `fe80::/10`, or `169.254.0.0/16` when IPv4-mapped.
    pub fn is_link_local(&self) -> bool {
        match self.to_ipv4_mapped() {
            Some(v4) => v4.is_link_local(),
            None => self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80,
        }
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Gid(raw)
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // std prints IPv4-mapped addresses as `::ffff:a.b.c.d`.
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl Serialize for Gid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// GID type (`enum ibv_gid_type` from `ibv_query_gid_ex`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// `IBV_GID_TYPE_IB` (0).
    Ib,
    /// `IBV_GID_TYPE_ROCE_V1` (1): raw Ethernet, not routable.
    RoceV1,
    /// `IBV_GID_TYPE_ROCE_V2` (2): UDP/IP, routable; what perftest prefers.
    RoceV2,
    /// Any other code.
    Unknown(u32),
}

impl GidType {
    /// Decodes the `enum ibv_gid_type` value of `ibv_gid_entry.gid_type`.
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            other => GidType::Unknown(other),
        }
    }

    /// Decodes the sysfs `gid_attrs/types/<i>` text ("IB/RoCE v1", "RoCE v2"), used when
    /// `ibv_query_gid_ex` is unavailable (rdma-core < 32).
    pub fn from_sysfs(text: &str, link_layer: LinkLayer) -> Self {
        match text.trim() {
            "RoCE v2" => GidType::RoceV2,
            "IB/RoCE v1" if link_layer == LinkLayer::Ethernet => GidType::RoceV1,
            "IB/RoCE v1" => GidType::Ib,
            _ => GidType::Unknown(u32::MAX),
        }
    }

    /// perftest's RoCE-version score component (v2 = 2, v1 = 1, anything else 0).
    fn roce_version(self) -> u32 {
        match self {
            GidType::RoceV2 => 2,
            GidType::RoceV1 => 1,
            _ => 0,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("ib"),
            GidType::RoceV1 => f.write_str("roce_v1"),
            GidType::RoceV2 => f.write_str("roce_v2"),
            GidType::Unknown(raw) => write!(f, "unknown({raw})"),
        }
    }
}

impl Serialize for GidType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One readable, non-empty entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    /// Index in the port's GID table (the `sgid_index` / `-x` value).
    pub index: u32,
    pub gid: Gid,
    pub gid_type: GidType,
    /// The netdev the GID belongs to (RoCE), if the kernel reports one.
    pub netdev: Option<String>,
}

/// perftest's `compute_gid_score`: +100 if the address family matches the preference, +10 if
/// not link-local, + RoCE version. `None` for zero GIDs (empty entries are never chosen).
fn gid_score(entry: &GidEntry, prefer_ipv6: bool) -> Option<u32> {
    if entry.gid.is_zero() {
        return None;
    }
    let mut score = 0;
    if entry.gid.is_ipv4_mapped() != prefer_ipv6 {
        score += 100;
    }
    if !entry.gid.is_link_local() {
        score += 10;
    }
    Some(score + entry.gid_type.roce_version())
}

/// Picks the GID index perftest would pick with no `-x` on an Ethernet port (its scoring):
/// prefer IPv4-mapped, then non-link-local, then RoCE v2 over v1; ties go to the lowest index;
/// zero GIDs are skipped. `None` if there is no usable entry. Normally this is the global
/// IPv4-mapped RoCE v2 GID of the port.
pub fn select_gid(entries: &[GidEntry]) -> Option<u32> {
    select_gid_with(entries, false, None)
}

/// [`select_gid`] with perftest's `--ipv6` preference and an optional netdev restriction (only
/// entries on that netdev are considered, for hosts where one RDMA port carries several netdevs,
/// e.g. VLANs or macvlans).
pub fn select_gid_with(
    entries: &[GidEntry],
    prefer_ipv6: bool,
    netdev: Option<&str>,
) -> Option<u32> {
    entries
        .iter()
        .filter(|e| netdev.is_none_or(|want| e.netdev.as_deref() == Some(want)))
        .filter_map(|e| gid_score(e, prefer_ipv6).map(|s| (s, e.index)))
        // Highest score; among equal scores the lowest index.
        .max_by(|(sa, ia), (sb, ib)| sa.cmp(sb).then(ib.cmp(ia)))
        .map(|(_, index)| index)
}

// ---------------------------------------------------------------------------------------------
// Work completion status
// ---------------------------------------------------------------------------------------------

/// Status of a work completion (`enum ibv_wc_status`). Unknown codes are kept, never panicked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocEecOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    LocRddViolErr,
    RemInvRdReqErr,
    RemAbortErr,
    InvEecnErr,
    InvEecStateErr,
    FatalErr,
    RespTimeoutErr,
    GeneralErr,
    TmErr,
    TmRndvIncomplete,
    Unknown(u32),
}

impl WcStatus {
    /// Decodes the raw status; never panics.
    pub fn from_raw(raw: u32) -> Self {
        use WcStatus::*;
        match raw {
            0 => Success,
            1 => LocLenErr,
            2 => LocQpOpErr,
            3 => LocEecOpErr,
            4 => LocProtErr,
            5 => WrFlushErr,
            6 => MwBindErr,
            7 => BadRespErr,
            8 => LocAccessErr,
            9 => RemInvReqErr,
            10 => RemAccessErr,
            11 => RemOpErr,
            12 => RetryExcErr,
            13 => RnrRetryExcErr,
            14 => LocRddViolErr,
            15 => RemInvRdReqErr,
            16 => RemAbortErr,
            17 => InvEecnErr,
            18 => InvEecStateErr,
            19 => FatalErr,
            20 => RespTimeoutErr,
            21 => GeneralErr,
            22 => TmErr,
            23 => TmRndvIncomplete,
            other => Unknown(other),
        }
    }

    /// The raw `enum ibv_wc_status` value (as printed by perftest: "Failed status ... (12)").
    pub fn raw(self) -> u32 {
        use WcStatus::*;
        match self {
            Success => 0,
            LocLenErr => 1,
            LocQpOpErr => 2,
            LocEecOpErr => 3,
            LocProtErr => 4,
            WrFlushErr => 5,
            MwBindErr => 6,
            BadRespErr => 7,
            LocAccessErr => 8,
            RemInvReqErr => 9,
            RemAccessErr => 10,
            RemOpErr => 11,
            RetryExcErr => 12,
            RnrRetryExcErr => 13,
            LocRddViolErr => 14,
            RemInvRdReqErr => 15,
            RemAbortErr => 16,
            InvEecnErr => 17,
            InvEecStateErr => 18,
            FatalErr => 19,
            RespTimeoutErr => 20,
            GeneralErr => 21,
            TmErr => 22,
            TmRndvIncomplete => 23,
            Unknown(raw) => raw,
        }
    }

    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }

    /// The metric `reason` for a failed completion. `Success` maps to `WcOther` (callers only ask
    /// for failed ones; there is no "ok" reason).
    pub fn reason(self) -> ErrorReason {
        match self {
            WcStatus::RetryExcErr => ErrorReason::WcRetryExceeded,
            WcStatus::RnrRetryExcErr => ErrorReason::WcRnrRetryExceeded,
            WcStatus::RemAccessErr => ErrorReason::WcRemoteAccess,
            WcStatus::RemOpErr => ErrorReason::WcRemoteOperation,
            WcStatus::LocProtErr => ErrorReason::WcLocalProtection,
            WcStatus::WrFlushErr => ErrorReason::WcFlush,
            _ => ErrorReason::WcOther,
        }
    }

    /// Human name, identical to libibverbs' `ibv_wc_status_str` so operators can search for it.
    pub fn name(self) -> &'static str {
        use WcStatus::*;
        match self {
            Success => "success",
            LocLenErr => "local length error",
            LocQpOpErr => "local QP operation error",
            LocEecOpErr => "local EE context operation error",
            LocProtErr => "local protection error",
            WrFlushErr => "Work Request Flushed Error",
            MwBindErr => "memory management operation error",
            BadRespErr => "bad response error",
            LocAccessErr => "local access error",
            RemInvReqErr => "remote invalid request error",
            RemAccessErr => "remote access error",
            RemOpErr => "remote operation error",
            RetryExcErr => "transport retry counter exceeded",
            RnrRetryExcErr => "RNR retry counter exceeded",
            LocRddViolErr => "local RDD violation error",
            RemInvRdReqErr => "remote invalid RD request",
            RemAbortErr => "operation aborted",
            InvEecnErr => "invalid EE context number",
            InvEecStateErr => "invalid EE context state",
            FatalErr => "fatal error",
            RespTimeoutErr => "response timeout error",
            GeneralErr => "general error",
            TmErr => "TM error",
            TmRndvIncomplete => "TM software rendezvous",
            Unknown(_) => "unknown",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.raw())
    }
}

impl Serialize for WcStatus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// Work completion opcode (`ibv_wc.opcode`) values this crate acts on.
pub mod wc_opcode {
    /// `IBV_WC_RDMA_WRITE`: a send-side completion of an RDMA WRITE (with or without immediate).
    pub const RDMA_WRITE: u32 = 1;
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a receive consumed by an incoming WRITE WITH IMMEDIATE.
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, ip: &str, gid_type: GidType) -> GidEntry {
        let gid = Gid(ip.parse::<Ipv6Addr>().unwrap().octets());
        GidEntry {
            index,
            gid,
            gid_type,
            netdev: Some("eth0".into()),
        }
    }

    /// The layout of a typical RoCE port (mlx5 / rxe): link-local v1/v2, then IPv4-mapped v1/v2.
    fn typical_roce_table() -> Vec<GidEntry> {
        vec![
            entry(0, "fe80::5054:ff:fe12:3456", GidType::RoceV1),
            entry(1, "fe80::5054:ff:fe12:3456", GidType::RoceV2),
            entry(2, "::ffff:192.0.2.10", GidType::RoceV1),
            entry(3, "::ffff:192.0.2.10", GidType::RoceV2),
        ]
    }

    #[test]
    fn select_gid_prefers_ipv4_mapped_roce_v2() {
        assert_eq!(select_gid(&typical_roce_table()), Some(3));
    }

    #[test]
    fn select_gid_rxe_layout() {
        // rxe: index 0 link-local v2, index 1 IPv4-mapped v2 (lab/README.md: `-x 1`).
        let t = vec![
            entry(0, "fe80::5054:ff:fe12:3456", GidType::RoceV2),
            entry(1, "::ffff:192.0.2.10", GidType::RoceV2),
        ];
        assert_eq!(select_gid(&t), Some(1));
    }

    #[test]
    fn select_gid_ties_go_to_lowest_index() {
        let t = vec![
            entry(7, "::ffff:192.0.2.11", GidType::RoceV2),
            entry(5, "::ffff:192.0.2.10", GidType::RoceV2),
            entry(6, "::ffff:192.0.2.12", GidType::RoceV2),
        ];
        assert_eq!(select_gid(&t), Some(5));
    }

    #[test]
    fn select_gid_skips_zero_and_handles_empty() {
        assert_eq!(select_gid(&[]), None);
        let zero = GidEntry {
            index: 0,
            gid: Gid([0; 16]),
            gid_type: GidType::RoceV2,
            netdev: None,
        };
        assert_eq!(select_gid(std::slice::from_ref(&zero)), None);
        let t = vec![zero, entry(1, "fe80::1", GidType::RoceV1)];
        assert_eq!(select_gid(&t), Some(1));
    }

    #[test]
    fn select_gid_ipv4_link_local_loses_to_global() {
        let t = vec![
            entry(0, "::ffff:169.254.1.1", GidType::RoceV2),
            entry(1, "::ffff:192.0.2.1", GidType::RoceV1),
        ];
        // 100+0+2 = 102 vs 100+10+1 = 111.
        assert_eq!(select_gid(&t), Some(1));
    }

    #[test]
    fn select_gid_family_beats_everything() {
        let t = vec![
            entry(0, "2001:db8::1", GidType::RoceV2),
            entry(1, "::ffff:169.254.1.1", GidType::RoceV1),
        ];
        assert_eq!(select_gid(&t), Some(1));
        assert_eq!(select_gid_with(&t, true, None), Some(0));
    }

    #[test]
    fn select_gid_netdev_filter() {
        let mut t = typical_roce_table();
        t.push(GidEntry {
            netdev: Some("eth0.100".into()),
            ..entry(4, "::ffff:198.51.100.1", GidType::RoceV2)
        });
        assert_eq!(select_gid_with(&t, false, Some("eth0.100")), Some(4));
        assert_eq!(select_gid_with(&t, false, Some("eth0")), Some(3));
        assert_eq!(select_gid_with(&t, false, Some("nope")), None);
    }

    #[test]
    fn select_gid_ib_port() {
        // IB GIDs are link-local-prefixed (fe80::) of type IB; still one is selected.
        let t = vec![entry(0, "fe80::2:c903:0:1", GidType::Ib)];
        assert_eq!(select_gid(&t), Some(0));
    }

    #[test]
    fn gid_display_and_classification() {
        let v4 = Gid("::ffff:192.0.2.1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(v4.to_string(), "::ffff:192.0.2.1");
        assert!(v4.is_ipv4_mapped());
        assert!(!v4.is_link_local());
        let ll = Gid("fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(ll.to_string(), "fe80::1");
        assert!(ll.is_link_local());
        assert!(!ll.is_ipv4_mapped());
        // fe80::/10 includes febf::.
        assert!(Gid("febf::1".parse::<Ipv6Addr>().unwrap().octets()).is_link_local());
        assert!(!Gid("fec0::1".parse::<Ipv6Addr>().unwrap().octets()).is_link_local());
        assert!(Gid([0; 16]).is_zero());
        assert_eq!(serde_json::to_string(&v4).unwrap(), "\"::ffff:192.0.2.1\"");
    }

    #[test]
    fn mtu_conversions() {
        assert_eq!(mtu_to_bytes(1), Some(256));
        assert_eq!(mtu_to_bytes(3), Some(1024));
        assert_eq!(mtu_to_bytes(5), Some(4096));
        assert_eq!(mtu_to_bytes(0), None);
        assert_eq!(mtu_to_bytes(6), None);
        assert_eq!(bytes_to_mtu(4096), Some(PathMtu::Mtu4096));
        assert_eq!(bytes_to_mtu(1500), None);
        for m in PathMtu::ALL {
            assert_eq!(PathMtu::from_code(m.code()), Some(m));
            assert_eq!(PathMtu::from_bytes(m.bytes()), Some(m));
        }
        assert_eq!(PathMtu::largest_at_most(9000), Some(PathMtu::Mtu4096));
        assert_eq!(PathMtu::largest_at_most(1500), Some(PathMtu::Mtu1024));
        assert_eq!(PathMtu::largest_at_most(256), Some(PathMtu::Mtu256));
        assert_eq!(PathMtu::largest_at_most(255), None);
        assert!(PathMtu::Mtu1024 < PathMtu::Mtu4096);
    }

    #[test]
    fn link_rates() {
        const G: u64 = 1_000_000_000;
        assert_eq!(link_rate_bits_per_second(1, 1), Some(2 * G)); // 1X SDR (rxe)
        assert_eq!(link_rate_bits_per_second(2, 4), Some(32 * G)); // 4X QDR
        assert_eq!(link_rate_bits_per_second(2, 32), Some(100 * G)); // 4X EDR / 100GbE
        assert_eq!(link_rate_bits_per_second(1, 32), Some(25 * G)); // 1X EDR / 25GbE
        assert_eq!(link_rate_bits_per_second(1, 8), Some(10 * G)); // 1X FDR10 / 10GbE
        assert_eq!(link_rate_bits_per_second(2, 8), Some(40 * G)); // 4X FDR10 / 40GbE
        assert_eq!(link_rate_bits_per_second(2, 64), Some(200 * G)); // 4X HDR
        assert_eq!(link_rate_bits_per_second(2, 128), Some(400 * G)); // 4X NDR
        assert_eq!(link_rate_bits_per_second(2, 256), Some(800 * G)); // 4X XDR
        assert_eq!(link_rate_bits_per_second(16, 64), Some(100 * G)); // 2X HDR
        assert_eq!(link_rate_bits_per_second(8, 32), Some(300 * G)); // 12X EDR
        assert_eq!(link_rate_bits_per_second(4, 128), Some(800 * G)); // 8X NDR
        assert_eq!(link_rate_bits_per_second(2, 16), Some(54_545_454_544)); // 4X FDR
                                                                            // Unknown codes never panic.
        assert_eq!(link_rate_bits_per_second(0, 1), None);
        assert_eq!(link_rate_bits_per_second(3, 1), None);
        assert_eq!(link_rate_bits_per_second(1, 0), None);
        assert_eq!(link_rate_bits_per_second(1, 512), None);
        for w in 0..=u8::MAX {
            for s in [0, 1, 3, 255, 256, 1024, u32::MAX] {
                let _ = link_rate_bits_per_second(w, s);
            }
        }
        assert_eq!(effective_speed_code(32, 0), 32);
        assert_eq!(effective_speed_code(0, 256), 256);
        assert_eq!(speed_name(256), Some("XDR"));
        assert_eq!(width_name(16), Some("2X"));
        assert_eq!(width_name(3), None);
    }

    #[test]
    fn wc_status_mapping() {
        assert!(WcStatus::from_raw(0).is_success());
        assert_eq!(
            WcStatus::from_raw(12).reason(),
            ErrorReason::WcRetryExceeded
        );
        assert_eq!(
            WcStatus::from_raw(13).reason(),
            ErrorReason::WcRnrRetryExceeded
        );
        assert_eq!(WcStatus::from_raw(10).reason(), ErrorReason::WcRemoteAccess);
        assert_eq!(
            WcStatus::from_raw(11).reason(),
            ErrorReason::WcRemoteOperation
        );
        assert_eq!(
            WcStatus::from_raw(4).reason(),
            ErrorReason::WcLocalProtection
        );
        assert_eq!(WcStatus::from_raw(5).reason(), ErrorReason::WcFlush);
        assert_eq!(WcStatus::from_raw(1).reason(), ErrorReason::WcOther);
        assert_eq!(WcStatus::from_raw(999).reason(), ErrorReason::WcOther);
        assert_eq!(
            WcStatus::from_raw(12).name(),
            "transport retry counter exceeded"
        );
        assert_eq!(
            WcStatus::from_raw(12).to_string(),
            "transport retry counter exceeded (12)"
        );
        for raw in 0..64 {
            let s = WcStatus::from_raw(raw);
            assert_eq!(s.raw(), raw);
            assert!(!s.name().is_empty());
        }
        assert_eq!(WcStatus::from_raw(77), WcStatus::Unknown(77));
    }

    #[test]
    fn raw_decoders_never_panic() {
        for raw in 0..300u32 {
            let _ = PortState::from_raw(raw).to_string();
            let _ = GidType::from_raw(raw).to_string();
        }
        for raw in 0..=u8::MAX {
            let _ = LinkLayer::from_raw(raw).to_string();
        }
        assert!(PortState::from_raw(4).is_active());
        assert_eq!(PortState::from_raw(9), PortState::Unknown(9));
        assert_eq!(LinkLayer::from_raw(0), LinkLayer::InfiniBand);
        assert_eq!(LinkLayer::from_raw(2), LinkLayer::Ethernet);
        assert_eq!(
            GidType::from_sysfs("RoCE v2\n", LinkLayer::Ethernet),
            GidType::RoceV2
        );
        assert_eq!(
            GidType::from_sysfs("IB/RoCE v1", LinkLayer::Ethernet),
            GidType::RoceV1
        );
        assert_eq!(
            GidType::from_sysfs("IB/RoCE v1", LinkLayer::InfiniBand),
            GidType::Ib
        );
        assert_eq!(
            serde_json::to_string(&PortState::Active).unwrap(),
            "\"active\""
        );
    }
}
