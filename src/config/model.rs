//! The validated config: what the exporter uses, and all it uses.
//!
//! Every value here has been checked once, at load ([`super::validate`]); the types make the
//! remaining choices explicit (`Devices::AllActive`, `GidIndex::Auto`, `Auth::None`,
//! `rate_limit: None` = unpaced). [`Config`], [`Peer`] and [`ProbeConfig`] keep their fields
//! private so that only a loaded file produces them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;

use super::address::HostPort;
use crate::burst::{BurstLength, BurstPlan};
use crate::control::{AuthMode, Keys, Psk, PskError};
use crate::prober;
use crate::topology::Topology;
use crate::units::{ByteSize, RateLimit, ResolveError, ResolvedRate};
use crate::verbs::LocalPort;

/// How often a path is probed, unless configured.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);
/// Random spread of probe times, as a fraction of the interval, unless configured.
pub const DEFAULT_JITTER: f64 = 0.1;
/// Largest jitter accepted: beyond half the interval, two probes of a path could run back to back.
pub const MAX_JITTER: f64 = 0.5;
/// How long a burst runs, unless configured.
pub const DEFAULT_BURST_DURATION: Duration = Duration::from_millis(500);
/// Every this-many-th burst of a path runs unpaced (a capacity check), unless configured.
pub const DEFAULT_UNPACED_EVERY: u32 = 24;
/// Deadline for each control exchange, and how long a burst may overrun its plan.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// ib_write_bw's QP timeout exponent (4.096 µs × 2^14 = 67 ms).
pub const DEFAULT_QP_TIMEOUT: u8 = 14;
/// Where `/metrics` is served, unless configured.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 9587);
/// Where the control channel listens, unless configured.
pub const DEFAULT_CONTROL_LISTEN: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    super::address::DEFAULT_CONTROL_PORT,
);
/// How long a discovered peer that vanished stays a candidate, unless configured.
pub const DEFAULT_FORGET_AFTER: Duration = Duration::from_secs(3600);
/// How often discovery names are re-resolved, unless configured (Prometheus' dns_sd default).
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Shortest and longest re-resolution interval accepted.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
pub const MAX_REFRESH_INTERVAL: Duration = Duration::from_secs(3600);
/// Peers outside this node's group probed per device and round, unless configured.
pub const DEFAULT_SAMPLE: u32 = crate::schedule::selection::DEFAULT_SAMPLE as u32;
/// Up to this many peers every one is probed, unless configured.
pub const DEFAULT_MAX_PEERS: u32 = crate::schedule::selection::DEFAULT_MAX_PEERS as u32;
/// How often the sampled peers change, unless configured.
pub const DEFAULT_ROUND: Duration = crate::schedule::selection::DEFAULT_ROUND;
/// Shortest round accepted: a sampled path is probed once per round, so the round must leave
/// the scheduler room to spread the probes.
pub const MIN_ROUND: Duration = Duration::from_secs(60);
/// Longest round accepted.
pub const MAX_ROUND: Duration = Duration::from_secs(24 * 3600);
pub const DEFAULT_DUTY_CYCLE: f64 = crate::schedule::DEFAULT_DUTY_CYCLE;
/// Below this a device would barely probe: surely a typo (`0.05%` for `5%`).
pub const MIN_DUTY_CYCLE: f64 = 0.001;

/// Static labels (`rack`, `tor`, ...), sorted by name.
pub type Labels = BTreeMap<String, String>;

/// `node`'s labels from `topology`, over those it has.
fn place(labels: &mut Labels, topology: &Topology, node: &str) {
    for (name, value) in topology.labels(node) {
        labels.insert(name.to_owned(), value);
    }
}

/// A validated config file.
#[derive(Debug, Clone)]
pub struct Config {
    pub(super) origin: String,
    pub(super) node: String,
    pub(super) labels: Labels,
    pub(super) listen: Listen,
    pub(super) auth: Auth,
    pub(super) devices: Devices,
    pub(super) exclude_devices: Vec<String>,
    /// Networks a peer's RDMA address may be in besides its control address.
    pub(super) rdma_networks: Vec<IpNet>,
    pub(super) defaults: ProbeConfig,
    pub(super) peers: Vec<Peer>,
    /// Peers found by discovery, merged in by the exporter ([`Config::with_discovered`]); never
    /// from the file.
    pub(super) discovered: Vec<Peer>,
    pub(super) discovery: Option<Discovery>,
    pub(super) selection: Selection,
    pub(super) schedule: Schedule,
    pub(super) series: Series,
    pub(super) ping: Ping,
    pub(super) judge: Judge,
    pub(super) limits: Limits,
    /// Where each node's place in the fabric is read from (docs/config.md, "Topology").
    pub(super) topology_source: Option<TopologySource>,
    /// What that file said, once [`Config::load`] read it: applied to the node's, the peers'
    /// and the discovered peers' labels.
    pub(super) topology: Option<Arc<Topology>>,
}

