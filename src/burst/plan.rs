//! What one burst will do, validated once: message size, queue depths, length, pace.
//!
//! Why a separate, validated type: the engine runs on a dedicated thread against pinned memory
//! and live QPs; every check it would otherwise have to repeat (or forget) is done here, with an
//! error an operator can act on. Defaults are ib_write_bw's (docs/architecture.md, "ib_write_bw
//! semantics"), so our numbers compare with perftest's when nobody changed anything.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::pacing::{Pacer, DEFAULT_BURST_ALLOWANCE};
use super::signal::{SendWindow, SignalPolicy, WindowError, MAX_WR_INDEX};
use super::stats::window_for_rate;
use crate::units::{deserialize_positive_duration, ByteSize, ResolvedRate};

/// perftest's default message size (`DEF_SIZE_BW`).
pub const DEFAULT_MESSAGE_SIZE: u64 = 65536;
/// Largest message accepted (1 GiB): far beyond what saturates any link, small enough to pin.
pub const MAX_MESSAGE_SIZE: u64 = 1 << 30;
/// perftest's default tx depth (`DEF_TX_BW`).
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// perftest's limit for `-t`.
pub const MAX_TX_DEPTH: u32 = 15000;
/// Most QPs per burst: enough to spread over ECMP paths (on RoCE v2 one QP follows one path),
/// bounded so per-QP state and memory stay small.
pub const MAX_QPS: u16 = 64;
/// Above this message size perftest signals every WR (`MSG_SIZE_CQ_MOD_LIMIT`).
pub const CQ_MOD_SIZE_LIMIT: u64 = 8192;
/// perftest's default CQ moderation for small messages (`DEF_CQ_MOD`).
pub const DEFAULT_CQ_MOD: u32 = 100;
/// Longest burst allowance: a bucket holding more than a second of traffic is no longer pacing.
pub const MAX_BURST_ALLOWANCE: Duration = Duration::from_secs(1);
/// Longest duration-mode burst: probes are short bursts repeated on a schedule, not long
/// benchmarks; this also keeps per-QP WR indexes far below [`MAX_WR_INDEX`] at any real message
/// rate.
pub const MAX_BURST_DURATION: Duration = Duration::from_secs(3600);

/// How long a burst runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BurstLength {
    /// This many messages in total, over all QPs (not per QP as perftest's `-n`).
    Messages(u64),
    /// At least this many payload bytes in total: rounded up to whole messages.
    #[serde(deserialize_with = "deserialize_byte_count")]
    Bytes(u64),
    /// Until this much time has passed since the burst start (then the window is drained).
    #[serde(deserialize_with = "deserialize_positive_duration")]
    Duration(Duration),
}

fn deserialize_byte_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    ByteSize::deserialize(d).map(ByteSize::bytes)
}

impl BurstLength {
    /// Total messages for `message_size`-byte messages; `None` in duration mode (or for a zero
    /// message size).
    pub fn total_messages(&self, message_size: u64) -> Option<u64> {
        match *self {
            BurstLength::Messages(n) => Some(n),
            BurstLength::Bytes(b) if message_size > 0 => Some(b.div_ceil(message_size)),
            BurstLength::Bytes(_) | BurstLength::Duration(_) => None,
        }
    }
}

impl fmt::Display for BurstLength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BurstLength::Messages(n) => write!(f, "{n} messages"),
            BurstLength::Bytes(b) => write!(f, "{}", ByteSize(b)),
            BurstLength::Duration(d) => write!(f, "{}", humantime::format_duration(d)),
        }
    }
}

impl Serialize for BurstLength {
    /// The same shape as accepted: `{messages: 4096}`, `{bytes: "256MiB"}`, `{duration: "500ms"}`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(1))?;
        match *self {
            BurstLength::Messages(n) => map.serialize_entry("messages", &n)?,
            BurstLength::Bytes(b) => map.serialize_entry("bytes", &ByteSize(b))?,
            BurstLength::Duration(d) => {
                map.serialize_entry("duration", &humantime::format_duration(d).to_string())?
            }
        }
        map.end()
    }
}

