//! One probe of a stock `ib_write_bw` server: our RC QPs connected to its QPs through perftest's
//! out-of-band exchange, our engine's paced RDMA WRITEs into the buffer the server advertised
//! (its rkey and address), then the closing exchange, so the server prints our figures as its
//! report and exits 0 (docs/perftest.md).

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::channel::{Channel, ChannelError, Step};
use super::wire::{self, Key, Report};
use crate::burst::BurstPlan;
use crate::placement;
use crate::port;
use crate::prober::{
    counter_reader, device_placement, ensure_port_active, read_counters, BurstJob, BurstKind,
    BurstWorker, ProbeError, ProbeOutcome, ProbeSettings,
};
use crate::reason::ErrorReason;
use crate::session::{QpSet, QpSetShape};
use crate::verbs::{Context, PathMtu, RemoteAccess, RemoteAddr, VerbsError};

/// perftest's default control port.
pub const DEFAULT_PORT: u16 = 18515;

/// What `probe --perftest` needs beyond the common probe settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerftestOptions {
    /// The server was started with `--report_gbits`: send its report in Gb/s, not MiB/s (the
    /// report carries no unit).
    pub report_gbits: bool,
}

fn failed(reason: ErrorReason, message: impl Into<String>) -> ProbeError {
    ProbeError::Failed {
        reason,
        message: message.into(),
    }
}

impl From<ChannelError> for ProbeError {
    fn from(e: ChannelError) -> Self {
        let reason = match &e {
            ChannelError::Timeout { .. } => ErrorReason::Timeout,
            ChannelError::Closed {
                step: Step::Version,
                ..
            }
            | ChannelError::Io { .. } => ErrorReason::Connect,
            ChannelError::Closed { .. } | ChannelError::Wire { .. } => ErrorReason::Protocol,
        };
        failed(reason, format!("perftest server: {e}"))
    }
}

/// Runs one burst against the `ib_write_bw` server at `settings.target` and closes the session
/// (`probe --perftest`): opens the local device and a burst thread for this one probe.
pub async fn probe_perftest(settings: &ProbeSettings, options: &PerftestOptions) -> ProbeOutcome {
    let local = &settings.local;
    let opened = match Context::open(local.device.as_deref(), local.port) {
        Ok(ctx) => {
            let placement = device_placement(ctx.device_name()).await;
            BurstWorker::start(placement).map(|worker| (ctx, worker))
        }
        Err(e) => Err(ProbeError::from(e)),
    };
    match opened {
        Ok((ctx, worker)) => probe_perftest_on(ctx, &worker, settings, options).await,
        Err(e) => {
            let mut outcome = fresh_outcome(settings);
            outcome.record_error(&e);
            outcome
        }
    }
}

/// [`probe_perftest`] on a device the caller already opened and its burst thread (an exporter
/// device worker's). A stock server serves one client and exits, so there is no warm session:
/// every probe sets up anew, and its setup time is reported as such.
pub async fn probe_perftest_on(
    ctx: Context,
    worker: &BurstWorker,
    settings: &ProbeSettings,
    options: &PerftestOptions,
) -> ProbeOutcome {
    let mut outcome = fresh_outcome(settings);
    if let Err(e) = run(ctx, worker, settings, options, &mut outcome).await {
        outcome.record_error(&e);
    }
    outcome
}

fn fresh_outcome(settings: &ProbeSettings) -> ProbeOutcome {
    ProbeOutcome {
        kind: BurstKind::of(settings.rate_limit.as_ref()),
        message_size: settings.message_size,
        qps: settings.qps,
        new_session: true,
        ..ProbeOutcome::default()
    }
}