/// The file each node's place in the fabric comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySource {
    /// A Slurm `topology.conf` (the tree or the block plugin's).
    pub slurm: PathBuf,
}

impl Config {
    /// The file this config came from (as given), for messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// This node's name; a peer with the same name is skipped.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This node's static labels (for `rdma_probe_node_info`).
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    pub fn listen(&self) -> &Listen {
        &self.listen
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Which local RDMA ports probe and respond.
    pub fn devices(&self) -> &Devices {
        &self.devices
    }

    /// Devices never touched, not even read in sysfs.
    pub fn exclude_devices(&self) -> &[String] {
        &self.exclude_devices
    }

    /// Networks a peer's RDMA address (its GID) may be in besides the address of its control
    /// connection: the rails' subnets on multi-rail nodes (docs/security.md, "Where RDMA traffic
    /// goes").
    pub fn rdma_networks(&self) -> &[IpNet] {
        &self.rdma_networks
    }

    /// Whether `device` is excluded.
    pub fn is_excluded(&self, device: &str) -> bool {
        self.exclude_devices.iter().any(|d| d == device)
    }

    /// The `defaults` section with the built-in defaults filled in.
    pub fn defaults(&self) -> &ProbeConfig {
        &self.defaults
    }

    /// Every peer in file order, including skipped ones (see [`Peer::skipped`]).
    pub fn peers(&self) -> &[Peer] {
        &self.peers
    }

    /// The peers to probe: every peer of the file that is not skipped, then the discovered
    /// ones.
    pub fn active_peers(&self) -> impl Iterator<Item = &Peer> + '_ {
        self.peers
            .iter()
            .filter(|p| p.skipped.is_none())
            .chain(&self.discovered)
    }

    /// The peers discovery found that are probed besides the file's (see
    /// [`Config::with_discovered`]).
    pub fn discovered_peers(&self) -> &[Peer] {
        &self.discovered
    }

    /// This config with `peers` (from [`Peer::discovered`]) as its discovered peers, replacing
    /// the previous ones. The caller has left out the node itself and the peers the file lists.
    /// A discovered peer the topology names takes its place from it.
    pub fn with_discovered(mut self, mut peers: Vec<Peer>) -> Config {
        if let Some(topology) = &self.topology {
            for peer in &mut peers {
                place(&mut peer.labels, topology, &peer.name);
            }
        }
        self.discovered = peers;
        self
    }

    /// Where the nodes' places are read from, if anywhere.
    pub fn topology_source(&self) -> Option<&TopologySource> {
        self.topology_source.as_ref()
    }

    /// This config with `topology` applied: the node and every peer it names take their `tor`
    /// (leaf switch), `spine` (the switch above it) or `block` from it, over their configured
    /// labels; the others keep theirs.
    pub fn with_topology(mut self, topology: Topology) -> Config {
        place(&mut self.labels, &topology, &self.node);
        for peer in self.peers.iter_mut().chain(self.discovered.iter_mut()) {
            place(&mut peer.labels, &topology, &peer.name);
        }
        self.topology = Some(Arc::new(topology));
        self
    }

    /// Where peers are discovered besides `peers` (docs/config.md, "Discovery").
    pub fn discovery(&self) -> Option<&Discovery> {
        self.discovery.as_ref()
    }

    /// Which peers are probed each round (docs/scale.md); the defaults when the file has no
    /// `selection`.
    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// How the local devices share their time (docs/schedule.md).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The pings beside the bursts (docs/config.md, "ping").
    pub fn ping(&self) -> &Ping {
        &self.ping
    }

    /// How each path is judged from its probes and pings (docs/architecture.md, "Judging
    /// paths").
    pub fn judge(&self) -> &Judge {
        &self.judge
    }

    /// The series budget (docs/metrics.md, "Series budget").
    pub fn series(&self) -> &Series {
        &self.series
    }