/// Why a burst plan was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("message_size {0} is out of range: must be 1 B to 1 GiB")]
    MessageSize(u64),
    #[error("tx_depth {0} is out of range: must be 1 to {MAX_TX_DEPTH}")]
    TxDepth(u32),
    #[error("qps {0} is out of range: must be 1 to {MAX_QPS}")]
    Qps(u16),
    /// cq_mod or post_list outside 1..=tx_depth.
    #[error(transparent)]
    Signaling(#[from] WindowError),
    #[error(
        "burst length {0} is empty: give at least one message, one byte or a non-zero duration"
    )]
    EmptyLength(BurstLength),
    #[error(
        "burst of {messages} message(s) cannot feed {qps} QPs: every QP needs at least one \
         message (lower qps or lengthen the burst)"
    )]
    TooFewMessages { messages: u64, qps: u16 },
    #[error("burst length {length} is too long (at most {max})")]
    TooLong { length: BurstLength, max: String },
    #[error(
        "burst_allowance {} is too long: at most {} (a bucket that large is no longer pacing)",
        humantime::format_duration(*.0),
        humantime::format_duration(MAX_BURST_ALLOWANCE)
    )]
    BurstAllowance(Duration),
}

/// A validated burst: construct with [`BurstPlan::builder`].
///
/// Fields are private so every `BurstPlan` in circulation satisfies the checks in
/// [`BurstPlanBuilder::build`]; read them through the getters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstPlan {
    message_size: u64,
    /// tx_depth, cq_mod and post_list, already checked against each other.
    #[serde(flatten)]
    signaling: SignalPolicy,
    qps: u16,
    length: BurstLength,
    rate: Option<ResolvedRate>,
    #[serde(serialize_with = "serialize_seconds")]
    burst_allowance: Duration,
    /// Wait by polling the CQ, never sleeping or blocking, as perftest does: for calibrating
    /// against perftest, not for production (docs/perftest.md, "Calibration").
    busy_poll: bool,
}

fn serialize_seconds<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Builder for [`BurstPlan`]; unset fields take perftest's defaults.
#[derive(Debug, Clone)]
pub struct BurstPlanBuilder {
    message_size: u64,
    length: BurstLength,
    tx_depth: u32,
    qps: u16,
    cq_mod: Option<u32>,
    post_list: u32,
    rate: Option<ResolvedRate>,
    burst_allowance: Duration,
    busy_poll: bool,
}

impl BurstPlanBuilder {
    /// Send-queue depth per QP (max outstanding WRs); default 128.
    pub fn tx_depth(mut self, tx_depth: u32) -> Self {
        self.tx_depth = tx_depth;
        self
    }

    /// Number of QPs; default 1. The rate limit and the length apply to all QPs together.
    pub fn qps(mut self, qps: u16) -> Self {
        self.qps = qps;
        self
    }

    /// Request a completion every `cq_mod` WRs. Default as perftest: the post list size if it is
    /// above 1, else 1 for messages above 8 KiB and 100 otherwise, capped at tx_depth. An explicit
    /// value must lie in 1..=tx_depth (perftest silently caps; a typo should not be silent).
    pub fn cq_mod(mut self, cq_mod: u32) -> Self {
        self.cq_mod = Some(cq_mod);
        self
    }

    /// WRs per `ibv_post_send` chain; default 1.
    pub fn post_list(mut self, post_list: u32) -> Self {
        self.post_list = post_list;
        self
    }

    /// Software pacing; `None` (the default) is unpaced.
    pub fn rate(mut self, rate: Option<ResolvedRate>) -> Self {
        self.rate = rate;
        self
    }

    /// How far behind schedule the pacer lets the sender fall and still catch up; default 1 ms.
    pub fn burst_allowance(mut self, allowance: Duration) -> Self {
        self.burst_allowance = allowance;
        self
    }

    /// Poll the CQ all through the burst instead of the CPU-frugal waits; default off.
    pub fn busy_poll(mut self, busy_poll: bool) -> Self {
        self.busy_poll = busy_poll;
        self
    }

