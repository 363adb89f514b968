//! The selection's promises: a full mesh for small clusters, every same-group peer every round,
//! the group's shares covering every (remote group, rail) within the computed bound, every
//! single path within its bound, bounded load per member, and the rotation keeping unprobed
//! sampled paths.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::schedule::rail_matched;

fn labels(tor: &str) -> BTreeMap<String, String> {
    [("tor".to_owned(), tor.to_owned())].into()
}

fn devices(rails: u16) -> Vec<LocalDevice> {
    (0..rails)
        .map(|r| LocalDevice::new(format!("mlx5_{r}"), Some(r)))
        .collect()
}

/// A cluster of groups of the given sizes: node `n{g}-{i}` in group `t{g}`.
fn cluster(sizes: &[usize]) -> Vec<(String, BTreeMap<String, String>)> {
    sizes
        .iter()
        .enumerate()
        .flat_map(|(g, &n)| {
            (0..n).map(move |i| (format!("n{g:03}-{i:03}"), labels(&format!("t{g:03}"))))
        })
        .collect()
}

fn layout(nodes: &[(String, BTreeMap<String, String>)]) -> Arc<Layout> {
    Arc::new(Layout::new(
        nodes.iter().map(|(n, l)| (n.as_str(), l)),
        "tor",
    ))
}

fn config(max_peers: usize, sample: usize) -> SelectionConfig {
    SelectionConfig {
        max_peers,
        sample,
        ..SelectionConfig::default()
    }
}

fn group_of(name: &str) -> &str {
    &name[..4]
}

#[test]
fn small_clusters_are_the_full_mesh_in_every_round() {
    let nodes = cluster(&[3, 2]);
    let devs = devices(2);
    let peers: Vec<&str> = nodes
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| *n != "n000-001")
        .collect();
    let s = Selector::with_layout("n000-001", layout(&nodes), &devs, &config(4, 1));
    assert!(s.is_full_mesh());
    for round in [0, 1, 17] {
        let keys: Vec<PathKey> = s
            .select(round)
            .into_iter()
            .map(|p| {
                assert_eq!(p.role, Role::FullMesh);
                p.key
            })
            .collect();
        assert_eq!(keys, rail_matched(&devs, peers.iter().copied()));
    }
    // One more peer than max_peers: rotating.
    let s = Selector::with_layout("n000-001", layout(&nodes), &devs, &config(3, 1));
    assert!(!s.is_full_mesh());
}

#[test]
fn candidates_from_the_config_keep_their_order_and_skip_the_node() {
    let candidates = vec![
        Candidate::new("b", labels("x"), Source::Config),
        Candidate::new("a", labels("x"), Source::Config),
        Candidate::new("self", labels("x"), Source::Config),
        Candidate::new("b", labels("y"), Source::Discovered),
    ];
    let devs = devices(1);
    let s = Selector::new(
        "self",
        &labels("x"),
        &devs,
        &candidates,
        &SelectionConfig::default(),
    );
    let peers: Vec<String> = s.select(0).into_iter().map(|p| p.key.peer).collect();
    assert_eq!(peers, ["b", "a"]);
}

#[test]
fn ten_thousand_nodes_in_32_node_tors() {
    let sizes: Vec<usize> = (0..313).map(|g| if g == 312 { 16 } else { 32 }).collect();
    let nodes = cluster(&sizes);
    assert_eq!(nodes.len(), 10_000);
    let layout = layout(&nodes);
    let devs = devices(8);
    let s = Selector::with_layout(
        "n005-007",
        layout.clone(),
        &devs,
        &SelectionConfig::default(),
    );
    let c = s.coverage();
    // 312 remote ToRs shared by 32 members: 10 each, the sample.
    assert_eq!(
        (c.groups, c.group_size, c.sampled_per_device),
        (313, 32, 10)
    );
    assert_eq!(c.same_group_rounds, 0);
    // A window of 32 × 10 = 320 ≥ 312 items: every ToR pair every round; the last group (16
    // nodes) needs a share of 20 and gets it. A block of 32 × 32 pairs, visited 320 / 312
    // times a round: 32 × 32 × 312 / 320 = 998.4 rounds.
    assert_eq!(c.group_pair_rounds, 2);
    assert_eq!(c.path_rounds, 999 + 1);
    let selected = s.select(1234);
    let same = selected
        .iter()
        .filter(|p| p.role == Role::SameGroup)
        .count();
    let sampled = selected.iter().filter(|p| p.role == Role::Sampled).count();
    assert_eq!(same, 31 * 8);
    assert!((8 * 9..=8 * 11).contains(&sampled), "{sampled}");
    let small = Selector::with_layout("n312-003", layout, &devs, &SelectionConfig::default());
    assert_eq!(small.coverage().sampled_per_device, 20);
}

