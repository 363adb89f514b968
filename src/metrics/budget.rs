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
//! Every path taken off or kept off `/metrics` for lack of room counts in [`dropped`]
//! (`rdma_probe_series_budget_dropped_paths_total`).
//!
//! [`dropped`]: SeriesBudget::dropped

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::time::Duration;

/// Per-path series of one node at most, unless configured: with ~12 base series a path, about
/// 370 paths (a 32-node ToR on 8 rails and the sampled paths of the last round), and room left
/// under 5,000 for the node's own series.
pub const DEFAULT_SERIES_BUDGET: usize = 4500;
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

/// FNV-1a: the keys are the node's own paths (labels from its config, or numbers), not input
/// an attacker chooses, so a fast hash without flooding protection is enough; SipHash cost
/// the simulation of ten thousand nodes a fifth of its time.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xCBF2_9CE4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // One multiply-xorshift round per word instead of eight byte rounds.
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 ^= self.0 >> 29;
    }
}

/// A `HashMap` with [`Fnv`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A path on `/metrics`. Its last probe is in its slot (see [`Order`]), not here.
#[derive(Debug, Clone, Copy)]
struct Entry {
    series: PathSeries,
    preferred: bool,
    /// The `seq` of its live slot: any other slot of the same key is stale.
    seq: u32,
}

/// One probe of a path, in the order of its rank.
#[derive(Debug, Clone)]
struct Slot<K> {
    /// The last probe, a [`Duration`] taken apart so that `seq` fits in its padding: 16 bytes
    /// and the key, not 24 (the simulation of ten thousand nodes holds millions of slots).
    secs: u64,
    nanos: u32,
    /// Taken from one counter per budget, so that two probes of one path at the same instant
    /// leave slots that can still be told apart. A `u32` runs out after four billion probes:
    /// then the live slots are numbered again ([`SeriesBudget::renumber`]).
    seq: u32,
    key: K,
}

impl<K> Slot<K> {
    fn new(last: Duration, key: K, seq: u32) -> Self {
        Slot {
            secs: last.as_secs(),
            nanos: last.subsec_nanos(),
            seq,
            key,
        }
    }

    fn last(&self) -> Duration {
        Duration::new(self.secs, self.nanos)
    }

    /// Where it goes in its order.
    fn rank(&self) -> (u64, u32, &K) {
        (self.secs, self.nanos, &self.key)
    }
}

/// The paths of one rank (sampled, or preferred) by `(last probe, key)`: eviction order, and
/// expiry order.
///
/// Time moves forward (the simulation's clock only ever does; the recorder's is the wall clock,
/// which can step back), so a probe almost always lands at the back: a path probed again gets
/// a new slot there and leaves its old one behind, stale, instead of being moved (a search
/// tree's remove and insert cost several cache misses and the odd allocation, at every probe).
/// Stale slots are skipped by every walk, dropped as soon as they reach the front, and all
/// dropped at once when they outnumber the live ones, so the memory stays in proportion to the
/// paths on `/metrics`. The slots, stale ones included, stay sorted: the live ones are in
/// exactly the order a sorted set of `(last probe, key)` would hold.
#[derive(Debug, Clone)]
struct Order<K> {
    /// Sorted by `(last, key)`; the front one, if any, is live.
    slots: VecDeque<Slot<K>>,
    /// Slots that are live: paths of this rank on `/metrics`.
    live: usize,
}

/// The entry whose slot `slot` is, if `slot` is live.
fn live<'a, K: Eq + Hash>(paths: &'a FastMap<K, Entry>, slot: &Slot<K>) -> Option<&'a Entry> {
    paths.get(&slot.key).filter(|entry| entry.seq == slot.seq)
}

impl<K: Eq + Hash + Ord> Order<K> {
    fn new() -> Self {
        Order {
            slots: VecDeque::new(),
            live: 0,
        }
    }

    /// The last probe of the path probed longest ago (the front slot is live).
    fn first(&self) -> Option<Duration> {
        self.slots.front().map(Slot::last)
    }

    /// Adds the live slot of a path just put on `/metrics` or probed again.
    fn insert(&mut self, slot: Slot<K>) {
        match self.slots.back() {
            Some(back) if back.rank() > slot.rank() => {
                self.insert_sorted(slot);
            }
            _ => self.slots.push_back(slot),
        }
    }

    /// Only a clock that stepped back, or two paths probed at the same instant out of key
    /// order, need this: out of line, so that the push at the back stays small.
    #[cold]
    #[inline(never)]
    fn insert_sorted(&mut self, slot: Slot<K>) {
        let at = self.slots.partition_point(|s| s.rank() <= slot.rank());
        self.slots.insert(at, slot);
    }

