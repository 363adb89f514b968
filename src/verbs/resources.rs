//! Protection domains, registered memory and completion queues (with completion channels).
//!
//! Lifetimes: every sideway handle keeps an `Arc` to what it was created from (MR → PD → device
//! context; CQ → context + completion channel; QP → PD + both CQs), so the C objects are always
//! destroyed children-first no matter in which order the Rust values are dropped. The only
//! ordering this module adds is inside [`MemoryRegion`]: the registration is dropped (deregistered)
//! before the buffer it covers is freed (struct fields drop in declaration order).

use std::alloc::{self, Layout};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_mummy_sys::{ibv_cq, ibv_wc, ibv_wc_flags};
use sideway::ibverbs::completion::{
    CompletionChannel, CompletionQueue as _, GenericCompletionQueue,
};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion as SwMemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain as SwProtectionDomain;
use sideway::ibverbs::AccessFlags;

use super::device::{error_chain, Context};
use super::error::{Resource, Result, VerbsError};
use super::types::WcStatus;

/// Pulls the `io::Error` out of a sideway error (they wrap it as `source`), or makes one from
/// the message.
fn io_error_of(e: &(dyn std::error::Error + 'static)) -> io::Error {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return match io.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(io.kind(), io.to_string()),
            };
        }
        cur = err.source();
    }
    io::Error::other(error_chain(e))
}

/// A protection domain: MRs and QPs of one probe session live in one PD so that the QP can
/// only touch memory registered for that session.
#[derive(Clone)]
pub struct ProtectionDomain {
    pub(crate) pd: Arc<SwProtectionDomain>,
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) device: Arc<str>,
    pub(crate) port_count: u8,
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.device)
            .finish()
    }
}

impl Context {
    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let pd = self.ctx.alloc_pd().map_err(|e| VerbsError::Create {
            resource: Resource::ProtectionDomain,
            device: self.name.to_string(),
            source: io_error_of(&e),
        })?;
        Ok(ProtectionDomain {
            pd,
            ctx: Arc::clone(&self.ctx),
            device: Arc::clone(&self.name),
            port_count: self.port_count(),
        })
    }

    /// Creates a basic CQ (`ibv_create_cq`) of at least `cqe` entries with its own completion
    /// channel.
    ///
    /// A basic CQ is used on purpose: rxe's extended-CQ poller in rdma-core < 55 yields fake
    /// successful completions with wrong `wr_id`s (seen in the lab: lab/README.md); `ibv_poll_cq`
    /// is correct and is what perftest uses.
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue> {
        check_cq_size(cqe)?;
        let create_err = |resource, source| VerbsError::Create {
            resource,
            device: self.name.to_string(),
            source,
        };
        let channel = self.create_channel()?;
        let cq = self
            .ctx
            .create_cq_builder()
            .setup_cqe(cqe)
            .setup_comp_channel(&channel, 0)
            .build()
            .map_err(|e| create_err(Resource::CompletionQueue, io_error_of(&e)))?;
        Ok(CompletionQueue {
            cq: GenericCompletionQueue::Basic(cq),
            channel,
        })
    }

    /// A completion channel for a new CQ: non-blocking, so `ibv_get_cq_event` after a spurious
    /// wake-up returns EAGAIN instead of blocking the caller past its timeout.
    pub(super) fn create_channel(&self) -> Result<Arc<CompletionChannel>> {
        let create_err = |source| VerbsError::Create {
            resource: Resource::CompletionChannel,
            device: self.name.to_string(),
            source,
        };
        let channel = self
            .ctx
            .create_comp_channel()
            .map_err(|e| create_err(io_error_of(&e)))?;
        channel.set_nonblocking(true).map_err(create_err)?;
        Ok(channel)
    }
}

