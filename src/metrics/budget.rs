//! The series budget: a bound on the per-path series one node puts on `/metrics`, and what goes
//! when it is reached (docs/metrics.md, "Series budget").
//!
//! Pure bookkeeping over path keys, so the recorder (keyed by labels) and the cluster
//! simulation (keyed by numbers) run the same rules:
//! - a path is **on `/metrics`** from its first probe; it leaves when it is out of the selection
//!   and its last probe is older than `ttl` ([`SeriesBudget::expire`]), or when the config drops
//!   its peer;
//! - each path counts its series: the **base** ones (success, the last-burst gauges, counters
//!   by result and reason) and the **detail** ones (its port-counter increases of the traffic
//!   kinds, bytes and packets, which repeat what `rdma_probe_bytes_total` says with the port's
//!   other traffic added);
//! - when a probe would take the total above the limit, first the **detail of every path** goes
//!   (once, until the budget is reset: a reload), then the **derived** series of every path (its
//!   message rates, setup time and byte and message totals: what the others imply, or only
//!   diagnose), then **whole paths**, the lowest first: sampled
//!   (other-group) paths before preferred (same-group or full-mesh) ones, and within each the
//!   one probed longest ago. A path never makes room by evicting one that ranks above it; a
//!   probe that cannot fit is not exported (the probe itself ran and counts in the schedule).
//!
//! A path kept off `/metrics` for lack of room, or taken off while in the selection less than
//! half its TTL after its last probe, counts in [`dropped`]
//! (`rdma_probe_series_budget_dropped_paths_total`): a result that was not watched for long.
//! Any other path taken off to make room (out of the selection: its round is over; or on
//! `/metrics` for half its TTL already) left a little before its TTL, which is what the
//! budget is for: it counts in [`expired_early`]
//! (`rdma_probe_series_budget_expired_early_paths_total`).
//!
//! [`dropped`]: SeriesBudget::dropped
//! [`expired_early`]: SeriesBudget::expired_early

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Per-path series of one node at most, unless configured: the selection of a 32-node ToR on
/// 8 rails fits once the port traffic and derived series are shed (248 same-ToR paths at 15
/// series with their capacity gauges, 80 sampled paths at 11: 4,600), with room for some of
/// the last round's sampled paths, and the node's own series and `peer_info` stay under 5,000
/// in all (docs/scale.md, "Series").
pub const DEFAULT_SERIES_BUDGET: usize = 4750;
/// How long a path out of the selection stays on `/metrics` after its last probe, unless
/// configured: one round of the selection, so a sampled path is on `/metrics` for about as
/// long as the round it was probed in lasts, and a failed one long enough for an alert.
pub const DEFAULT_SERIES_TTL: Duration = Duration::from_secs(600);

/// The series of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathSeries {
    /// Everything but the detail and the derived series.
    pub base: usize,
    /// The port-counter increases of the traffic kinds (shed first).
    pub detail: usize,
    /// Series the others imply or that only diagnose (shed second): message rates, setup time,
    /// byte and message totals.
    pub derived: usize,
}

/// What a probe's result may do (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission<K> {
    /// The result is exported (else its path is off `/metrics`, and was taken off if it was on).
    pub admitted: bool,
    /// Paths taken off `/metrics` to make room.
    pub evicted: Vec<K>,
    /// The detail of every path went, now (and stays off until [`SeriesBudget::reset`]).
    pub shed_detail: bool,
    /// The derived series of every path went, now (likewise).
    pub shed_derived: bool,
}

/// A path on `/metrics`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    series: PathSeries,
    last: Duration,
    preferred: bool,
}

