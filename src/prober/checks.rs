//! What the prober checks before and while it sets up a session: the responder serves the rail
//! asked for, the RDMA address it gave may be sent to, and the local port is ACTIVE.

use ipnet::IpNet;

use crate::control::message::Identity;
use crate::control::{Connection, QpEndpoint};
use crate::rdma_address::RdmaDestinations;
use crate::reason::ErrorReason;
use crate::session::QpSet;
use crate::verbs::Context;

use super::ProbeError;

/// `Err(no_device)` when the responder listed its devices and none is on `rail`: the session
/// request would be refused (the responder's rule), so it is not sent.
pub(crate) fn check_rail(identity: &Identity, rail: Option<u16>) -> Result<(), ProbeError> {
    match rail {
        Some(rail) if !identity.devices.is_empty() && !identity.serves_rail(rail) => {
            Err(ProbeError::new(
                ErrorReason::NoDevice,
                format!(
                    "peer {} has no device on rail {rail} (it serves {})",
                    identity.node,
                    identity.describe_devices()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Refuses to send to the RDMA address the responder gave unless it is the address the control
/// connection reached, or in `networks` (`rdma_address`): whoever answers the connection must not
/// choose where the bursts go.
pub(super) fn check_responder_address(
    set: &QpSet,
    conn: &Connection,
    endpoints: &[QpEndpoint],
    networks: &[IpNet],
) -> Result<(), ProbeError> {
    let control_peer = conn.peer_addr().map(|a| a.ip()).ok_or_else(|| {
        ProbeError::new(
            ErrorReason::RdmaAddress,
            "the control connection's peer address is unknown",
        )
    })?;
    set.check_peer_addresses(endpoints, &RdmaDestinations::new(control_peer, networks))
        .map_err(|e| ProbeError::new(ErrorReason::RdmaAddress, e.to_string()))
}

/// Re-reads the port and refuses to set up a session on one that is not ACTIVE (`port_down`).
pub(crate) fn ensure_port_active(ctx: &mut Context) -> Result<(), ProbeError> {
    let state = ctx.refresh_port_info()?.state;
    if state.is_active() {
        return Ok(());
    }
    Err(ProbeError::new(
        ErrorReason::PortDown,
        format!("{} port {} is {state:?}", ctx.device_name(), ctx.port()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::message::IdentityDevice;

    #[test]
    fn a_session_is_asked_for_only_on_a_rail_the_peer_has() {
        let device = |name: &str, rail| IdentityDevice {
            name: name.into(),
            port: 1,
            rail,
        };
        let peer = Identity {
            node: "gpu-b07".into(),
            labels: Default::default(),
            devices: vec![device("mlx5_0", Some(0)), device("mlx5_1", Some(1))],
        };
        assert!(check_rail(&peer, Some(1)).is_ok());
        assert!(check_rail(&peer, None).is_ok(), "no rail: its first device");
        let e = check_rail(&peer, Some(5)).unwrap_err();
        assert_eq!(e.reason(), Some(ErrorReason::NoDevice));
        assert_eq!(
            e.to_string(),
            "peer gpu-b07 has no device on rail 5 (it serves mlx5_0 (rail 0), mlx5_1 (rail 1))"
        );
        // A responder that lists no devices leaves the choice to its answer.
        let silent = Identity {
            devices: Vec::new(),
            ..peer
        };
        assert!(check_rail(&silent, Some(5)).is_ok());
    }
}
