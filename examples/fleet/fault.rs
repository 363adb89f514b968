//! The fault model: what the `--fault` specs say, parsed against the fleet's shape, and what they
//! mean for a probe at a given time (docs/scale.md, "Fleet bench: the emulator").

use std::fmt;
use std::time::Duration;

use serde_json::{json, Map, Value};

/// The fleet's size: node k is `t{k / per_tor}n{k % per_tor}` with devices `mlx5_0` to
/// `mlx5_{rails - 1}`, device r on rail r.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub nodes: usize,
    pub rails: u16,
    pub per_tor: usize,
}

impl Shape {
    pub fn tor_of(&self, node: usize) -> usize {
        node / self.per_tor
    }

    pub fn tors(&self) -> usize {
        self.nodes.div_ceil(self.per_tor)
    }

    pub fn node_name(&self, node: usize) -> String {
        format!("t{}n{}", node / self.per_tor, node % self.per_tor)
    }

    /// A node by its name (`t3n7`) or its 0-based index.
    fn node(&self, text: &str) -> Result<usize, String> {
        let index = match text.strip_prefix('t').and_then(|r| r.split_once('n')) {
            Some((t, i)) => {
                let (t, i) = (number(t)?, number(i)?);
                if i >= self.per_tor {
                    return Err(format!("no node {text}: {} nodes a ToR", self.per_tor));
                }
                t * self.per_tor + i
            }
            None => number(text)?,
        };
        if index >= self.nodes {
            return Err(format!("no node {text} in a fleet of {} nodes", self.nodes));
        }
        Ok(index)
    }

    /// A device by its name (`mlx5_3`) or its rail.
    fn rail(&self, text: &str) -> Result<u16, String> {
        let rail = number(text.strip_prefix("mlx5_").unwrap_or(text))?;
        match u16::try_from(rail) {
            Ok(r) if r < self.rails => Ok(r),
            _ => Err(format!("no device {text}: {} rails", self.rails)),
        }
    }

    /// A ToR by its label (`t3`) or its index.
    fn tor(&self, text: &str) -> Result<usize, String> {
        let tor = number(text.strip_prefix('t').unwrap_or(text))?;
        if tor >= self.tors() {
            return Err(format!("no ToR {text}: {} ToRs", self.tors()));
        }
        Ok(tor)
    }
}

fn number(text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not a node, device or ToR number"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Path,
    Port,
    PortDown,
    Node,
    Reboot,
    TorUplink,
    PortWidth,
    PortSpeed,
    Pcie,
}