/// The series budget of one node; see the module docs.
#[derive(Debug, Clone)]
pub struct SeriesBudget<K> {
    limit: usize,
    /// Of the limit, what the node's other budgeted series take ([`SeriesBudget::reserve`]).
    reserved: usize,
    ttl: Duration,
    paths: BTreeMap<K, Entry>,
    /// `(last probe, key)` of every path on `/metrics`, sampled ones and preferred ones apart:
    /// eviction order, and expiry order.
    sampled: BTreeSet<(Duration, K)>,
    preferred: BTreeSet<(Duration, K)>,
    /// At most the last probe of every path on `/metrics` ([`Duration::MAX`] when none is):
    /// lets [`expire`](Self::expire), which runs at every probe, return without walking to the
    /// first entry of each order when nothing can be stale.
    oldest: Duration,
    base: usize,
    detail: usize,
    derived: usize,
    /// What has been shed: 0 nothing, 1 the detail, 2 the detail and the derived series.
    shed: u8,
    dropped: u64,
    expired_early: u64,
}

impl<K: Clone + Ord> SeriesBudget<K> {
    pub fn new(limit: usize, ttl: Duration) -> Self {
        SeriesBudget {
            limit,
            reserved: 0,
            ttl,
            paths: BTreeMap::new(),
            sampled: BTreeSet::new(),
            preferred: BTreeSet::new(),
            oldest: Duration::MAX,
            base: 0,
            detail: 0,
            derived: 0,
            shed: 0,
            dropped: 0,
            expired_early: 0,
        }
    }

