//! The judged families: every path of this node judged where its probes are ([`crate::judge`];
//! docs/architecture.md, "Judging paths"), shown per device and crossing, never per path, so
//! that what alerting reads grows with ports, not with paths (docs/metrics.md, "Judged paths").
//!
//! Part of the recorder: it is told every probe result and ping report the recorder applies,
//! and keeps judging a path the series budget keeps off `/metrics`, until the path leaves the
//! node's peers or ages out of the selection with its series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::bad_rows::{BadRow, BadRowFamilies, BadRowLabels, BadRows};
use super::event::label;
use super::{PathLabels, ProbeRecord, ProbeResult};
use crate::judge::{
    BadState, Criteria, PacedFigures, PathJudge, PingJudge, PingSample, Probe, Verdict,
};
use crate::metrics::PREFIX;
use crate::ping::PingReports;
use crate::prober::BurstKind;
use crate::reason::ErrorReason;

type FloatGauge = Gauge<f64, AtomicU64>;

/// The label a node's and a peer's ToR is read from.
const TOR_LABEL: &str = "tor";

/// Whether a path stays under its ToR: `cross` when both ends' ToRs are known and differ, else
/// `local` (as the rules' `tor_pair:rdma_probe_crossing:info` says it).
fn crossing(own_tor: Option<&str>, peer_tor: Option<&str>) -> &'static str {
    match (own_tor, peer_tor) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() && a != b => "cross",
        _ => "local",
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct CrossingLabels {
    device: String,
    crossing: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    device: String,
    crossing: &'static str,
    state: &'static str,
}

/// The judged families (docs/metrics.md, "Judged paths").
#[derive(Debug, Clone, Default)]
pub struct JudgedFamilies {
    paths: Family<CrossingLabels, Gauge>,
    bad_paths: Family<StateLabels, Gauge>,
    last_success: Family<CrossingLabels, FloatGauge>,
    last_good: Family<CrossingLabels, FloatGauge>,
    rows: BadRowFamilies,
}

impl JudgedFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let f = JudgedFamilies {
            rows: BadRowFamilies::register(registry),
            ..JudgedFamilies::default()
        };
        registry.register(
            format!("{PREFIX}_judged_paths"),
            "Paths of the device this node judges, by crossing (local: within its ToR or ToRs \
             unknown; cross: to another ToR)",
            f.paths.clone(),
        );
        registry.register(
            format!("{PREFIX}_judged_bad_paths"),
            "Paths of the device judged bad now, by crossing and state (failed, slow, stalled, \
             gapped, below_baseline: judge.probes_bad probes in a row; stale, corrupt, lossy, \
             rtt_high, unanswered); present while at least one",
            f.bad_paths.clone(),
        );
        registry.register(
            format!("{PREFIX}_judged_last_success_timestamp_seconds"),
            "Unix time of the newest successful probe among the device's judged paths of this \
             crossing; 0 when none succeeded",
            f.last_success.clone(),
        );
        registry.register(
            format!("{PREFIX}_judged_last_good_timestamp_seconds"),
            "Unix time of the newest successful probe at or above judge.degraded_ratio among \
             the device's judged paths of this crossing; 0 when none",
            f.last_good.clone(),
        );
        f
    }
}

/// One path's judgements: its bursts, and its pings once it has any.
#[derive(Debug)]
struct Judged {
    bursts: PathJudge,
    pings: Option<PingJudge>,
}

/// Every judged path of this node, and what the families show of them.
#[derive(Debug)]
pub(super) struct JudgedPaths {
    families: JudgedFamilies,
    criteria: Criteria,
    own_tor: Option<String>,
    /// Each peer's node name (`peer_node`) and ToR, as `peer_info` shows them.
    peers: BTreeMap<String, PeerFacts>,
    paths: BTreeMap<PathLabels, Judged>,
    rows: BadRows,
    /// The (device, crossing) pairs the families show now, and their series.
    shown: BTreeSet<CrossingLabels>,
    series: usize,
}

