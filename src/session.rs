//! The RDMA resources of one probe session, the same on both ends: a device context, a PD, one
//! CQ shared by the session's QPs, one MR holding a region of message-sized slots per QP, and the
//! RC QPs. WRITE `i` of a QP uses slot `i mod slots` on both ends, so the last `slots` messages
//! of each QP sit at distinct offsets where the responder can check each one.
//!
//! Both the prober and the responder build a [`QpSet`], exchange [`QpSet::endpoints`] over the
//! control channel, and call [`QpSet::connect`] with the peer's. Between bursts the prober moves
//! its QPs to new flow labels ([`QpSet::set_flow_labels`], docs/architecture.md, "Every ECMP
//! path"). Dropping the set releases everything (the `verbs` wrappers order the destruction).

use crate::control::QpEndpoint;
use crate::rdma_address::{RdmaAddressError, RdmaDestinations};
use crate::verbs::{
    CompletionQueue, Context, LinkLayer, MemoryRegion, PathMtu, PathParams, ProtectionDomain,
    QpCaps, QueuePair, RemoteAccess, RemoteEndpoint, RtsParams, VerbsError,
};

/// Extra CQ entries beyond the send windows: one receive per QP for the closing WRITE WITH
/// IMMEDIATE, plus slack.
const CQ_SLACK: u32 = 16;

/// What the set is for: sizes of the queues and of the memory slot per QP.
#[derive(Debug, Clone, Copy)]
pub struct QpSetShape {
    pub qps: u16,
    /// Bytes per slot: the message size.
    pub slot_bytes: u64,
    /// Slots per QP (at least 1).
    pub slots: u64,
    /// Send queue depth per QP (tx depth; the responder only needs 1).
    pub send_depth: u32,
    /// Receive queue depth per QP (the responder posts one receive per burst).
    pub recv_depth: u32,
    /// What the peer may do to this side's memory: write (the responder) or nothing (the
    /// prober, whose region is only the source of its own writes).
    pub remote: RemoteAccess,
}

/// Path options the operator controls (docs/architecture.md, "ib_write_bw semantics").
#[derive(Debug, Clone, Copy)]
pub struct PathOptions {
    /// Upper bound on the path MTU in bytes.
    pub mtu: Option<u32>,
    pub gid_index: Option<u32>,
    pub traffic_class: u8,
    pub service_level: u8,
    /// Local ACK timeout exponent for senders (4.096 µs x 2^N).
    pub qp_timeout: u8,
}

/// How a connected set reaches its peer.
#[derive(Debug, Clone)]
struct Link {
    peer: Vec<QpEndpoint>,
    params: PathParams,
    qp_timeout: u8,
}

/// One side's resources for a session.
pub struct QpSet {
    pub ctx: Context,
    // Field order is drop order: QPs before the CQ and MR, all before the PD.
    pub qps: Vec<QueuePair>,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    _pd: ProtectionDomain,
    /// This side's initial send PSNs, one per QP.
    psns: Vec<u32>,
    /// The peer and the path, once connected: what bringing the QPs up again needs.
    link: Option<Link>,
    /// The flow label of each QP now (empty: none, the driver's default).
    flow_labels: Vec<u32>,
    /// The GID index used for RoCE (None on InfiniBand without GRH).
    sgid_index: Option<u32>,
    /// What the QPs grant the peer (set again when they are brought up anew).
    remote: RemoteAccess,
    slot_bytes: u64,
    slots: u64,
}

impl std::fmt::Debug for QpSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpSet")
            .field("device", &self.ctx.device_name())
            .field("qps", &self.qps.len())
            .field("slot_bytes", &self.slot_bytes)
            .field("slots", &self.slots)
            .finish()
    }
}

