//! How much memory a session asks for: message slots per QP, sized by the planned burst within
//! the session budget.

use crate::burst::BurstLength;

use super::ProbeSettings;

/// The most memory a session with these settings registers (pins) on the prober's side: its
/// QPs' slots of one message each. The responder registers at most the same.
pub fn session_region_bytes(settings: &ProbeSettings) -> u64 {
    wanted_slots(settings)
        .saturating_mul(settings.message_size.max(1))
        .saturating_mul(u64::from(settings.qps.max(1)))
}

/// Message slots per QP to ask for: one per message of the burst (every message verified) when
/// its message count is known — a count or bytes burst, or a duration burst at an absolute rate
/// (with a little room for the pacer's allowance) — else as many as the memory budget allows;
/// never more than the budget, and at least one. Sizing by the plan keeps a paced exporter's
/// sessions small: 500 ms at 20 Mb/s is 20 slots of 64 KiB, not the 64 MiB budget.
pub(super) fn wanted_slots(settings: &ProbeSettings) -> u64 {
    let size = settings.message_size.max(1);
    let qps = u64::from(settings.qps.max(1));
    let affordable = settings.max_session_bytes / size.saturating_mul(qps);
    let needed = planned_messages(settings).map_or(u64::MAX, |total| total.div_ceil(qps));
    affordable.min(needed).max(1)
}

/// How many messages the settings' burst sends, when that is known before the session exists.
fn planned_messages(settings: &ProbeSettings) -> Option<u64> {
    let size = settings.message_size.max(1);
    if let Some(total) = settings.length.total_messages(size) {
        return Some(total);
    }
    let BurstLength::Duration(duration) = settings.length else {
        return None;
    };
    // A percentage needs the link rate of both ends, known only after the handshake.
    let rate = settings.rate_limit?.resolve(size, None).ok()?;
    let messages = (duration.as_secs_f64() * rate.messages_per_second()).ceil();
    // The pacer may run up to its allowance ahead (at least one message), and duration mode
    // posts one more signaled WRITE at the end.
    Some((messages * 1.01).ceil() as u64 + 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::control::AuthMode;
    use crate::units::RateLimit;
    use crate::verbs::LocalPort;

    use super::super::DEFAULT_MAX_SESSION_BYTES;

    fn settings(length: BurstLength, rate_limit: Option<RateLimit>) -> ProbeSettings {
        ProbeSettings {
            target: "192.0.2.12:18516".into(),
            node_name: "node1".into(),
            local: LocalPort {
                device: None,
                port: 1,
                gid_index: None,
            },
            rail: None,
            message_size: 65536,
            length,
            rate_limit,
            qps: 1,
            tx_depth: 128,
            cq_mod: None,
            post_list: 1,
            mtu: None,
            traffic_class: 0,
            service_level: 0,
            qp_timeout: 14,
            auth: AuthMode::None,
            timeout: Duration::from_secs(10),
            max_session_bytes: DEFAULT_MAX_SESSION_BYTES,
            busy_poll: false,
            rdma_networks: Vec::new(),
        }
    }

    #[test]
    fn session_memory_follows_the_planned_burst() {
        let half_second = BurstLength::Duration(Duration::from_millis(500));
        // 500 ms at 20 Mb/s = 19.07 messages of 64 KiB: 20, plus room.
        let paced = settings(half_second, Some(RateLimit::BitsPerSecond(20e6)));
        assert_eq!(wanted_slots(&paced), 23);
        // A count: one slot per message, split over the QPs.
        let mut count = settings(BurstLength::Messages(300), None);
        assert_eq!(wanted_slots(&count), 300);
        count.qps = 4;
        assert_eq!(wanted_slots(&count), 75);
        // Unknown in advance (unpaced, or a percentage of a link not known yet): the budget.
        let budget = DEFAULT_MAX_SESSION_BYTES / 65536;
        assert_eq!(wanted_slots(&settings(half_second, None)), budget);
        let percent = settings(half_second, Some(RateLimit::PercentOfLink(25.0)));
        assert_eq!(wanted_slots(&percent), budget);
        // Never more than the budget, never none.
        let huge = settings(BurstLength::Messages(1 << 40), None);
        assert_eq!(wanted_slots(&huge), budget);
        let mut tiny = settings(BurstLength::Messages(10), None);
        tiny.max_session_bytes = 1;
        assert_eq!(wanted_slots(&tiny), 1);
    }
}
