//! The sparse per-path rows of the judged families: one series per path and way it is bad, with
//! what localisation joins on (the peer's node and ToR, the crossing), present while it is bad
//! and for a while after (docs/metrics.md, "Judged paths"). A healthy node shows none.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::PathLabels;
use crate::judge::BadState;
use crate::metrics::PREFIX;

/// How long a row stays at 0 after its path stopped being bad that way: a rule that reads it
/// late, or a path that flaps, still sees it, and its series does not come and go.
pub const LINGER_SECONDS: f64 = 600.0;
/// The most rows a node shows; beyond, the paths first in label order are shown and the rest
/// counted (`rdma_probe_bad_path_rows_shed_total`). The per-device counts include every path.
pub const MAX_ROWS: usize = 1024;

/// One bad path and way, and what it is joined on.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct BadRowLabels {
    pub device: String,
    pub peer: String,
    pub peer_device: String,
    pub peer_node: String,
    pub peer_tor: String,
    pub crossing: &'static str,
    pub state: &'static str,
}

/// A path bad one way now: its row and its count in a row (1 for the states judged by time or
/// over a window).
#[derive(Debug, Clone, PartialEq)]
pub struct BadRow {
    pub path: PathLabels,
    pub state: BadState,
    pub labels: BadRowLabels,
    pub in_a_row: u32,
}

#[derive(Debug, Clone, Default)]
pub struct BadRowFamilies {
    in_a_row: Family<BadRowLabels, Gauge>,
    shed: Counter,
}

impl BadRowFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let f = BadRowFamilies::default();
        registry.register(
            format!("{PREFIX}_bad_path_in_a_row"),
            "A path judged bad this way: its probes (pings for unanswered) in a row bad that \
             way, 1 for the states judged by time or over a window (stale, corrupt, lossy, \
             rtt_high); 0 for 10 minutes after it stopped being bad",
            f.in_a_row.clone(),
        );
        registry.register(
            format!("{PREFIX}_bad_path_rows_shed"),
            "Bad path rows not shown because the node showed its most (1024) already",
            f.shed.clone(),
        );
        f
    }
}

/// The rows shown, by (path, state): their labels and when the path was last bad that way.
#[derive(Debug, Default)]
pub struct BadRows {
    shown: BTreeMap<(PathLabels, BadState), (BadRowLabels, f64)>,
}

impl BadRows {
    /// Shows `bad` (every path bad now, any order) at `now`; rows no longer bad linger at 0 for
    /// [`LINGER_SECONDS`] while `judged` says their path still is, then go. Returns the rows
    /// shown.
    pub fn show(
        &mut self,
        families: &BadRowFamilies,
        now: f64,
        mut bad: Vec<BadRow>,
        judged: impl Fn(&PathLabels) -> bool,
    ) -> usize {
        bad.sort_by(|a, b| (&a.path, a.state).cmp(&(&b.path, b.state)));
        if bad.len() > MAX_ROWS {
            families.shed.inc_by((bad.len() - MAX_ROWS) as u64);
            bad.truncate(MAX_ROWS);
        }
        let mut now_bad: BTreeMap<(PathLabels, BadState), (BadRowLabels, f64)> = BTreeMap::new();
        for row in bad {
            families
                .in_a_row
                .get_or_create(&row.labels)
                .set(i64::from(row.in_a_row));
            now_bad.insert((row.path, row.state), (row.labels, now));
        }
        for (key, (labels, last_bad)) in std::mem::take(&mut self.shown) {
            if let Some((labels_now, _)) = now_bad.get(&key) {
                // The peer's node or ToR became known or changed: the old row goes.
                if *labels_now != labels {
                    families.in_a_row.remove(&labels);
                }
                continue;
            }
            let lingering =
                judged(&key.0) && now - last_bad <= LINGER_SECONDS && now_bad.len() < MAX_ROWS;
            if lingering {
                families.in_a_row.get_or_create(&labels).set(0);
                now_bad.insert(key, (labels, last_bad));
            } else {
                families.in_a_row.remove(&labels);
            }
        }
        self.shown = now_bad;
        self.shown.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(peer: &str, state: BadState, peer_node: &str, in_a_row: u32) -> BadRow {
        let path = PathLabels {
            device: "mlx5_0".into(),
            peer: peer.into(),
            peer_device: "mlx5_0".into(),
        };
        BadRow {
            labels: BadRowLabels {
                device: path.device.clone(),
                peer: path.peer.clone(),
                peer_device: path.peer_device.clone(),
                peer_node: peer_node.into(),
                peer_tor: "t2".into(),
                crossing: "cross",
                state: state.as_str(),
            },
            path,
            state,
            in_a_row,
        }
    }

    fn families() -> (Registry, BadRowFamilies) {
        let mut registry = Registry::default();
        let f = BadRowFamilies::register(&mut registry);
        (registry, f)
    }

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    const B_FAILED: &str = r#"rdma_probe_bad_path_in_a_row{device="mlx5_0",peer="b",peer_device="mlx5_0",peer_node="nb",peer_tor="t2",crossing="cross",state="failed"}"#;

    #[test]
    fn a_row_shows_while_bad_lingers_at_zero_then_goes() {
        let (registry, f) = families();
        let mut rows = BadRows::default();
        assert_eq!(
            rows.show(&f, 0.0, vec![row("b", BadState::Failed, "nb", 3)], |_| true),
            1
        );
        assert!(
            text(&registry).contains(&format!("{B_FAILED} 3")),
            "{}",
            text(&registry)
        );
        assert_eq!(rows.show(&f, 60.0, vec![], |_| true), 1);
        assert!(text(&registry).contains(&format!("{B_FAILED} 0")));
        assert_eq!(rows.show(&f, 600.0, vec![], |_| true), 1);
        assert_eq!(rows.show(&f, 601.0, vec![], |_| true), 0);
        assert!(!text(&registry).contains(B_FAILED));
        // A path no longer judged loses its row at once.
        rows.show(&f, 700.0, vec![row("b", BadState::Failed, "nb", 3)], |_| {
            true
        });
        assert_eq!(rows.show(&f, 701.0, vec![], |_| false), 0);
        assert!(!text(&registry).contains(B_FAILED));
    }

    #[test]
    fn a_row_whose_peer_node_became_known_replaces_the_old_one() {
        let (registry, f) = families();
        let mut rows = BadRows::default();
        rows.show(&f, 0.0, vec![row("b", BadState::Failed, "", 1)], |_| true);
        rows.show(&f, 1.0, vec![row("b", BadState::Failed, "nb", 2)], |_| true);
        let t = text(&registry);
        assert!(t.contains(&format!("{B_FAILED} 2")), "{t}");
        assert!(!t.contains(r#"peer_node="""#), "{t}");
    }

    #[test]
    fn beyond_the_most_rows_the_rest_are_counted_not_shown() {
        let (registry, f) = families();
        let mut rows = BadRows::default();
        let bad: Vec<BadRow> = (0..MAX_ROWS + 5)
            .map(|i| row(&format!("p{i:05}"), BadState::Failed, "n", 3))
            .collect();
        assert_eq!(rows.show(&f, 0.0, bad, |_| true), MAX_ROWS);
        assert!(text(&registry).contains("rdma_probe_bad_path_rows_shed_total 5"));
    }
}
