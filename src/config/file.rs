//! The config file as written: raw serde structs, parsed from YAML once.
//!
//! Why every value is a [`Scalar`] (text plus position) instead of a number or a unit type:
//! values are interpolated (`${VAR}`) and then parsed by this crate's own parsers
//! ([`super::validate`]), so every refusal, whatever the field, names its position and field
//! path and says what would be valid, in this crate's words. The YAML layer only decides the
//! document's shape: which keys exist (unknown keys are errors), what is a list or a mapping.
//!
//! Hostile input: the parser runs with tight budgets ([`limits`]): a config is a few hundred
//! small values nested about five levels deep, so deep nesting, alias bombs and huge values are
//! refused after little work, with an error like any other.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_saphyr::Spanned;

use super::error::{ConfigError, Origin};

/// A scalar value as written (after YAML unquoting, before interpolation), with its position.
pub(crate) type Scalar = Spanned<String>;

/// Parser budgets. Far above any real config, far below what costs noticeable time or memory.
pub(crate) mod limits {
    /// Nesting of mappings and lists; a config nests about 5 levels.
    pub const MAX_DEPTH: usize = 24;
    /// Nesting of flow (`{...}`, `[...]`) collections.
    pub const MAX_FLOW_DEPTH: usize = 24;
    /// Values (mappings, lists, scalars), with aliases expanded: about 5,000 peers with labels.
    /// Larger clusters list their peers through `discovery`.
    pub const MAX_NODES: usize = 50_000;
    /// Parser events: about one per value plus one per collection end.
    pub const MAX_EVENTS: usize = 2 * MAX_NODES;
    pub const MAX_ALIASES: usize = 10_000;
    pub const MAX_ANCHORS: usize = 10_000;
    /// Events replayed by all aliases together: what an alias bomb multiplies.
    pub const MAX_REPLAYED_EVENTS: usize = 100_000;
    pub const MAX_MERGE_KEYS: usize = 10_000;
    /// Bytes of all values together, with aliases expanded.
    pub const MAX_SCALAR_BYTES: usize = 4 << 20;
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Null (`node:`) is kept apart from absent, to point at it.
    #[serde(default, deserialize_with = "present")]
    pub node: Option<Spanned<Option<String>>>,
    pub labels: Option<Spanned<LabelMap>>,
    pub listen: Option<Spanned<RawListen>>,
    pub auth: Option<Spanned<RawAuth>>,
    pub devices: Option<Spanned<Vec<Spanned<RawDevice>>>>,
    pub exclude_devices: Option<Spanned<Vec<Scalar>>>,
    pub rdma_networks: Option<Spanned<Vec<Scalar>>>,
    pub defaults: Option<Spanned<RawDefaults>>,
    pub discovery: Option<Spanned<RawDiscovery>>,
    pub selection: Option<Spanned<RawSelection>>,
    pub schedule: Option<Spanned<RawSchedule>>,
    pub series: Option<Spanned<RawSeries>>,
    pub ping: Option<Spanned<RawPing>>,
    pub judge: Option<Spanned<RawJudge>>,
    pub limits: Option<Spanned<RawLimits>>,
    pub topology: Option<Spanned<RawTopology>>,
    pub peers: Option<Spanned<Vec<Spanned<RawPeer>>>>,
}

/// `topology: {slurm: PATH}`: where the nodes' places in the fabric are read from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTopology {
    pub slurm: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListen {
    pub metrics: Option<Scalar>,
    pub control: Option<Scalar>,
}

/// `auth: none` or `auth: {psk_file: PATH, previous_psk_file: PATH}` (the second only during a
/// key rollover).
#[derive(Debug)]
pub(crate) enum RawAuth {
    /// A plain word: valid only if it is exactly `none`.
    Word(String),
    PskFile {
        psk_file: Scalar,
        previous_psk_file: Option<Scalar>,
    },
}