impl JudgedPaths {
    pub(super) fn new(families: JudgedFamilies) -> Self {
        JudgedPaths {
            families,
            criteria: Criteria::defaults(),
            own_tor: None,
            peers: BTreeMap::new(),
            paths: BTreeMap::new(),
            rows: BadRows::default(),
            shown: BTreeSet::new(),
            series: 0,
        }
    }

    /// New settings start every judgement over (their windows and thresholds changed).
    pub(super) fn set_criteria(&mut self, criteria: Criteria) {
        if criteria != self.criteria {
            self.criteria = criteria;
            self.paths.clear();
        }
    }

    /// This node's labels and every candidate peer's (`peer` plus its labels), for the ToRs.
    pub(super) fn set_labels(
        &mut self,
        node: &[(String, String)],
        peers: &[Vec<(String, String)>],
    ) {
        self.own_tor = label(node, TOR_LABEL).map(str::to_owned);
        self.peers = peers
            .iter()
            .filter_map(|labels| Some((label(labels, "peer")?.to_owned(), PeerFacts::of(labels))))
            .collect();
    }

    /// A peer's labels as it reported them replace its configured ones.
    pub(super) fn set_peer_labels(&mut self, peer: &str, labels: &[(String, String)]) {
        self.peers.insert(peer.to_owned(), PeerFacts::of(labels));
    }

    /// Judges a finished probe (a deferral is not one). `node_median_ratio` is taken over the
    /// node's other judged paths first.
    pub(super) fn on_probe(&mut self, path: &PathLabels, record: &ProbeRecord) {
        let probe = match &record.result {
            ProbeResult::Deferred { .. } => return,
            ProbeResult::Success { figures } => Probe::Success {
                paced: (record.kind == BurstKind::Paced)
                    .then(|| {
                        PacedFigures::of_burst(
                            figures.bandwidth_bytes_per_second,
                            record.target_bytes_per_second,
                            figures.min_window_bandwidth_bytes_per_second,
                            figures.completion_gap_max_seconds,
                        )
                    })
                    .flatten(),
            },
            ProbeResult::Failure { reason, .. } => Probe::Failure {
                validation: *reason == ErrorReason::Validation,
            },
        };
        let node_median = crate::judge::median(
            self.paths
                .iter()
                .filter(|(p, _)| *p != path)
                .filter_map(|(_, j)| j.bursts.paced_ratio()),
        );
        let criteria = self.criteria;
        self.entry(path)
            .bursts
            .on_probe(&criteria, record.at_unix_seconds, probe, node_median);
    }

    /// Judges a ping engine's report of its paths, at `at` (Unix seconds).
    pub(super) fn on_pings(&mut self, reports: &PingReports<PathLabels>, at: f64) {
        let criteria = self.criteria;
        for report in &reports.paths {
            if report.gone {
                if let Some(j) = self.paths.get_mut(&report.path) {
                    j.pings = None;
                }
                continue;
            }
            let sample = PingSample {
                at,
                sent: report.counts.sent,
                lost: report.counts.lost,
                lost_in_a_row: u32::try_from(report.lost_in_a_row).unwrap_or(u32::MAX),
                p50_seconds: report.window.map(|w| w.rtt_p50.as_secs_f64()),
            };
            self.entry(&report.path)
                .pings
                .get_or_insert_with(|| PingJudge::new(&criteria))
                .on_report(&criteria, sample);
        }
    }

    fn entry(&mut self, path: &PathLabels) -> &mut Judged {
        let criteria = self.criteria;
        self.paths.entry(path.clone()).or_insert_with(|| Judged {
            bursts: PathJudge::new(&criteria),
            pings: None,
        })
    }

    /// Stops judging `path`.
    pub(super) fn forget(&mut self, path: &PathLabels) {
        self.paths.remove(path);
    }

