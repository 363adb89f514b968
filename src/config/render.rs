//! The resolved view of a config that `check-config` prints: what the exporter will do, with
//! every default filled in and every `${VAR}` substituted.

use std::fmt::Write as _;
use std::time::Duration;

use super::model::{Auth, Config, Devices, Labels, Peer, ProbeConfig};
use crate::burst::BurstLength;
use crate::units::ByteSize;

impl Config {
    /// A human-readable summary: node, listen addresses, auth, devices, defaults, and every peer
    /// with its effective settings (fields the peer sets itself marked `*`), skipped ones too.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_to(&mut out);
        out
    }

    fn write_to(&self, out: &mut String) -> std::fmt::Result {
        writeln!(out, "config: {}", self.origin)?;
        writeln!(out, "node: {}", self.node)?;
        writeln!(out, "labels: {}", labels(&self.labels))?;
        writeln!(
            out,
            "listen: metrics {}, control {}",
            self.listen.metrics, self.listen.control
        )?;
        match &self.auth {
            Auth::PskFile {
                path,
                previous: None,
            } => writeln!(out, "auth: pre-shared key from {}", path.display())?,
            Auth::PskFile {
                path,
                previous: Some(previous),
            } => writeln!(
                out,
                "auth: pre-shared key from {}, and the previous key from {} (a rollover: both \
                 accepted)",
                path.display(),
                previous.display()
            )?,
            Auth::None => writeln!(out, "auth: none (the control channel is not authenticated)")?,
        }
        match &self.devices {
            Devices::AllActive => writeln!(out, "devices: every RDMA device with an active port")?,
            Devices::Listed(devices) => {
                writeln!(out, "devices:")?;
                for d in devices {
                    write!(out, "  {} port {}", d.name, d.port)?;
                    if let Some(rail) = d.rail {
                        write!(out, " rail {rail}")?;
                    }
                    writeln!(out, " gid_index {}", d.gid_index)?;
                }
            }
        }
        if self.exclude_devices.is_empty() {
            writeln!(out, "exclude_devices: none")?;
        } else {
            writeln!(out, "exclude_devices: {}", self.exclude_devices.join(", "))?;
        }
        if self.rdma_networks.is_empty() {
            writeln!(
                out,
                "rdma_networks: none (a peer's RDMA address is its control address)"
            )?;
        } else {
            let networks: Vec<String> =
                self.rdma_networks.iter().map(ToString::to_string).collect();
            writeln!(out, "rdma_networks: {}", networks.join(", "))?;
        }
        writeln!(out, "defaults: {}", settings(&self.defaults, &[]))?;
        if let Some(d) = &self.discovery {
            let dns: Vec<String> = d.dns.iter().map(ToString::to_string).collect();
            writeln!(
                out,
                "discovery: dns [{}] files [{}] forget_after {} refresh_interval {}",
                dns.join(", "),
                d.files.join(", "),
                duration(d.forget_after),
                duration(d.refresh_interval)
            )?;
        }
        writeln!(
            out,
            "schedule: duty_cycle {}% per device",
            self.schedule.duty_cycle * 100.0
        )?;
        writeln!(
            out,
            "series: budget {} per-path series, ttl {}",
            self.series.budget,
            duration(self.series.ttl)
        )?;
        writeln!(
            out,
            "limits: serves at most {} sessions pinning {} together; {} per session",
            self.limits.max_sessions,
            ByteSize(self.limits.max_pinned_bytes),
            ByteSize(self.limits.max_session_bytes)
        )?;
        let s = &self.selection;
        writeln!(
            out,
            "selection: group_by {} max_peers {} sample {} round {}",
            s.group_by,
            s.max_peers,
            s.sample,
            duration(s.round)
        )?;
        let skipped = self.peers.iter().filter(|p| p.skipped.is_some()).count();
        writeln!(
            out,
            "peers: {} ({} probed, {skipped} skipped; * = set on the peer, the rest from defaults)",
            self.peers.len(),
            self.peers.len() - skipped
        )?;
        for peer in &self.peers {
            write_peer(out, peer)?;
        }
        Ok(())
    }
}

fn write_peer(out: &mut String, peer: &Peer) -> std::fmt::Result {
    write!(out, "  {} {}", peer.name, peer.address)?;
    if let Some(reason) = peer.skipped {
        return writeln!(out, " skipped: {reason}");
    }
    write!(out, " mode {}", peer.mode)?;
    if !peer.labels.is_empty() {
        write!(out, " labels {}", labels(&peer.labels))?;
    }
    writeln!(out)?;
    writeln!(out, "    {}", settings(&peer.probe, &peer.overrides))
}

fn labels(labels: &Labels) -> String {
    if labels.is_empty() {
        return "none".to_owned();
    }
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    pairs.join(" ")
}

/// `interval=60s jitter=10% ...`; fields in `overrides` get a `*`.
fn settings(p: &ProbeConfig, overrides: &[&str]) -> String {
    let plan = p.plan();
    let burst = match p.length() {
        BurstLength::Duration(d) => format!("{{duration: {}}}", duration(d)),
        BurstLength::Bytes(b) => format!("{{bytes: {}}}", ByteSize(b)),
        BurstLength::Messages(n) => format!("{{messages: {n}}}"),
    };
    let cq_mod = match p.cq_mod() {
        Some(n) => n.to_string(),
        None => format!("auto({})", plan.cq_mod()),
    };
    let fields = [
        ("interval", duration(p.interval())),
        ("jitter", percent(p.jitter())),
        ("message_size", p.message_size().to_string()),
        ("burst", burst),
        (
            "rate_limit",
            p.rate_limit()
                .map_or_else(|| "unpaced".to_owned(), |r| r.to_string()),
        ),
        ("unpaced_every", p.unpaced_every().to_string()),
        ("qps", p.qps().to_string()),
        ("tx_depth", p.tx_depth().to_string()),
        ("cq_mod", cq_mod),
        ("post_list", p.post_list().to_string()),
        (
            "mtu",
            p.mtu().map_or_else(|| "auto".to_owned(), |m| m.to_string()),
        ),
        ("traffic_class", p.traffic_class().to_string()),
        ("service_level", p.service_level().to_string()),
        ("qp_timeout", p.qp_timeout().to_string()),
        ("timeout", duration(p.timeout())),
    ];
    let parts: Vec<String> = fields
        .into_iter()
        .map(|(name, value)| {
            let star = if overrides.contains(&name) { "*" } else { "" };
            format!("{name}={value}{star}")
        })
        .collect();
    parts.join(" ")
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A fraction as a percentage, without float noise: 0.1 → `10%`, 0.125 → `12.5%`.
fn percent(fraction: f64) -> String {
    let s = format!("{:.6}", fraction * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages() {
        assert_eq!(super::percent(0.1), "10%");
        assert_eq!(super::percent(0.07), "7%");
        assert_eq!(super::percent(0.125), "12.5%");
        assert_eq!(super::percent(0.0), "0%");
        assert_eq!(super::percent(0.5), "50%");
    }
}