impl<'de> Deserialize<'de> for RawAuth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawAuth;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none` or a mapping {psk_file: PATH}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawAuth, E> {
                Ok(RawAuth::Word(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawAuth, A::Error> {
                /// The keys of the mapping form; an unknown key fails while it is read, so the
                /// error's field path names it.
                #[derive(Deserialize)]
                #[serde(field_identifier, rename_all = "snake_case")]
                enum Field {
                    PskFile,
                    PreviousPskFile,
                }
                let (mut psk_file, mut previous_psk_file) = (None, None);
                while let Some(field) = map.next_key::<Field>()? {
                    let (value, name) = match field {
                        Field::PskFile => (&mut psk_file, "psk_file"),
                        Field::PreviousPskFile => (&mut previous_psk_file, "previous_psk_file"),
                    };
                    if value.is_some() {
                        return Err(de::Error::duplicate_field(name));
                    }
                    *value = Some(map.next_value::<Scalar>()?);
                }
                let psk_file = psk_file.ok_or_else(|| de::Error::missing_field("psk_file"))?;
                Ok(RawAuth::PskFile {
                    psk_file,
                    previous_psk_file,
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// For `#[serde(default, deserialize_with = "present")]`: `Some` whenever the key is present,
/// even with a null value (which `T` then sees), `None` only when the key is absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A mapping of label names to values, in file order, with positions (for duplicate and name
/// checks).
#[derive(Debug, Default)]
pub(crate) struct LabelMap(pub Vec<(Scalar, Option<Scalar>)>);

impl<'de> Deserialize<'de> for LabelMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LabelMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of label names to values, e.g. {rack: r1, tor: tor-3}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabelMap, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Scalar>()? {
                    // A null value is refused in validation, where the key's name is known.
                    let value = map.next_value::<Option<Scalar>>()?;
                    entries.push((key, value));
                }
                Ok(LabelMap(entries))
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDevice {
    pub name: Option<Scalar>,
    pub port: Option<Scalar>,
    pub rail: Option<Scalar>,
    pub gid_index: Option<Scalar>,
}

/// `{duration: 500ms}`, `{bytes: 256MiB}` or `{messages: 4096}`: exactly one.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBurst {
    pub duration: Option<Scalar>,
    pub bytes: Option<Scalar>,
    pub messages: Option<Scalar>,
}

/// Declares a struct with the probe settings a peer can override, plus its own fields, and a
/// [`RawProbe`] view of the probe settings.
macro_rules! with_probe_fields {
    ($(#[$meta:meta])* pub(crate) struct $name:ident { $(pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        pub(crate) struct $name {
            $(pub $field: $ty,)*
            pub interval: Option<Scalar>,
            pub jitter: Option<Scalar>,
            pub message_size: Option<Scalar>,
            pub burst: Option<Spanned<RawBurst>>,
            pub rate_limit: Option<Scalar>,
            pub unpaced_every: Option<Scalar>,
            pub qps: Option<Scalar>,
            pub tx_depth: Option<Scalar>,
            pub cq_mod: Option<Scalar>,
            pub post_list: Option<Scalar>,
            pub mtu: Option<Scalar>,
            pub traffic_class: Option<Scalar>,
            pub service_level: Option<Scalar>,
            pub qp_timeout: Option<Scalar>,
            pub timeout: Option<Scalar>,
        }

        impl $name {
            pub fn probe(&self) -> RawProbe<'_> {
                RawProbe {
                    interval: self.interval.as_ref(),
                    jitter: self.jitter.as_ref(),
                    message_size: self.message_size.as_ref(),
                    burst: self.burst.as_ref(),
                    rate_limit: self.rate_limit.as_ref(),
                    unpaced_every: self.unpaced_every.as_ref(),
                    qps: self.qps.as_ref(),
                    tx_depth: self.tx_depth.as_ref(),
                    cq_mod: self.cq_mod.as_ref(),
                    post_list: self.post_list.as_ref(),
                    mtu: self.mtu.as_ref(),
                    traffic_class: self.traffic_class.as_ref(),
                    service_level: self.service_level.as_ref(),
                    qp_timeout: self.qp_timeout.as_ref(),
                    timeout: self.timeout.as_ref(),
                }
            }
        }
    };
}

