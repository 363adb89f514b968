//! RC queue pairs: creation, the RESET → INIT → RTR → RTS transitions with perftest's defaults,
//! and posting RDMA WRITEs (chained, like perftest's post list) and zero-length receives.
//!
//! A *basic* QP (`ibv_create_qp`) is used and work requests are posted with raw `ibv_post_send`:
//! it is what perftest's `--use_old_post_send` does, works on every provider, lets one call post a
//! chain of WRs, and reports exactly which WR of a chain was refused.

use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Arc;

use rdma_mummy_sys::{ibv_qp, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid as SwGid};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair as _, QueuePairAttribute, QueuePairAttributeMask, QueuePairState,
    QueuePairType,
};

use super::device::{error_chain, query_valid_gid};
use super::error::{Resource, Result, VerbsError};
use super::resources::{CompletionQueue, MemoryRegion, ProtectionDomain, RemoteAccess};
use super::types::PathMtu;

/// Largest PSN (PSNs are 24 bits on the wire).
pub const MAX_PSN: u32 = 0x00ff_ffff;

/// Largest GRH flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0x000f_ffff;

/// Queue sizes of a QP. perftest WRITE: `max_send_wr` = tx depth (128), `max_recv_wr` = 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth: the most WRs that may be outstanding (posted, not yet completed).
    pub max_send_wr: u32,
    /// Receive queue depth (zero-length receives for WRITE WITH IMMEDIATE).
    pub max_recv_wr: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 1,
        }
    }
}

/// What the peer sends over the control channel to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteEndpoint {
    pub qpn: u32,
    /// The peer's send PSN (becomes our receive PSN), 24 bits.
    pub psn: u32,
    /// The peer's GID (used only when [`PathParams::sgid_index`] is set).
    pub gid: [u8; 16],
    /// The peer's LID (InfiniBand without GRH; 0 on RoCE).
    pub lid: u16,
}

/// Path attributes for INIT → RTR. Defaults follow ib_write_bw (docs/architecture.md,
/// "ib_write_bw semantics").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathParams {
    /// Path MTU in bytes: one of 256, 512, 1024, 2048, 4096 (use the min of both ends' active
    /// MTUs and the configured one, see [`PathMtu::largest_at_most`]).
    pub mtu_bytes: u32,
    /// Local GID index for the GRH. `Some` for RoCE (always required there). `None` means
    /// InfiniBand LID routing without GRH — supported by design but not exercised by the lab.
    pub sgid_index: Option<u32>,
    /// GRH traffic class (DSCP << 2 | ECN bits on RoCE v2).
    pub traffic_class: u8,
    /// Service level (4 bits; on RoCE mapped to the VLAN priority / PFC class by the driver).
    pub service_level: u8,
    /// GRH flow label (20 bits; 0: none). On RoCE v2 the drivers derive the UDP source port of
    /// the QP's packets from it, so it picks the QP's ECMP path (docs/architecture.md, "Every
    /// ECMP path"). Ignored without a GRH.
    pub flow_label: u32,
    pub hop_limit: u8,
    /// RNR NAK timer code the responder advertises (12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// RDMA READ/atomic resources offered to the peer (1; WRITE does not use them).
    pub max_dest_rd_atomic: u8,
}

impl PathParams {
    /// perftest defaults (tclass 0, SL 0, hop limit 255, min RNR timer 12, max dest rd atomic 1)
    /// for the given MTU and GID index.
    pub fn new(mtu_bytes: u32, sgid_index: Option<u32>) -> Self {
        PathParams {
            mtu_bytes,
            sgid_index,
            traffic_class: 0,
            service_level: 0,
            flow_label: 0,
            hop_limit: 255,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 1,
        }
    }
}

/// Send-side attributes for RTR → RTS. Defaults follow ib_write_bw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsParams {
    /// Our send PSN (sent to the peer as its `RemoteEndpoint::psn`), 24 bits.
    pub psn: u32,
    /// Local ACK timeout code: 4.096 µs × 2^timeout (14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries before `RETRY_EXC_ERR` (7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomic as initiator (1).
    pub max_rd_atomic: u8,
}

