//! Where RDMA traffic may go: the GID a peer hands over in the session exchange is where this
//! node's QPs will send (the prober's WRITEs, the responder's ACKs). Without a check, whoever
//! answers a control connection chooses that destination, and could aim a prober's bursts at a
//! third host. So on RoCE v2 the address in the peer's GID must be the address the control
//! connection reached, or lie in one of the networks the operator lists (`rdma_networks`:
//! multi-rail nodes whose rails are on their own subnets). Pure: tested without RDMA
//! (docs/security.md, "Where RDMA traffic goes").

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;
use thiserror::Error;

/// Where a peer's RDMA address may be: its control address, or in `networks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDestinations {
    control_peer: IpAddr,
    networks: Vec<IpNet>,
}

/// A GID this node must not send to.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RdmaAddressError {
    #[error("the peer gave no RDMA address (an all-zero GID)")]
    Unset,
    #[error(
        "the peer's RDMA address {gid_ip} is neither the address its control connection reached \
         ({control_peer}) nor in rdma_networks ({networks}): list the rails' networks in \
         rdma_networks if its RDMA ports are on other subnets (docs/security.md)"
    )]
    Elsewhere {
        gid_ip: IpAddr,
        control_peer: IpAddr,
        networks: NetworkList,
    },
}

/// The configured networks, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkList(Vec<IpNet>);

impl fmt::Display for NetworkList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none listed");
        }
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// `rdma_networks` entry (config or `--rdma-network`): a network in CIDR form, without host
/// bits; the error says what is wrong (the caller names where the text came from).
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let network: IpNet = text
        .parse()
        .map_err(|_| "not a network in CIDR form, e.g. 10.1.0.0/16".to_owned())?;
    if network.trunc() != network {
        return Err(format!(
            "{network} has host bits set: the network is {}",
            network.trunc()
        ));
    }
    Ok(network)
}

impl RdmaDestinations {
    /// `control_peer`: the address the control connection reached (prober) or came from
    /// (responder); `networks`: `rdma_networks` from the config or the command line.
    pub fn new(control_peer: IpAddr, networks: &[IpNet]) -> Self {
        RdmaDestinations {
            control_peer: control_peer.to_canonical(),
            networks: networks.to_vec(),
        }
    }

    /// Whether this node may send RDMA traffic to the RoCE v2 GID `gid`.
    ///
    /// An IPv4-mapped GID (`::ffff:a.b.c.d`, what RoCE v2 ports carry for their IPv4 addresses)
    /// or a routable IPv6 GID must name the control peer or lie in a listed network. Not
    /// compared: a link-local GID (`fe80::/10`, derived from the port's MAC), which cannot be
    /// routed off the peer's L2 segment and carries no address to compare; and any GID when the
    /// control connection is over loopback: the peer is a process on this host (a node probing
    /// itself), whose RDMA address is one of this host's ports and never the loopback address.
    pub fn check(&self, gid: [u8; 16]) -> Result<(), RdmaAddressError> {
        let v6 = Ipv6Addr::from(gid);
        if v6.is_unspecified() {
            return Err(RdmaAddressError::Unset);
        }
        if v6.segments()[0] & 0xffc0 == 0xfe80 || self.control_peer.is_loopback() {
            return Ok(());
        }
        let gid_ip = IpAddr::V6(v6).to_canonical();
        if gid_ip == self.control_peer || self.networks.iter().any(|n| n.contains(&gid_ip)) {
            return Ok(());
        }
        Err(RdmaAddressError::Elsewhere {
            gid_ip,
            control_peer: self.control_peer,
            networks: NetworkList(self.networks.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(v4: [u8; 4]) -> [u8; 16] {
        std::net::Ipv4Addr::from(v4).to_ipv6_mapped().octets()
    }

    fn dest(control: &str, networks: &[&str]) -> RdmaDestinations {
        let networks: Vec<IpNet> = networks.iter().map(|n| n.parse().unwrap()).collect();
        RdmaDestinations::new(control.parse().unwrap(), &networks)
    }

    #[test]
    fn the_control_address_is_allowed_and_another_host_is_not() {
        let d = dest("192.0.2.12", &[]);
        assert_eq!(d.check(mapped([192, 0, 2, 12])), Ok(()));
        let err = d.check(mapped([192, 0, 2, 99])).unwrap_err();
        assert!(matches!(err, RdmaAddressError::Elsewhere { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("192.0.2.99") && text.contains("192.0.2.12"),
            "{text}"
        );
        assert!(text.contains("none listed"), "{text}");
    }

    #[test]
    fn a_listed_network_allows_a_rail_on_its_own_subnet() {
        let d = dest("10.0.0.5", &["10.1.0.0/16", "10.2.0.0/16"]);
        assert_eq!(d.check(mapped([10, 2, 7, 5])), Ok(()));
        let err = d.check(mapped([10, 3, 7, 5])).unwrap_err().to_string();
        assert!(err.contains("10.1.0.0/16, 10.2.0.0/16"), "{err}");
    }

    #[test]
    fn a_control_connection_over_ipv6_mapped_ipv4_compares_as_ipv4() {
        let d = dest("::ffff:192.0.2.12", &[]);
        assert_eq!(d.check(mapped([192, 0, 2, 12])), Ok(()));
    }

    #[test]
    fn ipv6_gids_compare_with_the_control_address_and_link_local_ones_pass() {
        let d = dest("2001:db8::12", &[]);
        let same: Ipv6Addr = "2001:db8::12".parse().unwrap();
        let other: Ipv6Addr = "2001:db8::99".parse().unwrap();
        assert_eq!(d.check(same.octets()), Ok(()));
        assert!(d.check(other.octets()).is_err());
        let link_local: Ipv6Addr = "fe80::5054:ff:fe12:3456".parse().unwrap();
        assert_eq!(d.check(link_local.octets()), Ok(()));
    }

    #[test]
    fn over_loopback_the_peer_is_this_host_and_its_port_address_is_not_compared() {
        for control in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(
                dest(control, &[]).check(mapped([192, 0, 2, 11])),
                Ok(()),
                "{control}"
            );
        }
    }

    #[test]
    fn an_all_zero_gid_is_refused() {
        assert_eq!(
            dest("192.0.2.12", &[]).check([0; 16]),
            Err(RdmaAddressError::Unset)
        );
    }
}