    /// Stops judging the paths out of the selection (`selected` false) whose last probe or
    /// ping report is more than `ttl` before `now`, as their series leave `/metrics` (also
    /// those the series budget took off earlier).
    pub(super) fn expire(
        &mut self,
        now: f64,
        ttl: Duration,
        selected: impl Fn(&PathLabels) -> bool,
    ) {
        let cutoff = now - ttl.as_secs_f64();
        self.paths.retain(|path, j| {
            let last = j
                .bursts
                .last_attempt()
                .into_iter()
                .chain(j.pings.as_ref().and_then(PingJudge::last_report))
                .fold(f64::NEG_INFINITY, f64::max);
            selected(path) || last >= cutoff
        });
    }

    /// Stops judging the paths to peers not in `peers`.
    pub(super) fn retain_peers(&mut self, peers: &BTreeSet<String>) {
        self.paths.retain(|p, _| peers.contains(&p.peer));
    }

    /// Shows every device's judged paths at `now` (Unix seconds); `planned` gives a selected
    /// path's planned interval (a path out of the selection is never stale).
    pub(super) fn show(&mut self, now: f64, planned: impl Fn(&PathLabels) -> Option<f64>) {
        let mut tally: BTreeMap<CrossingLabels, Tally> = BTreeMap::new();
        let mut rows: Vec<BadRow> = Vec::new();
        let unknown = PeerFacts::default();
        for (path, judged) in &self.paths {
            let peer = self.peers.get(&path.peer).unwrap_or(&unknown);
            let crossing = crossing(self.own_tor.as_deref(), peer.tor.as_deref());
            let key = CrossingLabels {
                device: path.device.clone(),
                crossing,
            };
            // The ways the path is counted bad, never a streak still short of `probes_bad`:
            // tallied per crossing, and a row each (a passing slow burst leaves no series).
            let verdicts = judged.verdicts(&self.criteria, now, planned(path));
            let counted: Vec<&Verdict> = verdicts
                .iter()
                .filter(|v| v.is_bad(&self.criteria))
                .collect();
            tally.entry(key).or_default().add(judged, &counted);
            rows.extend(counted.into_iter().map(|v| BadRow {
                path: path.clone(),
                state: v.state,
                labels: BadRowLabels {
                    device: path.device.clone(),
                    peer: path.peer.clone(),
                    peer_device: path.peer_device.clone(),
                    peer_node: peer.node.clone().unwrap_or_default(),
                    peer_tor: peer.tor.clone().unwrap_or_default(),
                    crossing,
                    state: v.state.as_str(),
                },
                in_a_row: v.in_a_row.max(1),
            }));
        }
        let paths = &self.paths;
        let shown_rows = self
            .rows
            .show(&self.families.rows, now, rows, |p| paths.contains_key(p));
        let f = &self.families;
        for gone in self.shown.iter().filter(|k| !tally.contains_key(*k)) {
            f.paths.remove(gone);
            f.last_success.remove(gone);
            f.last_good.remove(gone);
            for state in BadState::ALL {
                f.bad_paths.remove(&state_labels(gone, state));
            }
        }
        let mut series = 0;
        for (key, t) in &tally {
            f.paths.get_or_create(key).set(saturating(t.paths));
            f.last_success.get_or_create(key).set(t.last_success);
            f.last_good.get_or_create(key).set(t.last_good);
            series += 3;
            // A state's series only while some path is in it: a healthy device shows 3 a
            // crossing.
            for state in BadState::ALL {
                let labels = state_labels(key, state);
                match t.bad.get(&state).copied().unwrap_or(0) {
                    0 => {
                        f.bad_paths.remove(&labels);
                    }
                    n => {
                        f.bad_paths.get_or_create(&labels).set(saturating(n));
                        series += 1;
                    }
                }
            }
        }
        self.shown = tally.into_keys().collect();
        self.series = series + shown_rows;
    }

    /// The series the judged families show now.
    pub(super) fn series(&self) -> usize {
        self.series
    }
}

/// What one (device, crossing) adds up to.
#[derive(Debug, Default)]
struct Tally {
    paths: usize,
    bad: BTreeMap<BadState, usize>,
    last_success: f64,
    last_good: f64,
}