    /// The slot `seq` went stale (its path was probed again, or left `/metrics`): drops it if
    /// it is at the front, with the stale ones behind it, so that the front stays live and
    /// [`first`](Self::first) exact; compacts once stale slots outnumber live ones.
    fn retire(&mut self, seq: u32, paths: &FastMap<K, Entry>) {
        if self.slots.front().is_some_and(|slot| slot.seq == seq) {
            self.pop_stale_front(paths);
        }
        if self.slots.len() - self.live > self.live {
            self.compact(paths);
        }
    }

    fn pop_stale_front(&mut self, paths: &FastMap<K, Entry>) {
        self.slots.pop_front();
        while self
            .slots
            .front()
            .is_some_and(|slot| live(paths, slot).is_none())
        {
            self.slots.pop_front();
        }
        self.give_back_room();
    }

    /// Drops every stale slot. Each compaction costs at most twice the stale slots it drops:
    /// O(1) a probe over time.
    #[cold]
    #[inline(never)]
    fn compact(&mut self, paths: &FastMap<K, Entry>) {
        self.slots.retain(|slot| live(paths, slot).is_some());
        self.give_back_room();
    }

    /// Gives back the room of a crowd of paths that has gone, but not the room the slots need
    /// between two compactions (up to twice the live ones), or the slots would shrink and grow
    /// again every round.
    fn give_back_room(&mut self) {
        let keep = 4 * self.slots.len().max(8);
        if self.slots.capacity() > 2 * keep {
            self.slots.shrink_to(keep);
        }
    }
}

/// The series budget of one node; see the module docs.
#[derive(Debug, Clone)]
pub struct SeriesBudget<K> {
    limit: usize,
    ttl: Duration,
    paths: FastMap<K, Entry>,
    /// The paths on `/metrics`, sampled ones and preferred ones apart.
    sampled: Order<K>,
    preferred: Order<K>,
    /// The `seq` of the next slot.
    next_seq: u32,
    base: usize,
    detail: usize,
    derived: usize,
    /// What has been shed: 0 nothing, 1 the detail, 2 the detail and the derived series.
    shed: u8,
    dropped: u64,
}