    /// Validates everything and builds the plan.
    pub fn build(self) -> Result<BurstPlan, PlanError> {
        let Self {
            message_size,
            length,
            tx_depth,
            qps,
            cq_mod,
            post_list,
            rate,
            burst_allowance,
            busy_poll,
        } = self;
        if !(1..=MAX_MESSAGE_SIZE).contains(&message_size) {
            return Err(PlanError::MessageSize(message_size));
        }
        if !(1..=MAX_TX_DEPTH).contains(&tx_depth) {
            return Err(PlanError::TxDepth(tx_depth));
        }
        if !(1..=MAX_QPS).contains(&qps) {
            return Err(PlanError::Qps(qps));
        }
        // An explicit cq_mod must lie in 1..=tx_depth (perftest silently caps it; a typo should
        // not be silent); the default is capped like perftest's.
        let cq_mod =
            cq_mod.unwrap_or_else(|| default_cq_mod(message_size, post_list).min(tx_depth));
        let signaling = SignalPolicy::new(tx_depth, cq_mod, post_list)?;
        match length {
            BurstLength::Messages(0) | BurstLength::Bytes(0) => {
                return Err(PlanError::EmptyLength(length))
            }
            BurstLength::Duration(d) if d.is_zero() => return Err(PlanError::EmptyLength(length)),
            BurstLength::Duration(d) if d > MAX_BURST_DURATION => {
                return Err(PlanError::TooLong {
                    length,
                    max: humantime::format_duration(MAX_BURST_DURATION).to_string(),
                })
            }
            _ => {}
        }
        if let Some(messages) = length.total_messages(message_size) {
            if messages < u64::from(qps) {
                return Err(PlanError::TooFewMessages { messages, qps });
            }
            let bytes_overflow = messages.checked_mul(message_size).is_none();
            if bytes_overflow || messages.div_ceil(u64::from(qps)) > MAX_WR_INDEX {
                return Err(PlanError::TooLong {
                    length,
                    max: format!("{MAX_WR_INDEX} messages per QP and 2^64 bytes"),
                });
            }
        }
        if burst_allowance > MAX_BURST_ALLOWANCE {
            return Err(PlanError::BurstAllowance(burst_allowance));
        }
        Ok(BurstPlan {
            message_size,
            signaling,
            qps,
            length,
            rate,
            burst_allowance,
            busy_poll,
        })
    }
}

/// perftest's CQ moderation default (before the tx_depth cap): the post list if > 1 ("CQ
/// moderation will be the size of the post list"), else 1 above 8 KiB, else 100.
pub fn default_cq_mod(message_size: u64, post_list: u32) -> u32 {
    if post_list > 1 {
        post_list
    } else if message_size > CQ_MOD_SIZE_LIMIT {
        1
    } else {
        DEFAULT_CQ_MOD
    }
}

impl BurstPlan {
    /// Starts a plan with perftest's defaults for everything but the size and length.
    pub fn builder(message_size: u64, length: BurstLength) -> BurstPlanBuilder {
        BurstPlanBuilder {
            message_size,
            length,
            tx_depth: DEFAULT_TX_DEPTH,
            qps: 1,
            cq_mod: None,
            post_list: 1,
            rate: None,
            burst_allowance: DEFAULT_BURST_ALLOWANCE,
            busy_poll: false,
        }
    }

    pub fn message_size(&self) -> u64 {
        self.message_size
    }

    pub fn tx_depth(&self) -> u32 {
        self.signaling.tx_depth()
    }

    pub fn qps(&self) -> u16 {
        self.qps
    }

    pub fn cq_mod(&self) -> u32 {
        self.signaling.cq_mod()
    }

    pub fn post_list(&self) -> u32 {
        self.signaling.post_list()
    }

    pub fn length(&self) -> BurstLength {
        self.length
    }

    pub fn rate(&self) -> Option<ResolvedRate> {
        self.rate
    }

    /// The same plan at another pace (`None`: unpaced). No check depends on the pace, so a plan
    /// validated once (e.g. at config load) serves every burst of a path, whether paced at a
    /// rate known only at run time or unpaced.
    pub fn with_rate(mut self, rate: Option<ResolvedRate>) -> BurstPlan {
        self.rate = rate;
        self
    }

    pub fn busy_poll(&self) -> bool {
        self.busy_poll
    }

    pub fn burst_allowance(&self) -> Duration {
        self.burst_allowance
    }

    /// Total messages over all QPs; `None` in duration mode.
    pub fn total_messages(&self) -> Option<u64> {
        self.length.total_messages(self.message_size)
    }

    /// Messages for QP `qp` (0-based): the total split evenly, the first `total % qps` QPs
    /// getting one more. `None` in duration mode or for a QP index out of range.
    pub fn messages_for_qp(&self, qp: u16) -> Option<u64> {
        if qp >= self.qps {
            return None;
        }
        let total = self.total_messages()?;
        let qps = u64::from(self.qps);
        Some(total / qps + u64::from(u64::from(qp) < total % qps))
    }

    /// The signaling rule every QP of this burst follows.
    pub fn signal_policy(&self) -> SignalPolicy {
        self.signaling
    }

    /// A fresh send window for one QP.
    pub fn send_window(&self) -> SendWindow {
        SendWindow::new(self.signal_policy())
    }