#[test]
fn a_group_larger_than_max_peers_is_rotated_through() {
    let nodes = cluster(&[10, 3]);
    let s = Selector::with_layout("n000-000", layout(&nodes), &devices(1), &config(4, 1));
    assert_eq!(s.coverage().same_group_rounds, 9u64.div_ceil(4) + 1);
    let mut seen = BTreeSet::new();
    for round in 0..3 {
        let same: Vec<String> = s
            .select(round)
            .into_iter()
            .filter(|p| p.role == Role::SameGroup)
            .map(|p| p.key.peer)
            .collect();
        assert_eq!(same.len(), 4);
        seen.extend(same);
    }
    assert_eq!(seen.len(), 9, "{seen:?}");
}

/// The selection by numbers names the same paths as the selection by names, in the same order
/// and with the same roles: nodes of several layouts (given order unlike name order, a node
/// outside the layout, devices without a rail or off their place), full mesh and not, rotating
/// groups and tiny ones, over rounds.
#[test]
fn paths_by_number_are_the_paths_by_name() {
    let mixed = vec![
        LocalDevice::new("z0", Some(3)),
        LocalDevice::new("a1", None),
        LocalDevice::new("m2", Some(0)),
    ];
    let shapes: [&[usize]; 7] = [
        &[3, 2],
        &[10, 3],
        &[1; 8],
        &[5, 7, 2, 9, 1],
        &[32; 20],
        &[40, 40, 3],
        &[300],
    ];
    for sizes in shapes {
        let mut nodes = cluster(sizes);
        nodes.reverse();
        let layout = layout(&nodes);
        for config in [config(4, 1), config(32, 10), config(6, 3), config(1000, 3)] {
            for devs in [devices(2), mixed.clone()] {
                let by_name = |paths: Vec<Selected<PathIndex>>| -> Vec<Selected> {
                    paths
                        .into_iter()
                        .map(|p| Selected {
                            key: PathKey::new(
                                devs[p.key.device].name.clone(),
                                layout.name(p.key.peer),
                                devs[p.key.device].rail,
                            ),
                            role: p.role,
                        })
                        .collect()
                };
                let names = nodes.iter().step_by(7).map(|(n, _)| n.as_str());
                for node in names.chain(["absent"]) {
                    let s = Selector::with_layout(node, layout.clone(), &devs, &config);
                    for round in [0, 1, 2, 7, 1234, 99_999_999] {
                        let at = format!("{sizes:?} {config:?} {node} round {round}");
                        let fixed = s.fixed_paths(round);
                        assert_eq!(by_name(s.fixed_path_indices(round)), fixed, "{at}");
                        let sampled = s.sampled_paths(round);
                        assert_eq!(by_name(s.sampled_path_indices(round)), sampled, "{at}");
                        assert!(fixed.len() + sampled.len() > 0, "{at}");
                    }
                }
            }
        }
    }
}

#[test]
fn rotation_keeps_sampled_paths_until_probed() {
    let key = |p: &str| PathKey::new("d", p, Some(0));
    let keys = |ps: &[&str]| ps.iter().map(|p| key(p)).collect::<Vec<_>>();
    let mut r = Rotation::new();
    let first = r.advance(1, keys(&["a", "b"]));
    assert_eq!(first.added, keys(&["a", "b"]));
    r.probed(&key("a"));
    // A reload within the round keeps what was probed.
    assert_eq!(r.advance(1, keys(&["a", "b"])), RoundChange::default());
    assert_eq!(r.waiting(), 1);
    // Round 2 wants c: a was probed and goes, b was not and stays.
    let second = r.advance(2, keys(&["c"]));
    assert_eq!(second.added, keys(&["c"]));
    assert_eq!(second.removed, keys(&["a"]));
    assert_eq!(r.sampled().cloned().collect::<Vec<_>>(), keys(&["b", "c"]));
    assert_eq!(r.waiting(), 2);
    r.probed(&key("b"));
    r.probed(&key("c"));
    // Wanted again in a new round: waits for a probe anew.
    let third = r.advance(3, keys(&["c"]));
    assert_eq!(third.removed, keys(&["b"]));
    assert!(third.added.is_empty());
    assert_eq!(r.waiting(), 1);
}

/// What a [`Rotation`] does, said with a map: the wanted paths (probed only if probed before in
/// the same round), plus the earlier ones not probed yet.
#[derive(Default)]
struct RotationModel {
    round: Option<u64>,
    sampled: BTreeMap<u8, bool>,
}

