//! Which paths each round: a bounded, rotating selection of the candidate peers.
//!
//! A full mesh costs every node `(nodes − 1) × rails` paths: 80,000 at 10,000 nodes with eight
//! rails, far beyond what a 5% duty cycle can probe in any useful time. So the peers (from the
//! config, later from discovery) are *candidates*, and each round of `round` length the
//! [`Selector`] hands the scheduler a bounded set (docs/scale.md, "Selection"):
//!
//! - **Small clusters** (at most `max_peers` candidates): every candidate on every local device,
//!   with the configured intervals: exactly [`rail_matched`](super::rail_matched).
//! - **Same group**: every peer with the node's own value of the `group_by` label (its ToR),
//!   every round, at the configured interval (longer if the budget needs it, [`fit_plans`]).
//!   A group larger than `max_peers` is itself rotated through, `max_peers` peers a round.
//! - **Other groups, shared by the group.** The spine links between two ToRs on a rail are
//!   covered by any one path between their nodes on that rail, so the members of a group split
//!   the (remote group, rail) pairs among themselves instead of drawing at random: round `k`
//!   takes the next `W` items of a sequence that visits every remote group in turn, each visit
//!   moving to the next (prober, responder) pair of that block of paths, so that over the
//!   rounds every single path between the two groups comes up. With `W` at least the number of
//!   other groups, every ordered (ToR pair, rail) is probed every round; each member's share
//!   is about `W / group size` paths per device and round (`sample`, raised to cover every
//!   remote group each round), and consecutive items go to different members and different
//!   responders, so no node is picked by many at once.
//!
//! Round numbers come from the wall clock (`unix time / round`), so the members of a group, which
//! all see the same candidate list, agree on who probes what without talking to each other.
//! [`Rotation`] keeps a sampled path that has not been probed by the end of its round until it
//! has been, so that a probe delayed past the round's end (budget, busy peers) is late, never
//! lost. [`Coverage`] is the bound the code guarantees, in rounds and intervals.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::budget::secs_to_duration;
use super::full_mesh::LocalDevice;
use super::path::{PathKey, PathPlan, ScheduleKey, MAX_INTERVAL};

/// The label that groups nodes, unless configured: the top-of-rack switch.
pub const DEFAULT_GROUP_BY: &str = "tor";
/// At most this many candidates: the full mesh. Also the most same-group peers a device probes
/// per round.
pub const DEFAULT_MAX_PEERS: usize = 32;
/// Other-group paths per local device and round, unless configured (raised to the group's share
/// of the remote groups).
pub const DEFAULT_SAMPLE: usize = 10;
/// How often the sample rotates, unless configured.
pub const DEFAULT_ROUND: Duration = Duration::from_secs(600);
/// Share of the duty-cycle budget the selection plans for: the rest absorbs bursts that take
/// longer than expected and due times that cluster, so the scheduler's stretch stays at 1 and
/// every sampled path is reached within its round.
pub const PLAN_FILL: f64 = 0.9;

/// Where a candidate peer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The `peers` list of the config.
    Config,
    /// Found by discovery (DNS, file lists).
    Discovered,
}

/// A peer that may be probed: its name (the `peer` label), its static labels (the group label
/// among them) and where it was found. How to reach it stays with the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub source: Source,
}

impl Candidate {
    pub fn new(name: impl Into<String>, labels: BTreeMap<String, String>, source: Source) -> Self {
        Candidate {
            name: name.into(),
            labels,
            source,
        }
    }
}

/// How the selection is bounded (the config's `selection` section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectionConfig {
    /// Nodes with the same value of this label form a group (a ToR); a node or peer without it
    /// is in the group of the unlabelled.
    pub group_by: String,
    /// Up to this many candidates every one is probed (the full mesh); beyond, this many
    /// same-group peers per round at most.
    pub max_peers: usize,
    /// Other-group paths per local device and round (at least the group's share, see
    /// [`Selector`]).
    pub sample: usize,
    /// Length of a round; the sample changes at each round.
    pub round: Duration,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        SelectionConfig {
            group_by: DEFAULT_GROUP_BY.to_owned(),
            max_peers: DEFAULT_MAX_PEERS,
            sample: DEFAULT_SAMPLE,
            round: DEFAULT_ROUND,
        }
    }
}