    /// How many sessions this node serves and how much memory its sessions pin.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// How many per-path series this node keeps on `/metrics`, and for how long a path out of the
/// selection stays there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// Most per-path series on `/metrics`.
    pub budget: usize,
    /// A path out of the selection leaves `/metrics` this long after its last probe.
    pub ttl: Duration,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            budget: crate::metrics::budget::DEFAULT_SERIES_BUDGET,
            ttl: crate::metrics::budget::DEFAULT_SERIES_TTL,
        }
    }
}

/// How this node pings the paths its bursts reach (docs/architecture.md, "Pings").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// Each path's ping period; `None` (`interval: off`): no pings sent, none answered.
    pub interval: Option<Duration>,
    /// A ping whose first answer (the ack) has not come after this is lost.
    pub timeout: Duration,
    /// The RTT quantiles cover this much of the past.
    pub window: Duration,
    /// The most pings a second one device sends.
    pub max_rate: u32,
    /// The most paths one device pings.
    pub max_paths: usize,
}

impl Default for Ping {
    fn default() -> Self {
        Ping {
            interval: Some(Duration::from_secs(5)),
            timeout: Duration::from_secs(1),
            window: Duration::from_secs(60),
            max_rate: 1000,
            max_paths: 1024,
        }
    }
}

/// How the exporter judges each path from its own probes and pings (docs/architecture.md,
/// "Judging paths"). The names and defaults are the alert rules' own
/// (`deploy/prometheus/generate`); windows are counted as the rules count them: in the probe
/// interval (`defaults.interval`) and in the ping interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judge {
    /// A path is failing, slow, stalled, gapped or below its baseline after this many such
    /// probes in a row.
    pub probes_bad: u32,
    /// Slow: achieved / target bandwidth of paced bursts below this fraction.
    pub degraded_ratio: f64,
    /// Below its baseline: under this fraction of both the path's own median ratio over
    /// `baseline` and its node's median (while at or above `degraded_ratio`).
    pub baseline_drop: f64,
    /// Stalled: a burst's lowest short-window bandwidth below this fraction of its average.
    pub stall_min_window_ratio: f64,
    /// Gapped: the longest completion gap above this many times the path's median gap over
    /// `baseline`, and above `gap_floor`.
    pub gap_factor: u32,
    pub gap_floor: Duration,
    /// Stale: no probe for this many of the path's own planned intervals.
    pub stale_probes: u32,
    /// The path's own medians cover this many probe intervals.
    pub baseline: u32,
    /// Corrupt: for this many probe intervals after a burst's data arrived wrong.
    pub validation_window: u32,
    /// The responder counts a prober for this many probe intervals after its last burst on a
    /// device (`rdma_probe_responder_probers`): at least a round of the sampled selection.
    pub responder_window: u32,
    /// Lossy: at least this fraction, and at least `ping_loss_min`, of the path's pings lost over
    /// `ping_loss_window` pings, but less than `ping_loss_below` of them (a total fault).
    pub ping_loss_ratio: f64,
    pub ping_loss_min: u32,
    pub ping_loss_below: f64,
    pub ping_loss_window: u32,
    /// Slow to answer: the median RTT above this many times the path's own median over
    /// `ping_baseline` pings, and above `ping_rtt_floor`.
    pub ping_rtt_factor: u32,
    pub ping_rtt_floor: Duration,
    pub ping_baseline: u32,
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            probes_bad: 3,
            degraded_ratio: 0.7,
            baseline_drop: 0.85,
            stall_min_window_ratio: 0.25,
            gap_factor: 10,
            gap_floor: Duration::from_millis(10),
            stale_probes: 3,
            baseline: 60,
            validation_window: 10,
            responder_window: 30,
            ping_loss_ratio: 0.02,
            ping_loss_min: 3,
            ping_loss_below: 0.5,
            ping_loss_window: 60,
            ping_rtt_factor: 3,
            ping_rtt_floor: Duration::from_micros(100),
            ping_baseline: 720,
        }
    }
}

/// Largest count `judge` accepts for its streaks and factors, and for its windows.
pub const MAX_JUDGE_COUNT: u64 = 1000;
pub const MAX_JUDGE_WINDOW: u64 = 100_000;

/// Shortest and longest ping interval, timeout and window accepted.
pub const PING_INTERVALS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(3600);
pub const PING_TIMEOUTS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(60);
pub const MAX_PING_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Largest `ping.max_rate` and `ping.max_paths` accepted.
pub const MAX_PING_RATE: u64 = 100_000;
pub const MAX_PING_PATHS: u64 = 100_000;