pub(super) fn check_cq_size(cqe: u32) -> Result<()> {
    if cqe == 0 || cqe > i32::MAX as u32 {
        return Err(VerbsError::InvalidArgument(format!(
            "CQ size {cqe} out of range 1..={}",
            i32::MAX
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Memory region
// ---------------------------------------------------------------------------------------------

/// A page-aligned, zero-initialised heap buffer (freed on drop).
struct AlignedBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuffer {
    fn new(len: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len, page_size()).ok()?;
        if layout.size() == 0 {
            return None;
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| AlignedBuffer { ptr, layout })
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this `layout` and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// Whether the peer's QPs may write into a region (or a QP accept their writes): the responder's
/// regions take the prober's RDMA WRITEs; the prober's are only ever read by its own NIC to send
/// them, so they grant nothing remote. No region ever grants REMOTE_READ: a peer can never read
/// host memory through one (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteAccess {
    /// Local use only: the source of our own RDMA WRITEs.
    None,
    /// Local use only, written by our own receives (`LOCAL_WRITE`): the buffers of datagrams.
    Receives,
    /// `REMOTE_WRITE` (with the `LOCAL_WRITE` verbs requires beside it): the target of the peer's.
    Write,
}

impl RemoteAccess {
    pub(crate) fn mr_flags(self) -> AccessFlags {
        match self {
            RemoteAccess::None => AccessFlags::none(),
            RemoteAccess::Receives => AccessFlags::LocalWrite,
            RemoteAccess::Write => AccessFlags::LocalWrite | AccessFlags::RemoteWrite,
        }
    }

    pub(crate) fn qp_flags(self) -> AccessFlags {
        match self {
            RemoteAccess::None | RemoteAccess::Receives => AccessFlags::none(),
            RemoteAccess::Write => AccessFlags::RemoteWrite,
        }
    }
}

/// A buffer of `len` bytes registered with [`RemoteAccess`]: `LOCAL_WRITE | REMOTE_WRITE`,
/// `LOCAL_WRITE` alone (receive buffers) or no access flag at all — never REMOTE_READ: a peer may write into a probe buffer, but can never
/// read host memory through it.
///
/// The buffer is owned (allocated page-aligned and zeroed here), so its address is stable for the
/// life of the registration. Dropping deregisters first, then frees.
///
/// Memory safety with in-flight work: if an MR is dropped while WRs referencing it are still
/// outstanding, deregistration invalidates its keys first, so the NIC cannot touch the freed
/// memory; those WRs complete with a protection/access error instead.
pub struct MemoryRegion {
    // Field order matters: `mr` (deregistration) must drop before `buf` (free).
    mr: Arc<SwMemoryRegion>,
    buf: AlignedBuffer,
}

// SAFETY: `AlignedBuffer` is a uniquely owned heap allocation (like `Box<[u8]>`), only reachable
// through `&self`/`&mut self` of this struct; the sideway MR is itself `Send + Sync`. Moving the
// whole region to another thread (the burst engine's) is therefore sound.
unsafe impl Send for MemoryRegion {}
// SAFETY: shared access only hands out `&[u8]` and plain key values; mutation requires `&mut`.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl ProtectionDomain {
    /// Allocates a page-aligned zeroed buffer of `len` bytes and registers it (`ibv_reg_mr`) with
    /// `remote` access. The buffer is fresh for every region, so it never holds anything but
    /// zeros and what the probe writes into it.
    pub fn register(&self, len: usize, remote: RemoteAccess) -> Result<MemoryRegion> {
        let buf = AlignedBuffer::new(len).ok_or_else(|| {
            VerbsError::InvalidArgument(format!(
                "memory region size {len} must be between 1 and isize::MAX bytes and allocatable"
            ))
        })?;
        let access = remote.mr_flags();
        // SAFETY: `buf` is a live allocation of exactly `len` bytes; it is stored next to the
        // registration in the returned `MemoryRegion`, which drops (deregisters) the MR before
        // freeing `buf`, so the registered range stays valid for the registration's lifetime.
        let mr =
            unsafe { self.pd.reg_mr(buf.ptr.as_ptr() as usize, len, access) }.map_err(|e| {
                VerbsError::Create {
                    resource: Resource::MemoryRegion,
                    device: self.device.to_string(),
                    source: io_error_of(&e),
                }
            })?;
        Ok(MemoryRegion { mr, buf })
    }
}

impl MemoryRegion {
    /// Virtual address of the buffer (what a responder advertises as `vaddr`).
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.layout.size()
    }

    /// Always false (zero-length regions are refused at creation); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Key for local SGEs.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// Key a peer uses to RDMA WRITE into this region.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The buffer contents.
    ///
    /// While the region is registered a peer holding the rkey can write into it at any time, so
    /// read it only when the protocol guarantees no write is in flight (e.g. after the WRITE WITH
    /// IMMEDIATE that closes a burst has been received: RC delivers it after all earlier writes).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `buf` points to `len` initialised (zeroed at allocation) bytes owned by `self`,
        // alive for the borrow; see the doc comment for concurrent remote writes.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr(), self.len()) }
    }

    /// The buffer contents, mutable (to fill a send pattern).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` guarantees no other Rust reference exists.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr(), self.len()) }
    }

    /// Whether `[offset, offset + len)` lies inside the buffer.
    pub(crate) fn contains(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len())
    }
}

// ---------------------------------------------------------------------------------------------
// Completion queue
// ---------------------------------------------------------------------------------------------