/// Why a path is in the selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Small cluster: every candidate, at the configured interval.
    FullMesh,
    /// A peer of the node's own group.
    SameGroup,
    /// One of this round's other-group paths: probed once in its round.
    Sampled,
}

impl Role {
    /// Paths whose series the series budget keeps before the sampled ones.
    pub fn is_preferred(self) -> bool {
        !matches!(self, Role::Sampled)
    }
}

/// A selected path and why: keyed by names ([`PathKey`]), or by numbers ([`PathIndex`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected<K = PathKey> {
    pub key: K,
    pub role: Role,
}

/// A path by numbers: the local device's place in the [`Selector`]'s device list and the peer's
/// place in the [`Layout`]'s node order ([`Layout::name`]). What the selection computes before
/// any name is built: the simulation selects for ten thousand nodes every round and keys its
/// paths by number, so it takes these and never builds a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathIndex {
    pub device: usize,
    pub peer: usize,
}

/// A group of nodes (one value of the group label), members in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    members: Vec<String>,
    /// Each member's place in the layout's node order.
    ids: Vec<usize>,
}

/// The cluster as the selection sees it: every node (this one included) in its group, and the
/// candidates in their given order. Every node builds the same layout from the same candidate
/// list, which is how the members of a group agree on their shares; one layout can be shared by
/// many [`Selector`]s (the simulation's ten thousand nodes).
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Every group, in order of the label's value.
    groups: Vec<Group>,
    /// Name → (group, index among its members).
    places: HashMap<String, (usize, usize)>,
    /// Every node in the given order (the full mesh probes in this order).
    order: Vec<String>,
}

impl Layout {
    /// The layout of `nodes` (name and labels; a repeated name counts once, with its first
    /// labels), grouped by the value of `group_by` (nodes without it form one group).
    pub fn new<'a>(
        nodes: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
        group_by: &str,
    ) -> Layout {
        let mut by_group: BTreeMap<&str, Vec<(String, usize)>> = BTreeMap::new();
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for (name, labels) in nodes {
            if !seen.insert(name) {
                continue;
            }
            let group = labels.get(group_by).map_or("", String::as_str);
            by_group
                .entry(group)
                .or_default()
                .push((name.to_owned(), order.len()));
            order.push(name.to_owned());
        }
        let groups: Vec<Group> = by_group
            .into_values()
            .map(|mut members| {
                members.sort();
                let (members, ids) = members.into_iter().unzip();
                Group { members, ids }
            })
            .collect();
        let mut places = HashMap::with_capacity(order.len());
        for (g, group) in groups.iter().enumerate() {
            for (i, m) in group.members.iter().enumerate() {
                places.insert(m.clone(), (g, i));
            }
        }
        Layout {
            groups,
            places,
            order,
        }
    }

    /// The layout seen by `node` (with its own `labels`) from its `candidates`.
    pub fn of_node(
        node: &str,
        labels: &BTreeMap<String, String>,
        candidates: &[Candidate],
        group_by: &str,
    ) -> Layout {
        let nodes = std::iter::once((node, labels))
            .chain(candidates.iter().map(|c| (c.name.as_str(), &c.labels)));
        Layout::new(nodes, group_by)
    }

    /// Nodes in the layout.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Groups in the layout.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// `node`'s (group, index among the group's members).
    pub fn place(&self, node: &str) -> Option<(usize, usize)> {
        self.places.get(node).copied()
    }

    /// The members of group `g`, in name order.
    pub fn members(&self, g: usize) -> &[String] {
        &self.groups[g].members
    }

    /// The name of the node at `id` in the given order (a [`PathIndex::peer`]).
    pub fn name(&self, id: usize) -> &str {
        &self.order[id]
    }
}

