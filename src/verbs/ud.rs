//! UD queue pairs and address handles: what pings travel on.
//!
//! A UD QP sends datagrams to any peer's UD QP through an address handle (the peer's GID), with
//! no connection: one QP per device serves every path. It goes RESET → INIT (port, P_Key, Q_Key)
//! → RTR → RTS (send PSN) once. A receive lands after a 40-byte GRH, so a receive buffer is
//! [`GRH_LEN`] longer than the datagram it takes. sideway wraps neither the Q_Key attribute nor
//! address handles, so both are raw `rdma-mummy-sys` calls here, each under a `// SAFETY:` note.

use std::io;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdma_mummy_sys::{
    ibv_ah, ibv_ah_attr, ibv_gid, ibv_global_route, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask,
    ibv_qp_state, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode, ud_t,
};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, QueuePair as _, QueuePairAttributeMask, QueuePairState, QueuePairType,
};

use super::device::error_chain;
use super::error::{Resource, Result, VerbsError};
use super::qp::QpCaps;
use super::resources::{CompletionQueue, MemoryRegion, ProtectionDomain};

/// Bytes of the Global Route Header in front of every received UD datagram.
pub const GRH_LEN: usize = 40;

/// A UD QP. Dropping it destroys the QP before the CQs and PD it references.
pub struct UdQueuePair {
    qp: BasicQueuePair,
    device: Arc<str>,
    port_count: u8,
    _ctx: Arc<DeviceContext>,
}

impl std::fmt::Debug for UdQueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdQueuePair")
            .field("device", &self.device)
            .field("qpn", &self.qpn())
            .finish()
    }
}

/// Where a datagram goes: the peer device's GID as reached from one local port.
pub struct AddressHandle {
    ah: NonNull<ibv_ah>,
    // Keeps the PD (and through it the device context) alive while the AH exists.
    _pd: ProtectionDomain,
}

// SAFETY: an `ibv_ah` is an immutable handle once created; libibverbs allows using and
// destroying it from any thread.
unsafe impl Send for AddressHandle {}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle").finish_non_exhaustive()
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: `ah` was returned by ibv_create_ah and is destroyed once, here; no send WR
        // that references it is posted after this (the caller owns both and drops the AH last).
        unsafe { rdma_mummy_sys::ibv_destroy_ah(self.ah.as_ptr()) };
    }
}

/// The address vector of a datagram to `gid` from `port`, by the local GID `sgid_index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub port: u8,
    pub sgid_index: u8,
    pub gid: [u8; 16],
    pub hop_limit: u8,
    pub traffic_class: u8,
}

fn post_error(qpn: u32, queue: &'static str, ret: i32) -> VerbsError {
    VerbsError::Post {
        qpn,
        queue,
        posted: 0,
        source: io::Error::from_raw_os_error(ret),
    }
}

impl ProtectionDomain {
    /// Creates a UD QP whose completions go to `cq`, with `depth` send and receive WRs of one
    /// SGE each.
    pub fn create_ud_qp(&self, cq: &CompletionQueue, depth: u32) -> Result<UdQueuePair> {
        if depth == 0 {
            return Err(VerbsError::InvalidArgument(
                "UD QP depth must be at least 1".into(),
            ));
        }
        let caps = QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
        };
        let qp = self.create_basic_qp(QueuePairType::UnreliableDatagram, cq, cq, caps)?;
        Ok(UdQueuePair {
            qp,
            device: Arc::clone(&self.device),
            port_count: self.port_count,
            _ctx: Arc::clone(&self.ctx),
        })
    }

    /// An address handle for datagrams along `route`.
    pub fn create_ah(&self, route: &Route) -> Result<AddressHandle> {
        let mut attr = ibv_ah_attr {
            grh: ibv_global_route {
                // SAFETY: ibv_gid is a plain C union of byte arrays and integers: all zeroes is
                // a valid value, overwritten below.
                dgid: unsafe { MaybeUninit::<ibv_gid>::zeroed().assume_init() },
                flow_label: 0,
                sgid_index: route.sgid_index,
                hop_limit: route.hop_limit,
                traffic_class: route.traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: route.port,
        };
        attr.grh.dgid.raw = route.gid;
        // SAFETY: the PD is alive (self holds it) for the call; `attr` is a fully initialised
        // ibv_ah_attr, only read during the call.
        let ah = unsafe { rdma_mummy_sys::ibv_create_ah(self.pd.pd().as_ptr(), &mut attr) };
        let ah = NonNull::new(ah).ok_or_else(|| VerbsError::Create {
            resource: Resource::AddressHandle,
            device: self.device.to_string(),
            source: io::Error::last_os_error(),
        })?;
        Ok(AddressHandle {
            ah,
            _pd: self.clone(),
        })
    }
}

impl UdQueuePair {
    pub fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    fn raw(&self) -> *mut ibv_qp {
        // SAFETY: the pointer is used only while `self` (which owns the QP) is borrowed.
        unsafe { self.qp.qp().as_ptr() }
    }