impl Tally {
    /// Counts a path, bad the ways `counted` says.
    fn add(&mut self, judged: &Judged, counted: &[&Verdict]) {
        self.paths += 1;
        let b = &judged.bursts;
        self.last_success = self.last_success.max(b.last_success().unwrap_or(0.0));
        self.last_good = self.last_good.max(b.last_good().unwrap_or(0.0));
        let states: BTreeSet<BadState> = counted.iter().map(|v| v.state).collect();
        for state in states {
            *self.bad.entry(state).or_default() += 1;
        }
    }
}

impl Judged {
    /// Every way the path is bad at `now`: its bursts' (stale only with a planned interval)
    /// and its pings'.
    fn verdicts(&self, criteria: &Criteria, now: f64, planned: Option<f64>) -> Vec<Verdict> {
        let mut verdicts = self
            .bursts
            .verdicts(criteria, now, planned.unwrap_or(f64::INFINITY));
        if let Some(pings) = &self.pings {
            verdicts.extend(pings.verdicts(criteria));
        }
        verdicts
    }
}

/// What the judge joins a peer's rows on.
#[derive(Debug, Clone, Default)]
struct PeerFacts {
    node: Option<String>,
    tor: Option<String>,
}

impl PeerFacts {
    fn of(labels: &[(String, String)]) -> Self {
        PeerFacts {
            node: label(labels, "peer_node").map(str::to_owned),
            tor: label(labels, TOR_LABEL).map(str::to_owned),
        }
    }
}

fn state_labels(key: &CrossingLabels, state: BadState) -> StateLabels {
    StateLabels {
        device: key.device.clone(),
        crossing: key.crossing,
        state: state.as_str(),
    }
}