/// The rotation of one node; cheap to query per round.
#[derive(Debug, Clone)]
pub struct Selector {
    config: SelectionConfig,
    devices: Vec<LocalDevice>,
    layout: Arc<Layout>,
    /// The node's place in the layout's node order (`None`: not in the layout).
    id: Option<usize>,
    /// The node's group and its index among the members.
    local: usize,
    me: usize,
    full_mesh: bool,
}

impl Selector {
    /// The selection of `node` (with its own `labels`) among `candidates` (the node itself, if
    /// listed, is left out; a repeated name counts once, with its first labels).
    pub fn new(
        node: &str,
        labels: &BTreeMap<String, String>,
        devices: &[LocalDevice],
        candidates: &[Candidate],
        config: &SelectionConfig,
    ) -> Selector {
        let layout = Layout::of_node(node, labels, candidates, &config.group_by);
        Selector::with_layout(node, Arc::new(layout), devices, config)
    }

    /// The selection of `node` in a shared `layout` (which must hold `node`; if not, the node
    /// selects as if alone in a group of its own).
    pub fn with_layout(
        node: &str,
        layout: Arc<Layout>,
        devices: &[LocalDevice],
        config: &SelectionConfig,
    ) -> Selector {
        let peers = layout
            .len()
            .saturating_sub(usize::from(layout.place(node).is_some()));
        let place = layout.place(node);
        let (local, me) = place.unwrap_or((usize::MAX, 0));
        Selector {
            config: config.clone(),
            devices: devices.to_vec(),
            id: place.map(|(g, i)| layout.groups[g].ids[i]),
            local,
            me,
            full_mesh: peers <= config.max_peers || local == usize::MAX,
            layout,
        }
    }

    pub fn config(&self) -> &SelectionConfig {
        &self.config
    }

    pub fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// Every candidate is probed, as without a selection.
    pub fn is_full_mesh(&self) -> bool {
        self.full_mesh
    }

    /// The round that `unix_time` falls in.
    pub fn round_at(&self, unix_time: Duration) -> u64 {
        let round = self.config.round.as_nanos().max(1);
        u64::try_from(unix_time.as_nanos() / round).unwrap_or(u64::MAX)
    }