/// Largest series budget accepted.
pub const MAX_SERIES_BUDGET: u64 = 10_000_000;
/// Shortest and longest series TTL accepted.
pub const MIN_SERIES_TTL: Duration = Duration::from_secs(60);
pub const MAX_SERIES_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the exporter listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    /// `/metrics`, `/healthz`, `/readyz`.
    pub metrics: SocketAddr,
    /// The control channel probers connect to.
    pub control: SocketAddr,
}

/// How the control channel is authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A pre-shared key read from `path` (read when the exporter starts, not at config load, so a
    /// config can be checked where the secret is not mounted), and during a key rollover the
    /// previous key, also accepted (docs/security.md, "Rotating the key").
    PskFile {
        path: PathBuf,
        previous: Option<PathBuf>,
    },
    /// No authentication: written out as `auth: none`.
    None,
}

impl Auth {
    /// Loads the key (and the previous key, if any) into the control channel's [`AuthMode`].
    pub fn load(&self) -> Result<AuthMode, PskError> {
        match self {
            Auth::PskFile { path, previous } => {
                let current = Psk::load(path)?;
                let previous = previous.as_ref().map(Psk::load).transpose()?;
                Ok(AuthMode::Psk(Keys::new(current, previous)))
            }
            Auth::None => Ok(AuthMode::None),
        }
    }

    /// The key file, if any.
    pub fn psk_file(&self) -> Option<&Path> {
        match self {
            Auth::PskFile { path, .. } => Some(path),
            Auth::None => None,
        }
    }

    /// The previous key's file, during a rollover.
    pub fn previous_psk_file(&self) -> Option<&Path> {
        match self {
            Auth::PskFile { previous, .. } => previous.as_deref(),
            Auth::None => None,
        }
    }
}

/// Which local RDMA ports the exporter uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Every device with an active port (minus `exclude_devices`): the default.
    AllActive,
    /// Exactly these, in file order (never empty).
    Listed(Vec<Device>),
}

/// One local RDMA port, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `mlx5_0`, `rxe0`.
    pub name: String,
    /// 1-based port number.
    pub port: u8,
    /// The rail this port is on; paths are matched by rail. Either every listed device has one
    /// or none has.
    pub rail: Option<u16>,
    pub gid_index: GidIndex,
}

impl Device {
    /// The prober's view of this port.
    pub fn local_port(&self) -> LocalPort {
        LocalPort {
            device: Some(self.name.clone()),
            port: self.port,
            gid_index: self.gid_index.index(),
        }
    }
}

/// Which GID of a port the probes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GidIndex {
    /// The port's global IPv4-mapped RoCE v2 GID, as ib_write_bw picks it.
    #[default]
    Auto,
    Index(u32),
}

impl GidIndex {
    pub fn index(self) -> Option<u32> {
        match self {
            GidIndex::Auto => None,
            GidIndex::Index(i) => Some(i),
        }
    }
}

impl fmt::Display for GidIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidIndex::Auto => f.write_str("auto"),
            GidIndex::Index(i) => write!(f, "{i}"),
        }
    }
}

/// What runs at a peer's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerMode {
    /// Another rdma-probe-exporter (its responder).
    #[default]
    Exporter,
    /// A stock `ib_write_bw` server (perftest's wire protocol). Reserved: parsed and checked,
    /// probing such a peer is not implemented yet.
    Perftest,
}

impl fmt::Display for PeerMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PeerMode::Exporter => "exporter",
            PeerMode::Perftest => "perftest",
        })
    }
}

/// Why a peer in the file is not probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The peer is this node (the same peer list is shared by every node).
    Itself,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::Itself => "itself",
        })
    }
}

/// One entry of `peers`.
#[derive(Debug, Clone)]
pub struct Peer {
    pub(super) name: String,
    pub(super) address: HostPort,
    pub(super) labels: Labels,
    pub(super) mode: PeerMode,
    pub(super) probe: ProbeConfig,
    pub(super) overrides: Vec<&'static str>,
    pub(super) skipped: Option<SkipReason>,
}

impl Peer {
    /// A peer found by discovery: probed with `defaults`, as a responder of this exporter.
    pub fn discovered(
        name: String,
        address: HostPort,
        labels: Labels,
        defaults: &ProbeConfig,
    ) -> Peer {
        Peer {
            name,
            address,
            labels,
            mode: PeerMode::Exporter,
            probe: defaults.clone(),
            overrides: Vec::new(),
            skipped: None,
        }
    }