impl RotationModel {
    fn advance(&mut self, round: u64, wanted: &[u8]) -> RoundChange<u8> {
        let same_round = self.round == Some(round);
        let mut next = BTreeMap::new();
        let mut added = Vec::new();
        for key in wanted {
            let probed = match self.sampled.get(key) {
                Some(probed) => same_round && *probed,
                None => {
                    added.push(*key);
                    false
                }
            };
            next.insert(*key, probed);
        }
        let mut removed = Vec::new();
        for (key, probed) in std::mem::take(&mut self.sampled) {
            if next.contains_key(&key) {
                continue;
            }
            if probed {
                removed.push(key);
            } else {
                next.insert(key, false);
            }
        }
        self.sampled = next;
        self.round = Some(round);
        RoundChange { added, removed }
    }
}

#[test]
fn fitted_plans_leave_room_for_the_sample() {
    let base = |k: &PathKey| {
        PathPlan::new(k.clone(), Duration::from_secs(60))
            .with_jitter(0.1)
            .with_expected_burst(Duration::from_millis(500))
    };
    let mut selected = Vec::new();
    for p in 0..31 {
        selected.push(Selected {
            key: PathKey::new("d", format!("s{p}"), Some(0)),
            role: Role::SameGroup,
        });
    }
    for p in 0..12 {
        selected.push(Selected {
            key: PathKey::new("d", format!("o{p}"), Some(0)),
            role: Role::Sampled,
        });
    }
    selected.push(Selected {
        key: PathKey::new("e", "x", Some(1)),
        role: Role::SameGroup,
    });
    let round = Duration::from_secs(600);
    let plans = fit_plans(&selected, base, 0.05, round, 12);
    let demand: f64 = plans
        .iter()
        .filter(|p| p.key.device == "d")
        .map(|p| p.expected_burst.as_secs_f64() / p.interval.as_secs_f64())
        .sum();
    assert!((demand - 0.05 * PLAN_FILL).abs() < 1e-6, "{demand}");
    let same = plans.iter().find(|p| p.key.peer == "s0").unwrap();
    // 31 × 0.5 s / (4.5% − 12 × 0.5 s / 600 s) = 443 s.
    assert!(
        (same.interval.as_secs_f64() - 15.5 / 0.035).abs() < 0.01,
        "{:?}",
        same.interval
    );
    assert_eq!(
        plans.iter().find(|p| p.key.peer == "o0").unwrap().interval,
        round
    );
    // A device whose paths fit keeps the configured interval.
    assert_eq!(
        plans.iter().find(|p| p.key.device == "e").unwrap().interval,
        Duration::from_secs(60)
    );
}

/// Every sampled path of every member of the cluster in `round`, per (prober, rail), and checks
/// that nobody probes itself or its own group.
fn all_sampled(
    nodes: &[(String, BTreeMap<String, String>)],
    layout: &Arc<Layout>,
    rails: u16,
    config: &SelectionConfig,
    round: u64,
) -> Vec<(String, PathKey)> {
    let devs = devices(rails);
    let mut out = Vec::new();
    for (n, _) in nodes {
        let s = Selector::with_layout(n, layout.clone(), &devs, config);
        let mut keys = BTreeSet::new();
        for p in s.select(round) {
            assert_ne!(&p.key.peer, n);
            assert!(keys.insert(p.key.clone()), "{n}: {} twice", p.key);
            if p.role == Role::Sampled {
                assert_ne!(
                    group_of(&p.key.peer),
                    group_of(n),
                    "{n} sampled its own group"
                );
                out.push((n.clone(), p.key));
            }
        }
    }
    out
}