impl<K: Clone + Eq + Hash + Ord> SeriesBudget<K> {
    pub fn new(limit: usize, ttl: Duration) -> Self {
        SeriesBudget {
            limit,
            ttl,
            paths: FastMap::default(),
            sampled: Order::new(),
            preferred: Order::new(),
            next_seq: 0,
            base: 0,
            detail: 0,
            derived: 0,
            shed: 0,
            dropped: 0,
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

    /// Paths taken off or kept off `/metrics` for lack of room, since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Distinct values of `peer(key)` over the paths on `/metrics` (one `peer_info` each).
    pub fn peers<P: Eq + Hash>(&self, peer: impl Fn(&K) -> P) -> usize {
        self.paths
            .keys()
            .map(peer)
            .collect::<std::collections::HashSet<_, BuildHasherDefault<Fnv>>>()
            .len()
    }

    /// Starts loading what the next probes' [`record`](Self::record) and
    /// [`expire`](Self::expire) read: every path's entry and both ends of each order. A hint
    /// (see [`prefetch`](crate::schedule::prefetch)) for a caller that keeps many budgets and
    /// knows which it will use next (the cluster simulation).
    pub fn prefetch(&self) {
        use crate::schedule::prefetch;
        for entry in self.paths.values() {
            prefetch(entry);
        }
        for order in [&self.sampled, &self.preferred] {
            for slot in [order.slots.front(), order.slots.back()]
                .into_iter()
                .flatten()
            {
                prefetch(slot);
            }
        }
    }

    /// A probe of `key` at `now` leaves it with `series`; `preferred`: a same-group or
    /// full-mesh path.
    pub fn record(
        &mut self,
        key: K,
        now: Duration,
        preferred: bool,
        series: PathSeries,
    ) -> Admission<K> {
        let mut admission = Admission {
            admitted: true,
            evicted: Vec::new(),
            shed_detail: false,
            shed_derived: false,
        };
        // Taken before the path's entry is borrowed: renumbering (when the counter runs out)
        // needs every entry. A path kept off wastes it.
        let seq = self.take_seq();
        match self.paths.get_mut(&key) {
            // The common case: a path on /metrics probed again, its series unchanged.
            Some(entry) if entry.series == series && entry.preferred == preferred => {
                let stale = std::mem::replace(&mut entry.seq, seq);
                let (order, paths) = self.order_mut(preferred);
                order.insert(Slot::new(now, key, seq));
                order.retire(stale, paths);
                return admission;
            }
            Some(_) => {
                self.take(&key);
            }
            // A path not on /metrics: nothing to take off (and no second lookup to find that).
            None => {}
        }
        while self.series() + self.size(&series) > self.limit && self.shed < 2 {
            self.shed += 1;
            match self.shed {
                1 => admission.shed_detail = true,
                _ => admission.shed_derived = true,
            }
        }
        let needed = self.size(&series);
        let room = self.limit.saturating_sub(self.series());
        if needed > room {
            // The lowest paths that rank below this one, as many as make room: all or none.
            let Some(victims) = self.victims(preferred, now, needed - room) else {
                // Kept off (and taken off, if it was on).
                self.dropped += 1;
                admission.admitted = false;
                return admission;
            };
            for k in victims {
                self.take(&k);
                self.dropped += 1;
                admission.evicted.push(k);
            }
        }
        self.put(key, now, preferred, series, seq);
        admission
    }

    /// Takes off `/metrics` the paths out of the selection (`selected` false) whose last probe
    /// is older than the TTL at `now`, and returns them.
    pub fn expire(&mut self, now: Duration, selected: impl Fn(&K) -> bool) -> Vec<K> {
        let Some(cutoff) = now.checked_sub(self.ttl) else {
            return Vec::new();
        };
        // Runs at every probe: most of the time nothing is stale, which the fronts tell.
        if self.oldest() >= cutoff {
            return Vec::new();
        }
        // Each order is by last probe: the stale paths come first.
        let mut stale = Vec::new();
        for order in [&self.sampled, &self.preferred] {
            for slot in &order.slots {
                if slot.last() >= cutoff {
                    break;
                }
                if live(&self.paths, slot).is_some() && !selected(&slot.key) {
                    stale.push(slot.key.clone());
                }
            }
        }
        for key in &stale {
            self.take(key);
        }
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

    /// The last probe of the path probed longest ago ([`Duration::MAX`] when none is on
    /// `/metrics`).
    fn oldest(&self) -> Duration {
        let sampled = self.sampled.first().unwrap_or(Duration::MAX);
        let preferred = self.preferred.first().unwrap_or(Duration::MAX);
        sampled.min(preferred)
    }

    /// The paths to take off, lowest first, so that `short` more series fit for a path of rank
    /// `(preferred, now)`; `None` if those that rank below it are not enough.
    fn victims(&self, preferred: bool, now: Duration, short: usize) -> Option<Vec<K>> {
        let rank = (preferred, now);
        let mut freed = 0;
        let mut victims = Vec::new();
        let lowest_first = [(false, &self.sampled), (true, &self.preferred)]
            .into_iter()
            .flat_map(|(p, order)| order.slots.iter().map(move |slot| (p, slot)));
        for (p, slot) in lowest_first {
            // The orders are sorted, so a stale slot that ranks too high ends the walk as well
            // as a live one would.
            if (p, slot.last()) >= rank || freed >= short {
                break;
            }
            if let Some(entry) = live(&self.paths, slot) {
                freed += self.size(&entry.series);
                victims.push(slot.key.clone());
            }
        }
        (freed >= short).then_some(victims)
    }

    /// The order of a rank, and the paths, borrowed apart.
    fn order_mut(&mut self, preferred: bool) -> (&mut Order<K>, &FastMap<K, Entry>) {
        let order = if preferred {
            &mut self.preferred
        } else {
            &mut self.sampled
        };
        (order, &self.paths)
    }

    fn take(&mut self, key: &K) -> Option<Entry> {
        let entry = self.paths.remove(key)?;
        self.base -= entry.series.base;
        self.detail -= entry.series.detail;
        self.derived -= entry.series.derived;
        let (order, paths) = self.order_mut(entry.preferred);
        order.live -= 1;
        order.retire(entry.seq, paths);
        Some(entry)
    }

    fn put(&mut self, key: K, now: Duration, preferred: bool, series: PathSeries, seq: u32) {
        self.base += series.base;
        self.detail += series.detail;
        self.derived += series.derived;
        self.paths.insert(
            key.clone(),
            Entry {
                series,
                preferred,
                seq,
            },
        );
        let (order, _) = self.order_mut(preferred);
        order.live += 1;
        order.insert(Slot::new(now, key, seq));
    }

    /// A `seq` that no slot has.
    fn take_seq(&mut self) -> u32 {
        if self.next_seq == u32::MAX {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Drops the stale slots and numbers the live ones from 0 again, once the counter is
    /// spent: a stale slot left with an old number could match its path's entry again.
    #[cold]
    #[inline(never)]
    fn renumber(&mut self) {
        let paths = &mut self.paths;
        let mut seq = 0;
        for order in [&mut self.sampled, &mut self.preferred] {
            order.slots.retain(|slot| live(paths, slot).is_some());
            for slot in &mut order.slots {
                if let Some(entry) = paths.get_mut(&slot.key) {
                    entry.seq = seq;
                }
                slot.seq = seq;
                // Four billion paths would not fit in memory.
                seq += 1;
            }
            order.give_back_room();
        }
        self.next_seq = seq;
    }
}

#[cfg(test)]
mod tests;