/// One work completion, copied out of `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    /// Raw `ibv_wc.opcode` (only valid when `status` is success; see [`super::wc_opcode`]).
    pub opcode: u32,
    /// Bytes received (receive completions only).
    pub byte_len: u32,
    /// Immediate data in host byte order, if the completion carries one.
    pub imm: Option<u32>,
    /// The local QP the completion belongs to.
    pub qp_num: u32,
    /// The sending QP of a UD receive (0 for other completions).
    pub src_qp: u32,
    /// Vendor error syndrome (perftest prints it as "syndrom 0x..").
    pub vendor_err: u32,
    /// The NIC's clock when the work completed (ticks of its `hca_core_clock`): on a CQ made by
    /// [`Context::create_timestamped_cq`] always, else never.
    pub timestamp: Option<u64>,
}

impl Completion {
    /// A placeholder to size output buffers: `[Completion::EMPTY; 16]`.
    pub const EMPTY: Completion = Completion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: 0,
        byte_len: 0,
        imm: None,
        qp_num: 0,
        src_qp: 0,
        vendor_err: 0,
        timestamp: None,
    };

    /// `Ok` for a successful completion, else [`VerbsError::WorkCompletion`] (whose `reason()` is
    /// the status's reason).
    pub fn check(&self) -> Result<()> {
        if self.status.is_success() {
            Ok(())
        } else {
            Err(VerbsError::WorkCompletion {
                status: self.status,
                wr_id: self.wr_id,
                vendor_err: self.vendor_err,
                qpn: self.qp_num,
            })
        }
    }

    fn from_wc(wc: &ibv_wc) -> Self {
        let imm = if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: both union members are `u32`; with IBV_WC_WITH_IMM set the member is the
            // immediate, in network byte order.
            Some(u32::from_be(unsafe {
                wc.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        };
        Completion {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: wc.opcode,
            byte_len: wc.byte_len,
            imm,
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            vendor_err: wc.vendor_err,
            timestamp: None,
        }
    }
}

/// How many `ibv_wc` are polled per `ibv_poll_cq` call (on the stack; 64 × 48 B).
const POLL_CHUNK: usize = 64;

/// A completion queue with its own completion channel, for both busy polling
/// ([`CompletionQueue::poll`]) and sleeping ([`CompletionQueue::arm`] + [`CompletionQueue::wait`]):
/// a basic CQ ([`Context::create_cq`]), or an extended one whose completions carry the NIC's
/// timestamps ([`Context::create_timestamped_cq`]).
pub struct CompletionQueue {
    pub(super) cq: GenericCompletionQueue,
    pub(super) channel: Arc<CompletionChannel>,
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl CompletionQueue {
    pub(crate) fn sideway(&self) -> GenericCompletionQueue {
        self.cq.clone()
    }

    fn raw(&self) -> *mut ibv_cq {
        // SAFETY: the pointer is used only while `self` (which keeps the CQ alive) is borrowed.
        unsafe { self.cq.cq().as_ptr() }
    }

    /// Actual number of entries (the driver may round the requested size up).
    pub fn capacity(&self) -> u32 {
        // SAFETY: `raw()` is the live CQ; `cqe` is set at creation and not changed (no resize).
        let cqe = unsafe { (*self.raw()).cqe };
        u32::try_from(cqe).unwrap_or(0)
    }

    /// Polls up to `out.len()` completions without blocking (`ibv_poll_cq`, or the extended
    /// poller's calls on a timestamped CQ); returns how many were written to the front of `out`.
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
        if let GenericCompletionQueue::Extended(cq) = &self.cq {
            return super::timestamps::poll(cq, out);
        }
        let mut wcs = [const { MaybeUninit::<ibv_wc>::uninit() }; POLL_CHUNK];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_CHUNK);
            // SAFETY: `raw()` is a live CQ; `wcs` has room for `want <= POLL_CHUNK` entries, and
            // the provider writes at most `want` of them.
            let n = unsafe {
                rdma_mummy_sys::ibv_poll_cq(self.raw(), want as i32, wcs.as_mut_ptr().cast())
            };
            if n < 0 {
                return Err(VerbsError::Completion {
                    op: "poll",
                    source: io::Error::from_raw_os_error(-n),
                });
            }
            let n = (n as usize).min(want);
            for (completion, wc) in out[done..done + n].iter_mut().zip(&wcs[..n]) {
                // SAFETY: the first `n` entries were initialised by `ibv_poll_cq`.
                *completion = Completion::from_wc(unsafe { wc.assume_init_ref() });
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Requests an event on the channel for the next completion (`ibv_req_notify_cq`, all
    /// completions, not only solicited ones). One-shot: re-arm after every event.
    ///
    /// Race-free sleeping pattern: `arm()`, then `poll()` once more (a completion that arrived
    /// before arming raises no event), and only if that found nothing, `wait()`.
    pub fn arm(&self) -> Result<()> {
        // SAFETY: `raw()` is a live CQ created with a completion channel.
        let ret = unsafe { rdma_mummy_sys::ibv_req_notify_cq(self.raw(), 0) };
        if ret != 0 {
            return Err(VerbsError::Completion {
                op: "arm (ibv_req_notify_cq)",
                source: io::Error::from_raw_os_error(ret),
            });
        }
        Ok(())
    }

    /// Sleeps until the armed CQ raises a completion event or `timeout` passes: `poll(2)` on the
    /// channel fd, then `ibv_get_cq_event` + `ibv_ack_cq_events` (every event is acked at once, so
    /// destroying the CQ never blocks on unacked events). Returns `false` on timeout. A zero
    /// timeout only checks. The completions themselves must still be fetched with `poll`.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        Ok(self.wait_or(None, timeout)? == Woken::Completion)
    }

    /// [`Self::wait`], also woken when `other` (say, the read end of a socket pair another
    /// thread writes to) becomes readable; its data is the caller's to read.
    pub fn wait_or(&self, other: Option<BorrowedFd<'_>>, timeout: Duration) -> Result<Woken> {
        let deadline = Instant::now().checked_add(timeout);
        let fd = self.channel.as_raw_fd();
        loop {
            let remaining = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_millis(i32::MAX as u64),
            };
            // Round up so a sub-millisecond timeout sleeps instead of spinning.
            let ms = i32::try_from(remaining.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            let pollfd = |fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let mut pfds = [pollfd(fd), pollfd(other.map_or(-1, |o| o.as_raw_fd()))];
            // SAFETY: `pfds` is two valid `pollfd`s (a negative fd is ignored by poll(2)); `fd`
            // is the channel's fd, kept open by `self`, and `other` is borrowed for the call.
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), 2, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(VerbsError::Completion {
                    op: "wait (poll)",
                    source: e,
                });
            }
            if r == 0 {
                return Ok(Woken::Timeout);
            }
            if pfds[0].revents == 0 {
                return Ok(Woken::Other);
            }
            let mut ev_cq: *mut ibv_cq = ptr::null_mut();
            let mut ev_ctx: *mut libc::c_void = ptr::null_mut();
            // SAFETY: the channel is live; the out-pointers are valid for writes. The channel fd
            // is non-blocking, so this cannot block.
            let ret = unsafe {
                rdma_mummy_sys::ibv_get_cq_event(
                    self.channel.comp_channel().as_ptr(),
                    &mut ev_cq,
                    &mut ev_ctx,
                )
            };
            if ret != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                    // Spurious wake-up (or another thread took the event): wait out the rest.
                    if remaining.is_zero() {
                        return Ok(Woken::Timeout);
                    }
                    continue;
                }
                return Err(VerbsError::Completion {
                    op: "wait (ibv_get_cq_event)",
                    source: e,
                });
            }
            if !ev_cq.is_null() {
                // SAFETY: `ev_cq` is the CQ the event was reported for (ours: only this CQ uses
                // this channel) and is live; exactly one event is acknowledged.
                unsafe { rdma_mummy_sys::ibv_ack_cq_events(ev_cq, 1) };
            }
            return Ok(Woken::Completion);
        }
    }
}

