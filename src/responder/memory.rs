//! The pinned-memory budget: what a session's regions take, and its reservation against
//! `max_pinned_bytes`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::control::SessionRequest;
use crate::metrics::SessionResult;
use crate::reason::ErrorReason;

use super::failure::{failure, SessionFailure};
use super::served::Shared;

/// Memory pinned for one session, returned to the budget when dropped.
pub(super) struct PinnedReservation {
    pub(super) pinned: Arc<AtomicU64>,
    pub(super) bytes: u64,
}

impl PinnedReservation {
    pub(super) fn take(pinned: &Arc<AtomicU64>, bytes: u64, limit: u64) -> Option<Self> {
        pinned
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            })
            .ok()?;
        Some(PinnedReservation {
            pinned: Arc::clone(pinned),
            bytes,
        })
    }
}

impl Drop for PinnedReservation {
    fn drop(&mut self) {
        self.pinned.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Reserves the memory `request` would pin within `max_pinned_bytes`, or refuses it as `limit`.
pub(super) fn reserve_session_memory(
    shared: &Shared,
    request: &SessionRequest,
) -> Result<PinnedReservation, SessionFailure> {
    let settings = &shared.settings;
    let bytes = session_bytes(request, settings.max_session_bytes);
    PinnedReservation::take(&shared.pinned, bytes, settings.max_pinned_bytes).ok_or_else(|| {
        SessionFailure {
            refusal: Some(SessionResult::Limit),
            ..failure(
                ErrorReason::PeerError,
                format!(
                    "responder pinned-memory limit: {bytes} more bytes would exceed {}",
                    settings.max_pinned_bytes
                ),
            )
        }
    })
}

/// The memory a session for `request` pins: its granted slots of one message on each QP.
fn session_bytes(request: &SessionRequest, max_session_bytes: u64) -> u64 {
    request
        .message_size
        .saturating_mul(granted_slots(request, max_session_bytes))
        .saturating_mul(u64::from(request.qps))
}

/// Slots per QP the responder grants: what the prober asked for (`region_bytes` per QP), within
/// the per-session memory budget, and at least one.
pub(super) fn granted_slots(request: &SessionRequest, max_session_bytes: u64) -> u64 {
    let size = request.message_size.max(1);
    let asked = request.region_bytes / size;
    let affordable = max_session_bytes / size.saturating_mul(u64::from(request.qps.max(1)));
    asked.min(affordable).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::responder::test_support::request;

    #[test]
    fn pinned_memory_is_bounded_across_sessions_and_returned_when_they_end() {
        let pinned = Arc::new(AtomicU64::new(0));
        let first = PinnedReservation::take(&pinned, 600, 1000).unwrap();
        assert!(PinnedReservation::take(&pinned, 401, 1000).is_none());
        let second = PinnedReservation::take(&pinned, 400, 1000).unwrap();
        assert_eq!(pinned.load(Ordering::Acquire), 1000);
        assert!(PinnedReservation::take(&pinned, 1, 1000).is_none());
        drop(first);
        assert_eq!(pinned.load(Ordering::Acquire), 400);
        assert!(PinnedReservation::take(&pinned, 600, 1000).is_some());
        drop(second);
        assert_eq!(pinned.load(Ordering::Acquire), 0);
        // A request that would overflow the counter is refused, not wrapped.
        let _held = PinnedReservation::take(&pinned, 1, u64::MAX).unwrap();
        assert!(PinnedReservation::take(&pinned, u64::MAX, u64::MAX).is_none());
    }

    #[test]
    fn slots_follow_the_request_within_the_session_budget() {
        // 200 messages of 64 KiB on one QP fit a 64 MiB budget: one slot each.
        assert_eq!(
            granted_slots(&request(1, 65536, 200 * 65536), 64 << 20),
            200
        );
        // 4 QPs x 1000 slots x 64 KiB do not: 64 MiB / (4 x 64 KiB) = 256 each.
        assert_eq!(
            granted_slots(&request(4, 65536, 1000 * 65536), 64 << 20),
            256
        );
        // A message larger than the budget still gets its one slot.
        assert_eq!(granted_slots(&request(1, 1 << 30, 1 << 30), 64 << 20), 1);
    }
}