    fn modify(&mut self, attr: &mut ibv_qp_attr, mask: u32, to: &'static str) -> Result<()> {
        // SAFETY: live QP owned by `self`; `attr` is initialised for every field `mask` names
        // and only read during the call.
        let ret = unsafe { rdma_mummy_sys::ibv_modify_qp(self.raw(), attr, mask as _) };
        if ret != 0 {
            return Err(VerbsError::Modify {
                qpn: self.qpn(),
                to,
                detail: io::Error::from_raw_os_error(ret).to_string(),
            });
        }
        Ok(())
    }

    /// Whether the device holds the QP in the error state now. A completion in error does not
    /// always put a UD QP there (a receive too short for its datagram may complete alone), and
    /// only a QP in the error state needs [`Self::reset`].
    pub fn in_error_state(&self) -> Result<bool> {
        let qpn = self.qpn();
        let (attr, _) =
            self.qp
                .query(QueuePairAttributeMask::State)
                .map_err(|e| VerbsError::Query {
                    qpn,
                    detail: error_chain(&e),
                })?;
        Ok(attr.state() == QueuePairState::Error)
    }

    /// Back to RESET: the queues are emptied without completions (a QP in the error state
    /// completes every receive posted to it at once, flushed); [`Self::activate`] brings it up
    /// again with the same QP number.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: ibv_qp_attr is a plain C struct of integers: all zeroes is a valid value.
        let mut attr: ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = ibv_qp_state::IBV_QPS_RESET;
        self.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0, "RESET")
    }

    /// RESET → INIT → RTR → RTS on `port`, taking datagrams tagged `qkey`, sending from `psn`.
    pub fn activate(&mut self, port: u8, pkey_index: u16, qkey: u32, psn: u32) -> Result<()> {
        if port == 0 || port > self.port_count {
            return Err(VerbsError::UnknownPort {
                device: self.device.to_string(),
                port,
                port_count: self.port_count,
            });
        }
        // SAFETY: ibv_qp_attr is a plain C struct of integers: all zeroes is a valid value.
        let mut attr: ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = pkey_index;
        attr.port_num = port;
        attr.qkey = qkey;
        let init = ibv_qp_attr_mask::IBV_QP_STATE
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
            | ibv_qp_attr_mask::IBV_QP_PORT
            | ibv_qp_attr_mask::IBV_QP_QKEY;
        self.modify(&mut attr, init.0, "INIT")?;
        attr.qp_state = ibv_qp_state::IBV_QPS_RTR;
        self.modify(&mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0, "RTR")?;
        attr.qp_state = ibv_qp_state::IBV_QPS_RTS;
        attr.sq_psn = psn & super::qp::MAX_PSN;
        let rts = ibv_qp_attr_mask::IBV_QP_STATE | ibv_qp_attr_mask::IBV_QP_SQ_PSN;
        self.modify(&mut attr, rts.0, "RTS")
    }

    /// Posts one signaled SEND of `len` bytes at `offset` of `local` to the UD QP `remote_qpn`
    /// (Q_Key `remote_qkey`) through `ah`.
    pub fn post_send(
        &mut self,
        local: &MemoryRegion,
        (offset, len): (usize, u32),
        ah: &AddressHandle,
        (remote_qpn, remote_qkey): (u32, u32),
        wr_id: u64,
    ) -> Result<()> {
        let mut sge = sge_of(local, offset, len)?;
        // SAFETY: ibv_send_wr is a plain C struct of integers, pointers and unions of them: all
        // zeroes (null pointers) is a valid value.
        let mut wr: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud = ud_t {
            ah: ah.ah.as_ptr(),
            remote_qpn,
            remote_qkey,
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: live QP owned by `self`; `wr` is one null-terminated WR whose SGE lies inside
        // the registered `local` (checked by sge_of) and whose AH outlives the call; the provider
        // copies the WR before returning.
        let ret = unsafe { rdma_mummy_sys::ibv_post_send(self.raw(), &mut wr, &mut bad) };
        if ret != 0 {
            return Err(post_error(self.qpn(), "send", ret));
        }
        Ok(())
    }

    /// Posts one receive of up to `len` bytes at `offset` of `local` (the GRH included: a
    /// datagram of n bytes needs n + [`GRH_LEN`]).
    pub fn post_recv(
        &mut self,
        local: &MemoryRegion,
        offset: usize,
        len: u32,
        wr_id: u64,
    ) -> Result<()> {
        let mut sge = sge_of(local, offset, len)?;
        let mut wr = ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: live QP owned by `self`; `wr` is one null-terminated WR whose SGE lies inside
        // the registered `local` (checked by sge_of); the provider copies it before returning.
        let ret = unsafe { rdma_mummy_sys::ibv_post_recv(self.raw(), &mut wr, &mut bad) };
        if ret != 0 {
            return Err(post_error(self.qpn(), "receive", ret));
        }
        Ok(())
    }
}

/// The SGE of `len` bytes at `offset` of `mr`, refused unless it lies inside it.
fn sge_of(mr: &MemoryRegion, offset: usize, len: u32) -> Result<ibv_sge> {
    if len == 0 || !mr.contains(offset, len as usize) {
        return Err(VerbsError::InvalidArgument(format!(
            "{len} bytes at offset {offset} do not fit a registered buffer of {} bytes",
            mr.len()
        )));
    }
    Ok(ibv_sge {
        addr: mr.addr() + offset as u64,
        length: len,
        lkey: mr.lkey(),
    })
}