    /// The name used in metrics (`peer` label).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The control address (`HOST:PORT`).
    pub fn address(&self) -> &HostPort {
        &self.address
    }

    /// Static labels (for `rdma_probe_peer_info`).
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    pub fn mode(&self) -> PeerMode {
        self.mode
    }

    /// The effective probe settings: `defaults`, overridden by the peer's own fields.
    pub fn probe(&self) -> &ProbeConfig {
        &self.probe
    }

    /// The probe settings this peer sets itself (field names as in the file).
    pub fn overrides(&self) -> &[&'static str] {
        &self.overrides
    }

    /// `Some` when this peer is kept in the file but not probed.
    pub fn skipped(&self) -> Option<SkipReason> {
        self.skipped
    }
}

/// Effective probe settings of a peer (or of `defaults`), with the burst plan checked at load.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    pub(super) values: ProbeValues,
    /// The plan with every setting but the pace: a percentage rate limit needs both ends' link
    /// rates, known only at run time, and every Nth burst runs unpaced anyway.
    pub(super) plan: BurstPlan,
}

/// The settings without the plan built from them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProbeValues {
    pub interval: Duration,
    pub jitter: f64,
    pub message_size: ByteSize,
    pub length: BurstLength,
    pub rate_limit: Option<RateLimit>,
    pub unpaced_every: u32,
    pub qps: u16,
    pub tx_depth: u32,
    pub cq_mod: Option<u32>,
    pub post_list: u32,
    pub mtu: Option<u32>,
    pub traffic_class: u8,
    pub service_level: u8,
    pub qp_timeout: u8,
    pub timeout: Duration,
}

impl ProbeValues {
    /// The product's defaults: ib_write_bw's for the burst, 500 ms long, unpaced.
    pub fn builtin() -> ProbeValues {
        ProbeValues {
            interval: DEFAULT_INTERVAL,
            jitter: DEFAULT_JITTER,
            message_size: ByteSize(crate::burst::plan::DEFAULT_MESSAGE_SIZE),
            length: BurstLength::Duration(DEFAULT_BURST_DURATION),
            rate_limit: None,
            unpaced_every: DEFAULT_UNPACED_EVERY,
            qps: 1,
            tx_depth: crate::burst::plan::DEFAULT_TX_DEPTH,
            cq_mod: None,
            post_list: 1,
            mtu: None,
            traffic_class: 0,
            service_level: 0,
            qp_timeout: DEFAULT_QP_TIMEOUT,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl ProbeConfig {
    /// Time between two probes of a path.
    pub fn interval(&self) -> Duration {
        self.values.interval
    }

    /// Random spread of probe times as a fraction of the interval, `0.0..=0.5`.
    pub fn jitter(&self) -> f64 {
        self.values.jitter
    }

    pub fn message_size(&self) -> ByteSize {
        self.values.message_size
    }

    pub fn length(&self) -> BurstLength {
        self.values.length
    }

    /// `None`: unpaced. A percentage is resolved per burst with [`Self::resolve_rate`].
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.values.rate_limit
    }

    /// Every this-many-th burst of a path runs unpaced; 0 = never.
    pub fn unpaced_every(&self) -> u32 {
        self.values.unpaced_every
    }

    pub fn qps(&self) -> u16 {
        self.values.qps
    }

    pub fn tx_depth(&self) -> u32 {
        self.values.tx_depth
    }

    /// As configured; `None` = perftest's default (see [`BurstPlan::cq_mod`] for the effective).
    pub fn cq_mod(&self) -> Option<u32> {
        self.values.cq_mod
    }

    pub fn post_list(&self) -> u32 {
        self.values.post_list
    }

    /// Upper bound for the path MTU in bytes; `None` = the lower active MTU of both ends.
    pub fn mtu(&self) -> Option<u32> {
        self.values.mtu
    }

    /// RoCE v2: DSCP << 2.
    pub fn traffic_class(&self) -> u8 {
        self.values.traffic_class
    }

    pub fn service_level(&self) -> u8 {
        self.values.service_level
    }

    /// Local ACK timeout exponent (4.096 µs × 2^N).
    pub fn qp_timeout(&self) -> u8 {
        self.values.qp_timeout
    }

    /// Deadline for each control exchange, and how long a burst may overrun its plan.
    pub fn timeout(&self) -> Duration {
        self.values.timeout
    }

    /// The burst plan without a pace (checked at load).
    pub fn plan(&self) -> &BurstPlan {
        &self.plan
    }

    /// The rate of a paced burst: `None` when no limit is configured. `link_rate` is the lower
    /// link rate of both ends in bytes per second; only a percentage needs it.
    pub fn resolve_rate(
        &self,
        link_rate_bytes_per_second: Option<f64>,
    ) -> Result<Option<ResolvedRate>, ResolveError> {
        self.values
            .rate_limit
            .map(|limit| {
                limit.resolve(self.values.message_size.bytes(), link_rate_bytes_per_second)
            })
            .transpose()
    }

    /// The plan of one burst: paced at `rate` (from [`Self::resolve_rate`]), or unpaced for `None`.
    pub fn plan_with_rate(&self, rate: Option<ResolvedRate>) -> BurstPlan {
        self.plan.clone().with_rate(rate)
    }

    /// Everything the prober needs for a probe of this peer from `local`.
    pub fn prober_settings(
        &self,
        target: &HostPort,
        node_name: &str,
        local: LocalPort,
        auth: AuthMode,
    ) -> prober::ProbeSettings {
        let v = &self.values;
        prober::ProbeSettings {
            target: target.to_string(),
            node_name: node_name.to_owned(),
            local,
            rail: None,
            message_size: v.message_size.bytes(),
            length: v.length,
            rate_limit: v.rate_limit,
            qps: v.qps,
            tx_depth: v.tx_depth,
            cq_mod: v.cq_mod,
            post_list: v.post_list,
            mtu: v.mtu,
            traffic_class: v.traffic_class,
            service_level: v.service_level,
            qp_timeout: v.qp_timeout,
            auth,
            timeout: v.timeout,
            max_session_bytes: prober::DEFAULT_MAX_SESSION_BYTES,
            busy_poll: false,
            rdma_networks: Vec::new(),
        }
    }
}

/// Scheduling limits of this node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Most share of wall time each local device spends bursting (docs/schedule.md,
    /// "Duty-cycle budget").
    pub duty_cycle: f64,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            duty_cycle: DEFAULT_DUTY_CYCLE,
        }
    }
}