    /// A fresh pacer for the whole burst (all QPs together), or `None` when unpaced.
    pub fn pacer(&self) -> Option<Pacer> {
        self.rate
            .as_ref()
            .map(|r| Pacer::new(r, self.burst_allowance))
    }

    /// The statistics window for this burst: 10 ms, or longer when the pace is so slow that
    /// 10 ms would hold too few completions to mean anything (see [`window_for_rate`]).
    /// For an unpaced burst pass the expected message rate at the link rate, if known, to
    /// [`window_for_rate`] directly.
    pub fn stats_window(&self) -> Duration {
        window_for_rate(self.rate.map(|r| r.messages_per_second()), self.cq_mod())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn perftest_defaults() {
        let p = BurstPlan::builder(DEFAULT_MESSAGE_SIZE, BurstLength::Messages(5000))
            .build()
            .unwrap();
        assert_eq!(p.tx_depth(), 128);
        assert_eq!(p.qps(), 1);
        assert_eq!(p.cq_mod(), 1, "64 KiB messages signal every WR");
        assert_eq!(p.post_list(), 1);
        assert_eq!(p.burst_allowance(), Duration::from_millis(1));
        assert!(p.rate().is_none() && p.pacer().is_none());
        let small = BurstPlan::builder(8192, BurstLength::Messages(5000))
            .build()
            .unwrap();
        assert_eq!(small.cq_mod(), 100);
        let capped = BurstPlan::builder(64, BurstLength::Messages(5000))
            .tx_depth(32)
            .build()
            .unwrap();
        assert_eq!(capped.cq_mod(), 32, "capped at tx_depth like perftest");
        let listed = BurstPlan::builder(64, BurstLength::Messages(5000))
            .post_list(8)
            .build()
            .unwrap();
        assert_eq!(listed.cq_mod(), 8, "post list size, like perftest");
    }

    #[test]
    fn lengths() {
        let p = BurstPlan::builder(65536, BurstLength::Bytes(256 << 20))
            .build()
            .unwrap();
        assert_eq!(p.total_messages(), Some(4096));
        let p = BurstPlan::builder(65536, BurstLength::Bytes(65537))
            .build()
            .unwrap();
        assert_eq!(
            p.total_messages(),
            Some(2),
            "bytes round up to whole messages"
        );
        let p = BurstPlan::builder(65536, BurstLength::Duration(Duration::from_millis(500)))
            .build()
            .unwrap();
        assert_eq!(p.total_messages(), None);
        assert_eq!(p.messages_for_qp(0), None);
    }

    #[test]
    fn split_over_qps() {
        let p = BurstPlan::builder(4096, BurstLength::Messages(10))
            .qps(4)
            .build()
            .unwrap();
        let split: Vec<_> = (0..4).map(|q| p.messages_for_qp(q).unwrap()).collect();
        assert_eq!(split, [3, 3, 2, 2]);
        assert_eq!(p.messages_for_qp(4), None);
    }

    #[test]
    fn refusals() {
        let b = || BurstPlan::builder(65536, BurstLength::Messages(100));
        let cases = [
            (
                BurstPlan::builder(0, BurstLength::Messages(1)).build(),
                "message_size 0",
            ),
            (
                BurstPlan::builder(MAX_MESSAGE_SIZE + 1, BurstLength::Messages(1)).build(),
                "message_size",
            ),
            (b().tx_depth(0).build(), "tx_depth 0"),
            (b().tx_depth(15001).build(), "tx_depth 15001"),
            (b().qps(0).build(), "qps 0"),
            (b().qps(65).build(), "qps 65"),
            (b().cq_mod(0).build(), "cq_mod 0"),
            (b().cq_mod(129).build(), "cq_mod 129"),
            (b().post_list(0).build(), "post_list 0"),
            (b().post_list(129).build(), "post_list 129"),
            (
                BurstPlan::builder(1, BurstLength::Messages(0)).build(),
                "empty",
            ),
            (
                BurstPlan::builder(1, BurstLength::Bytes(0)).build(),
                "empty",
            ),
            (
                BurstPlan::builder(1, BurstLength::Duration(Duration::ZERO)).build(),
                "empty",
            ),
            (
                BurstPlan::builder(1, BurstLength::Duration(Duration::from_secs(3601))).build(),
                "too long",
            ),
            (
                BurstPlan::builder(1 << 30, BurstLength::Messages(u64::MAX)).build(),
                "too long",
            ),
            (
                BurstPlan::builder(65536, BurstLength::Bytes(1))
                    .qps(2)
                    .build(),
                "cannot feed 2 QPs",
            ),
            (
                b().burst_allowance(Duration::from_secs(2)).build(),
                "burst_allowance 2s",
            ),
        ];
        for (result, needle) in cases {
            let err = result.unwrap_err().to_string();
            assert!(err.contains(needle), "{err:?} should mention {needle:?}");
        }
    }

    #[test]
    fn pacer_and_window_follow_the_plan() {
        let rate = ResolvedRate::from_messages_per_second(1000.0, 65536).unwrap();
        let p = BurstPlan::builder(65536, BurstLength::Messages(100))
            .rate(Some(rate))
            .build()
            .unwrap();
        let pacer = p.pacer().unwrap();
        assert_eq!(pacer.capacity(), 2);
        assert_eq!(p.send_window().policy().tx_depth(), 128);
        // 1000 msg/s with a completion per message: 20 completions need 20 ms.
        assert_eq!(p.stats_window(), Duration::from_millis(20));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["tx_depth"], 128);
        assert_eq!(json["cq_mod"], 1);
        assert_eq!(json["length"]["messages"], 100);
        assert_eq!(json["rate"]["messages_per_second"], 1000.0);
        assert_eq!(json["burst_allowance"], 0.001);
        let unpaced = p.clone().with_rate(None);
        assert!(unpaced.pacer().is_none());
        assert_eq!(unpaced.with_rate(Some(rate)), p);
    }