    /// When `round` starts, as a unix time (saturating far in the future).
    pub fn round_start(&self, round: u64) -> Duration {
        let nanos = u128::from(round) * self.config.round.as_nanos();
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The paths of `round`: [`fixed_paths`](Self::fixed_paths), then
    /// [`sampled_paths`](Self::sampled_paths).
    pub fn select(&self, round: u64) -> Vec<Selected> {
        let mut out = self.fixed_paths(round);
        out.extend(self.sampled_paths(round));
        out
    }

    /// The paths that do not rotate with the sample: every candidate (full mesh), or the node's
    /// group (the whole group in every round when it fits in `max_peers`), per local device.
    pub fn fixed_paths(&self, round: u64) -> Vec<Selected> {
        self.named(self.fixed_path_indices(round))
    }

    /// [`fixed_paths`](Self::fixed_paths) by numbers.
    pub fn fixed_path_indices(&self, round: u64) -> Vec<Selected<PathIndex>> {
        let (role, peers) = if self.full_mesh {
            let all = (0..self.layout.len()).filter(|p| Some(*p) != self.id);
            (Role::FullMesh, all.collect())
        } else {
            (Role::SameGroup, self.same_group(round))
        };
        let mut out = Vec::with_capacity(self.devices.len() * peers.len());
        for device in 0..self.devices.len() {
            out.extend(peers.iter().map(|&peer| Selected {
                key: PathIndex { device, peer },
                role,
            }));
        }
        out
    }

    /// Whether [`fixed_paths`](Self::fixed_paths) changes from round to round.
    pub fn fixed_paths_rotate(&self) -> bool {
        !self.full_mesh && self.same_group_rounds() > 0
    }

    /// This round's other-group paths, per local device (none for a full mesh).
    pub fn sampled_paths(&self, round: u64) -> Vec<Selected> {
        self.named(self.sampled_path_indices(round))
    }

    /// [`sampled_paths`](Self::sampled_paths) by numbers.
    pub fn sampled_path_indices(&self, round: u64) -> Vec<Selected<PathIndex>> {
        if self.full_mesh {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(self.devices.len() * (self.share() + 1));
        let mut peers = Vec::new();
        for (device, d) in self.devices.iter().enumerate() {
            peers.clear();
            self.sampled(round, rail_index(d, device), |peer| peers.push(peer));
            // A window longer than a block's whole cycle (tiny groups) comes back to a pair.
            keep_first_of_each(&mut peers);
            out.extend(peers.iter().map(|&peer| Selected {
                key: PathIndex { device, peer },
                role: Role::Sampled,
            }));
        }
        out
    }

    /// The key of a path by numbers: its device's name and rail, its peer's name.
    pub fn path_key(&self, path: PathIndex) -> PathKey {
        let device = &self.devices[path.device];
        PathKey::new(
            device.name.clone(),
            self.layout.name(path.peer),
            device.rail,
        )
    }

    /// `selected` keyed by names.
    fn named(&self, selected: Vec<Selected<PathIndex>>) -> Vec<Selected> {
        selected
            .into_iter()
            .map(|s| Selected {
                key: self.path_key(s.key),
                role: s.role,
            })
            .collect()
    }

    /// What the selection guarantees (see [`Coverage`]).
    pub fn coverage(&self) -> Coverage {
        if self.full_mesh {
            return Coverage {
                groups: 1,
                group_size: self.layout.len().max(1),
                same_group_rounds: 0,
                sampled_per_device: 0,
                group_pair_rounds: 0,
                path_rounds: 0,
            };
        }
        let c = &self.config;
        let groups = &self.layout.groups;
        let m = groups.len();
        let n_local = groups[self.local].members.len();
        let same_group_rounds = self.same_group_rounds();
        // The worst over every group of the cluster: this node's group probes the others, and is
        // probed by them with their own windows.
        let mut pair = 0;
        let mut path = 0;
        if m >= 2 {
            let others = (m - 1) as u64;
            let largest = groups
                .iter()
                .map(|g| g.members.len() as u64)
                .max()
                .unwrap_or(1);
            for group in groups {
                let n_g = group.members.len();
                let w = window(n_g, m, c) as u64;
                pair = pair.max(others.div_ceil(w) + 1);
                // The largest remote block gives the longest cycle from this group.
                let block = n_g as u64 * largest;
                path = path.max((block * others).div_ceil(w) + 1);
            }
        }
        Coverage {
            groups: m,
            group_size: n_local,
            same_group_rounds,
            sampled_per_device: self.share(),
            group_pair_rounds: pair,
            path_rounds: path,
        }
    }

    /// [`Coverage::sampled_per_device`] (not for a full mesh).
    fn share(&self) -> usize {
        let groups = &self.layout.groups;
        let m = groups.len();
        if m < 2 {
            return 0;
        }
        share(groups[self.local].members.len(), m, &self.config)
    }

    /// [`Coverage::same_group_rounds`] (not for a full mesh).
    fn same_group_rounds(&self) -> u64 {
        let n_local = self.layout.groups[self.local].members.len();
        let max_peers = self.config.max_peers;
        if n_local - 1 <= max_peers {
            0
        } else {
            (n_local - 1).div_ceil(max_peers.max(1)) as u64 + 1
        }
    }

    /// The node's own group in `round` (node ids): all of it, or a window of `max_peers` moving
    /// by `max_peers` each round (starting at the node's own place, so that members do not all
    /// pick the same peers at once).
    fn same_group(&self, round: u64) -> Vec<usize> {
        let ids = &self.layout.groups[self.local].ids;
        let same: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|m| Some(*m) != self.id)
            .collect();
        let n = same.len();
        let max = self.config.max_peers;
        if n <= max {
            return same;
        }
        let start = (u128::from(round) * max as u128 + self.me as u128) % n as u128;
        (0..max).map(|i| same[(start as usize + i) % n]).collect()
    }

    /// Calls `take` with each other-group peer (node id) this node probes on `rail` in `round`:
    /// the items of its group's window whose prober is this node.
    fn sampled(&self, round: u64, rail: u64, mut take: impl FnMut(usize)) {
        let groups = &self.layout.groups;
        let m = groups.len() as u64;
        if m < 2 {
            return;
        }
        let others = m - 1;
        let n_g = groups[self.local].members.len() as u64;
        let w = window(n_g as usize, m as usize, &self.config) as u64;
        let start = round.saturating_mul(w);
        let end = start.saturating_add(w);
        // Runs of the window with one visit number `t` (remote groups `rel` in turn); the prober
        // of item (t, rel) is (t + rel) mod n_g, so this node's items in a run are every n_g-th.
        let mut t = start / others;
        while t.saturating_mul(others) < end {
            let z0 = t * others;
            let lo = start.max(z0) - z0;
            let hi = end.min(z0 + others) - z0;
            let first = lo + (self.me as u64 + n_g - (t + lo) % n_g) % n_g;
            let mut rel = first;
            while rel < hi {
                let it = item(z0 + rel, self.local, n_g as usize, groups, rail);
                debug_assert_eq!(it.prober, self.me);
                take(groups[it.group].ids[it.responder]);
                rel += n_g;
            }
            t += 1;
        }
    }
}

/// What a [`Selector`] guarantees, in rounds, on top of the scheduler: a path in the selection
/// is probed within its (fitted) interval, a sampled one within its round (or, late, as soon as
/// its device gets to it: [`Rotation`]). A bound of `n` rounds means: within any `n` rounds in a
/// row. Zero: every such path is in every round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// Groups in the cluster (1 for a full mesh).
    pub groups: usize,
    /// Nodes in this node's group, itself included.
    pub group_size: usize,
    /// A same-group path is selected at least once in this many rounds (0: in every round; the
    /// group is larger than `max_peers` otherwise).
    pub same_group_rounds: u64,
    /// Other-group paths per local device and round.
    pub sampled_per_device: usize,
    /// Every ordered pair of groups is probed on every rail at least once in this many rounds
    /// (over every group of the cluster).
    pub group_pair_rounds: u64,
    /// Every single other-group path is probed at least once in this many rounds.
    pub path_rounds: u64,
}