impl QpSet {
    /// Allocates everything and moves the QPs to INIT.
    pub fn create(
        ctx: Context,
        shape: QpSetShape,
        path: &PathOptions,
    ) -> Result<QpSet, VerbsError> {
        let slots = shape.slots.max(1);
        let mr_len = shape
            .slot_bytes
            .checked_mul(slots)
            .and_then(|region| region.checked_mul(u64::from(shape.qps)))
            .and_then(|len| usize::try_from(len).ok())
            .ok_or_else(|| {
                VerbsError::InvalidArgument("qps x slots x message size overflows".into())
            })?;
        let sgid_index = match path.gid_index {
            Some(i) => {
                ctx.gid(i)?; // names the valid indexes when `i` is not one of them
                Some(i)
            }
            None if ctx.port_info().link_layer == LinkLayer::InfiniBand => None,
            None => ctx.select_gid()?,
        };
        let pd = ctx.alloc_pd()?;
        let cqe = u32::from(shape.qps)
            .saturating_mul(shape.send_depth.saturating_add(shape.recv_depth))
            .saturating_add(CQ_SLACK);
        let cq = ctx.create_cq(cqe)?;
        let mr = pd.register(mr_len, shape.remote)?;
        let mut qps = Vec::with_capacity(usize::from(shape.qps));
        let mut psns = Vec::with_capacity(usize::from(shape.qps));
        for _ in 0..shape.qps {
            let mut qp = pd.create_qp(
                &cq,
                &cq,
                QpCaps {
                    max_send_wr: shape.send_depth.max(1),
                    max_recv_wr: shape.recv_depth.max(1),
                },
            )?;
            qp.to_init(ctx.port(), 0, shape.remote)?;
            qps.push(qp);
            psns.push(random_psn());
        }
        Ok(QpSet {
            ctx,
            qps,
            cq,
            mr,
            _pd: pd,
            psns,
            link: None,
            flow_labels: Vec::new(),
            sgid_index,
            remote: shape.remote,
            slot_bytes: shape.slot_bytes,
            slots,
        })
    }

    /// What the peer needs to connect to each of our QPs.
    pub fn endpoints(&self) -> Result<Vec<QpEndpoint>, VerbsError> {
        let gid = match self.sgid_index {
            Some(i) => self.ctx.gid(i)?.gid.octets(),
            None => [0; 16],
        };
        Ok(self
            .qps
            .iter()
            .zip(&self.psns)
            .map(|(qp, &psn)| QpEndpoint {
                qpn: qp.qpn(),
                psn,
                lid: self.ctx.port_info().lid,
                gid,
            })
            .collect())
    }

    /// Refuses a peer whose QPs' RDMA address this node must not send to. Only RoCE carries
    /// an address in the GID; InfiniBand (and LID routing without a GRH) is left alone.
    pub fn check_peer_addresses(
        &self,
        peer: &[QpEndpoint],
        allowed: &RdmaDestinations,
    ) -> Result<(), RdmaAddressError> {
        if self.sgid_index.is_none() || self.ctx.port_info().link_layer != LinkLayer::Ethernet {
            return Ok(());
        }
        peer.iter().try_for_each(|e| allowed.check(e.gid))
    }

    /// The local GID index of the GRH (`None`: InfiniBand LID routing without GRH).
    pub fn sgid_index(&self) -> Option<u32> {
        self.sgid_index
    }

    /// This port's active MTU in bytes.
    pub fn active_mtu(&self) -> u32 {
        self.ctx
            .port_info()
            .active_path_mtu()
            .map_or(1024, PathMtu::bytes)
    }

    /// The path MTU both ends can use: min(ours, peer's, configured), as a valid IB MTU.
    pub fn path_mtu(&self, peer_mtu: u32, configured: Option<u32>) -> PathMtu {
        let want = self
            .active_mtu()
            .min(peer_mtu)
            .min(configured.unwrap_or(u32::MAX));
        PathMtu::largest_at_most(want).unwrap_or(PathMtu::Mtu256)
    }

    /// Connects our QP `i` to the peer's endpoint `i`: INIT → RTR, and → RTS when `send` (the
    /// responder only receives, so like perftest's server it stays in RTR). QP `i` gets flow
    /// label `flow_labels[i]` (none for a QP without one, and without a GRH).
    pub fn connect(
        &mut self,
        peer: &[QpEndpoint],
        mtu: PathMtu,
        path: &PathOptions,
        send: bool,
        flow_labels: &[u32],
    ) -> Result<(), VerbsError> {
        if peer.len() != self.qps.len() {
            return Err(VerbsError::InvalidArgument(format!(
                "peer offered {} QPs, we have {}",
                peer.len(),
                self.qps.len()
            )));
        }
        let mut params = PathParams::new(mtu.bytes(), self.sgid_index);
        params.traffic_class = path.traffic_class;
        params.service_level = path.service_level;
        let link = Link {
            peer: peer.to_vec(),
            params,
            qp_timeout: path.qp_timeout,
        };
        for (q, (qp, &psn)) in self.qps.iter_mut().zip(&self.psns).enumerate() {
            let params = link.params_for(q, flow_labels);
            qp.to_rtr(&remote_endpoint(&link.peer[q]), &params)?;
            if send {
                qp.to_rts(&link.rts(psn))?;
            }
        }
        self.link = Some(link);
        self.flow_labels = self.labels_in_use(flow_labels);
        Ok(())
    }

