//! End-to-end smoke test of the `verbs` module on a real RDMA device (Soft-RoCE in the lab).
//!
//! Usage: `verbs_smoke [DEVICE [PORT]]` (default: first device with an active port 1).
//!
//! Loopback on one device: two RC QPs connected to each other with the GID `select_gid` picks,
//! 200 RDMA WRITEs of 64 KiB (every WR signaled, tx depth 64, posted partly as chains), checking
//! that completions arrive in `wr_id` order with success; then two WRITE WITH IMMEDIATE (4 KiB
//! and zero-length) received on the other QP via arm/wait; then the written bytes are compared;
//! then a WRITE with a wrong rkey must fail with a completion error. Exits non-zero on any
//! failure (2 when there is no RDMA device at all).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_probe_exporter::verbs::{
    self, wc_opcode, Completion, CompletionQueue, Context, LinkLayer, MemoryRegion, PathParams,
    QpCaps, QueuePair, RemoteAccess, RemoteAddr, RemoteEndpoint, RtsParams, VerbsError, WcStatus,
    WriteRequest, MAX_PSN,
};

const MSG: usize = 64 * 1024;
const COUNT: u64 = 200;
const TX_DEPTH: u32 = 64;
/// Distinct source slots in the sender buffer (message i is sent from slot i % SRC_SLOTS).
const SRC_SLOTS: usize = 16;
const IMM_LEN: u32 = 4096;
const IMM_1: u32 = 0xC0FF_EE42;
const IMM_2: u32 = 0x0000_0001;
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = args.first().map(String::as_str);
    let port: u8 = match args.get(1).map(|p| p.parse()) {
        None => 1,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("bad port: {e}");
            return ExitCode::from(2);
        }
    };
    match run(device, port) {
        Ok(()) => {
            println!("verbs_smoke: PASS");
            ExitCode::SUCCESS
        }
        Err(Failure::Verbs(e)) => {
            eprintln!("verbs_smoke: FAIL ({}): {e}", e.reason());
            if e.reason() == rdma_probe_exporter::reason::ErrorReason::NoDevice {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
        Err(Failure::Check(msg)) => {
            eprintln!("verbs_smoke: FAIL: {msg}");
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    Verbs(VerbsError),
    Check(String),
}

impl From<VerbsError> for Failure {
    fn from(e: VerbsError) -> Self {
        Failure::Verbs(e)
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Check(s)
    }
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Res<()> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

fn pattern(slot: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ slot.wrapping_mul(97) ^ (i >> 8)) as u8
}

fn run(device: Option<&str>, port: u8) -> Result<(), Failure> {
    // 1. Inventory.
    let devices = verbs::list_devices()?;
    for d in &devices {
        println!(
            "device {}{}",
            d.name,
            d.error
                .as_deref()
                .map(|e| format!(" (error: {e})"))
                .unwrap_or_default()
        );
        for p in &d.ports {
            println!(
                "  port {} state {} link {} mtu {:?}/{:?} lid {} {} rate {:?} b/s",
                p.port,
                p.state,
                p.link_layer,
                p.active_mtu,
                p.max_mtu,
                p.lid,
                p.link_description(),
                p.link_rate_bits_per_second
            );
            for g in &p.gids {
                println!(
                    "    gid[{}] {} {} {}",
                    g.index,
                    g.gid,
                    g.gid_type,
                    g.netdev.as_deref().unwrap_or("-")
                );
            }
        }
    }
    println!(
        "devices --json: {}",
        serde_json::to_string(&devices).map_err(|e| e.to_string())?
    );

    // 2. Open and pick the GID.
    let ctx = Context::open(device, port)?;
    let info = ctx.port_info().clone();
    let sgid = verbs::select_gid(&info.gids);
    println!(
        "opened {} port {} ({}), selected GID index {:?}",
        ctx.device_name(),
        ctx.port(),
        info.link_layer,
        sgid
    );
    if info.link_layer == LinkLayer::Ethernet {
        ensure(sgid.is_some(), || "RoCE port without a usable GID".into())?;
    }
    let gid = match sgid {
        Some(i) => ctx.gid(i)?.gid.octets(),
        None => [0; 16],
    };
    // A wrong index must be refused with the valid ones listed.
    match ctx.gid(60_000) {
        Err(e @ VerbsError::BadGidIndex { .. }) => {
            println!("bad GID index refused as expected: {e}")
        }
        other => {
            return Err(format!("gid(60000) should fail with BadGidIndex, got {other:?}").into())
        }
    }
    let mtu = info
        .active_mtu
        .ok_or_else(|| "port reports an unknown active MTU".to_string())?;

    // 3. Resources.
    let pd = ctx.alloc_pd()?;
    let mut src = pd.register(MSG * SRC_SLOTS, RemoteAccess::None)?;
    let dst_len = MSG * COUNT as usize + IMM_LEN as usize;
    let dst = pd.register(dst_len, RemoteAccess::Write)?;
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i / MSG, i % MSG);
    }
    ensure(src.addr() % 4096 == 0, || {
        format!("MR not page aligned: {:#x}", src.addr())
    })?;
    let cq_a = ctx.create_cq(TX_DEPTH * 2)?;
    let cq_b = ctx.create_cq(16)?;
    let mut qp_a = pd.create_qp(
        &cq_a,
        &cq_a,
        QpCaps {
            max_send_wr: TX_DEPTH,
            max_recv_wr: 1,
        },
    )?;
    let mut qp_b = pd.create_qp(
        &cq_b,
        &cq_b,
        QpCaps {
            max_send_wr: 1,
            max_recv_wr: 4,
        },
    )?;
    println!(
        "PD/MRs/CQs/QPs created: src {src:?} dst {dst:?} cq_a {} cq_b {} qp_a {} qp_b {}",
        cq_a.capacity(),
        cq_b.capacity(),
        qp_a.qpn(),
        qp_b.qpn()
    );

    // 4. Connect A <-> B (loopback).
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id();
    let psn_a = seed.wrapping_mul(2_654_435_761) & MAX_PSN;
    let psn_b = (psn_a ^ 0x5a5a5a) & MAX_PSN;
    let ep_a = RemoteEndpoint {
        qpn: qp_a.qpn(),
        psn: psn_a,
        gid,
        lid: info.lid,
    };
    let ep_b = RemoteEndpoint {
        qpn: qp_b.qpn(),
        psn: psn_b,
        gid,
        lid: info.lid,
    };
    let path = PathParams::new(mtu, sgid);
    qp_a.to_init(ctx.port(), 0, RemoteAccess::None)?;
    qp_b.to_init(ctx.port(), 0, RemoteAccess::Write)?;
    qp_b.to_rtr(&ep_a, &path)?; // the responder side stays in RTR, like ib_write_bw's server
    qp_a.to_rtr(&ep_b, &path)?;
    qp_a.to_rts(&RtsParams::new(psn_a))?;
    println!("connected: path MTU {mtu}, PSNs {psn_a:#x}/{psn_b:#x}");
    // Bad MTU must be refused before reaching the driver.
    match qp_b.to_rtr(&ep_a, &PathParams::new(1500, sgid)) {
        Err(VerbsError::InvalidArgument(m)) => println!("bad MTU refused as expected: {m}"),
        other => return Err(format!("MTU 1500 should be refused, got {other:?}").into()),
    }
    // Out-of-bounds local range must be refused.
    match qp_a.post_write(
        &src,
        WriteRequest::new(
            9,
            MSG * SRC_SLOTS - 10,
            64,
            RemoteAddr {
                addr: dst.addr(),
                rkey: dst.rkey(),
            },
        ),
    ) {
        Err(VerbsError::InvalidArgument(_)) => {}
        other => {
            return Err(format!("out-of-bounds write should be refused, got {other:?}").into())
        }
    }

    // 5. 200 × 64 KiB WRITEs, all signaled, at most TX_DEPTH outstanding, posted as chains of up
    //    to 8 (post list) and single WRs alternately.
    qp_b.post_recv(0xB0)?;
    qp_b.post_recv(0xB1)?;
    let remote = RemoteAddr {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    let started = Instant::now();
    let mut posted: u64 = 0;
    let mut completed: u64 = 0;
    let mut wcs = [Completion::EMPTY; 16];
    let mut last_progress = Instant::now();
    let mut chain = Vec::new();
    let mut chains_posted = 0;
    while completed < COUNT {
        let window = u64::from(TX_DEPTH) - (posted - completed);
        let n = window
            .min(COUNT - posted)
            .min(if posted.is_multiple_of(2) { 8 } else { 1 });
        if n > 0 {
            chain.clear();
            for i in posted..posted + n {
                let slot = (i as usize) % SRC_SLOTS;
                chain.push(WriteRequest::new(
                    i,
                    slot * MSG,
                    MSG as u32,
                    RemoteAddr {
                        addr: remote.addr + i * MSG as u64,
                        rkey: remote.rkey,
                    },
                ));
            }
            if n == 1 {
                qp_a.post_write(&src, chain[0])?;
            } else {
                qp_a.post_writes(&src, &chain)?;
                chains_posted += 1;
            }
            posted += n;
        }
        let got = cq_a.poll(&mut wcs)?;
        for wc in &wcs[..got] {
            ensure(wc.status.is_success(), || {
                format!("completion error: {wc:?} ({})", wc.status)
            })?;
            ensure(wc.wr_id == completed, || {
                format!(
                    "completion out of order: got wr_id {} expected {completed}",
                    wc.wr_id
                )
            })?;
            ensure(wc.opcode == wc_opcode::RDMA_WRITE, || {
                format!("unexpected opcode {wc:?}")
            })?;
            ensure(wc.qp_num == qp_a.qpn(), || {
                format!("completion for QP {} not {}", wc.qp_num, qp_a.qpn())
            })?;
            completed += 1;
        }
        if got > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STEP_TIMEOUT {
            return Err(format!(
                "no completion for {STEP_TIMEOUT:?}: posted {posted} completed {completed}"
            )
            .into());
        }
    }
    let elapsed = started.elapsed();
    let gbps = (COUNT as f64 * MSG as f64 * 8.0) / elapsed.as_secs_f64() / 1e9;
    println!(
        "{COUNT} x {MSG} B WRITEs completed in order in {elapsed:?} ({gbps:.3} Gb/s, {chains_posted} chains)"
    );

    // 6. WRITE WITH IMMEDIATE (4 KiB, then zero-length), received via arm + wait on CQ B.
    for (k, (len, imm)) in [(IMM_LEN, IMM_1), (0, IMM_2)].into_iter().enumerate() {
        cq_b.arm()?;
        let mut rwc = [Completion::EMPTY; 4];
        ensure(cq_b.poll(&mut rwc)? == 0, || {
            "CQ B had an unexpected completion".into()
        })?;
        let wr = WriteRequest::new(
            1000 + k as u64,
            0,
            len,
            RemoteAddr {
                addr: remote.addr + COUNT * MSG as u64,
                rkey: remote.rkey,
            },
        );
        let t0 = Instant::now();
        qp_a.post_write_with_imm(&src, wr, imm)?;
        ensure(cq_b.wait(STEP_TIMEOUT)?, || {
            format!("no completion event on CQ B within {STEP_TIMEOUT:?}")
        })?;
        let event_after = t0.elapsed();
        let mut got = 0;
        let deadline = Instant::now() + STEP_TIMEOUT;
        while got == 0 && Instant::now() < deadline {
            got = cq_b.poll(&mut rwc)?;
        }
        ensure(got == 1, || {
            format!("expected 1 receive completion, got {got}")
        })?;
        let r = rwc[0];
        ensure(r.status.is_success(), || {
            format!("receive completion error: {r:?} ({})", r.status)
        })?;
        ensure(r.opcode == wc_opcode::RECV_RDMA_WITH_IMM, || {
            format!("unexpected receive opcode {r:?}")
        })?;
        ensure(r.imm == Some(imm), || {
            format!("immediate {:?}, expected {imm:#x}", r.imm)
        })?;
        ensure(r.wr_id == 0xB0 + k as u64, || {
            format!("receive wr_id {:#x}", r.wr_id)
        })?;
        ensure(r.byte_len == len, || {
            format!("receive byte_len {} expected {len}", r.byte_len)
        })?;
        ensure(r.qp_num == qp_b.qpn(), || {
            format!("receive on QP {} not {}", r.qp_num, qp_b.qpn())
        })?;
        // Its send completion on CQ A.
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut s = 0;
        while s == 0 && Instant::now() < deadline {
            s = cq_a.poll(&mut wcs)?;
        }
        ensure(
            s == 1 && wcs[0].wr_id == 1000 + k as u64 && wcs[0].status.is_success(),
            || format!("WRITE_WITH_IMM send completion: {:?}", &wcs[..s]),
        )?;
        println!(
            "WRITE WITH IMM #{k} ({len} B): imm {imm:#x} received, event after {event_after:?}"
        );
    }
    // wait() with nothing armed/pending must time out and return false.
    cq_b.arm()?;
    let t0 = Instant::now();
    ensure(!cq_b.wait(Duration::from_millis(200))?, || {
        "wait() reported an event with nothing posted".into()
    })?;
    let waited = t0.elapsed();
    ensure(waited >= Duration::from_millis(190), || {
        format!("wait(200ms) returned after {waited:?}")
    })?;

    // 7. Verify the written bytes.
    let d = dst.as_slice();
    let s = src.as_slice();
    for i in 0..COUNT as usize {
        let slot = i % SRC_SLOTS;
        if d[i * MSG..(i + 1) * MSG] != s[slot * MSG..(slot + 1) * MSG] {
            let off = (0..MSG)
                .find(|&j| d[i * MSG + j] != s[slot * MSG + j])
                .unwrap_or(0);
            return Err(format!("data mismatch in message {i} at byte {off}").into());
        }
    }
    let tail = &d[COUNT as usize * MSG..];
    ensure(tail == &s[..IMM_LEN as usize], || {
        "WRITE_WITH_IMM payload mismatch".into()
    })?;
    println!("data verified: {} bytes", dst_len);

    // 8. Error path: wrong rkey → completion error, mapped to a Wc* reason; the QP is then dead.
    let bad = WriteRequest::new(
        2000,
        0,
        64,
        RemoteAddr {
            addr: remote.addr,
            rkey: remote.rkey ^ 0x00ff_ff00,
        },
    );
    qp_a.post_write(&src, bad)?;
    let wc = wait_one(&cq_a, &mut wcs)?;
    ensure(!wc.status.is_success(), || {
        format!("write with a wrong rkey succeeded: {wc:?}")
    })?;
    let err = wc.check().expect_err("failed completion");
    println!("wrong rkey: {err} → reason {}", err.reason());
    if wc.status != WcStatus::RemAccessErr {
        println!("NOTE: expected remote access error (10), got {}", wc.status);
    }
    match qp_a.post_write(&src, WriteRequest::new(2001, 0, 64, remote)) {
        Ok(()) => {
            let wc = wait_one(&cq_a, &mut wcs)?;
            println!(
                "post on errored QP: completion {} → reason {}",
                wc.status,
                wc.status.reason()
            );
            ensure(wc.status == WcStatus::WrFlushErr, || {
                format!("expected a flush error, got {wc:?}")
            })?;
        }
        Err(e) => println!("post on errored QP refused: {e} → reason {}", e.reason()),
    }
    qp_a.to_error()?;
    qp_b.to_error()?;

    // 9. Teardown in the "wrong" order: sideway's Arcs must keep parents alive.
    drop_in_wrong_order(pd, src, dst, cq_a, cq_b, qp_a, qp_b);
    drop(ctx);
    println!("teardown OK");
    Ok(())
}

fn wait_one(cq: &CompletionQueue, wcs: &mut [Completion]) -> Res<Completion> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while Instant::now() < deadline {
        let n = cq.poll(&mut wcs[..1]).map_err(|e| e.to_string())?;
        if n == 1 {
            return Ok(wcs[0]);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Err(format!("no completion within {STEP_TIMEOUT:?}"))
}

#[allow(clippy::too_many_arguments)]
fn drop_in_wrong_order(
    pd: verbs::ProtectionDomain,
    src: MemoryRegion,
    dst: MemoryRegion,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    qp_a: QueuePair,
    qp_b: QueuePair,
) {
    drop(pd);
    drop(cq_a);
    drop(src);
    drop(cq_b);
    drop(qp_a);
    drop(dst);
    drop(qp_b);
}
