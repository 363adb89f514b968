//! When a device pings each of its targets: every `interval`, jittered so that a node's pings
//! (and a fleet's) spread out, never two closer than the device's rate cap allows. A target
//! stays while bursts keep refreshing it: one a burst session has not confirmed for `ttl` leaves,
//! and past `max_targets` the one confirmed longest ago makes room.
//!
//! Time is the caller's monotonic clock as a [`Duration`] since any fixed start. Pure:
//! unit-tested here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How a device's pings are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSettings {
    /// Each target's ping period.
    pub interval: Duration,
    /// Least time between two pings of the device (the inverse of its rate cap).
    pub min_gap: Duration,
    /// A target no burst session confirmed for this long leaves.
    pub ttl: Duration,
    /// The most targets a device pings.
    pub max_targets: usize,
}

/// Each period is `interval` ± this share of it.
const JITTER: f64 = 0.1;

#[derive(Debug, Clone, Copy)]
struct Entry {
    due: Duration,
    confirmed: Duration,
}

/// A device's ping targets and when each is next due.
#[derive(Debug)]
pub struct PingSchedule<K> {
    settings: ScheduleSettings,
    entries: BTreeMap<K, Entry>,
    /// `(due, target)` of every entry: the next one due is the first.
    queue: BTreeSet<(Duration, K)>,
    last_sent: Option<Duration>,
    rng: u64,
}

impl<K: Ord + Clone> PingSchedule<K> {
    /// `seed` spreads the first pings of different nodes differently.
    pub fn new(settings: ScheduleSettings, seed: u64) -> PingSchedule<K> {
        PingSchedule {
            settings,
            entries: BTreeMap::new(),
            queue: BTreeSet::new(),
            last_sent: None,
            rng: seed | 1,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// A burst session confirmed `key` at `now`: a new target is first due at a random point of
    /// its first interval. Returns the target that left to make room, if one did.
    pub fn confirm(&mut self, now: Duration, key: K) -> Option<K> {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.confirmed = now;
            return None;
        }
        let evicted = (self.entries.len() >= self.settings.max_targets)
            .then(|| self.oldest())
            .flatten();
        if let Some(old) = &evicted {
            self.remove(old);
        }
        let due = now + self.settings.interval.mul_f64(self.uniform());
        self.entries.insert(
            key.clone(),
            Entry {
                due,
                confirmed: now,
            },
        );
        self.queue.insert((due, key));
        evicted
    }

    fn oldest(&self) -> Option<K> {
        self.entries
            .iter()
            .min_by_key(|(_, e)| e.confirmed)
            .map(|(k, _)| k.clone())
    }

    pub fn remove(&mut self, key: &K) -> bool {
        match self.entries.remove(key) {
            Some(entry) => {
                self.queue.remove(&(entry.due, key.clone()));
                true
            }
            None => false,
        }
    }

    /// Removes the targets `keep` refuses; returns them.
    pub fn retain(&mut self, keep: impl Fn(&K) -> bool) -> Vec<K> {
        let gone: Vec<K> = self.entries.keys().filter(|k| !keep(k)).cloned().collect();
        for key in &gone {
            self.remove(key);
        }
        gone
    }

    /// Removes the targets not confirmed for `ttl` as of `now`; returns them.
    pub fn expire(&mut self, now: Duration) -> Vec<K> {
        let ttl = self.settings.ttl;
        let gone: Vec<K> = self
            .entries
            .iter()
            .filter(|(_, e)| now.saturating_sub(e.confirmed) >= ttl)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            self.remove(key);
        }
        gone
    }