/// How many sessions this node serves at once and how much memory RDMA sessions pin, on both
/// sides (docs/security.md, "Memory and session limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sessions the responder serves at once; more are refused (`limit`).
    pub max_sessions: usize,
    /// Memory all served sessions pin together; a session beyond it is refused (`limit`).
    pub max_pinned_bytes: u64,
    /// Memory one session pins on each end: what a served session may get, and what a probed
    /// path's session asks for at most.
    pub max_session_bytes: u64,
}

/// [`Limits::max_sessions`] unless the config says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 16;
/// Largest `limits.max_sessions` accepted.
pub const MAX_MAX_SESSIONS: u64 = 4096;
/// [`Limits::max_pinned_bytes`] unless the config says otherwise.
pub const DEFAULT_MAX_PINNED_BYTES: u64 = 1 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_pinned_bytes: DEFAULT_MAX_PINNED_BYTES,
            max_session_bytes: prober::DEFAULT_MAX_SESSION_BYTES,
        }
    }
}

/// Where peers come from besides `peers` (the `discovery` module runs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Names whose A/AAAA records are peers (e.g. a DaemonSet's headless Service).
    pub dns: Vec<HostPort>,
    /// file_sd-style peer lists (paths, or globs in the file name), watched.
    pub files: Vec<String>,
    /// How long a vanished peer stays a candidate.
    pub forget_after: Duration,
    /// How often the `dns` names are resolved again.
    pub refresh_interval: Duration,
}

/// Which peers are probed each round (docs/scale.md, "Selection").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Peers with the same value of this label as the node are probed every round.
    pub group_by: String,
    /// Up to this many peers, every one is probed (the full mesh); beyond, at most this many
    /// same-group peers per device and round.
    pub max_peers: u32,
    /// Other-group peers per device and round (raised to the group's share).
    pub sample: u32,
    /// How often the sample changes.
    pub round: Duration,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            group_by: crate::schedule::selection::DEFAULT_GROUP_BY.to_owned(),
            max_peers: DEFAULT_MAX_PEERS,
            sample: DEFAULT_SAMPLE,
            round: DEFAULT_ROUND,
        }
    }
}

impl Selection {
    /// The selector's settings.
    pub fn to_selection_config(&self) -> crate::schedule::SelectionConfig {
        crate::schedule::SelectionConfig {
            group_by: self.group_by.clone(),
            max_peers: self.max_peers as usize,
            sample: self.sample as usize,
            round: self.round,
        }
    }
}