impl RtsParams {
    /// perftest defaults (timeout 14, retry 7, RNR retry 7, max rd atomic 1) with `psn`.
    pub fn new(psn: u32) -> Self {
        RtsParams {
            psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

/// Where a WRITE lands on the peer: an address inside its advertised MR and that MR's rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteAddr {
    pub addr: u64,
    pub rkey: u32,
}

/// One RDMA WRITE (optionally WITH IMMEDIATE) for [`QueuePair::post_writes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRequest {
    /// Returned in the completion; perftest uses `(qp_index << 32) | wr_index`.
    pub wr_id: u64,
    /// Offset of the source bytes in the local MR.
    pub local_offset: usize,
    /// Bytes to write (0 is allowed: no SGE).
    pub len: u32,
    pub remote: RemoteAddr,
    /// Request a completion for this WR (unsignaled WRs complete silently; for when the engine
    /// must signal, see `burst::signal` and docs/architecture.md, "ib_write_bw semantics").
    pub signaled: bool,
    /// `Some(imm)`: WRITE WITH IMMEDIATE, which also consumes one posted receive at the peer and
    /// delivers `imm` in its receive completion.
    pub imm: Option<u32>,
}

impl WriteRequest {
    /// A signaled plain RDMA WRITE.
    pub fn new(wr_id: u64, local_offset: usize, len: u32, remote: RemoteAddr) -> Self {
        WriteRequest {
            wr_id,
            local_offset,
            len,
            remote,
            signaled: true,
            imm: None,
        }
    }

    /// Sets whether a completion is requested.
    pub fn signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// Makes this a WRITE WITH IMMEDIATE.
    pub fn with_imm(mut self, imm: u32) -> Self {
        self.imm = Some(imm);
        self
    }
}

/// Reusable storage for building WR chains without allocating on every post.
struct PostScratch {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
}

// SAFETY: the raw pointers inside the stored `ibv_send_wr`s (next, sg_list) point into these same
// vectors and are written and dereferenced only within one `&mut QueuePair` call; between calls
// the contents are dead data that is never read. Moving the buffers to another thread is like
// moving a `Vec<u8>`.
unsafe impl Send for PostScratch {}

/// A reliable-connected QP. Dropping it destroys the QP (`ibv_destroy_qp`) before the CQs and PD
/// it references (it holds `Arc`s to them).
pub struct QueuePair {
    qp: BasicQueuePair,
    ctx: Arc<DeviceContext>,
    device: Arc<str>,
    port_count: u8,
    /// Port given to `to_init`, needed again for the RTR address vector.
    port: Option<u8>,
    scratch: PostScratch,
}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("device", &self.device)
            .field("qpn", &self.qpn())
            .field("port", &self.port)
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates an RC QP whose send and receive completions go to `send_cq` and `recv_cq` (may be
    /// the same CQ), with one SGE per WR and no inline data (perftest: inline 0 for BW tests).
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<QueuePair> {
        if caps.max_send_wr == 0 {
            return Err(VerbsError::InvalidArgument(
                "QP max_send_wr (tx depth) must be at least 1".into(),
            ));
        }
        let qp = self.create_basic_qp(QueuePairType::ReliableConnection, send_cq, recv_cq, caps)?;
        Ok(QueuePair {
            qp,
            ctx: Arc::clone(&self.ctx),
            device: Arc::clone(&self.device),
            port_count: self.port_count,
            port: None,
            scratch: PostScratch {
                wrs: Vec::new(),
                sges: Vec::new(),
            },
        })
    }
}

impl ProtectionDomain {
    /// A basic QP of `qp_type` with one SGE per WR and no inline data (RC bursts, UD pings).
    pub(super) fn create_basic_qp(
        &self,
        qp_type: QueuePairType,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
    ) -> Result<BasicQueuePair> {
        self.pd
            .create_qp_builder()
            .setup_qp_type(qp_type)
            .setup_max_send_wr(caps.max_send_wr)
            .setup_max_recv_wr(caps.max_recv_wr)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(0)
            .setup_send_cq(send_cq.sideway())
            .setup_recv_cq(recv_cq.sideway())
            .build()
            .map_err(|e| VerbsError::Create {
                resource: Resource::QueuePair,
                device: self.device.to_string(),
                source: match e.0 {
                    sideway::ibverbs::queue_pair::CreateQueuePairErrorKind::Ibverbs(io) => io,
                    #[allow(unreachable_patterns)] // the sideway enum is #[non_exhaustive]
                    other => io::Error::other(other.to_string()),
                },
            })
    }
}

fn to_sideway_mtu(mtu: PathMtu) -> Mtu {
    match mtu {
        PathMtu::Mtu256 => Mtu::Mtu256,
        PathMtu::Mtu512 => Mtu::Mtu512,
        PathMtu::Mtu1024 => Mtu::Mtu1024,
        PathMtu::Mtu2048 => Mtu::Mtu2048,
        PathMtu::Mtu4096 => Mtu::Mtu4096,
    }
}

fn check_psn(psn: u32, what: &str) -> Result<()> {
    if psn > MAX_PSN {
        return Err(VerbsError::InvalidArgument(format!(
            "{what} {psn:#x} does not fit in 24 bits"
        )));
    }
    Ok(())
}

impl QueuePair {
    /// The QP number (sent to the peer).
    pub fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    fn raw(&self) -> *mut ibv_qp {
        // SAFETY: the pointer is used only while `self` (which owns the QP) is borrowed.
        unsafe { self.qp.qp().as_ptr() }
    }

