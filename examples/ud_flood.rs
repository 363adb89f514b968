//! A host on the fabric without the key, sending UD datagrams of its own to a node's ping QP:
//! the QP number is in clear in every ping and the Q_Key is a constant, so any host can
//! (docs/security.md, "What the pre-shared key protects").
//!
//! Usage: `ud_flood --to IPV4 --qpn N [--size BYTES] [--count N] [--device rxe0] [--port 1]
//! [--sgid-index 1] [--qkey Q]`. Sends `--count` datagrams of `--size` bytes (at most the path
//! MTU) to QP `--qpn` at the RoCE v2 GID of `--to`, 64 in flight at most, and prints one JSON
//! line: how many were sent, how many completed in error, and how long it took. Meant for the
//! lab's own addresses.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rdma_probe_exporter::ping::PING_QKEY;
use rdma_probe_exporter::verbs::{Completion, Context, RemoteAccess, Route, VerbsError};
use serde_json::{json, Value};

/// Sends in flight at most.
const DEPTH: u32 = 64;

#[derive(Debug, Parser)]
#[command(about = "Sends UD datagrams to a UD QP, as a host on the fabric without the key can")]
struct Args {
    /// The target's IPv4 address: its RoCE v2 GID is the address mapped into IPv6.
    #[arg(long)]
    to: Ipv4Addr,
    /// The target QP number (a node's ping QP: `rdma res show qp` there lists it as UD).
    #[arg(long)]
    qpn: u32,
    /// Bytes per datagram, at most the path MTU.
    #[arg(long, default_value_t = 1000)]
    size: u32,
    /// Datagrams to send.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
    /// The local RDMA device.
    #[arg(long, default_value = "rxe0")]
    device: String,
    /// The local port.
    #[arg(long, default_value_t = 1)]
    port: u8,
    /// The local GID index of RoCE v2 over IPv4 (1 on the lab's Soft-RoCE).
    #[arg(long, default_value_t = 1)]
    sgid_index: u8,
    /// The Q_Key the datagrams carry: by default the ping QPs' ("rdpa").
    #[arg(long, default_value_t = PING_QKEY)]
    qkey: u32,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match flood(&args) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ud_flood: {e}");
            ExitCode::FAILURE
        }
    }
}

fn flood(args: &Args) -> Result<Value, VerbsError> {
    let ctx = Context::open(Some(&args.device), args.port)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(2 * DEPTH)?;
    let mut qp = pd.create_ud_qp(&cq, DEPTH)?;
    qp.activate(args.port, 0, args.qkey, 0)?;
    let mr = pd.register(args.size as usize, RemoteAccess::None)?;
    let ah = pd.create_ah(&Route {
        port: args.port,
        sgid_index: args.sgid_index,
        gid: args.to.to_ipv6_mapped().octets(),
        hop_limit: 64,
        traffic_class: 0,
    })?;
    let started = Instant::now();
    let (mut posted, mut completed, mut failed) = (0u64, 0u64, 0u64);
    let mut completions = [Completion::EMPTY; 32];
    while completed < args.count {
        while posted < args.count && posted - completed < u64::from(DEPTH) {
            qp.post_send(&mr, (0, args.size), &ah, (args.qpn, args.qkey), posted)?;
            posted += 1;
        }
        let n = cq.poll(&mut completions)?;
        for c in &completions[..n] {
            completed += 1;
            if !c.status.is_success() {
                failed += 1;
            }
        }
    }
    Ok(json!({
        "sent": posted,
        "failed": failed,
        "size": args.size,
        "seconds": started.elapsed().as_secs_f64(),
    }))
}
