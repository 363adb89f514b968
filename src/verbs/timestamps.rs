//! NIC completion timestamps: whether a device's clock can stamp completions, and an extended
//! CQ (`ibv_create_cq_ex` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`) whose completions carry
//! it, polled with `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll`.
//!
//! Only a device that reports a clock (`hca_core_clock` and `completion_timestamp_mask` both
//! non-zero in `ibv_query_device_ex`) gets such a CQ. Soft-RoCE reports none, so it keeps the
//! basic CQ, whose `ibv_poll_cq` is also the one correct poller there (rxe's extended poller in
//! rdma-core < 55 yields wrong completions: lab/README.md).

use std::io;
use std::mem::MaybeUninit;

use rdma_mummy_sys::{
    ibv_cq_ex, ibv_end_poll, ibv_next_poll, ibv_poll_cq_attr, ibv_start_poll, ibv_wc_flags,
    ibv_wc_read_byte_len, ibv_wc_read_completion_ts, ibv_wc_read_imm_data, ibv_wc_read_opcode,
    ibv_wc_read_qp_num, ibv_wc_read_src_qp, ibv_wc_read_vendor_err, ibv_wc_read_wc_flags,
};
use sideway::ibverbs::completion::{
    CompletionQueue as _, CreateCompletionQueueWorkCompletionFlags as WcFlags,
    ExtendedCompletionQueue, GenericCompletionQueue,
};

use super::device::Context;
use super::error::{Resource, Result, VerbsError};
use super::resources::{check_cq_size, Completion, CompletionQueue};
use super::types::WcStatus;

/// A device's completion clock: its frequency and the bits its timestamps have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletionClock {
    pub khz: u64,
    pub mask: u64,
}

impl Context {
    /// The clock this device stamps completions with; `None` where it has none (Soft-RoCE) or
    /// the query fails.
    pub fn completion_clock(&self) -> Option<CompletionClock> {
        let attr = self.ctx.query_device().ok()?;
        let clock = CompletionClock {
            khz: attr.hca_core_clock(),
            mask: attr.completion_timestamp_mask(),
        };
        (clock.khz > 0 && clock.mask > 0).then_some(clock)
    }

    /// An extended CQ of at least `cqe` entries, with its own completion channel, whose every
    /// completion carries the NIC's timestamp ([`Completion::timestamp`]).
    pub fn create_timestamped_cq(&self, cqe: u32) -> Result<CompletionQueue> {
        check_cq_size(cqe)?;
        let channel = self.create_channel()?;
        let cq = self
            .ctx
            .create_cq_builder()
            .setup_cqe(cqe)
            .setup_comp_channel(&channel, 0)
            .setup_wc_flags(WcFlags::StandardFlags | WcFlags::CompletionTimestamp)
            .build_ex()
            .map_err(|e| VerbsError::Create {
                resource: Resource::CompletionQueue,
                device: self.name.to_string(),
                source: io::Error::other(super::device::error_chain(&e)),
            })?;
        Ok(CompletionQueue {
            cq: GenericCompletionQueue::Extended(cq),
            channel,
        })
    }
}

fn poll_error(op: &'static str, ret: i32) -> VerbsError {
    VerbsError::Completion {
        op,
        source: io::Error::from_raw_os_error(ret),
    }
}

/// Polls up to `out.len()` completions of an extended CQ without blocking; returns how many were
/// written to the front of `out`.
pub(super) fn poll(cq: &ExtendedCompletionQueue, out: &mut [Completion]) -> Result<usize> {
    if out.is_empty() {
        return Ok(0);
    }
    // SAFETY: sideway's `cq()` of an extended CQ is its `ibv_cq_ex` pointer cast to `ibv_cq`
    // (libibverbs' ibv_cq_ex_to_cq is that cast), so casting back gives the live `ibv_cq_ex`,
    // used only while `cq` is borrowed.
    let raw: *mut ibv_cq_ex = unsafe { cq.cq().cast::<ibv_cq_ex>().as_ptr() };
    let mut attr = MaybeUninit::<ibv_poll_cq_attr>::zeroed();
    // SAFETY: `raw` is a live extended CQ polled by this thread alone (the CQ is owned by one
    // engine); `attr` is a zeroed ibv_poll_cq_attr (comp_mask 0), as the call requires.
    match unsafe { ibv_start_poll(raw, attr.as_mut_ptr()) } {
        0 => {}
        // Empty: nothing was started, so ibv_end_poll must not be called.
        libc::ENOENT => return Ok(0),
        ret => return Err(poll_error("poll (ibv_start_poll)", ret)),
    }
    let mut done = 0;
    let result = loop {
        // SAFETY: a poll was started and its last call returned a completion, which the read
        // functions read until the next ibv_next_poll.
        out[done] = unsafe { current(raw) };
        done += 1;
        if done == out.len() {
            break Ok(done);
        }
        // SAFETY: as above; moves the started poll to the next completion.
        match unsafe { ibv_next_poll(raw) } {
            0 => {}
            libc::ENOENT => break Ok(done),
            ret => break Err(poll_error("poll (ibv_next_poll)", ret)),
        }
    };
    // SAFETY: ends the poll started above, once, whatever ibv_next_poll returned.
    unsafe { ibv_end_poll(raw) };
    result
}

/// The completion a started poll of `raw` points at.
///
/// # Safety
/// `raw` is a live extended CQ created with the standard fields and the completion timestamp,
/// inside a started poll whose last call returned a completion.
unsafe fn current(raw: *mut ibv_cq_ex) -> Completion {
    // SAFETY: the caller's contract: `wr_id` and `status` are set for every polled completion.
    let (wr_id, status) = unsafe { ((*raw).wr_id, WcStatus::from_raw((*raw).status)) };
    // SAFETY: the caller's contract; vendor_err is valid for every completion.
    let vendor_err = unsafe { ibv_wc_read_vendor_err(raw) };
    // SAFETY: the caller's contract; the timestamp was asked for at creation.
    let timestamp = Some(unsafe { ibv_wc_read_completion_ts(raw) });
    if !status.is_success() {
        // The other fields are not defined for a failed completion.
        return Completion {
            wr_id,
            status,
            vendor_err,
            timestamp,
            ..Completion::EMPTY
        };
    }
    // SAFETY: the caller's contract; a successful completion defines every field the CQ was
    // created with (the standard ones: opcode, byte_len, wc_flags, imm, qp_num, src_qp).
    unsafe {
        let imm = (ibv_wc_read_wc_flags(raw) & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0)
            .then(|| u32::from_be(ibv_wc_read_imm_data(raw)));
        Completion {
            wr_id,
            status,
            opcode: ibv_wc_read_opcode(raw),
            byte_len: ibv_wc_read_byte_len(raw),
            imm,
            qp_num: ibv_wc_read_qp_num(raw),
            src_qp: ibv_wc_read_src_qp(raw),
            vendor_err,
            timestamp,
        }
    }
}