    fn modify(&mut self, attr: &QueuePairAttribute, to: &'static str) -> Result<()> {
        let qpn = self.qpn();
        self.qp.modify(attr).map_err(|e| VerbsError::Modify {
            qpn,
            to,
            detail: error_chain(&e),
        })
    }

    /// RESET → INIT on `port` with `pkey_index`, allowing the peer's RDMA WRITEs (perftest WRITE)
    /// or, with [`RemoteAccess::None`], no remote access at all.
    pub fn to_init(&mut self, port: u8, pkey_index: u16, remote: RemoteAccess) -> Result<()> {
        if port == 0 || port > self.port_count {
            return Err(VerbsError::UnknownPort {
                device: self.device.to_string(),
                port,
                port_count: self.port_count,
            });
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(pkey_index)
            .setup_port(port)
            .setup_access_flags(remote.qp_flags());
        self.modify(&attr, "INIT")?;
        self.port = Some(port);
        Ok(())
    }

    /// INIT → RTR: connects the receive side to `remote` over the path `path`.
    ///
    /// With `path.sgid_index = Some(i)` a GRH is used (RoCE; required there) after checking that
    /// GID `i` is readable ([`VerbsError::BadGidIndex`] lists the valid ones). With `None`, routing
    /// is by LID only (InfiniBand; not exercised in the lab).
    pub fn to_rtr(&mut self, remote: &RemoteEndpoint, path: &PathParams) -> Result<()> {
        let port = self.port.ok_or_else(|| {
            VerbsError::InvalidArgument("to_rtr called before to_init".to_string())
        })?;
        let mtu = PathMtu::from_bytes(path.mtu_bytes).ok_or_else(|| {
            VerbsError::InvalidArgument(format!(
                "path MTU {} is not one of 256, 512, 1024, 2048, 4096",
                path.mtu_bytes
            ))
        })?;
        check_psn(remote.psn, "remote PSN")?;
        if path.service_level > 15 {
            return Err(VerbsError::InvalidArgument(format!(
                "service level {} does not fit in 4 bits",
                path.service_level
            )));
        }
        if path.flow_label > MAX_FLOW_LABEL {
            return Err(VerbsError::InvalidArgument(format!(
                "flow label {:#x} does not fit in 20 bits",
                path.flow_label
            )));
        }
        let mut av = AddressHandleAttribute::new();
        av.setup_dest_lid(remote.lid)
            .setup_service_level(path.service_level)
            .setup_port(port);
        if let Some(index) = path.sgid_index {
            // Validate first: a bad index otherwise surfaces as an opaque EINVAL from modify_qp,
            // or worse, as retry-exceeded completions much later.
            query_valid_gid(&self.ctx, &self.device, port, self.port_count, index)?;
            let sgid = u8::try_from(index).map_err(|_| {
                VerbsError::InvalidArgument(format!(
                    "GID index {index} does not fit the GRH (max 255)"
                ))
            })?;
            av.setup_grh(
                &SwGid { raw: remote.gid },
                path.flow_label,
                sgid,
                path.hop_limit,
                path.traffic_class,
            );
        }
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(to_sideway_mtu(mtu))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(path.max_dest_rd_atomic)
            .setup_min_rnr_timer(path.min_rnr_timer)
            .setup_address_vector(&av);
        self.modify(&attr, "RTR")
    }

    /// RTR → RTS: enables the send side.
    pub fn to_rts(&mut self, params: &RtsParams) -> Result<()> {
        check_psn(params.psn, "send PSN")?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(params.psn)
            .setup_timeout(params.timeout)
            .setup_retry_cnt(params.retry_cnt)
            .setup_rnr_retry(params.rnr_retry)
            .setup_max_read_atomic(params.max_rd_atomic);
        self.modify(&attr, "RTS")
    }

    /// The PSN the QP's next request packet will carry, as the device keeps it.
    pub fn send_psn(&self) -> Result<u32> {
        let qpn = self.qpn();
        let (attr, _) = self
            .qp
            .query(QueuePairAttributeMask::SendQueuePacketSequenceNumber)
            .map_err(|e| VerbsError::Query {
                qpn,
                detail: error_chain(&e),
            })?;
        Ok(attr.sq_psn() & MAX_PSN)
    }

    /// Any state → RESET, keeping the QP number: with nothing outstanding, the QP can then be
    /// brought up again (INIT, RTR, RTS) on another path to the same peer QP, its send PSN
    /// continuing where it stopped, so the peer, which stays in RTR, notices nothing.
    pub fn to_reset(&mut self) -> Result<()> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Reset);
        self.modify(&attr, "RESET")?;
        self.port = None;
        Ok(())
    }