/// The probe settings of `defaults` or of one peer, each `None` when not written.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawProbe<'a> {
    pub interval: Option<&'a Scalar>,
    pub jitter: Option<&'a Scalar>,
    pub message_size: Option<&'a Scalar>,
    pub burst: Option<&'a Spanned<RawBurst>>,
    pub rate_limit: Option<&'a Scalar>,
    pub unpaced_every: Option<&'a Scalar>,
    pub qps: Option<&'a Scalar>,
    pub tx_depth: Option<&'a Scalar>,
    pub cq_mod: Option<&'a Scalar>,
    pub post_list: Option<&'a Scalar>,
    pub mtu: Option<&'a Scalar>,
    pub traffic_class: Option<&'a Scalar>,
    pub service_level: Option<&'a Scalar>,
    pub qp_timeout: Option<&'a Scalar>,
    pub timeout: Option<&'a Scalar>,
}

with_probe_fields! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawDefaults {}
}

with_probe_fields! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawPeer {
        pub name: Option<Scalar>,
        pub address: Option<Scalar>,
        pub labels: Option<Spanned<LabelMap>>,
        pub mode: Option<Scalar>,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiscovery {
    pub dns: Option<Spanned<Vec<Scalar>>>,
    pub files: Option<Spanned<Vec<Scalar>>>,
    pub forget_after: Option<Scalar>,
    pub refresh_interval: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSchedule {
    pub duty_cycle: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSeries {
    pub budget: Option<Scalar>,
    pub ttl: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPing {
    pub interval: Option<Scalar>,
    pub timeout: Option<Scalar>,
    pub window: Option<Scalar>,
    pub max_rate: Option<Scalar>,
    pub max_paths: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJudge {
    pub probes_bad: Option<Scalar>,
    pub degraded_ratio: Option<Scalar>,
    pub baseline_drop: Option<Scalar>,
    pub stall_min_window_ratio: Option<Scalar>,
    pub gap_factor: Option<Scalar>,
    pub gap_floor: Option<Scalar>,
    pub stale_probes: Option<Scalar>,
    pub baseline: Option<Scalar>,
    pub validation_window: Option<Scalar>,
    pub responder_window: Option<Scalar>,
    pub ping_loss_ratio: Option<Scalar>,
    pub ping_loss_min: Option<Scalar>,
    pub ping_loss_below: Option<Scalar>,
    pub ping_loss_window: Option<Scalar>,
    pub ping_rtt_factor: Option<Scalar>,
    pub ping_rtt_floor: Option<Scalar>,
    pub ping_baseline: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub max_sessions: Option<Scalar>,
    pub max_pinned: Option<Scalar>,
    pub max_session_memory: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSelection {
    pub group_by: Option<Scalar>,
    pub max_peers: Option<Scalar>,
    pub sample: Option<Scalar>,
    pub round: Option<Scalar>,
}

/// Parses `text` into the raw structs; YAML and shape errors come back with their position and
/// field path.
pub(crate) fn parse(text: &str, origin: &Origin) -> Result<RawConfig, ConfigError> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: limits::MAX_DEPTH,
            flow_nesting_limit: limits::MAX_FLOW_DEPTH,
            max_nodes: limits::MAX_NODES,
            max_events: limits::MAX_EVENTS,
            max_aliases: limits::MAX_ALIASES,
            max_anchors: limits::MAX_ANCHORS,
            max_merge_keys: limits::MAX_MERGE_KEYS,
            max_total_scalar_bytes: limits::MAX_SCALAR_BYTES,
            max_documents: 1,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: limits::MAX_REPLAYED_EVENTS,
        },
    };
    let mut failed_at = String::new();
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        let mut track = serde_path_to_error::Track::new();
        let result = RawConfig::deserialize(serde_path_to_error::Deserializer::new(de, &mut track));
        if result.is_err() {
            failed_at = field_path(&track.path());
        }
        result
    });
    parsed.map_err(|e| origin.yaml(&e, &failed_at, text))
}

/// `peers[1].burst.dur` from serde's path, without the `value` steps of [`Spanned`] wrappers and
/// the unknown (`?`) steps of a syntax error.
fn field_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } if key == "value" => {}
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}