    /// Moves every QP of a connected, sending set to flow label `flow_labels[i]`: each QP goes
    /// through RESET, INIT and RTR to RTS again with its QP number, peer and send PSN unchanged,
    /// so the peer's QPs, which stay in RTR, see the next request packet at the PSN they expect.
    /// Call only with nothing outstanding (between bursts). Without a GRH (InfiniBand) there is
    /// no flow label, and nothing changes.
    pub fn set_flow_labels(&mut self, flow_labels: &[u32]) -> Result<(), VerbsError> {
        let link = self
            .link
            .as_ref()
            .ok_or_else(|| VerbsError::InvalidArgument("the QP set is not connected".into()))?;
        if self.sgid_index.is_none() {
            return Ok(());
        }
        let port = self.ctx.port();
        for (q, qp) in self.qps.iter_mut().enumerate() {
            let psn = qp.send_psn()?;
            qp.to_reset()?;
            qp.to_init(port, 0, self.remote)?;
            qp.to_rtr(
                &remote_endpoint(&link.peer[q]),
                &link.params_for(q, flow_labels),
            )?;
            qp.to_rts(&link.rts(psn))?;
        }
        self.flow_labels = self.labels_in_use(flow_labels);
        Ok(())
    }

    /// The flow label of each QP now; empty when the QPs have none (no GRH, or none given).
    pub fn flow_labels(&self) -> &[u32] {
        &self.flow_labels
    }

    fn labels_in_use(&self, flow_labels: &[u32]) -> Vec<u32> {
        if self.sgid_index.is_none() || flow_labels.is_empty() {
            return Vec::new();
        }
        (0..self.qps.len())
            .map(|q| flow_labels.get(q).copied().unwrap_or(0))
            .collect()
    }

    /// QP `q`'s region: its `slots` message slots, slot `k` at `k * slot_bytes`.
    pub fn region(&self, q: usize) -> &[u8] {
        let len = self.region_len();
        &self.mr.as_slice()[q * len..(q + 1) * len]
    }

    /// QP `q`'s region, writable.
    pub fn region_mut(&mut self, q: usize) -> &mut [u8] {
        let len = self.region_len();
        &mut self.mr.as_mut_slice()[q * len..(q + 1) * len]
    }

    /// Remote address of QP `q`'s region (what the peer writes to).
    pub fn region_addr(&self, q: usize) -> u64 {
        self.mr.addr() + (q as u64) * self.region_bytes()
    }

    /// Bytes of one QP's region.
    pub fn region_bytes(&self) -> u64 {
        self.slot_bytes * self.slots
    }

    pub fn slot_bytes(&self) -> u64 {
        self.slot_bytes
    }

    pub fn slots(&self) -> u64 {
        self.slots
    }

    fn region_len(&self) -> usize {
        self.region_bytes() as usize // checked to fit in usize at creation
    }
}

impl Link {
    /// The path of QP `q`: the session's, with the QP's flow label.
    fn params_for(&self, q: usize, flow_labels: &[u32]) -> PathParams {
        let mut params = self.params;
        params.flow_label = flow_labels.get(q).copied().unwrap_or(0);
        params
    }

    fn rts(&self, psn: u32) -> RtsParams {
        let mut rts = RtsParams::new(psn);
        rts.timeout = self.qp_timeout;
        rts
    }
}

fn remote_endpoint(peer: &QpEndpoint) -> RemoteEndpoint {
    RemoteEndpoint {
        qpn: peer.qpn,
        psn: peer.psn,
        gid: peer.gid,
        lid: peer.lid,
    }
}

/// A random 24-bit initial PSN, as perftest uses (`lrand48() & 0xffffff`).
fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // A fixed PSN is still correct, only less robust against stale packets: never fail for it.
    let _ = getrandom::getrandom(&mut b);
    u32::from_le_bytes(b) & crate::verbs::MAX_PSN
}