async fn run(
    mut ctx: Context,
    worker: &BurstWorker,
    settings: &ProbeSettings,
    options: &PerftestOptions,
    outcome: &mut ProbeOutcome,
) -> Result<(), ProbeError> {
    let started = Instant::now();
    ensure_port_active(&mut ctx)?;
    let path = settings.path_options();
    // One slot per QP: every WRITE lands at the start of the server's buffer for that QP, as
    // perftest's own client does with messages above half a page.
    let shape = QpSetShape {
        qps: settings.qps,
        slot_bytes: settings.message_size,
        slots: 1,
        send_depth: settings.tx_depth,
        recv_depth: 1,
        remote: RemoteAccess::None,
    };
    let cpus = worker.placement().cpus().map(<[usize]>::to_vec);
    let mut set = tokio::task::spawn_blocking(move || {
        placement::with_cpus(cpus.as_deref(), || QpSet::create(ctx, shape, &path))
    })
    .await
    .map_err(|e| failed(ErrorReason::QpSetup, format!("setup task: {e}")))??;
    outcome.device = Some(set.ctx.device_name().to_string());
    let local_rate = set.ctx.port_info().link_rate_bits_per_second;
    outcome.local_link_rate_bits_per_second = local_rate;

    let stream = connect(&settings.target, settings.timeout).await?;
    let _ = stream.set_nodelay(true); // one segment per message; a failure only slows it
    let with_gid = set.sgid_index().is_some();
    // The server sleeps 1 s after accepting before it answers: the timeout covers it.
    let mut channel = Channel::new(
        stream,
        settings.timeout.max(Duration::from_secs(2)),
        with_gid,
    );

    let hello = channel.hello(page_size(), 64).await?;
    outcome.perftest_server_version = Some(hello.version.text.clone());
    tracing::debug!(server_version = %hello.version.text, cycle_buffer = hello.cycle_buffer,
        "perftest server answered");
    let ours = set.path_mtu(u32::MAX, settings.mtu);
    let code = channel
        .mtu(wire::mtu_code(ours.bytes()).unwrap_or(1))
        .await?;
    let mtu = wire::mtu_bytes(code)
        .and_then(PathMtu::from_bytes)
        .unwrap_or(PathMtu::Mtu256);
    outcome.mtu = Some(mtu.bytes());

    let keys = local_keys(&set)?;
    let mut remote_keys = Vec::with_capacity(keys.len());
    for key in &keys {
        remote_keys.push(channel.keys(Step::Keys(1), key).await?);
    }
    check_gid_families(&keys, &remote_keys)?;
    let endpoints: Vec<_> = remote_keys
        .iter()
        .map(|k| crate::control::QpEndpoint {
            qpn: k.qpn,
            psn: k.psn,
            lid: k.lid,
            gid: k.gid.unwrap_or([0; 16]),
        })
        .collect();
    set.connect(&endpoints, mtu, &path, true, &[])?;
    for key in &keys {
        channel.keys(Step::Keys(2), key).await?;
    }
    channel.keys(Step::StartBarrier, &keys[0]).await?;
    let setup = started.elapsed();
    outcome.setup_seconds = Some(setup.as_secs_f64());

    let link = local_rate.map(|r| r as f64 / 8.0);
    let rate = match &settings.rate_limit {
        Some(limit) => Some(limit.resolve(settings.message_size, link)?),
        None => None,
    };
    let mut builder = BurstPlan::builder(settings.message_size, settings.length)
        .tx_depth(settings.tx_depth)
        .qps(settings.qps)
        .post_list(settings.post_list)
        .rate(rate)
        .busy_poll(settings.busy_poll);
    if let Some(cq_mod) = settings.cq_mod {
        builder = builder.cq_mod(cq_mod);
    }
    let plan = builder.build()?;
    outcome.target_bandwidth_bytes_per_second = rate.map(|r| r.bytes_per_second()).or(link);
    let remote = remote_keys
        .iter()
        .map(|k| RemoteAddr {
            addr: k.vaddr,
            rkey: k.rkey,
        })
        .collect();
    let counters = counter_reader(set.ctx.device_name(), set.ctx.port()).await;
    let counters_before = read_counters(counters.clone()).await;
    let (set, result) = worker
        .run(BurstJob {
            set,
            remote,
            plan,
            imm: None,
            timeout: settings.timeout,
            slots: 1,
        })
        .await?;
    drop(set);
    let counters_after = read_counters(counters).await;
    outcome.local_counters = port::nonzero_increases(counters_before, counters_after);
    let (report, timing) = match result {
        Ok(done) => done,
        Err(failure) => {
            outcome.report = failure.partial.map(|r| *r);
            // Dropping the channel closes the socket: the server stops waiting and exits 1.
            let reason = failure.error.reason();
            let mut message = failure.error.to_string();
            if reason == ErrorReason::WcRemoteAccess {
                message.push_str(&format!(
                    " (the server's buffer per QP is max(its -s, {} B): start it with -s at least {})",
                    hello.cycle_buffer, settings.message_size
                ));
            } else if reason == ErrorReason::WcRetryExceeded {
                message.push_str(
                    " (does the server run the same connection type (RC), GID type and port?)",
                );
            }
            return Err(failed(reason, message));
        }
    };
    outcome.post_seconds = Some(timing.posting.as_secs_f64());
    channel.keys(Step::EndBarrier, &keys[0]).await?;
    let unit = if options.report_gbits {
        125_000_000.0
    } else {
        1_048_576.0
    };
    let figures = Report {
        size: settings.message_size,
        iters: report.messages,
        // Like perftest without peak measurement: it prints 0.00.
        bw_peak: 0.0,
        bw_avg: report.bandwidth_bytes_per_second / unit,
        msg_rate: report.message_rate_per_second / 1e6,
    };
    outcome.report = Some(report);
    channel.report(&figures).await?;
    channel.close(&keys[0]).await?;
    Ok(())
}

