//! Peers from DNS: every A and AAAA record of a name (e.g. the DaemonSet's headless Service,
//! one record per node), resolved again every `refresh_interval`.
//!
//! Resolution goes through the system resolver (`getaddrinfo`, via tokio), so `/etc/hosts`,
//! `resolv.conf` search domains and the cluster DNS work as for any other program. A lookup that
//! fails (no such name, no records, a timeout) keeps the last good set.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::mpsc;

use super::state::{SourceReport, Target};
use crate::config::HostPort;

/// How long one lookup may take before it counts as failed.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a lookup gave no set.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DnsError {
    #[error("resolving {name}: {error}")]
    Lookup { name: String, error: String },
    #[error("resolving {name}: no answer within {timeout:?}")]
    Timeout { name: String, timeout: Duration },
    #[error("resolving {name}: no addresses")]
    Empty { name: String },
}

/// Resolves a name to addresses: the system resolver, or a stand-in in tests.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `name` (`HOST:PORT`), with its port.
    fn resolve(
        &self,
        name: &HostPort,
    ) -> impl Future<Output = Result<Vec<SocketAddr>, String>> + Send;
}

/// The system resolver (`getaddrinfo` on a blocking thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    async fn resolve(&self, name: &HostPort) -> Result<Vec<SocketAddr>, String> {
        tokio::net::lookup_host(name.to_string())
            .await
            .map(Iterator::collect)
            .map_err(|e| e.to_string())
    }
}

/// The source's name in the metrics.
pub fn source_name(name: &HostPort) -> String {
    format!("dns:{name}")
}

/// One lookup of `name`: its addresses as targets, each once, in order.
pub async fn lookup<R: Resolve>(
    resolver: &R,
    name: &HostPort,
    timeout: Duration,
) -> Result<Vec<Target>, DnsError> {
    let shown = name.to_string();
    let mut addresses = tokio::time::timeout(timeout, resolver.resolve(name))
        .await
        .map_err(|_| DnsError::Timeout {
            name: shown.clone(),
            timeout,
        })?
        .map_err(|error| DnsError::Lookup {
            name: shown.clone(),
            error,
        })?;
    addresses.sort();
    addresses.dedup();
    if addresses.is_empty() {
        return Err(DnsError::Empty { name: shown });
    }
    Ok(addresses
        .into_iter()
        .map(|a| Target::address(HostPort::from(a)))
        .collect())
}

/// The report of one lookup.
pub async fn poll<R: Resolve>(resolver: &R, name: &HostPort, timeout: Duration) -> SourceReport {
    let source = source_name(name);
    match lookup(resolver, name, timeout).await {
        Ok(peers) => SourceReport {
            source,
            peers: Some(peers),
            error: None,
        },
        Err(e) => SourceReport {
            source,
            peers: None,
            error: Some(e.to_string()),
        },
    }
}

/// Resolves `name` every `every` and reports each lookup, until the receiver is gone.
pub async fn run<R: Resolve>(
    resolver: R,
    name: HostPort,
    every: Duration,
    reports: mpsc::Sender<SourceReport>,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let report = poll(
            &resolver,
            &name,
            LOOKUP_TIMEOUT.min(every.max(Duration::from_secs(1))),
        )
        .await;
        if reports.send(report).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use crate::config::{parse_host_port, DEFAULT_CONTROL_PORT};

    /// Answers from a script, one answer per lookup (the last one repeats).
    #[derive(Clone)]
    struct Scripted(Arc<Mutex<Vec<Answer>>>);

    #[derive(Clone)]
    enum Answer {
        Addresses(Vec<&'static str>),
        Fail(&'static str),
        Hang,
    }

    impl Scripted {
        fn new(answers: Vec<Answer>) -> Scripted {
            Scripted(Arc::new(Mutex::new(answers)))
        }
    }

    impl Resolve for Scripted {
        async fn resolve(&self, name: &HostPort) -> Result<Vec<SocketAddr>, String> {
            let answer = {
                let mut answers = self.0.lock().unwrap();
                if answers.len() > 1 {
                    answers.remove(0)
                } else {
                    answers[0].clone()
                }
            };
            match answer {
                Answer::Addresses(ips) => Ok(ips
                    .iter()
                    .map(|ip| SocketAddr::new(ip.parse().unwrap(), name.port()))
                    .collect()),
                Answer::Fail(e) => Err(e.to_owned()),
                Answer::Hang => std::future::pending().await,
            }
        }
    }

    fn name() -> HostPort {
        parse_host_port("peers.lab", DEFAULT_CONTROL_PORT).unwrap()
    }

    #[tokio::test]
    async fn a_lookup_gives_every_address_once_with_the_names_port() {
        let r = Scripted::new(vec![Answer::Addresses(vec![
            "10.0.0.3", "10.0.0.2", "fd00::2", "10.0.0.3",
        ])]);
        let report = poll(&r, &name(), LOOKUP_TIMEOUT).await;
        assert_eq!(report.source, "dns:peers.lab:18516");
        assert_eq!(report.error, None);
        let shown: Vec<String> = report
            .peers
            .unwrap()
            .iter()
            .map(|t| t.address.to_string())
            .collect();
        assert_eq!(
            shown,
            ["10.0.0.2:18516", "10.0.0.3:18516", "[fd00::2]:18516"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn failures_and_timeouts_bring_no_set() {
        let r = Scripted::new(vec![
            Answer::Fail("failed to lookup address information: Name or service not known"),
            Answer::Addresses(vec![]),
            Answer::Hang,
        ]);
        let nx = poll(&r, &name(), LOOKUP_TIMEOUT).await;
        assert_eq!(nx.peers, None);
        assert!(nx.error.unwrap().contains("not known"));
        let empty = poll(&r, &name(), LOOKUP_TIMEOUT).await;
        assert!(empty.error.unwrap().contains("no addresses"));
        let hung = poll(&r, &name(), LOOKUP_TIMEOUT).await;
        assert!(hung.error.unwrap().contains("no answer within 10s"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_source_resolves_again_every_interval() {
        let r = Scripted::new(vec![
            Answer::Addresses(vec!["10.0.0.2"]),
            Answer::Fail("NXDOMAIN"),
            Answer::Addresses(vec!["10.0.0.2", "10.0.0.4"]),
        ]);
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(run(r, name(), Duration::from_secs(30), tx));
        let count = |r: &SourceReport| r.peers.as_ref().map(Vec::len);
        let first = rx.recv().await.unwrap();
        assert_eq!(count(&first), Some(1));
        let started = tokio::time::Instant::now();
        let second = rx.recv().await.unwrap();
        assert_eq!(count(&second), None);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert_eq!(count(&rx.recv().await.unwrap()), Some(2));
        task.abort();
    }

    #[tokio::test]
    async fn the_system_resolver_reads_addresses() {
        // A numeric address needs no DNS server (none is reachable in CI).
        let ip = parse_host_port("127.0.0.1:99", 1).unwrap();
        let got = SystemResolver.resolve(&ip).await.unwrap();
        assert_eq!(got, ["127.0.0.1:99".parse().unwrap()]);
    }
}
