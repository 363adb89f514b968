//! The port's logical state, physical state and link layer, from their sysfs texts
//! (`state` = "4: ACTIVE", `phys_state` = "5: LinkUp", `link_layer` = "Ethernet").
//!
//! Pure: every text decodes to a value, a code the build does not know to an `Unknown` variant,
//! and only text without a leading code to `None`.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::verbs::{LinkLayer, PortState};

/// `state`: "<code>: <NAME>", the code being `enum ib_port_state` (the same codes as verbs').
pub fn parse_state(text: &str) -> Option<PortState> {
    leading_code(text).map(PortState::from_raw)
}

/// `link_layer`: "InfiniBand", "Ethernet" or "Unknown". Anything else is
/// `LinkLayer::Unknown(u8::MAX)` (there is no code in the text).
pub fn parse_link_layer(text: &str) -> LinkLayer {
    match text.trim() {
        "InfiniBand" => LinkLayer::InfiniBand,
        "Ethernet" => LinkLayer::Ethernet,
        _ => LinkLayer::Unknown(u8::MAX),
    }
}

/// The number before the `:` of "<code>: <name>".
fn leading_code(text: &str) -> Option<u32> {
    let (code, _) = text.trim().split_once(':')?;
    code.trim().parse().ok()
}

/// Physical port state (`phys_state`; IBA PortInfo PortPhysicalState). On RoCE the driver maps
/// the Ethernet link onto the same codes (link up = `LinkUp`, no carrier = `Disabled` or
/// `Polling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhysState {
    /// 1: `Sleep`.
    Sleep,
    /// 2: `Polling`: looking for a peer (no cable, peer down, or training failing).
    Polling,
    /// 3: `Disabled` (administratively, or no carrier on RoCE).
    Disabled,
    /// 4: `PortConfigurationTraining`.
    PortConfigurationTraining,
    /// 5: `LinkUp`: the only state in which traffic flows.
    LinkUp,
    /// 6: `LinkErrorRecovery`: the link is retraining after errors.
    LinkErrorRecovery,
    /// 7: `Phy Test`.
    PhyTest,
    /// A code this build does not know (the kernel prints "<code>: <unknown>").
    Unknown(u32),
}

impl PhysState {
    /// Decodes a `phys_state` text; `None` when it has no leading code.
    pub fn parse(text: &str) -> Option<Self> {
        leading_code(text).map(Self::from_code)
    }

    pub fn from_code(code: u32) -> Self {
        match code {
            1 => PhysState::Sleep,
            2 => PhysState::Polling,
            3 => PhysState::Disabled,
            4 => PhysState::PortConfigurationTraining,
            5 => PhysState::LinkUp,
            6 => PhysState::LinkErrorRecovery,
            7 => PhysState::PhyTest,
            other => PhysState::Unknown(other),
        }
    }

    /// The IBA code (what `rdma_probe_port_phys_state_id` exports).
    pub fn code(self) -> u32 {
        match self {
            PhysState::Sleep => 1,
            PhysState::Polling => 2,
            PhysState::Disabled => 3,
            PhysState::PortConfigurationTraining => 4,
            PhysState::LinkUp => 5,
            PhysState::LinkErrorRecovery => 6,
            PhysState::PhyTest => 7,
            PhysState::Unknown(code) => code,
        }
    }
}

impl fmt::Display for PhysState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PhysState::Sleep => f.write_str("sleep"),
            PhysState::Polling => f.write_str("polling"),
            PhysState::Disabled => f.write_str("disabled"),
            PhysState::PortConfigurationTraining => f.write_str("port_configuration_training"),
            PhysState::LinkUp => f.write_str("link_up"),
            PhysState::LinkErrorRecovery => f.write_str("link_error_recovery"),
            PhysState::PhyTest => f.write_str("phy_test"),
            PhysState::Unknown(code) => write!(f, "unknown({code})"),
        }
    }
}

impl Serialize for PhysState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_decode_like_the_kernel_prints_them() {
        assert_eq!(parse_state("4: ACTIVE\n"), Some(PortState::Active));
        assert_eq!(parse_state("1: DOWN"), Some(PortState::Down));
        assert_eq!(parse_state("9: UNKNOWN"), Some(PortState::Unknown(9)));
        assert_eq!(parse_state("ACTIVE"), None);
        assert_eq!(parse_state(""), None);
        assert_eq!(PhysState::parse("5: LinkUp\n"), Some(PhysState::LinkUp));
        assert_eq!(PhysState::parse("2: Polling"), Some(PhysState::Polling));
        assert_eq!(PhysState::parse("7: Phy Test"), Some(PhysState::PhyTest));
        assert_eq!(
            PhysState::parse("8: <unknown>"),
            Some(PhysState::Unknown(8))
        );
        assert_eq!(PhysState::parse("LinkUp"), None);
        for code in 0..=9 {
            assert_eq!(PhysState::from_code(code).code(), code);
        }
        assert_eq!(PhysState::LinkUp.to_string(), "link_up");
        assert_eq!(PhysState::Unknown(8).to_string(), "unknown(8)");
    }

    #[test]
    fn link_layers() {
        assert_eq!(parse_link_layer("InfiniBand\n"), LinkLayer::InfiniBand);
        assert_eq!(parse_link_layer("Ethernet"), LinkLayer::Ethernet);
        assert_eq!(parse_link_layer("Unknown"), LinkLayer::Unknown(u8::MAX));
        assert_eq!(parse_link_layer("OmniPath"), LinkLayer::Unknown(u8::MAX));
    }
}
