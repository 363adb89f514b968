//! The data check after a burst: the closing writes, then the pattern of the last messages in
//! each QP's slots (docs/architecture.md, "Data integrity").

use std::time::{Duration, Instant};

use crate::burst::pattern;
use crate::session::QpSet;
use crate::verbs::{wc_opcode, Completion};

/// What the responder found in the regions after a burst.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) verified_messages: u64,
    /// What did not verify; `None` when everything checked did.
    pub(super) detail: Option<String>,
}

/// Waits for every QP's closing WRITE WITH IMMEDIATE (RC orders it after the QP's data).
/// `Err` says what did not arrive or was wrong.
pub(super) async fn wait_closing_writes(
    set: &mut QpSet,
    burst_id: u64,
    deadline: Duration,
) -> Result<(), String> {
    // `&mut`: a shared borrow held across an await would need `QpSet: Sync`, which verbs handles
    // are not; exclusive access only needs `Send`.
    let qps = set.qps.len();
    let until = Instant::now() + deadline;
    let mut seen = 0usize;
    let mut wcs = [Completion::EMPTY; 16];
    while seen < qps {
        let n = set.cq.poll(&mut wcs).map_err(|e| e.to_string())?;
        for wc in &wcs[..n] {
            wc.check().map_err(|e| format!("closing write: {e}"))?;
            if wc.opcode != wc_opcode::RECV_RDMA_WITH_IMM || wc.imm != Some(burst_id as u32) {
                return Err(format!(
                    "closing write carried {:?} (opcode {}), expected burst id {}",
                    wc.imm, wc.opcode, burst_id as u32
                ));
            }
            seen += 1;
        }
        if seen < qps {
            if Instant::now() >= until {
                return Err(format!("only {seen} of {qps} closing writes arrived"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

/// Checks each QP's slots that the burst wrote: all of them when the QP posted no more messages
/// than it has slots, else every slot (holding the last `slots` messages). Slot `k` of QP `q`
/// holds the pattern of stream `q` at offset `k * slot_bytes`.
pub(super) fn check_regions(set: &QpSet, seed: u64, posted_per_qp: &[u64]) -> Verdict {
    let regions: Vec<&[u8]> = (0..set.qps.len()).map(|q| set.region(q)).collect();
    check_slots(&regions, set.slot_bytes(), seed, posted_per_qp)
}

/// [`check_regions`] on plain memory: `regions[q]` is QP `q`'s slots.
fn check_slots(regions: &[&[u8]], slot_bytes: u64, seed: u64, posted_per_qp: &[u64]) -> Verdict {
    let mut verified = 0;
    for (q, region) in regions.iter().enumerate() {
        let slots = region.len() as u64 / slot_bytes.max(1);
        let posted = posted_per_qp.get(q).copied().unwrap_or(slots);
        let written = posted.min(slots);
        let bytes = (written * slot_bytes) as usize; // within the region, which is in memory
        if let Err(m) = pattern::verify(seed, q as u32, &region[..bytes]) {
            return Verdict {
                verified_messages: verified,
                detail: Some(format!(
                    "QP {q}, message slot {} (byte {} of the message): expected {:#04x}, found {:#04x}",
                    m.offset as u64 / slot_bytes,
                    m.offset as u64 % slot_bytes,
                    m.expected,
                    m.found
                )),
            };
        }
        verified += written;
    }
    Verdict {
        verified_messages: verified,
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the responder's memory holds after a burst: the last write to each slot.
    fn written(seed: u64, qp: u32, slots: usize, size: usize) -> Vec<u8> {
        let mut region = vec![0u8; slots * size];
        pattern::fill(seed, qp, &mut region);
        region
    }

    #[test]
    fn every_message_is_checked_at_its_own_offset() {
        let (size, seed) = (4096usize, 42);
        let good = written(seed, 0, 8, size);
        let verdict = check_slots(&[&good], size as u64, seed, &[8]);
        assert_eq!(
            verdict,
            Verdict {
                verified_messages: 8,
                detail: None
            }
        );
        // One intermediate WRITE lost: its slot still holds the previous burst's data.
        let mut lost = good.clone();
        pattern::fill(seed - 1, 0, &mut lost[3 * size..4 * size]);
        let verdict = check_slots(&[&lost], size as u64, seed, &[8]);
        assert_eq!(verdict.verified_messages, 0);
        let detail = verdict.detail.unwrap();
        assert!(detail.contains("message slot 3"), "{detail}");
        // A message written into the wrong slot does not verify either.
        let mut misplaced = good.clone();
        misplaced.copy_within(0..size, 5 * size);
        assert!(check_slots(&[&misplaced], size as u64, seed, &[8])
            .detail
            .is_some());
    }

    #[test]
    fn a_burst_longer_than_its_slots_is_checked_over_its_last_messages() {
        let (size, seed) = (1024usize, 7);
        let regions = [written(seed, 0, 4, size), written(seed, 1, 4, size)];
        let views: Vec<&[u8]> = regions.iter().map(Vec::as_slice).collect();
        // QP 0 posted 100 (the last 4 are checked), QP 1 only 2 (slots 2 and 3 never written).
        let verdict = check_slots(&views, size as u64, seed, &[100, 2]);
        assert_eq!(
            verdict,
            Verdict {
                verified_messages: 6,
                detail: None
            }
        );
    }
}