    /// Any state → ERROR: outstanding WRs are flushed (complete with `WR_FLUSH_ERR`), so the CQ
    /// can be drained before teardown. An errored QP is never reused: it would only produce
    /// cascades of flush errors; the session is rebuilt instead.
    pub fn to_error(&mut self) -> Result<()> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        self.modify(&attr, "ERROR")
    }

    /// Posts one RDMA WRITE (or WRITE WITH IMMEDIATE if `wr.imm` is set) from `local`.
    pub fn post_write(&mut self, local: &MemoryRegion, wr: WriteRequest) -> Result<()> {
        self.post_writes(local, std::slice::from_ref(&wr))
    }

    /// Posts one WRITE WITH IMMEDIATE (`imm` arrives in the peer's receive completion).
    pub fn post_write_with_imm(
        &mut self,
        local: &MemoryRegion,
        wr: WriteRequest,
        imm: u32,
    ) -> Result<()> {
        self.post_write(local, wr.with_imm(imm))
    }

    /// Posts `wrs` as one chain in a single `ibv_post_send` (perftest's post list). All WRs read
    /// from `local`; every range is bounds-checked before anything is posted.
    ///
    /// On failure, [`VerbsError::Post::posted`] says how many leading WRs were accepted (they
    /// will complete; the rest were not posted).
    pub fn post_writes(&mut self, local: &MemoryRegion, wrs: &[WriteRequest]) -> Result<()> {
        if wrs.is_empty() {
            return Ok(());
        }
        for wr in wrs {
            if !local.contains(wr.local_offset, wr.len as usize) {
                return Err(VerbsError::InvalidArgument(format!(
                    "write wr_id {}: local range {}+{} is outside the {}-byte memory region",
                    wr.wr_id,
                    wr.local_offset,
                    wr.len,
                    local.len()
                )));
            }
        }
        let qpn = self.qpn();
        let qp = self.raw();
        let scratch = &mut self.scratch;
        scratch.wrs.clear();
        scratch.sges.clear();
        scratch.wrs.reserve(wrs.len());
        scratch.sges.reserve(wrs.len());
        for wr in wrs {
            scratch.sges.push(ibv_sge {
                addr: local.addr() + wr.local_offset as u64,
                length: wr.len,
                lkey: local.lkey(),
            });
            // SAFETY: `ibv_send_wr` is a plain C struct of integers, raw pointers and unions
            // thereof; all-zero is a valid value (null pointers, no flags).
            let mut w: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
            w.wr_id = wr.wr_id;
            w.opcode = match wr.imm {
                Some(_) => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                None => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            };
            if let Some(imm) = wr.imm {
                // Immediate data travels in network byte order.
                w.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            w.send_flags = if wr.signaled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            w.wr.rdma = rdma_mummy_sys::rdma_t {
                remote_addr: wr.remote.addr,
                rkey: wr.remote.rkey,
            };
            scratch.wrs.push(w);
        }
        // Link the chain and the SGEs now that both vectors have their final addresses.
        let base = scratch.wrs.as_mut_ptr();
        let sge_base = scratch.sges.as_mut_ptr();
        for (i, wr) in wrs.iter().enumerate() {
            // SAFETY: `i` (and `i + 1` when used) are in bounds of `scratch.wrs`/`scratch.sges`,
            // which both hold `wrs.len()` elements and are not reallocated until the next call.
            unsafe {
                let w = &mut *base.add(i);
                w.next = if i + 1 < wrs.len() {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
                if wr.len > 0 {
                    w.sg_list = sge_base.add(i);
                    w.num_sge = 1;
                }
            }
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `qp` is the live QP owned by `self`; `base` heads a well-formed, null-terminated
        // chain of WRs whose SGEs reference `local`'s registered buffer (bounds checked above).
        // The WR and SGE structs are only read during the call.
        let ret = unsafe { rdma_mummy_sys::ibv_post_send(qp, base, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let posted = if bad.is_null() {
            0
        } else {
            // SAFETY: on failure `bad` points at the refused WR, an element of the same chain.
            usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0)
        };
        Err(VerbsError::Post {
            qpn,
            queue: "send",
            posted,
            source: io::Error::from_raw_os_error(ret),
        })
    }

    /// Posts one zero-length receive (no SGE): enough to take the immediate of an incoming
    /// WRITE WITH IMMEDIATE, which closes a burst.
    pub fn post_recv(&mut self, wr_id: u64) -> Result<()> {
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP owned by `self`; `wr` is a single, null-terminated WR with no SGE, only
        // read during the call.
        let ret = unsafe { rdma_mummy_sys::ibv_post_recv(self.raw(), &mut wr, &mut bad) };
        if ret != 0 {
            return Err(VerbsError::Post {
                qpn: self.qpn(),
                queue: "receive",
                posted: 0,
                source: io::Error::from_raw_os_error(ret),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_defaults() {
        let p = PathParams::new(1024, Some(1));
        assert_eq!(p.hop_limit, 255);
        assert_eq!(p.min_rnr_timer, 12);
        assert_eq!(p.max_dest_rd_atomic, 1);
        assert_eq!(p.traffic_class, 0);
        let r = RtsParams::new(7);
        assert_eq!(
            (r.timeout, r.retry_cnt, r.rnr_retry, r.max_rd_atomic),
            (14, 7, 7, 1)
        );
        assert_eq!(QpCaps::default().max_send_wr, 128);
        assert_eq!(QpCaps::default().max_recv_wr, 1);
    }

    #[test]
    fn psn_range() {
        assert!(check_psn(MAX_PSN, "psn").is_ok());
        assert!(check_psn(MAX_PSN + 1, "psn").is_err());
    }

    #[test]
    fn write_request_builder() {
        let r = RemoteAddr {
            addr: 0x1000,
            rkey: 9,
        };
        let w = WriteRequest::new(1, 0, 64, r).signaled(false).with_imm(5);
        assert!(!w.signaled);
        assert_eq!(w.imm, Some(5));
        assert_eq!(w.remote, r);
    }

    #[test]
    fn handles_are_send() {
        fn assert_send<T: Send>() {}
        assert_send::<QueuePair>();
        assert_send::<super::super::Context>();
        assert_send::<ProtectionDomain>();
        assert_send::<MemoryRegion>();
        assert_send::<CompletionQueue>();
    }
}