fn arb_cluster() -> impl Strategy<Value = (Vec<usize>, usize, usize, u16)> {
    (
        proptest::collection::vec(1usize..7, 2..7),
        1usize..5,
        0usize..4,
        1u16..3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every ordered (group pair, rail) is selected within `group_pair_rounds − 1` rounds in a
    /// row, from any start; every single path between groups within `path_rounds − 1`.
    #[test]
    fn every_pair_and_every_path_within_the_bound(
        (sizes, max_peers, sample, rails) in arb_cluster(),
        start in 0u64..1_000_000,
    ) {
        let nodes = cluster(&sizes);
        prop_assume!(nodes.len() - 1 > max_peers);
        let layout = layout(&nodes);
        let config = config(max_peers, sample);
        let coverage = Selector::with_layout(&nodes[0].0, layout.clone(), &devices(rails), &config).coverage();
        let pair_rounds = coverage.group_pair_rounds;
        let path_rounds = coverage.path_rounds;
        prop_assert!(pair_rounds >= 2 && path_rounds >= pair_rounds);
        // Per round: the set of (prober, responder, rail) sampled.
        let mut per_round: Vec<BTreeSet<(String, String, Option<u16>)>> = Vec::new();
        for round in start..start + path_rounds - 1 {
            per_round.push(
                all_sampled(&nodes, &layout, rails, &config, round)
                    .into_iter()
                    .map(|(n, k)| (n, k.peer, k.rail))
                    .collect(),
            );
        }
        let groups: BTreeSet<&str> = nodes.iter().map(|(n, _)| group_of(n)).collect();
        for offset in 0..=(path_rounds - pair_rounds) as usize {
            let window = &per_round[offset..offset + pair_rounds as usize - 1];
            for g in &groups {
                for h in groups.iter().filter(|h| *h != g) {
                    for rail in 0..rails {
                        let covered = window.iter().any(|r| r.iter().any(|(a, b, rl)| {
                            group_of(a) == *g && group_of(b) == *h && *rl == Some(rail)
                        }));
                        prop_assert!(covered, "{g} -> {h} rail {rail} not in rounds {}..+{}", start + offset as u64, pair_rounds - 1);
                    }
                }
            }
        }
        let all: BTreeSet<&(String, String, Option<u16>)> = per_round.iter().flatten().collect();
        for (a, _) in &nodes {
            for (b, _) in nodes.iter().filter(|(b, _)| group_of(b) != group_of(a)) {
                for rail in 0..rails {
                    prop_assert!(all.contains(&(a.clone(), b.clone(), Some(rail))),
                        "{a} -> {b} rail {rail} not within {} rounds", path_rounds - 1);
                }
            }
        }
    }

    /// Each member probes about its share: `sampled_per_device` per device and round, give or
    /// take the runs its window spans; every same-group peer is in every round (the group fits).
    #[test]
    fn shares_are_even_and_the_group_is_complete(
        (sizes, max_peers, sample, rails) in arb_cluster(),
        round in 0u64..1_000_000,
    ) {
        let nodes = cluster(&sizes);
        prop_assume!(nodes.len() - 1 > max_peers);
        let layout = layout(&nodes);
        let config = config(max_peers, sample);
        let m = sizes.len();
        let sampled = all_sampled(&nodes, &layout, rails, &config, round);
        for (n, _) in &nodes {
            let s = Selector::with_layout(n, layout.clone(), &devices(rails), &config);
            let share = s.coverage().sampled_per_device;
            let runs = (share * s.coverage().group_size).div_ceil(m - 1) + 1;
            for rail in 0..rails {
                let mine = sampled.iter().filter(|(p, k)| p == n && k.rail == Some(rail)).count();
                prop_assert!(mine <= share + runs, "{n} rail {rail}: {mine} > {share} + {runs}");
                prop_assert!(mine + runs >= share, "{n} rail {rail}: {mine} < {share} - {runs}");
            }
            let group_size = s.coverage().group_size;
            let same: BTreeSet<String> = s.select(round).into_iter()
                .filter(|p| p.role == Role::SameGroup).map(|p| p.key.peer).collect();
            if group_size - 1 <= max_peers {
                prop_assert_eq!(same.len(), group_size - 1);
                prop_assert!(same.iter().all(|p| group_of(p) == group_of(n)));
            } else {
                prop_assert_eq!(same.len(), max_peers);
            }
        }
    }

    /// A rotation changes as its model does, round after round, reloads and probes included.
    #[test]
    fn rotation_follows_its_model(
        steps in proptest::collection::vec(
            (0u64..3, proptest::collection::vec(0u8..12, 0..8), proptest::collection::vec(0u8..12, 0..6)),
            1..12,
        ),
    ) {
        let mut rotation = Rotation::new();
        let mut model = RotationModel::default();
        let mut round = 0;
        for (step, wanted, probed) in steps {
            round += step;
            let change = rotation.advance(round, wanted.clone());
            prop_assert_eq!(change, model.advance(round, &wanted));
            for key in probed {
                rotation.probed(&key);
                if let Some(p) = model.sampled.get_mut(&key) {
                    *p = true;
                }
            }
            prop_assert_eq!(rotation.sampled().copied().collect::<Vec<_>>(), model.sampled.keys().copied().collect::<Vec<_>>());
            prop_assert_eq!(rotation.waiting(), model.sampled.values().filter(|p| !**p).count());
            for key in 0..12 {
                prop_assert_eq!(rotation.contains(&key), model.sampled.contains_key(&key));
            }
        }
    }

    /// A small cluster's selection is `rail_matched` over the candidates, whatever the round.
    #[test]
    fn full_mesh_is_rail_matched(n in 1usize..20, round in any::<u64>(), rails in 1u16..4) {
        let nodes = cluster(&[n]);
        let devs = devices(rails);
        let s = Selector::with_layout(&nodes[0].0, layout(&nodes), &devs, &config(n, 3));
        prop_assert!(s.is_full_mesh());
        let keys: Vec<PathKey> = s.select(round).into_iter().map(|p| p.key).collect();
        prop_assert_eq!(keys, rail_matched(&devs, nodes[1..].iter().map(|(n, _)| n.as_str())));
    }
}