impl Kind {
    const ALL: [Kind; 9] = [
        Kind::Path,
        Kind::Port,
        Kind::PortDown,
        Kind::Node,
        Kind::Reboot,
        Kind::TorUplink,
        Kind::PortWidth,
        Kind::PortSpeed,
        Kind::Pcie,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Path => "path",
            Kind::Port => "port",
            Kind::PortDown => "port_down",
            Kind::Node => "node",
            Kind::Reboot => "reboot",
            Kind::TorUplink => "tor_uplink",
            Kind::PortWidth => "port_width",
            Kind::PortSpeed => "port_speed",
            Kind::Pcie => "pcie",
        }
    }

    /// The keys the kind needs (besides the optional `start` and `end`).
    fn keys(self) -> &'static [&'static str] {
        match self {
            Kind::Path => &["node", "device", "peer", "fraction"],
            Kind::Port => &["node", "device", "fraction"],
            Kind::PortDown | Kind::PortWidth | Kind::PortSpeed | Kind::Pcie => &["node", "device"],
            Kind::Node | Kind::Reboot => &["node"],
            Kind::TorUplink => &["tor", "rail", "fraction"],
        }
    }

    /// Whether the fault shows in the node's sysfs tree (rewritten at its start and end).
    pub fn in_sysfs(self) -> bool {
        matches!(
            self,
            Kind::PortDown | Kind::PortWidth | Kind::PortSpeed | Kind::Pcie
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `--fault`, resolved against the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: Kind,
    pub node: Option<usize>,
    /// The device, by its rail (`node`'s device for `path`, `port` and the port kinds).
    pub device: Option<u16>,
    pub peer: Option<usize>,
    pub tor: Option<usize>,
    pub rail: Option<u16>,
    pub fraction: Option<f64>,
    /// From the emulator's start.
    pub start: Duration,
    /// `None`: until the end of the run.
    pub end: Option<Duration>,
}

impl Fault {
    /// Parses `KIND:key=value,key=value`; every error says what is wrong with the spec.
    pub fn parse(spec: &str, shape: &Shape) -> Result<Fault, String> {
        Fault::parse_keys(spec, shape).map_err(|e| format!("--fault {spec:?}: {e}"))
    }

    fn parse_keys(spec: &str, shape: &Shape) -> Result<Fault, String> {
        let (kind_text, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.name() == kind_text)
            .ok_or_else(|| {
                let kinds: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown kind {kind_text:?} (one of {})", kinds.join(", "))
            })?;
        let mut fault = Fault {
            kind,
            node: None,
            device: None,
            peer: None,
            tor: None,
            rail: None,
            fraction: None,
            start: Duration::ZERO,
            end: None,
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            if seen.contains(&key) {
                return Err(format!("{key} given twice"));
            }
            seen.push(key);
            if !kind.keys().contains(&key) && key != "start" && key != "end" {
                return Err(format!(
                    "{kind} takes {} (and start, end), not {key}",
                    kind.keys().join(", ")
                ));
            }
            let at = |what: &str| format!("{what}={value}: ");
            match key {
                "node" => fault.node = Some(shape.node(value).map_err(|e| at(key) + &e)?),
                "peer" => fault.peer = Some(shape.node(value).map_err(|e| at(key) + &e)?),
                "device" => fault.device = Some(shape.rail(value).map_err(|e| at(key) + &e)?),
                "rail" => fault.rail = Some(shape.rail(value).map_err(|e| at(key) + &e)?),
                "tor" => fault.tor = Some(shape.tor(value).map_err(|e| at(key) + &e)?),
                "fraction" => match value.parse::<f64>() {
                    Ok(f) if (0.0..=1.0).contains(&f) => fault.fraction = Some(f),
                    _ => return Err(at(key) + "a fraction is a number from 0 to 1"),
                },
                "start" => fault.start = duration(value).map_err(|e| at(key) + &e)?,
                "end" => fault.end = Some(duration(value).map_err(|e| at(key) + &e)?),
                _ => unreachable!("keys are checked against the kind's above"),
            }
        }
        let missing: Vec<&str> = kind
            .keys()
            .iter()
            .copied()
            .filter(|k| !seen.contains(k))
            .collect();
        if !missing.is_empty() {
            return Err(format!("{kind} needs {}", missing.join(", ")));
        }
        if fault.end.is_some_and(|end| end <= fault.start) {
            return Err("end must come after start".into());
        }
        if fault.peer.is_some() && fault.peer == fault.node {
            return Err("a path's peer is another node".into());
        }
        Ok(fault)
    }

    pub fn active(&self, at: Duration) -> bool {
        at >= self.start && self.end.is_none_or(|end| at < end)
    }

    /// The manifest's entry: names as the metrics label them, times in Unix seconds.
    pub fn manifest(&self, shape: &Shape, started_unix: f64, run_end: Duration) -> Value {
        let mut entry = Map::new();
        entry.insert("kind".into(), json!(self.kind.name()));
        if let Some(n) = self.node {
            entry.insert("node".into(), json!(shape.node_name(n)));
        }
        if let Some(d) = self.device {
            entry.insert("device".into(), json!(format!("mlx5_{d}")));
        }
        if let Some(p) = self.peer {
            entry.insert("peer".into(), json!(shape.node_name(p)));
        }
        if let Some(t) = self.tor {
            entry.insert("tor".into(), json!(format!("t{t}")));
        }
        if let Some(r) = self.rail.or(self.device) {
            entry.insert("rail".into(), json!(r));
        }
        if let Some(f) = self.fraction {
            entry.insert("fraction".into(), json!(f));
        }
        let end = self.end.unwrap_or(run_end);
        entry.insert(
            "start_unix".into(),
            json!(started_unix + self.start.as_secs_f64()),
        );
        entry.insert("end_unix".into(), json!(started_unix + end.as_secs_f64()));
        Value::Object(entry)
    }
}

fn duration(text: &str) -> Result<Duration, String> {
    rdma_probe_exporter::units::parse_duration(text).map_err(|e| e.to_string())
}

/// What a probe meets, from the faults active at the time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fate {
    /// The peer node is off or rebooting: nothing answers (the probe times out).
    PeerDown,
    /// This node's port is down.
    LocalPortDown,
    /// The peer's port is down, or the path drops everything: the RDMA WRITEs are never acked.
    Dropped,
    /// Runs at this fraction of its pace.
    Runs(f64),
}