fn saturating(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::crossing;
    use crate::metrics::probe::{
        BurstFigures, InfoLabels, PathLabels, ProbeEvent, ProbeRecord, ProbeRecorder, ProbeResult,
    };
    use crate::metrics::{Format, Metrics};
    use crate::ping::delay::Source;
    use crate::ping::path::Counts;
    use crate::ping::{PingReport, PingReports};
    use crate::prober::BurstKind;
    use crate::reason::ErrorReason;

    const T0: f64 = 1_700_000_000.0;

    fn path(peer: &str) -> PathLabels {
        PathLabels {
            device: "mlx5_0".into(),
            peer: peer.into(),
            peer_device: "mlx5_0".into(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn record(at: f64, result: ProbeResult) -> ProbeRecord {
        ProbeRecord {
            result,
            kind: BurstKind::Paced,
            target_bytes_per_second: Some(1e9),
            setup_seconds: None,
            at_unix_seconds: at,
            counters: Vec::new(),
            other_traffic: Vec::new(),
        }
    }

    fn success(at: f64, bandwidth: f64) -> ProbeRecord {
        record(
            at,
            ProbeResult::Success {
                figures: BurstFigures {
                    bytes: 1 << 20,
                    messages: 16,
                    elapsed_seconds: 0.5,
                    bandwidth_bytes_per_second: bandwidth,
                    min_window_bandwidth_bytes_per_second: bandwidth * 0.9,
                    completion_gap_max_seconds: 0.001,
                    message_rate_per_second: 32.0,
                    qp_bandwidth_min_bytes_per_second: None,
                    qp_bandwidth_max_bytes_per_second: None,
                },
            },
        )
    }

    fn failure(at: f64) -> ProbeRecord {
        record(
            at,
            ProbeResult::Failure {
                reason: ErrorReason::Timeout,
                message: "timed out".into(),
                figures: None,
            },
        )
    }

    fn value(text: &str, family: &str, labels: &str) -> Option<f64> {
        let series = format!("rdma_probe_{family}{{device=\"mlx5_0\",{labels}}}");
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    fn bad(text: &str, crossing: &str, state: &str) -> Option<f64> {
        value(
            text,
            "judged_bad_paths",
            &format!("crossing=\"{crossing}\",state=\"{state}\""),
        )
    }

    /// Node a under ToR t1 probes b (t1, local) and c (t2, cross), each planned every 60 s.
    fn recorder() -> (Metrics, ProbeRecorder) {
        let metrics = Metrics::for_exporter();
        let mut recorder = ProbeRecorder::new(metrics.probes.clone().unwrap());
        let at = Duration::from_secs_f64(T0);
        recorder.apply_at(
            ProbeEvent::Info(InfoLabels {
                node: labels(&[("node", "a"), ("tor", "t1")]),
                peers: vec![
                    labels(&[("peer", "b"), ("tor", "t1")]),
                    labels(&[("peer", "c"), ("tor", "t2")]),
                ],
            }),
            at,
        );
        recorder.apply_at(
            ProbeEvent::Intervals(vec![
                (("mlx5_0".into(), "b".into()), Duration::from_secs(60)),
                (("mlx5_0".into(), "c".into()), Duration::from_secs(60)),
            ]),
            at,
        );
        (metrics, recorder)
    }

    #[test]
    fn bad_paths_are_counted_per_device_and_crossing_once_the_rules_would_call_them_bad() {
        let (metrics, mut recorder) = recorder();
        let text = || metrics.encode(Format::PrometheusText).unwrap();
        let at = |i: u32| Duration::from_secs_f64(T0 + 60.0 * f64::from(i));
        for i in 0..2 {
            recorder.apply_at(
                ProbeEvent::completed(path("b"), failure(T0 + 60.0 * f64::from(i))),
                at(i),
            );
            recorder.apply_at(
                ProbeEvent::completed(path("c"), success(T0 + 60.0 * f64::from(i), 5e8)),
                at(i),
            );
        }
        // Two bad probes in a row: not yet bad (probes_bad is 3), but judged.
        let t = text();
        assert_eq!(
            value(&t, "judged_paths", "crossing=\"local\""),
            Some(1.0),
            "{t}"
        );
        assert_eq!(value(&t, "judged_paths", "crossing=\"cross\""), Some(1.0));
        assert_eq!(bad(&t, "local", "failed"), None);
        assert_eq!(bad(&t, "cross", "slow"), None);
        // Nor a row: a streak short of probes_bad leaves no series behind.
        assert!(!t.contains("rdma_probe_bad_path_in_a_row{"), "{t}");
        recorder.apply_at(ProbeEvent::completed(path("b"), failure(T0 + 120.0)), at(2));
        recorder.apply_at(
            ProbeEvent::completed(path("c"), success(T0 + 120.0, 5e8)),
            at(2),
        );
        let t = text();
        assert_eq!(bad(&t, "local", "failed"), Some(1.0), "{t}");
        // And its row, with what localisation joins on (b said no node name yet).
        assert!(
            t.contains(
                r#"rdma_probe_bad_path_in_a_row{device="mlx5_0",peer="b",peer_device="mlx5_0",peer_node="",peer_tor="t1",crossing="local",state="failed"} 3"#
            ),
            "{t}"
        );
        assert_eq!(bad(&t, "cross", "slow"), Some(1.0));
        assert_eq!(bad(&t, "cross", "failed"), None);
        // c succeeded, but slowly: never good.
        let last = |kind: &str, crossing: &str| {
            value(
                &t,
                &format!("judged_last_{kind}_timestamp_seconds"),
                &format!("crossing=\"{crossing}\""),
            )
        };
        assert_eq!(last("success", "cross"), Some(T0 + 120.0));
        assert_eq!(last("good", "cross"), Some(0.0));
        assert_eq!(last("success", "local"), Some(0.0));
        // A good burst ends the streak and is the newest good result.
        recorder.apply_at(
            ProbeEvent::completed(path("c"), success(T0 + 180.0, 1e9)),
            at(3),
        );
        let t = text();
        assert_eq!(bad(&t, "cross", "slow"), None);
        // Its row stays, at 0, for a rule that reads it late.
        assert!(
            t.contains(
                r#"rdma_probe_bad_path_in_a_row{device="mlx5_0",peer="c",peer_device="mlx5_0",peer_node="",peer_tor="t2",crossing="cross",state="slow"} 0"#
            ),
            "{t}"
        );
        assert_eq!(
            value(
                &t,
                "judged_last_good_timestamp_seconds",
                "crossing=\"cross\""
            ),
            Some(T0 + 180.0)
        );
        // Nothing for three planned intervals: both stale, judged at the recorder's expiry.
        recorder.expire(Duration::from_secs_f64(T0 + 180.0 + 181.0));
        let t = text();
        assert_eq!(bad(&t, "cross", "stale"), Some(1.0), "{t}");
        assert_eq!(bad(&t, "local", "stale"), Some(1.0));
        // A path forgotten is no longer judged: its crossing's series go.
        recorder.apply_at(ProbeEvent::ForgetPath(path("b")), at(7));
        let t = text();
        assert_eq!(value(&t, "judged_paths", "crossing=\"local\""), None, "{t}");
        assert_eq!(bad(&t, "local", "failed"), None);
        assert_eq!(value(&t, "judged_paths", "crossing=\"cross\""), Some(1.0));
    }

    #[test]
    fn a_path_out_of_the_selection_is_judged_until_its_ttl_after_its_last_probe() {
        let (metrics, mut recorder) = recorder();
        let text = || metrics.encode(Format::PrometheusText).unwrap();
        let at = |s: f64| Duration::from_secs_f64(T0 + s);
        recorder.apply_at(
            ProbeEvent::Selection(
                [(("mlx5_0".to_owned(), "c".to_owned()), false)]
                    .into_iter()
                    .collect(),
            ),
            at(0.0),
        );
        recorder.apply_at(ProbeEvent::completed(path("b"), failure(T0)), at(0.0));
        recorder.apply_at(ProbeEvent::completed(path("c"), success(T0, 1e9)), at(0.0));
        // b is out of the selection: never stale, judged for the series TTL (10 minutes).
        recorder.expire(at(599.0));
        let t = text();
        assert_eq!(
            value(&t, "judged_paths", "crossing=\"local\""),
            Some(1.0),
            "{t}"
        );
        assert_eq!(bad(&t, "local", "stale"), None);
        assert_eq!(bad(&t, "cross", "stale"), Some(1.0));
        recorder.expire(at(601.0));
        let t = text();
        assert_eq!(value(&t, "judged_paths", "crossing=\"local\""), None, "{t}");
        assert_eq!(value(&t, "judged_paths", "crossing=\"cross\""), Some(1.0));
    }

    #[test]
    fn pings_unanswered_in_a_row_and_lost_in_the_band_are_judged() {
        let (metrics, mut recorder) = recorder();
        let report = |sent: u64, lost: u64, lost_in_a_row: u64| PingReports {
            device: "mlx5_0".into(),
            timestamps: Source::Software,
            answered: 0,
            refused: 0,
            rtts: Vec::new(),
            paths: vec![PingReport {
                path: path("c"),
                counts: Counts {
                    sent,
                    lost,
                    ..Counts::default()
                },
                lost_in_a_row,
                window: None,
                gone: false,
            }],
        };
        let at = |i: u64| Duration::from_secs(T0 as u64 + 5 * i);
        for i in 1..=60 {
            recorder.apply_at(ProbeEvent::Pings(report(i, i / 10, 0)), at(i));
        }
        let t = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(bad(&t, "cross", "lossy"), Some(1.0), "{t}");
        assert_eq!(bad(&t, "cross", "unanswered"), None);
        recorder.apply_at(ProbeEvent::Pings(report(64, 10, 4)), at(61));
        let t = metrics.encode(Format::PrometheusText).unwrap();
        assert_eq!(bad(&t, "cross", "unanswered"), Some(1.0), "{t}");
    }

    #[test]
    fn a_path_crosses_only_between_two_known_and_different_tors() {
        assert_eq!(crossing(Some("t1"), Some("t2")), "cross");
        assert_eq!(crossing(Some("t1"), Some("t1")), "local");
        assert_eq!(crossing(None, Some("t2")), "local");
        assert_eq!(crossing(Some("t1"), None), "local");
        assert_eq!(crossing(Some(""), Some("t2")), "local");
    }
}