/// Index of a local device's rail for the partition: its rail number, or its place in the device
/// list when it has none.
fn rail_index(device: &LocalDevice, index: usize) -> u64 {
    device.rail.map_or(index as u64, u64::from)
}

/// Drops the repeats of `ids`, keeping the first of each in place.
fn keep_first_of_each(ids: &mut Vec<usize>) {
    let repeats = if ids.len() <= 32 {
        // A device's share of a round: a few comparisons, no allocation.
        (1..ids.len()).any(|i| ids[..i].contains(&ids[i]))
    } else {
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.windows(2).any(|w| w[0] == w[1])
    };
    if repeats {
        let mut taken = BTreeSet::new();
        ids.retain(|id| taken.insert(*id));
    }
}

/// Other-group paths per device and round for a member of a group of `n_g` among `m` groups:
/// `sample`, raised to the group's share of the `m − 1` remote groups (so the group reaches every
/// one each round), but not above `max_peers` for that (tiny groups in a cluster of many would
/// otherwise take a full mesh).
fn share(n_g: usize, m: usize, config: &SelectionConfig) -> usize {
    let needed = (m - 1).div_ceil(n_g.max(1));
    config.sample.max(needed.min(config.max_peers)).max(1)
}

/// Items a group of `n_g` covers per rail and round.
fn window(n_g: usize, m: usize, config: &SelectionConfig) -> usize {
    n_g.max(1) * share(n_g, m, config)
}