/// Every fault of the run, asked about by time since the start.
#[derive(Debug, Clone)]
pub struct FaultModel {
    pub shape: Shape,
    pub faults: Vec<Fault>,
}

impl FaultModel {
    fn active(&self, at: Duration) -> impl Iterator<Item = &Fault> {
        self.faults.iter().filter(move |f| f.active(at))
    }

    /// Whether the node is off (its exporter is gone) at `at`.
    pub fn node_down(&self, node: usize, at: Duration) -> bool {
        self.active(at)
            .any(|f| matches!(f.kind, Kind::Node | Kind::Reboot) && f.node == Some(node))
    }

    fn has(&self, kind: Kind, node: usize, rail: u16, at: Duration) -> bool {
        self.active(at)
            .any(|f| f.kind == kind && f.node == Some(node) && f.device == Some(rail))
    }

    pub fn port_down(&self, node: usize, rail: u16, at: Duration) -> bool {
        self.has(Kind::PortDown, node, rail, at)
    }

    /// The port's link: narrower (`port_width`), slower (`port_speed`) or as cabled.
    pub fn link(&self, node: usize, rail: u16, at: Duration) -> Link {
        if self.has(Kind::PortWidth, node, rail, at) {
            Link::HalfWidth
        } else if self.has(Kind::PortSpeed, node, rail, at) {
            Link::LowerSpeed
        } else {
            Link::Full
        }
    }

    pub fn pcie_degraded(&self, node: usize, rail: u16, at: Duration) -> bool {
        self.has(Kind::Pcie, node, rail, at)
    }

    /// What a probe from `node`'s device on `rail` to `peer` meets at `at`.
    pub fn fate(&self, node: usize, rail: u16, peer: usize, at: Duration) -> Fate {
        if self.node_down(peer, at) {
            return Fate::PeerDown;
        }
        if self.port_down(node, rail, at) {
            return Fate::LocalPortDown;
        }
        if self.port_down(peer, rail, at) {
            return Fate::Dropped;
        }
        let cross_tor = self.shape.tor_of(node) != self.shape.tor_of(peer);
        let mut fraction = 1.0;
        for f in self.active(at) {
            let applies = match f.kind {
                Kind::Path => {
                    f.node == Some(node) && f.device == Some(rail) && f.peer == Some(peer)
                }
                Kind::Port => {
                    f.device == Some(rail) && (f.node == Some(node) || f.node == Some(peer))
                }
                Kind::TorUplink => {
                    cross_tor
                        && f.rail == Some(rail)
                        && (f.tor == Some(self.shape.tor_of(node))
                            || f.tor == Some(self.shape.tor_of(peer)))
                }
                _ => false,
            };
            if applies {
                fraction *= f.fraction.unwrap_or(1.0);
            }
        }
        if fraction <= 0.0 {
            Fate::Dropped
        } else {
            Fate::Runs(fraction)
        }
    }

    /// When the sysfs trees change (the starts and ends of the sysfs kinds), in order.
    pub fn sysfs_changes(&self) -> Vec<Duration> {
        let mut at: Vec<Duration> = self
            .faults
            .iter()
            .filter(|f| f.kind.in_sysfs())
            .flat_map(|f| [Some(f.start), f.end])
            .flatten()
            .filter(|t| !t.is_zero())
            .collect();
        at.sort();
        at.dedup();
        at
    }
}

/// How a port trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// 4X NDR: 400 Gb/s.
    Full,
    /// 2X NDR: 200 Gb/s.
    HalfWidth,
    /// 4X HDR: 200 Gb/s.
    LowerSpeed,
}

impl Link {
    pub fn bits_per_second(self) -> f64 {
        match self {
            Link::Full => 400e9,
            Link::HalfWidth | Link::LowerSpeed => 200e9,
        }
    }

    /// The port's `rate` file.
    pub fn rate_text(self) -> &'static str {
        match self {
            Link::Full => "400 Gb/sec (4X NDR)",
            Link::HalfWidth => "200 Gb/sec (2X NDR)",
            Link::LowerSpeed => "200 Gb/sec (4X HDR)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        nodes: 250,
        rails: 8,
        per_tor: 32,
    };

    fn parse(spec: &str) -> Result<Fault, String> {
        Fault::parse(spec, &SHAPE)
    }