    #[test]
    fn burst_length_serde() {
        #[derive(Deserialize)]
        struct C {
            burst: BurstLength,
        }
        let parse = |s: &str| serde_json::from_str::<C>(s).map(|c| c.burst);
        assert_eq!(
            parse(r#"{"burst":{"duration":"500ms"}}"#).unwrap(),
            BurstLength::Duration(Duration::from_millis(500))
        );
        assert_eq!(
            parse(r#"{"burst":{"bytes":"256MiB"}}"#).unwrap(),
            BurstLength::Bytes(256 << 20)
        );
        assert_eq!(
            parse(r#"{"burst":{"bytes":1024}}"#).unwrap(),
            BurstLength::Bytes(1024)
        );
        assert_eq!(
            parse(r#"{"burst":{"messages":4096}}"#).unwrap(),
            BurstLength::Messages(4096)
        );
        assert!(parse(r#"{"burst":{"duration":"0s"}}"#).is_err());
        assert!(parse(r#"{"burst":{"furlongs":3}}"#).is_err());
        for l in [
            BurstLength::Duration(Duration::from_millis(500)),
            BurstLength::Bytes(256 << 20),
            BurstLength::Messages(7),
        ] {
            let json = format!(r#"{{"burst":{}}}"#, serde_json::to_string(&l).unwrap());
            assert_eq!(parse(&json).unwrap(), l, "{json}");
        }
        assert_eq!(BurstLength::Bytes(256 << 20).to_string(), "256MiB");
        assert_eq!(
            BurstLength::Duration(Duration::from_millis(500)).to_string(),
            "500ms"
        );
    }

    proptest! {
        #[test]
        fn build_never_panics_and_plans_are_consistent(
            size in 0u64..=(1 << 31),
            tx_depth in 0u32..20_000,
            qps in 0u16..100,
            cq_mod in proptest::option::of(0u32..20_000),
            post_list in 0u32..20_000,
            length in prop_oneof![
                any::<u64>().prop_map(BurstLength::Messages),
                any::<u64>().prop_map(BurstLength::Bytes),
                (0u64..10_000_000).prop_map(|ms| BurstLength::Duration(Duration::from_millis(ms))),
            ],
            allowance_us in 0u64..2_000_000,
        ) {
            let mut b = BurstPlan::builder(size, length)
                .tx_depth(tx_depth)
                .qps(qps)
                .post_list(post_list)
                .burst_allowance(Duration::from_micros(allowance_us));
            if let Some(c) = cq_mod {
                b = b.cq_mod(c);
            }
            if let Ok(p) = b.build() {
                prop_assert!((1..=p.tx_depth()).contains(&p.cq_mod()));
                prop_assert!((1..=p.tx_depth()).contains(&p.post_list()));
                let _ = p.signal_policy();
                if let Some(total) = p.total_messages() {
                    let sum: u64 = (0..p.qps()).map(|q| p.messages_for_qp(q).unwrap()).sum();
                    prop_assert_eq!(sum, total);
                    prop_assert!((0..p.qps()).all(|q| p.messages_for_qp(q).unwrap() >= 1));
                }
            }
        }
    }
}