/// One step of a group's sequence on a rail: which remote group, and which (prober, responder)
/// pair of that block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Item {
    /// Index of the remote group.
    group: usize,
    /// Index of the prober among the local group's members.
    prober: usize,
    /// Index of the responder among the remote group's members.
    responder: usize,
}

/// The `z`-th item of group `g`'s sequence on `rail`. Remote groups take turns (`z mod (m − 1)`);
/// the `t`-th visit to a block takes its `t`-th pair in an order that pairs every prober with
/// every responder once per `n_g × n_h` visits, consecutive visits with different probers and
/// different responders (the pair `(t mod n_g, (t + ⌊t / lcm⌋) mod n_h)`, shifted).
fn item(z: u64, g: usize, n_g: usize, groups: &[Group], rail: u64) -> Item {
    let others = groups.len() as u64 - 1;
    let rel = z % others;
    let visit = z / others;
    let h = (g + 1 + rel as usize) % groups.len();
    let n_g = n_g as u64;
    let n_h = groups[h].members.len() as u64;
    let t = visit % (n_g * n_h);
    let lcm = n_g / gcd(n_g, n_h) * n_h;
    let prober = ((t + rel) % n_g) as usize;
    // Offsets by the source group and the rail, so that different groups (and rails) start at
    // different responders of the same remote group.
    let shift = (g as u64).wrapping_add(rail) % n_h;
    let responder = ((t + t / lcm + shift) % n_h) as usize;
    Item {
        group: h,
        prober,
        responder,
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// The scheduler's plans for a selection: full-mesh paths as `base` plans them; a sampled path
/// once per round (interval = round); same-group paths at their configured interval, stretched
/// per device (all by the same factor) so that they and `sampled_per_device` sampled paths (the
/// nominal share, [`Coverage::sampled_per_device`]) fit [`PLAN_FILL`] of `duty_cycle`. Without
/// this the scheduler would stretch every path of the device alike, sampled ones too, and a
/// sampled path's first probe would fall past its round. Planned by the nominal share rather
/// than this round's count, a same-group plan stays the same from round to round.
pub fn fit_plans<K: ScheduleKey>(
    selected: &[Selected<K>],
    base: impl Fn(&K) -> PathPlan<K>,
    duty_cycle: f64,
    round: Duration,
    sampled_per_device: usize,
) -> Vec<PathPlan<K>> {
    let mut plans: Vec<(Role, PathPlan<K>)> = selected
        .iter()
        .map(|s| {
            let mut plan = base(&s.key);
            if s.role == Role::Sampled {
                plan.interval = round.min(MAX_INTERVAL);
            }
            (s.role, plan)
        })
        .collect();
    // Per device: Σ burst / interval of the same-group paths, and their mean burst.
    let mut per_device: BTreeMap<&K::Device, (f64, f64, usize)> = BTreeMap::new();
    for (role, plan) in &plans {
        if *role == Role::SameGroup {
            let burst = plan.expected_burst.as_secs_f64();
            let entry = per_device.entry(plan.key.device()).or_default();
            entry.0 += burst / plan.interval.as_secs_f64();
            entry.1 += burst;
            entry.2 += 1;
        }
    }
    let factors: BTreeMap<K::Device, f64> = per_device
        .into_iter()
        .map(|(device, (same, bursts, n))| {
            let sampled = sampled_per_device as f64 * (bursts / n as f64) / round.as_secs_f64();
            let left = duty_cycle * PLAN_FILL - sampled;
            let factor = if left > 0.0 && same > left {
                same / left
            } else {
                1.0
            };
            (device.clone(), factor)
        })
        .collect();
    for (role, plan) in &mut plans {
        if *role == Role::SameGroup {
            let factor = factors.get(plan.key.device()).copied().unwrap_or(1.0);
            let stretched = secs_to_duration(plan.interval.as_secs_f64() * factor);
            plan.interval = stretched.clamp(plan.interval, MAX_INTERVAL);
        }
    }
    plans.into_iter().map(|(_, p)| p).collect()
}

/// The sampled paths across rounds: this round's, plus those of earlier rounds that have not
/// been probed yet (kept until they are, so that a probe delayed past its round is late rather
/// than lost).
#[derive(Debug, Clone)]
pub struct Rotation<K = PathKey> {
    /// The round of the current set.
    round: Option<u64>,
    /// The sampled paths now, in key order, and whether each has been probed since it was
    /// selected. A sorted `Vec`: a node has a few dozen, looked up at every probe of one (the
    /// simulation's ten thousand nodes), where a B-tree map would walk its nodes.
    sampled: Vec<(K, bool)>,
}

impl<K> Default for Rotation<K> {
    fn default() -> Self {
        Rotation {
            round: None,
            sampled: Vec::new(),
        }
    }
}

/// How the sampled set changed from one round to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundChange<K = PathKey> {
    pub added: Vec<K>,
    pub removed: Vec<K>,
}

impl<K> Default for RoundChange<K> {
    fn default() -> Self {
        RoundChange {
            added: Vec::new(),
            removed: Vec::new(),
        }
    }
}

impl<K: Clone + Ord> Rotation<K> {
    pub fn new() -> Self {
        Rotation::default()
    }

    /// Moves to `round`, whose selection wants the sampled paths `wanted`: they, plus the
    /// earlier ones still waiting for their probe, are the set from now on. In a new round a
    /// path wanted again waits for a probe anew; within the same round (a reload) it keeps what
    /// it had.
    pub fn advance(&mut self, round: u64, mut wanted: Vec<K>) -> RoundChange<K> {
        let same_round = self.round == Some(round);
        let added: Vec<K> = wanted
            .iter()
            .filter(|k| self.find(k).is_err())
            .cloned()
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        // One pass over both sets, in key order.
        let mut earlier = std::mem::take(&mut self.sampled).into_iter().peekable();
        let mut next = Vec::with_capacity(wanted.len() + earlier.len());
        let mut removed = Vec::new();
        for key in wanted {
            while let Some((k, probed)) = earlier.next_if(|(k, _)| *k < key) {
                Self::unwanted(k, probed, &mut next, &mut removed);
            }
            let probed = earlier
                .next_if(|(k, _)| *k == key)
                .is_some_and(|(_, probed)| same_round && probed);
            next.push((key, probed));
        }
        for (k, probed) in earlier {
            Self::unwanted(k, probed, &mut next, &mut removed);
        }
        self.sampled = next;
        self.round = Some(round);
        RoundChange { added, removed }
    }

    /// A path of the set that the new round does not want: it goes once probed, else it waits
    /// on.
    fn unwanted(key: K, probed: bool, next: &mut Vec<(K, bool)>, removed: &mut Vec<K>) {
        if probed {
            removed.push(key);
        } else {
            next.push((key, false));
        }
    }

    /// The sampled paths now, in key order.
    pub fn sampled(&self) -> impl Iterator<Item = &K> {
        self.sampled.iter().map(|(k, _)| k)
    }

    /// Whether `key` is one of the sampled paths now.
    pub fn contains(&self, key: &K) -> bool {
        self.find(key).is_ok()
    }

    /// A probe of `key` ran (succeeded or failed; a `busy` answer is not a probe).
    pub fn probed(&mut self, key: &K) {
        if let Ok(i) = self.find(key) {
            self.sampled[i].1 = true;
        }
    }

    /// Sampled paths still waiting for their probe.
    pub fn waiting(&self) -> usize {
        self.sampled.iter().filter(|(_, p)| !*p).count()
    }

    fn find(&self, key: &K) -> Result<usize, usize> {
        self.sampled.binary_search_by(|(k, _)| k.cmp(key))
    }
}

#[cfg(test)]
mod tests;