/// How often a refused connection is tried again: a stock server serves one client and exits,
/// so a server run in a loop is not listening for the moment it takes to start again (seconds on
/// a busy node: opening the device and registering its buffer; docs/perftest.md, "In the
/// exporter").
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Connects to the server within `timeout`, trying a refused connection again until then: a
/// server between two clients is not a server that is down, and one that stays down is a
/// `connect` failure when the probe's time is up. A connection attempt that hangs (no answer
/// at all) is a `timeout`.
async fn connect(target: &str, timeout: Duration) -> Result<TcpStream, ProbeError> {
    let started = tokio::time::Instant::now();
    let attempts = async {
        loop {
            match TcpStream::connect(target).await {
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && started.elapsed() + RETRY_EVERY < timeout =>
                {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                other => return other,
            }
        }
    };
    tokio::time::timeout(timeout, attempts)
        .await
        .map_err(|_| {
            failed(
                ErrorReason::Timeout,
                format!("connecting to {target} timed out after {timeout:?}"),
            )
        })?
        .map_err(|e| {
            failed(
                ErrorReason::Connect,
                format!("connecting to the perftest server {target}: {e}"),
            )
        })
}

/// Our QPs' keys: number, PSN, LID, GID, and the MR's rkey and address (perftest sends its own
/// even though a WRITE server never uses the client's).
fn local_keys(set: &QpSet) -> Result<Vec<Key>, VerbsError> {
    Ok(set
        .endpoints()?
        .iter()
        .enumerate()
        .map(|(q, e)| Key {
            lid: e.lid,
            out_reads: 1,
            qpn: e.qpn,
            psn: e.psn,
            rkey: set.mr.rkey(),
            vaddr: set.region_addr(q),
            gid: set.sgid_index().map(|_| e.gid),
            srqn: 0,
        })
        .collect())
}

/// perftest refuses a pair whose GIDs are not both IPv4-mapped or both not.
fn check_gid_families(ours: &[Key], theirs: &[Key]) -> Result<(), ProbeError> {
    if let (Some(Key { gid: Some(a), .. }), Some(Key { gid: Some(b), .. })) =
        (ours.first(), theirs.first())
    {
        if wire::is_v4_mapped(a) != wire::is_v4_mapped(b) {
            return Err(failed(
                ErrorReason::Protocol,
                "perftest server: one GID is IPv4-mapped and the other is not (the server \
                 refuses this pair too): pick GIDs of the same family with --gid-index / -x",
            ));
        }
    }
    Ok(())
}

/// The page size perftest sends as its `cycle_buffer`.
fn page_size() -> u32 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A free loopback port: bound, then released.
    fn free_port() -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    }

    /// Connects (10 s timeout) to a server that starts listening after `down`.
    async fn reach_a_server_back_after(down: Duration) {
        let addr = free_port();
        let server = tokio::spawn(async move {
            tokio::time::sleep(down).await;
            let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
            listener.accept().await.unwrap();
        });
        let stream = connect(&addr.to_string(), Duration::from_secs(10)).await;
        assert!(stream.is_ok(), "{:?}", stream.err());
        server.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_starts_again_quickly_is_reached() {
        reach_a_server_back_after(Duration::from_millis(900)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_slow_to_start_again_is_reached_within_the_timeout() {
        reach_a_server_back_after(Duration::from_millis(6_500)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_stays_down_is_a_connect_failure_at_the_timeout() {
        let addr = free_port();
        let started = tokio::time::Instant::now();
        let error = connect(&addr.to_string(), Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), Some(ErrorReason::Connect), "{error}");
        assert!(error.to_string().contains("refused"), "{error}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(10) - RETRY_EVERY && waited <= Duration::from_secs(10),
            "{waited:?}"
        );
    }

    #[test]
    fn channel_errors_map_to_reasons() {
        let e = ChannelError::Timeout {
            step: Step::Version,
            got: 0,
            expected: 16,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(ProbeError::from(e).reason(), Some(ErrorReason::Timeout));
        let e = ChannelError::Wire {
            step: Step::Version,
            source: wire::WireError::NegotiationRequired("6.28".into()),
        };
        let p = ProbeError::from(e);
        assert_eq!(p.reason(), Some(ErrorReason::Protocol));
        assert!(p.to_string().contains("6.28"), "{p}");
    }

    #[test]
    fn mismatched_gid_families_are_refused() {
        let key = |gid| Key {
            lid: 0,
            out_reads: 1,
            qpn: 1,
            psn: 1,
            rkey: 1,
            vaddr: 0,
            gid: Some(gid),
            srqn: 0,
        };
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
        let v6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert!(check_gid_families(&[key(v4)], &[key(v4)]).is_ok());
        assert!(check_gid_families(&[key(v4)], &[key(v6)]).is_err());
    }
}