    #[test]
    fn every_kind_parses_with_names_or_numbers() {
        let f =
            parse("path:node=t0n1,device=mlx5_3,peer=40,fraction=0.5,start=300s,end=15m").unwrap();
        assert_eq!(
            (f.kind, f.node, f.device, f.peer, f.fraction),
            (Kind::Path, Some(1), Some(3), Some(40), Some(0.5))
        );
        assert_eq!(
            (f.start, f.end),
            (Duration::from_secs(300), Some(Duration::from_secs(900)))
        );
        let f = parse("tor_uplink:tor=t7,rail=7,fraction=0").unwrap();
        assert_eq!((f.tor, f.rail, f.fraction), (Some(7), Some(7), Some(0.0)));
        assert_eq!(f.end, None, "until the end of the run");
        for spec in [
            "port:node=t7n25,device=0,fraction=0.3",
            "port_down:node=5,device=mlx5_7",
            "node:node=t1n0",
            "reboot:node=249,start=10s,end=20s",
            "port_width:node=0,device=1",
            "port_speed:node=0,device=1",
            "pcie:node=0,device=1",
        ] {
            parse(spec).unwrap();
        }
    }

    #[test]
    fn bad_specs_are_errors_that_say_what_is_wrong() {
        for (spec, says) in [
            ("", "unknown kind"),
            ("cable:node=1", "unknown kind \"cable\""),
            ("port:node=1,device=2", "port needs fraction"),
            ("port:node=1,device=2,fraction=1.5", "from 0 to 1"),
            ("port:node=1,device=2,fraction=x", "from 0 to 1"),
            ("port:node=250,device=2,fraction=0", "no node 250"),
            ("port:node=t7n26,device=2,fraction=0", "no node t7n26"),
            ("port:node=t0n32,device=2,fraction=0", "32 nodes a ToR"),
            ("port:node=1,device=mlx5_8,fraction=0", "no device mlx5_8"),
            ("port:node=1,device=2,fraction=0,peer=3", "not peer"),
            ("node:node=1,node=2", "node given twice"),
            ("node:node", "not key=value"),
            ("node:node=x", "not a node"),
            ("node:node=1,start=5", "start=5"),
            ("node:node=1,start=20s,end=10s", "end must come after start"),
            ("path:node=1,device=0,peer=1,fraction=0", "another node"),
            ("tor_uplink:tor=t8,rail=0,fraction=0", "no ToR t8"),
            ("node:node=-1", "not a node"),
            (
                "port_width:node=99999999999999999999999,device=0",
                "not a node",
            ),
        ] {
            let error = parse(spec).expect_err(spec);
            assert!(error.contains(says), "{spec}: {error}");
            assert!(error.starts_with("--fault"), "{error}");
        }
    }

    #[test]
    fn faults_apply_in_their_window_and_to_both_ends_of_a_port() {
        let model = FaultModel {
            shape: SHAPE,
            faults: vec![
                parse("port:node=0,device=1,fraction=0.5,start=10s,end=20s").unwrap(),
                parse("tor_uplink:tor=t1,rail=2,fraction=0").unwrap(),
                parse("reboot:node=5,start=1s,end=2s").unwrap(),
                parse("port_down:node=6,device=3").unwrap(),
            ],
        };
        let s = Duration::from_secs;
        assert_eq!(model.fate(0, 1, 3, s(5)), Fate::Runs(1.0));
        assert_eq!(model.fate(0, 1, 3, s(10)), Fate::Runs(0.5));
        assert_eq!(model.fate(3, 1, 0, s(15)), Fate::Runs(0.5), "into the port");
        assert_eq!(model.fate(3, 2, 0, s(15)), Fate::Runs(1.0), "another rail");
        assert_eq!(model.fate(0, 1, 3, s(20)), Fate::Runs(1.0));
        assert_eq!(model.fate(0, 2, 40, s(0)), Fate::Dropped, "into ToR 1");
        assert_eq!(model.fate(40, 2, 0, s(0)), Fate::Dropped, "out of ToR 1");
        assert_eq!(model.fate(40, 2, 41, s(0)), Fate::Runs(1.0), "inside ToR 1");
        assert_eq!(model.fate(0, 2, 5, s(1)), Fate::PeerDown);
        assert_eq!(model.fate(0, 2, 5, s(2)), Fate::Runs(1.0));
        assert_eq!(model.fate(6, 3, 0, s(0)), Fate::LocalPortDown);
        assert_eq!(model.fate(0, 3, 6, s(0)), Fate::Dropped);
        assert_eq!(model.sysfs_changes(), Vec::<Duration>::new());
    }
}