    /// New limits (a reload); the detail may come back. What is on `/metrics` stays until the
    /// next probe that needs room or the next expiry.
    pub fn reset(&mut self, limit: usize, ttl: Duration) {
        self.limit = limit;
        self.ttl = ttl;
        self.shed = 0;
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// How long a path out of the selection stays after its last probe.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Keeps `series` of the limit for series that are not a path's but count in the budget
    /// (the judged families: docs/metrics.md, "Judged paths"). Like a new limit, it applies
    /// from the next probe that needs room.
    pub fn reserve(&mut self, series: usize) {
        self.reserved = series;
    }

    /// What the paths may take: the limit less what is reserved.
    fn paths_limit(&self) -> usize {
        self.limit.saturating_sub(self.reserved)
    }

    /// Series of the paths on `/metrics` now.
    pub fn series(&self) -> usize {
        self.base
            + if self.shed < 1 { self.detail } else { 0 }
            + if self.shed < 2 { self.derived } else { 0 }
    }

    /// Paths on `/metrics` now.
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// Whether `key` is on `/metrics`.
    pub fn contains(&self, key: &K) -> bool {
        self.paths.contains_key(key)
    }

    /// The detail series are off (the budget was reached since the last reset).
    pub fn detail_shed(&self) -> bool {
        self.shed >= 1
    }

    /// The derived series are off too.
    pub fn derived_shed(&self) -> bool {
        self.shed >= 2
    }

    /// Paths kept off `/metrics` for lack of room, or taken off early in their watch (see the
    /// module docs), since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Paths taken off `/metrics` to make room a little before their TTL (see the module
    /// docs), since the start.
    pub fn expired_early(&self) -> u64 {
        self.expired_early
    }

    /// Distinct values of `peer(key)` over the paths on `/metrics` (one `peer_info` each).
    pub fn peers<P: Ord>(&self, peer: impl Fn(&K) -> P) -> usize {
        self.paths.keys().map(peer).collect::<BTreeSet<_>>().len()
    }

    /// A probe of `key` at `now` leaves it with `series`; `preferred`: a same-group or
    /// full-mesh path; `selected`: whether a path is in the selection now.
    pub fn record(
        &mut self,
        key: K,
        now: Duration,
        preferred: bool,
        series: PathSeries,
        selected: impl Fn(&K) -> bool,
    ) -> Admission<K> {
        let mut admission = Admission {
            admitted: true,
            evicted: Vec::new(),
            shed_detail: false,
            shed_derived: false,
        };
        // The common case: a path on /metrics probed again, its series unchanged.
        if let Some(entry) = self.paths.get_mut(&key) {
            if entry.series == series && entry.preferred == preferred {
                let old = (entry.last, key.clone());
                entry.last = now;
                // `oldest` stays at most every last probe, also when the clock steps back.
                self.oldest = self.oldest.min(now);
                let order = self.order_mut(preferred);
                order.remove(&old);
                order.insert((now, key));
                return admission;
            }
        }
        self.take(&key);
        while self.series() + self.size(&series) > self.paths_limit() && self.shed < 2 {
            self.shed += 1;
            match self.shed {
                1 => admission.shed_detail = true,
                _ => admission.shed_derived = true,
            }
        }
        let needed = self.size(&series);
        let room = self.paths_limit().saturating_sub(self.series());
        if needed > room {
            // The lowest paths that rank below this one, as many as make room: all or none.
            let rank = (preferred, now);
            let mut freed = 0;
            let mut victims = Vec::new();
            let lowest_first = (self.sampled.iter().map(|(last, k)| (false, last, k)))
                .chain(self.preferred.iter().map(|(last, k)| (true, last, k)));
            for (p, last, k) in lowest_first {
                if (p, *last) >= rank || needed <= room + freed {
                    break;
                }
                freed += self.paths.get(k).map_or(0, |e| self.size(&e.series));
                victims.push((*last, k.clone()));
            }
            if needed > room + freed {
                // Kept off (and taken off, if it was on).
                self.dropped += 1;
                admission.admitted = false;
                return admission;
            }
            for (last, k) in victims {
                self.take(&k);
                if selected(&k) && now.saturating_sub(last) < self.ttl / 2 {
                    self.dropped += 1;
                } else {
                    self.expired_early += 1;
                }
                admission.evicted.push(k);
            }
        }
        self.put(
            key,
            Entry {
                series,
                last: now,
                preferred,
            },
        );
        admission
    }

    /// Takes off `/metrics` the paths out of the selection (`selected` false) whose last probe
    /// is older than the TTL at `now`, and returns them.
    pub fn expire(&mut self, now: Duration, selected: impl Fn(&K) -> bool) -> Vec<K> {
        let Some(cutoff) = now.checked_sub(self.ttl) else {
            return Vec::new();
        };
        if self.oldest >= cutoff {
            return Vec::new();
        }
        // Each order is by last probe: the stale paths come first.
        let mut stale = Vec::new();
        for order in [&self.sampled, &self.preferred] {
            for (last, key) in order {
                if *last >= cutoff {
                    break;
                }
                if !selected(key) {
                    stale.push(key.clone());
                }
            }
        }
        for key in &stale {
            self.take(key);
        }
        self.oldest = [&self.sampled, &self.preferred]
            .into_iter()
            .filter_map(|order| order.first().map(|(last, _)| *last))
            .min()
            .unwrap_or(Duration::MAX);
        stale
    }

    /// Takes `key` off (its peer left the config).
    pub fn remove(&mut self, key: &K) {
        self.take(key);
    }

    /// What a path's series count for now (what is shed does not).
    fn size(&self, series: &PathSeries) -> usize {
        series.base
            + if self.shed < 1 { series.detail } else { 0 }
            + if self.shed < 2 { series.derived } else { 0 }
    }

    /// The order of a rank.
    fn order_mut(&mut self, preferred: bool) -> &mut BTreeSet<(Duration, K)> {
        if preferred {
            &mut self.preferred
        } else {
            &mut self.sampled
        }
    }

    fn take(&mut self, key: &K) -> Option<Entry> {
        let entry = self.paths.remove(key)?;
        self.order_mut(entry.preferred)
            .remove(&(entry.last, key.clone()));
        self.base -= entry.series.base;
        self.detail -= entry.series.detail;
        self.derived -= entry.series.derived;
        Some(entry)
    }

    fn put(&mut self, key: K, entry: Entry) {
        self.oldest = self.oldest.min(entry.last);
        self.base += entry.series.base;
        self.detail += entry.series.detail;
        self.derived += entry.series.derived;
        self.order_mut(entry.preferred)
            .insert((entry.last, key.clone()));
        self.paths.insert(key, entry);
    }
}

#[cfg(test)]
mod tests;