/// What ended a [`CompletionQueue::wait_or`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The CQ raised a completion event.
    Completion,
    /// The other fd became readable.
    Other,
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_from_wc_decodes_imm_and_status() {
        // SAFETY: `ibv_wc` is a plain C struct; all-zero is a valid value.
        let mut wc: ibv_wc = unsafe { MaybeUninit::zeroed().assume_init() };
        wc.wr_id = 42;
        wc.status = 12;
        wc.opcode = 129;
        wc.byte_len = 0;
        wc.qp_num = 17;
        wc.vendor_err = 0x81;
        wc.imm_data_invalidated_rkey_union.imm_data = 0xdead_beef_u32.to_be();
        wc.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
        let c = Completion::from_wc(&wc);
        assert_eq!(c.imm, Some(0xdead_beef));
        assert_eq!(c.status, WcStatus::RetryExcErr);
        assert_eq!(
            c.check().unwrap_err().reason(),
            crate::reason::ErrorReason::WcRetryExceeded
        );
        wc.wc_flags = 0;
        wc.status = 0;
        let c = Completion::from_wc(&wc);
        assert_eq!(c.imm, None);
        assert!(c.check().is_ok());
    }

    #[test]
    fn aligned_buffer_is_page_aligned_and_zeroed() {
        let b = AlignedBuffer::new(10_000).unwrap();
        assert_eq!(b.ptr.as_ptr() as usize % page_size(), 0);
        // SAFETY: 10_000 zero-initialised bytes owned by `b`.
        let s = unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), 10_000) };
        assert!(s.iter().all(|&x| x == 0));
        assert!(AlignedBuffer::new(0).is_none());
        assert!(AlignedBuffer::new(usize::MAX).is_none());
    }
}
