//! `HOST:PORT` addresses of peers, as written in the config file and on the command line.
//!
//! One parser for both, so that `probe node-b` and a config entry `address: node-b` mean the
//! same thing. Only the syntax is checked here; host names are resolved when connecting, so a
//! config that names a host the checking machine cannot resolve still loads.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The control port responders listen on by default (perftest's is 18515; one above it, so a
/// stock `ib_write_bw` server and a responder can run side by side).
pub const DEFAULT_CONTROL_PORT: u16 = 18516;

/// The port a stock `ib_write_bw` server listens on by default (perftest's `-p`).
pub const PERFTEST_PORT: u16 = 18515;

/// A peer's control address: an IP address or a host name, and a port (never 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    host: Host,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl HostPort {
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as written (an IP address in canonical form, or a host name), without brackets.
    pub fn host(&self) -> String {
        match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }

    /// The socket address when the host is an IP address (no resolution needed).
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        match self.host {
            Host::Ip(ip) => Some(SocketAddr::new(ip, self.port)),
            Host::Name(_) => None,
        }
    }
}

impl From<SocketAddr> for HostPort {
    /// An address as resolved (discovery by DNS).
    fn from(addr: SocketAddr) -> Self {
        HostPort {
            host: Host::Ip(addr.ip()),
            port: addr.port(),
        }
    }
}

impl fmt::Display for HostPort {
    /// `10.0.0.2:18516`, `[fe80::1]:18516`, `node-b.example:18516`: what a TCP connect
    /// (`tokio::net::lookup_host`) accepts, and what [`parse_host_port`] parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(ip) => write!(f, "{}", SocketAddr::new(*ip, self.port)),
            Host::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

/// The `peer` label of a peer known by its address only: the host alone on the default control
/// port (as `address: 10.0.0.2` is written), else `HOST:PORT`. It stays the peer's name for
/// good: what the peer later says its name is goes to `rdma_probe_peer_info` (`peer_node`), so
/// its series never move to other labels.
pub fn address_name(address: &HostPort) -> String {
    if address.port() == DEFAULT_CONTROL_PORT {
        address.host()
    } else {
        address.to_string()
    }
}

/// The forms [`parse_host_port`] accepts, for error messages.
pub fn host_port_forms(default_port: u16) -> String {
    format!(
        "expected HOST:PORT, [IPv6]:PORT or HOST (port {default_port}), e.g. \
         10.0.0.2:{DEFAULT_CONTROL_PORT}"
    )
}

/// Parses `HOST:PORT`, `[IPv6]:PORT`, a bare IP address or host name (then `default_port`), or a
/// bare IPv6 address. A host name is letters, digits, `-`, `.` and `_`; port 0 is refused.
pub fn parse_host_port(s: &str, default_port: u16) -> Result<HostPort, String> {
    let forms = || host_port_forms(default_port);
    let s = s.trim();
    if s.is_empty() {
        return Err(format!("empty address; {}", forms()));
    }
    let ip = |ip: IpAddr, port: u16| HostPort {
        host: Host::Ip(ip),
        port,
    };
    if let Ok(addr) = s.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(format!("{s}: port 0 is not a valid port; {}", forms()));
        }
        return Ok(ip(addr.ip(), addr.port()));
    }
    if let Ok(addr) = s.parse::<IpAddr>() {
        return Ok(ip(addr, default_port));
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner
            .parse::<Ipv6Addr>()
            .map(|v6| ip(IpAddr::V6(v6), default_port))
            .map_err(|_| format!("{s}: not an IPv6 address; {}", forms()));
    }
    let (host, port) = match s.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("{s}: invalid port {port:?}; {}", forms()))?;
            (host, port)
        }
        None => (s, default_port),
    };
    let valid_host = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if !valid_host {
        return Err(format!("{s}: invalid host name {host:?}; {}", forms()));
    }
    Ok(HostPort {
        host: Host::Name(host.to_owned()),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let ok = |s: &str| {
            parse_host_port(s, DEFAULT_CONTROL_PORT)
                .unwrap()
                .to_string()
        };
        assert_eq!(ok("10.0.0.2:18516"), "10.0.0.2:18516");
        assert_eq!(ok("10.0.0.2"), "10.0.0.2:18516");
        assert_eq!(ok(" node-b.example:1234 "), "node-b.example:1234");
        assert_eq!(ok("node-b"), "node-b:18516");
        assert_eq!(ok("[::1]:99"), "[::1]:99");
        assert_eq!(ok("[fe80::1]"), "[fe80::1]:18516");
        assert_eq!(ok("::1"), "[::1]:18516");
        let perftest = parse_host_port("legacy-1", PERFTEST_PORT).unwrap();
        assert_eq!(perftest.port(), 18515);
        assert_eq!(perftest.host(), "legacy-1");
        assert_eq!(perftest.socket_addr(), None);
        let ip = parse_host_port("[::1]:7", 1).unwrap();
        assert_eq!(ip.host(), "::1");
        assert_eq!(ip.socket_addr(), Some("[::1]:7".parse().unwrap()));
    }

    #[test]
    fn refusals_name_the_forms() {
        for bad in [
            "",
            "h:",
            "h:0",
            "h:70000",
            ":80",
            "a b:1",
            "[zz]",
            "h:x",
            "10.0.0.2:0",
            "${X}",
        ] {
            let e = parse_host_port(bad, DEFAULT_CONTROL_PORT).unwrap_err();
            assert!(
                e.contains("HOST:PORT") && e.contains("18516"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn display_parses_back() {
        for s in ["10.0.0.2:1", "[fe80::1]:2", "a.b-c_d:3", "::ffff:10.0.0.1"] {
            let a = parse_host_port(s, 9).unwrap();
            assert_eq!(parse_host_port(&a.to_string(), 9).unwrap(), a, "{s}");
        }
    }
}