    /// The next target to ping at `now`, if one is due and the rate cap allows; it is then due
    /// again one jittered interval later (from now, if it fell behind by more than one).
    pub fn next_due(&mut self, now: Duration) -> Option<K> {
        if self
            .last_sent
            .is_some_and(|t| now < t + self.settings.min_gap)
        {
            return None;
        }
        let (due, key) = self.queue.first().cloned()?;
        if due > now {
            return None;
        }
        self.queue.pop_first();
        let period = self
            .settings
            .interval
            .mul_f64(1.0 + JITTER * (2.0 * self.uniform() - 1.0));
        let next = if due + period > now {
            due + period
        } else {
            now + period
        };
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.due = next;
        }
        self.queue.insert((next, key.clone()));
        self.last_sent = Some(now);
        Some(key)
    }

    /// When a ping may next be due (`None` without targets).
    pub fn wake_at(&self) -> Option<Duration> {
        let (due, _) = self.queue.first()?;
        let allowed = self
            .last_sent
            .map_or(Duration::ZERO, |t| t + self.settings.min_gap);
        Some((*due).max(allowed))
    }

    /// A uniform number in [0, 1) (xorshift64*: spreading pings needs no better).
    fn uniform(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn settings() -> ScheduleSettings {
        ScheduleSettings {
            interval: 5 * S,
            min_gap: Duration::from_millis(1),
            ttl: 600 * S,
            max_targets: 3,
        }
    }

    /// Every ping sent from `from` to `to`, stepping 1 ms: (time, target).
    fn run(s: &mut PingSchedule<u32>, from: Duration, to: Duration) -> Vec<(Duration, u32)> {
        let mut sent = Vec::new();
        let mut now = from;
        while now < to {
            while let Some(k) = s.next_due(now) {
                sent.push((now, k));
            }
            now += Duration::from_millis(1);
        }
        sent
    }

    #[test]
    fn each_target_is_pinged_once_an_interval_jittered_within_ten_percent() {
        let mut s = PingSchedule::new(settings(), 7);
        for k in 0..3 {
            assert_eq!(s.confirm(Duration::ZERO, k), None);
        }
        let sent = run(&mut s, Duration::ZERO, 100 * S);
        for k in 0..3 {
            let times: Vec<Duration> = sent
                .iter()
                .filter(|(_, t)| *t == k)
                .map(|(at, _)| *at)
                .collect();
            // The first within the first interval, then one every 4.5..=5.5 s.
            assert!(times[0] < 5 * S, "{k}: first at {:?}", times[0]);
            assert!(
                (19..=21).contains(&times.len()),
                "{k}: {} pings",
                times.len()
            );
            let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                gaps.iter().all(|g| *g >= Duration::from_millis(4499) && *g <= Duration::from_millis(5501)),
                "{k}: {gaps:?}"
            );
            // Jittered: not all the same.
            assert!(gaps.iter().any(|g| *g != gaps[0]), "{k}: {gaps:?}");
        }
    }

    #[test]
    fn the_rate_cap_spaces_pings_that_fall_due_together() {
        let mut s = PingSchedule::new(
            ScheduleSettings {
                min_gap: Duration::from_millis(10),
                max_targets: 100,
                ..settings()
            },
            1,
        );
        for k in 0..100 {
            s.confirm(Duration::ZERO, k);
        }
        // All 100 fall due in the first 5 s; the cap lets one through every 10 ms.
        let sent = run(&mut s, 5 * S, 6 * S + Duration::from_millis(500));
        let gaps: Vec<Duration> = sent.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(
            gaps.iter().all(|g| *g >= Duration::from_millis(10)),
            "{gaps:?}"
        );
        let mut first: Vec<u32> = sent.iter().map(|(_, k)| *k).take(100).collect();
        first.sort_unstable();
        first.dedup();
        assert_eq!(first.len(), 100, "every target once before any twice");
        assert_eq!(s.wake_at().map(|w| w > 6 * S), Some(true));
    }

    #[test]
    fn targets_leave_when_unconfirmed_for_the_ttl_or_to_make_room() {
        let mut s = PingSchedule::new(settings(), 3);
        s.confirm(Duration::ZERO, 1);
        s.confirm(10 * S, 2);
        s.confirm(20 * S, 3);
        // Confirming 1 again keeps it: 2 is now the one confirmed longest ago.
        assert_eq!(s.confirm(30 * S, 1), None);
        assert_eq!(s.confirm(40 * S, 4), Some(2));
        assert!(!s.contains(&2) && s.len() == 3);
        assert_eq!(s.expire(619 * S), Vec::<u32>::new());
        assert_eq!(s.expire(620 * S), vec![3]);
        assert_eq!(s.retain(|k| *k != 4), vec![4]);
        assert_eq!(s.len(), 1);
        // A removed target is never due again.
        let sent = run(&mut s, 620 * S, 640 * S);
        assert!(sent.iter().all(|(_, k)| *k == 1), "{sent:?}");
        assert!(!sent.is_empty());
    }

    #[test]
    fn a_target_that_fell_behind_is_due_from_now_not_in_a_burst_of_catch_ups() {
        let mut s = PingSchedule::new(settings(), 5);
        s.confirm(Duration::ZERO, 1);
        // Nothing asked for a minute (a stalled thread): one ping now, the next an interval on.
        let sent = run(&mut s, 60 * S, 66 * S);
        assert_eq!(sent.len(), 2, "{sent:?}");
        assert_eq!(sent[0].0, 60 * S);
        assert!(sent[1].0 >= 60 * S + Duration::from_millis(4499));
        assert_eq!(PingSchedule::<u32>::new(settings(), 0).wake_at(), None);
    }
}
