//! Raw structs → [`Config`]: interpolation, parsing of every value, and every check, once.
//!
//! Each check reports the position of the value it refuses (or of the mapping a required value
//! is missing from), the field path, and what would be valid ([`field_help`]). A peer's burst
//! plan is built here, from `defaults` overridden by the peer's own fields, so settings that do
//! not combine are a config error at load instead of a failed probe at run time.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde_saphyr::Spanned;

use super::address::{
    address_name, host_port_forms, parse_host_port, HostPort, DEFAULT_CONTROL_PORT, PERFTEST_PORT,
};
use super::error::{ConfigError, Origin, Pos};
use super::file::{LabelMap, RawAuth, RawBurst, RawConfig, RawDevice, RawPeer, RawProbe, Scalar};
use super::interpolate::interpolate;
use super::model::*;
use crate::burst::plan::{MAX_QPS, MAX_TX_DEPTH};
use crate::burst::{BurstLength, BurstPlan, PlanError};
use crate::units::{
    parse_positive_duration, ByteSize, RateLimit, BYTE_SIZE_FORMS, RATE_LIMIT_FORMS,
};
use crate::verbs::PathMtu;

/// Longest name (node, peer, device, label value) accepted.
const MAX_NAME_LEN: usize = 253;

/// Label names the exporter sets itself on its metrics; a static label with one of these names
/// would clash with them in joins (`peer_node`: the node name a peer reports, on
/// `rdma_probe_peer_info`). `instance` and `job` are Prometheus' target labels: an exported
/// one would be renamed `exported_instance` (or overwrite the target's with `honor_labels`).
pub const RESERVED_LABELS: &[&str] = &[
    "node",
    "peer",
    "peer_node",
    "device",
    "peer_device",
    "port",
    "instance",
    "job",
];

/// What a field accepts, by field path (`peers[2].rate_limit`), for error messages.
pub(crate) fn field_help(path: &str) -> Option<String> {
    // `peers[2].burst.duration` → ["peers", "burst", "duration"]
    let mut parts: Vec<&str> = path
        .split('.')
        .map(|p| p.split('[').next().unwrap_or(p))
        .filter(|p| !p.is_empty())
        .collect();
    let field = parts.pop()?;
    let parent = parts.last().copied().unwrap_or("");
    let probe_level = matches!(parent, "defaults" | "peers");
    let s = |s: &str| Some(s.to_owned());
    match (parent, field) {
        ("", "node") => s("this node's name (no spaces), e.g. node-a or ${NODE_NAME}"),
        (_, "labels") => s("a mapping of label names to values, e.g. {rack: r1, tor: tor-3}"),
        ("", "listen") => s("a mapping {metrics: IP:PORT, control: IP:PORT}"),
        ("listen", "metrics") => s("IP:PORT to serve /metrics on, e.g. 0.0.0.0:9587 or [::]:9587"),
        ("listen", "control") => s("IP:PORT for the control channel, e.g. 0.0.0.0:18516"),
        ("", "auth") => {
            s("`auth: {psk_file: PATH}` or, to run without authentication, `auth: none`")
        }
        ("auth", "psk_file") => s("the path of the file holding the pre-shared key"),
        ("auth", "previous_psk_file") => s(
            "during a key rollover, the path of the file holding the previous pre-shared key \
             (also accepted; docs/security.md)",
        ),
        ("", "devices") => s(
            "a list of {name: DEVICE, port: N, rail: N, gid_index: auto | N}; \
                               without it every active RDMA device is used",
        ),
        ("devices", "name") => s("an RDMA device name, e.g. mlx5_0"),
        ("devices", "port") => s("a port number from 1 to 255 (default 1)"),
        ("devices", "rail") => s("a rail number from 0 to 65535"),
        ("devices", "gid_index") => s("auto or a GID table index (a whole number)"),
        ("", "exclude_devices") => s("a list of RDMA device names, e.g. [mlx5_8]"),
        ("", "rdma_networks") => s(
            "a list of networks in CIDR form, e.g. [10.1.0.0/16]: where peers' RDMA addresses \
             may be besides their control addresses",
        ),
        ("", "defaults") => s("a mapping of probe settings (interval, burst, rate_limit, ...)"),
        ("", "peers") => s("a list of {name: NAME, address: HOST:PORT, ...}"),
        ("peers", "name") => s(
            "the peer's name (no spaces), unique in the file; optional: a peer without one is \
             named by its address",
        ),
        ("peers", "address") => Some(format!(
            "{} ({PERFTEST_PORT} with mode: perftest)",
            host_port_forms(DEFAULT_CONTROL_PORT)
        )),
        ("peers", "mode") => s("exporter (the default) or perftest (a stock ib_write_bw server)"),
        ("", "discovery") => {
            s("a mapping {dns: [HOST:PORT, ...], files: [GLOB, ...], forget_after: DURATION, \
               refresh_interval: DURATION}")
        }
        ("discovery", "dns") => s("a list of HOST:PORT names to resolve"),
        ("discovery", "files") => {
            s("a list of file paths or globs, e.g. [/etc/rdma-probe/peers/*.yaml]")
        }
        ("discovery", "forget_after") => s("a duration greater than zero, e.g. 1h"),
        ("discovery", "refresh_interval") => s("a duration from 1s to 1h, e.g. 30s"),
        ("", "selection") => {
            s("a mapping {group_by: LABEL, max_peers: N, sample: N, round: DURATION}")
        }
        ("", "schedule") => s("a mapping {duty_cycle: PERCENT}"),
        ("", "series") => s("a mapping {budget: N, ttl: DURATION}"),
        ("series", "budget") => s("a whole number of per-path series from 1 to 10000000, e.g. 4500"),
        ("series", "ttl") => s("a duration from 1m to 7d, e.g. 10m"),
        ("", "limits") => s(
            "a mapping {max_sessions: N, max_pinned: SIZE, max_session_memory: SIZE}",
        ),
        ("limits", "max_sessions") => s(&format!(
            "the sessions this node serves at once, 1 to {MAX_MAX_SESSIONS} (default \
             {DEFAULT_MAX_SESSIONS})"
        )),
        ("limits", "max_pinned") => s(
            "the memory all served sessions pin together, e.g. 1GiB (the default), at least \
             max_session_memory",
        ),
        ("limits", "max_session_memory") => {
            s("the memory one session pins on each end, e.g. 64MiB (the default)")
        }
        ("schedule", "duty_cycle") => {
            s("a percentage of wall time each local device may spend bursting, from 0.1% to 100%, e.g. 5%")
        }
        ("selection", "group_by") => s("a label name, e.g. tor"),
        ("selection", "sample") => {
            s("a whole number of other-group peers per device and round, from 0 to 100000, e.g. 10")
        }
        ("selection", "max_peers") => s("a whole number of peers from 1 to 100000, e.g. 32"),
        ("selection", "round") => s("a duration from 1m to 24h, e.g. 10m"),
        ("burst", "duration") => s("a duration greater than zero and at most 1h, e.g. 500ms"),
        ("burst", "bytes") => Some(format!("{BYTE_SIZE_FORMS}; at least 1 byte")),
        ("burst", "messages") => s("a whole number of messages greater than zero, e.g. 4096"),
        _ if probe_level => probe_field_help(field),
        _ => None,
    }
}

fn probe_field_help(field: &str) -> Option<String> {
    let s = |s: &str| Some(s.to_owned());
    match field {
        "interval" => s("a duration greater than zero, e.g. 60s or 5m"),
        "jitter" => s("a percentage of the interval from 0% to 50%, e.g. 10%"),
        "message_size" => Some(format!("{BYTE_SIZE_FORMS}; from 1 B to 1 GiB")),
        "burst" => s("exactly one of {duration: 500ms}, {bytes: 256MiB} or {messages: 4096}"),
        "rate_limit" => Some(format!("{RATE_LIMIT_FORMS}; or `unpaced`")),
        "unpaced_every" => s("a whole number N: every Nth burst of a path runs unpaced (0: never)"),
        "qps" => Some(format!("a whole number from 1 to {MAX_QPS}")),
        "tx_depth" => Some(format!("a whole number from 1 to {MAX_TX_DEPTH}")),
        "cq_mod" => s("auto or a whole number from 1 to tx_depth"),
        "post_list" => s("a whole number from 1 to tx_depth"),
        "mtu" => s("auto, 256, 512, 1024, 2048 or 4096"),
        "traffic_class" => s("a whole number from 0 to 255 (RoCE v2: DSCP << 2)"),
        "service_level" => s("a whole number from 0 to 15"),
        "qp_timeout" => s("a whole number from 0 to 31 (4.096 µs × 2^N)"),
        "timeout" => s("a duration greater than zero, e.g. 10s"),
        _ => None,
    }
}

/// Validates the raw file into a [`Config`].
pub(crate) fn validate(
    raw: RawConfig,
    text: &str,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    Ctx { origin, text, env }.config(raw)
}

struct Ctx<'a> {
    origin: &'a Origin,
    text: &'a str,
    env: &'a dyn Fn(&str) -> Option<String>,
}

/// `value` quoted for a message, cut to 40 characters: values can be arbitrarily long.
fn quote(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((cut, _)) => format!("{:?}...", &value[..cut]),
        None => format!("{value:?}"),
    }
}

/// Longest value of a number, size, rate or duration: anything longer is a mistake, and is
/// refused before it is parsed or echoed.
const MAX_UNIT_LEN: usize = 64;

/// The items of an optional list.
fn items<T>(list: &Option<Spanned<Vec<T>>>) -> &[T] {
    list.as_ref().map_or(&[], |l| &l.value)
}

/// `parent.field`, or `field` at the top level.
fn join(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_owned()
    } else {
        format!("{parent}.{field}")
    }
}

impl Ctx<'_> {
    fn pos<T>(&self, spanned: &Spanned<T>) -> Pos {
        Pos::from_location(&spanned.referenced)
    }

    /// A refusal of a value, with what the field accepts appended.
    fn invalid(&self, pos: Pos, path: &str, what: impl Into<String>) -> ConfigError {
        let mut message = what.into();
        if let Some(help) = field_help(path) {
            message.push_str("; expected ");
            message.push_str(&help);
        }
        self.origin.value(pos, path, message)
    }

    /// A refusal whose message already says what would be valid.
    fn refused(&self, pos: Pos, path: &str, message: impl Into<String>) -> ConfigError {
        self.origin.value(pos, path, message)
    }

    /// The value of a scalar with `${VAR}` references substituted.
    fn text(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        interpolate(&scalar.value, self.env)
            .map(|v| v.into_owned())
            .map_err(|e| {
                self.origin
                    .env(self.offset_pos(scalar, e.offset), path, e.message)
            })
    }

    /// The value of a number, size, rate or duration field (at most [`MAX_UNIT_LEN`] long).
    fn short(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        let value = self.text(scalar, path)?;
        if value.chars().count() > MAX_UNIT_LEN {
            return Err(self.invalid(
                self.pos(scalar),
                path,
                format!("{} is too long", quote(&value)),
            ));
        }
        Ok(value)
    }

    /// A `HOST:PORT` address (`default_port` when none is given).
    fn address(
        &self,
        scalar: &Scalar,
        path: &str,
        default_port: u16,
    ) -> Result<HostPort, ConfigError> {
        let value = self.text(scalar, path)?;
        // A DNS name is at most 253 characters; with brackets and a port, 300 is plenty.
        if value.chars().count() > 300 {
            return Err(self.invalid(self.pos(scalar), path, "too long"));
        }
        parse_host_port(&value, default_port).map_err(|e| self.refused(self.pos(scalar), path, e))
    }

    /// The position of byte `offset` of a scalar's value: exact when the file holds the value
    /// verbatim (plain or quoted without escapes), else the scalar's start.
    fn offset_pos(&self, scalar: &Scalar, offset: usize) -> Pos {
        let span = scalar.referenced.span();
        let exact = (|| {
            let start = usize::try_from(span.byte_offset()?).ok()?;
            let len = usize::try_from(span.byte_len()?).ok()?;
            let raw = self.text.get(start..start.checked_add(len)?)?;
            let quoted = raw.len() >= 2
                && (raw.starts_with('"') || raw.starts_with('\''))
                && raw.get(1..raw.len() - 1) == Some(scalar.value.as_str());
            let skip = if raw == scalar.value {
                0
            } else if quoted {
                1
            } else {
                return None;
            };
            Some(Pos::of_offset(self.text, start + skip + offset))
        })();
        exact.unwrap_or_else(|| self.pos(scalar))
    }

    /// A trimmed, interpolated value that must not be empty.
    fn non_empty(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        let value = self.text(scalar, path)?;
        let value = value.trim();
        if value.is_empty() {
            return Err(self.invalid(self.pos(scalar), path, "empty value"));
        }
        Ok(value.to_owned())
    }

    /// A name: non-empty, no whitespace or control characters, at most 253 characters.
    fn name(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        let value = self.text(scalar, path)?;
        let pos = self.pos(scalar);
        if value.is_empty() {
            return Err(self.invalid(pos, path, "empty name"));
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(self.invalid(
                pos,
                path,
                format!(
                    "{} contains whitespace or control characters",
                    quote(&value)
                ),
            ));
        }
        if value.chars().count() > MAX_NAME_LEN {
            return Err(self.invalid(
                pos,
                path,
                format!("name longer than {MAX_NAME_LEN} characters"),
            ));
        }
        Ok(value)
    }

    /// A whole number in `min..=max`.
    fn number<T: TryFrom<u64>>(
        &self,
        scalar: &Scalar,
        path: &str,
        min: u64,
        max: u64,
    ) -> Result<T, ConfigError> {
        let value = self.short(scalar, path)?;
        let trimmed = value.trim();
        let pos = self.pos(scalar);
        if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.invalid(
                pos,
                path,
                format!("{} is not a whole number", quote(&value)),
            ));
        }
        let out_of_range = || self.invalid(pos, path, format!("{trimmed} is out of range"));
        let n: u64 = trimmed.parse().map_err(|_| out_of_range())?;
        if !(min..=max).contains(&n) {
            return Err(out_of_range());
        }
        T::try_from(n).map_err(|_| out_of_range())
    }

    fn duration(&self, scalar: &Scalar, path: &str) -> Result<Duration, ConfigError> {
        let value = self.short(scalar, path)?;
        parse_positive_duration(&value)
            .map_err(|e| self.invalid(self.pos(scalar), path, e.to_string()))
    }

    fn byte_size(&self, scalar: &Scalar, path: &str) -> Result<ByteSize, ConfigError> {
        let value = self.short(scalar, path)?;
        let pos = self.pos(scalar);
        // Unit errors already list the accepted forms.
        let size =
            ByteSize::from_str(&value).map_err(|e| self.refused(pos, path, e.to_string()))?;
        if size.bytes() == 0 {
            return Err(self.invalid(pos, path, format!("{} is zero", quote(&value))));
        }
        Ok(size)
    }

    fn socket_addr(&self, scalar: &Scalar, path: &str) -> Result<SocketAddr, ConfigError> {
        let value = self.non_empty(scalar, path)?;
        let pos = self.pos(scalar);
        let addr: SocketAddr = value.parse().map_err(|_| {
            self.invalid(
                pos,
                path,
                format!("{} is not an IP:PORT address", quote(&value)),
            )
        })?;
        if addr.port() == 0 {
            return Err(self.invalid(
                pos,
                path,
                "port 0 would pick a random port; peers and Prometheus need a fixed one",
            ));
        }
        Ok(addr)
    }

    fn labels(
        &self,
        labels: Option<&Spanned<LabelMap>>,
        path: &str,
    ) -> Result<Labels, ConfigError> {
        let mut out = BTreeMap::new();
        let Some(labels) = labels else {
            return Ok(out);
        };
        for (key, value) in &labels.value.0 {
            let name = key.value.as_str();
            let key_path = join(path, name);
            let pos = self.pos(key);
            check_label_name(name).map_err(|e| self.refused(pos, &key_path, e))?;
            let Some(value) = value else {
                return Err(self.refused(
                    pos,
                    &key_path,
                    "no value (null); give the label a value, or remove it",
                ));
            };
            let value = self.text(value, &key_path)?;
            if value.chars().count() > MAX_NAME_LEN {
                return Err(self.refused(
                    pos,
                    &key_path,
                    format!("label value longer than {MAX_NAME_LEN} characters"),
                ));
            }
            // Duplicate keys are refused by the YAML layer already.
            out.insert(name.to_owned(), value);
        }
        Ok(out)
    }

    fn config(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let node = match &raw.node {
            Some(Spanned {
                value: Some(value),
                referenced,
                defined,
            }) => self.name(&Spanned::new(value.clone(), *referenced, *defined), "node")?,
            Some(null) => return Err(self.invalid(self.pos(null), "node", "empty (null)")),
            None => {
                return Err(self.refused(
                    Pos::START,
                    "node",
                    "missing: every config names this node, usually `node: ${NODE_NAME}` (the \
                     Kubernetes node name, or the host name under systemd)",
                ))
            }
        };
        let labels = self.labels(raw.labels.as_ref(), "labels")?;
        let listen = self.listen(raw.listen.as_ref())?;
        let auth = self.auth(raw.auth.as_ref())?;
        let exclude_devices = self.exclude_devices(raw.exclude_devices.as_ref())?;
        let rdma_networks = self.rdma_networks(raw.rdma_networks.as_ref())?;
        let devices = self.devices(raw.devices.as_ref(), &exclude_devices)?;
        let empty = RawProbe::default();
        let (defaults_raw, defaults_pos) = match &raw.defaults {
            Some(d) => (d.value.probe(), self.pos(d)),
            None => (empty, Pos::START),
        };
        let defaults = self.probe_config(
            ProbeValues::builtin(),
            &Level {
                path: "defaults".to_owned(),
                pos: defaults_pos,
                raw: defaults_raw,
                is_peer: false,
            },
        )?;
        let peers = self.peers(raw.peers.as_ref(), &node, &defaults.0)?;
        let discovery = raw
            .discovery
            .as_ref()
            .map(|d| self.discovery(d))
            .transpose()?;
        let selection = match raw.selection.as_ref() {
            Some(s) => self.selection(s)?,
            None => Selection::default(),
        };
        let schedule = self.schedule(raw.schedule.as_ref())?;
        let series = self.series(raw.series.as_ref())?;
        let limits = self.limits(raw.limits.as_ref())?;
        Ok(Config {
            origin: self.origin.name.clone(),
            node,
            labels,
            listen,
            auth,
            devices,
            exclude_devices,
            rdma_networks,
            defaults: defaults.0,
            peers,
            discovered: Vec::new(),
            discovery,
            selection,
            schedule,
            series,
            limits,
        })
    }

    fn listen(&self, raw: Option<&Spanned<super::file::RawListen>>) -> Result<Listen, ConfigError> {
        let mut listen = Listen {
            metrics: DEFAULT_METRICS_LISTEN,
            control: DEFAULT_CONTROL_LISTEN,
        };
        let Some(raw) = raw else {
            return Ok(listen);
        };
        if let Some(m) = &raw.value.metrics {
            listen.metrics = self.socket_addr(m, "listen.metrics")?;
        }
        if let Some(c) = &raw.value.control {
            listen.control = self.socket_addr(c, "listen.control")?;
        }
        let (m, c) = (listen.metrics, listen.control);
        let overlap = m.ip() == c.ip() || m.ip().is_unspecified() || c.ip().is_unspecified();
        if m.port() == c.port() && overlap {
            let pos = raw
                .value
                .control
                .as_ref()
                .map_or(self.pos(raw), |c| self.pos(c));
            return Err(self.refused(
                pos,
                "listen.control",
                format!(
                    "{c} and listen.metrics {m} cannot both listen on port {}; give them \
                     different ports",
                    c.port()
                ),
            ));
        }
        Ok(listen)
    }

    fn auth(&self, raw: Option<&Spanned<RawAuth>>) -> Result<Auth, ConfigError> {
        let Some(raw) = raw else {
            return Err(self.refused(
                Pos::START,
                "auth",
                "missing: the control channel is authenticated by default; write \
                 `auth: {psk_file: /etc/rdma-probe/psk}` (a file holding a pre-shared key of at \
                 least 16 bytes that every node shares), or `auth: none` to run without \
                 authentication, explicitly",
            ));
        };
        match &raw.value {
            RawAuth::Word(word) if word == "none" => Ok(Auth::None),
            RawAuth::Word(word) => Err(self.invalid(
                self.pos(raw),
                "auth",
                format!(
                    "{} is not an auth setting (`none` must be written literally)",
                    quote(word)
                ),
            )),
            RawAuth::PskFile {
                psk_file,
                previous_psk_file,
            } => {
                let path = PathBuf::from(self.non_empty(psk_file, "auth.psk_file")?);
                let previous = previous_psk_file
                    .as_ref()
                    .map(|p| {
                        self.non_empty(p, "auth.previous_psk_file")
                            .map(PathBuf::from)
                    })
                    .transpose()?;
                if let (Some(prev), Some(raw)) = (&previous, previous_psk_file) {
                    if *prev == path {
                        return Err(self.invalid(
                            self.pos(raw),
                            "auth.previous_psk_file",
                            "is the same file as auth.psk_file; name the previous key's file, \
                             or remove previous_psk_file once the rollover is done",
                        ));
                    }
                }
                Ok(Auth::PskFile { path, previous })
            }
        }
    }

    fn exclude_devices(
        &self,
        raw: Option<&Spanned<Vec<Scalar>>>,
    ) -> Result<Vec<String>, ConfigError> {
        let mut out: Vec<String> = Vec::new();
        for (i, scalar) in raw.map_or(&[][..], |r| &r.value).iter().enumerate() {
            let path = format!("exclude_devices[{i}]");
            let name = self.name(scalar, &path)?;
            if out.contains(&name) {
                return Err(self.refused(
                    self.pos(scalar),
                    &path,
                    format!("{name} is listed twice"),
                ));
            }
            out.push(name);
        }
        Ok(out)
    }

    fn rdma_networks(&self, raw: Option<&Spanned<Vec<Scalar>>>) -> Result<Vec<IpNet>, ConfigError> {
        let mut out: Vec<IpNet> = Vec::new();
        for (i, scalar) in raw.map_or(&[][..], |r| &r.value).iter().enumerate() {
            let path = format!("rdma_networks[{i}]");
            let value = self.non_empty(scalar, &path)?;
            let network: IpNet = value.parse().map_err(|_| {
                self.invalid(
                    self.pos(scalar),
                    &path,
                    format!("{} is not a network in CIDR form", quote(&value)),
                )
            })?;
            if network.trunc() != network {
                return Err(self.invalid(
                    self.pos(scalar),
                    &path,
                    format!(
                        "{network} has host bits set: the network is {}",
                        network.trunc()
                    ),
                ));
            }
            out.push(network);
        }
        Ok(out)
    }

    fn devices(
        &self,
        raw: Option<&Spanned<Vec<Spanned<RawDevice>>>>,
        exclude: &[String],
    ) -> Result<Devices, ConfigError> {
        let Some(raw) = raw else {
            return Ok(Devices::AllActive);
        };
        if raw.value.is_empty() {
            return Err(self.refused(
                self.pos(raw),
                "devices",
                "an empty list would use no device; remove `devices` to use every active RDMA \
                 device, or list them",
            ));
        }
        let mut out: Vec<(Device, Pos)> = Vec::new();
        for (i, entry) in raw.value.iter().enumerate() {
            let path = format!("devices[{i}]");
            let d = &entry.value;
            let name = match &d.name {
                Some(n) => self.name(n, &join(&path, "name"))?,
                None => return Err(self.invalid(self.pos(entry), &join(&path, "name"), "missing")),
            };
            let port = match &d.port {
                Some(p) => self.number(p, &join(&path, "port"), 1, 255)?,
                None => 1,
            };
            let rail = d
                .rail
                .as_ref()
                .map(|r| self.number(r, &join(&path, "rail"), 0, u64::from(u16::MAX)))
                .transpose()?;
            let gid_index = match &d.gid_index {
                None => GidIndex::Auto,
                Some(g) => {
                    let gpath = join(&path, "gid_index");
                    if self.short(g, &gpath)?.trim() == "auto" {
                        GidIndex::Auto
                    } else {
                        GidIndex::Index(self.number(g, &gpath, 0, u64::from(u32::MAX))?)
                    }
                }
            };
            let pos = self.pos(entry);
            if exclude.contains(&name) {
                return Err(self.refused(
                    pos,
                    &join(&path, "name"),
                    format!("{name} is also in exclude_devices; remove it from one of the two"),
                ));
            }
            let device = Device {
                name,
                port,
                rail,
                gid_index,
            };
            for (j, (other, other_pos)) in out.iter().enumerate() {
                if other.name == device.name && other.port == device.port {
                    return Err(self.refused(
                        pos,
                        &path,
                        format!(
                            "{} port {} is listed twice (also devices[{j}], line {})",
                            device.name, device.port, other_pos.line
                        ),
                    ));
                }
                if let (Some(a), Some(b)) = (other.rail, device.rail) {
                    if a == b {
                        return Err(self.refused(
                            d.rail.as_ref().map_or(pos, |r| self.pos(r)),
                            &join(&path, "rail"),
                            format!(
                                "rail {a} is also devices[{j}]'s ({}, line {}); each rail has \
                                 one device",
                                other.name, other_pos.line
                            ),
                        ));
                    }
                }
                if other.rail.is_some() != device.rail.is_some() {
                    let (with, without) = if device.rail.is_some() {
                        (format!("devices[{i}]"), format!("devices[{j}]"))
                    } else {
                        (format!("devices[{j}]"), format!("devices[{i}]"))
                    };
                    return Err(self.refused(
                        pos,
                        &path,
                        format!(
                            "{with} has a rail but {without} has none; paths are matched by \
                             rail, so give every device a rail, or none"
                        ),
                    ));
                }
            }
            out.push((device, pos));
        }
        Ok(Devices::Listed(out.into_iter().map(|(d, _)| d).collect()))
    }

    fn peers(
        &self,
        raw: Option<&Spanned<Vec<Spanned<RawPeer>>>>,
        node: &str,
        defaults: &ProbeConfig,
    ) -> Result<Vec<Peer>, ConfigError> {
        let mut out: Vec<(Peer, Pos)> = Vec::new();
        for (i, entry) in raw.map_or(&[][..], |r| &r.value).iter().enumerate() {
            let path = format!("peers[{i}]");
            let p = &entry.value;
            let pos = self.pos(entry);
            let given_name = p
                .name
                .as_ref()
                .map(|n| self.name(n, &join(&path, "name")))
                .transpose()?;
            let mode = match &p.mode {
                None => PeerMode::Exporter,
                Some(m) => {
                    let mpath = join(&path, "mode");
                    match self.text(m, &mpath)?.trim() {
                        "exporter" => PeerMode::Exporter,
                        "perftest" => PeerMode::Perftest,
                        other => {
                            return Err(self.invalid(
                                self.pos(m),
                                &mpath,
                                format!("unknown mode {}", quote(other)),
                            ))
                        }
                    }
                }
            };
            let default_port = match mode {
                PeerMode::Exporter => DEFAULT_CONTROL_PORT,
                PeerMode::Perftest => PERFTEST_PORT,
            };
            let address = match &p.address {
                Some(a) => self.address(a, &join(&path, "address"), default_port)?,
                None => {
                    let what = match &given_name {
                        Some(name) => format!("missing for peer {name}"),
                        None => "missing: every peer has an address (and may have a name)".into(),
                    };
                    return Err(self.invalid(pos, &join(&path, "address"), what));
                }
            };
            // A peer without a name is named by its address, for good (docs/config.md).
            let name = given_name.unwrap_or_else(|| address_name(&address));
            if let Some((_, first)) = out.iter().find(|(peer, _)| peer.name == name) {
                let (at, field) = match (&p.name, &p.address) {
                    (Some(n), _) => (self.pos(n), "name"),
                    (None, Some(a)) => (self.pos(a), "address"),
                    (None, None) => (pos, "name"),
                };
                return Err(self.refused(
                    at,
                    &join(&path, field),
                    format!(
                        "peer {name} is listed twice (first at line {}); peer names must be \
                         unique, they name the metric series (a peer without a name is named \
                         by its address)",
                        first.line
                    ),
                ));
            }
            if let Some((other, first)) = out.iter().find(|(peer, _)| peer.address == address) {
                let at = p.address.as_ref().map_or(pos, |a| self.pos(a));
                return Err(self.refused(
                    at,
                    &join(&path, "address"),
                    format!(
                        "{address} is also peer {}'s (line {}); each peer has its own address",
                        other.name, first.line
                    ),
                ));
            }
            let labels = self.labels(p.labels.as_ref(), &join(&path, "labels"))?;
            let (probe, overrides) = self.probe_config(
                defaults.values.clone(),
                &Level {
                    path: path.clone(),
                    pos,
                    raw: p.probe(),
                    is_peer: true,
                },
            )?;
            let skipped = (name == node).then_some(SkipReason::Itself);
            out.push((
                Peer {
                    name,
                    address,
                    labels,
                    mode,
                    probe,
                    overrides,
                    skipped,
                },
                pos,
            ));
        }
        Ok(out.into_iter().map(|(p, _)| p).collect())
    }

    fn discovery(
        &self,
        raw: &Spanned<super::file::RawDiscovery>,
    ) -> Result<Discovery, ConfigError> {
        let d = &raw.value;
        let mut dns = Vec::new();
        for (i, s) in items(&d.dns).iter().enumerate() {
            let path = format!("discovery.dns[{i}]");
            dns.push(self.address(s, &path, DEFAULT_CONTROL_PORT)?);
        }
        let mut files = Vec::new();
        for (i, s) in items(&d.files).iter().enumerate() {
            let path = format!("discovery.files[{i}]");
            let file = self.non_empty(s, &path)?;
            if let Some((dir, _)) = file.rsplit_once('/') {
                if dir.contains(['*', '?', '[']) {
                    return Err(self.refused(
                        self.pos(s),
                        &path,
                        format!(
                            "{}: wildcards are matched in the file name only (as Prometheus' \
                             file_sd), e.g. /etc/rdma-probe/peers/*.yaml",
                            quote(&file)
                        ),
                    ));
                }
            }
            files.push(file);
        }
        if dns.is_empty() && files.is_empty() {
            return Err(self.refused(
                self.pos(raw),
                "discovery",
                "no source: give dns or files (or remove discovery; `peers` alone works)",
            ));
        }
        let forget_after = match &d.forget_after {
            Some(f) => self.duration(f, "discovery.forget_after")?,
            None => DEFAULT_FORGET_AFTER,
        };
        let refresh_interval = match &d.refresh_interval {
            Some(r) => {
                let path = "discovery.refresh_interval";
                let interval = self.duration(r, path)?;
                if !(MIN_REFRESH_INTERVAL..=MAX_REFRESH_INTERVAL).contains(&interval) {
                    return Err(self.refused(
                        self.pos(r),
                        path,
                        "must be from 1s to 1h: names are re-resolved this often",
                    ));
                }
                interval
            }
            None => DEFAULT_REFRESH_INTERVAL,
        };
        Ok(Discovery {
            dns,
            files,
            forget_after,
            refresh_interval,
        })
    }

    fn selection(
        &self,
        raw: &Spanned<super::file::RawSelection>,
    ) -> Result<Selection, ConfigError> {
        let s = &raw.value;
        let mut selection = Selection::default();
        if let Some(g) = &s.group_by {
            let name = self.text(g, "selection.group_by")?;
            check_label_name(&name)
                .map_err(|e| self.refused(self.pos(g), "selection.group_by", e))?;
            selection.group_by = name;
        }
        if let Some(n) = &s.max_peers {
            selection.max_peers = self.number(n, "selection.max_peers", 1, MAX_SELECTION_PEERS)?;
        }
        if let Some(n) = &s.sample {
            selection.sample = self.number(n, "selection.sample", 0, MAX_SELECTION_PEERS)?;
        }
        if let Some(r) = &s.round {
            let round = self.duration(r, "selection.round")?;
            if !(MIN_ROUND..=MAX_ROUND).contains(&round) {
                return Err(self.invalid(
                    self.pos(r),
                    "selection.round",
                    format!("{} is out of range", humantime::format_duration(round)),
                ));
            }
            selection.round = round;
        }
        Ok(selection)
    }

    /// `base` overridden by the fields set at `level`, checked as a whole (the burst plan is
    /// built). Returns the fields set at this level, too.
    fn probe_config(
        &self,
        base: ProbeValues,
        level: &Level<'_>,
    ) -> Result<(ProbeConfig, Vec<&'static str>), ConfigError> {
        let raw = &level.raw;
        let mut v = base;
        let mut set: Vec<(&'static str, Pos)> = Vec::new();
        let p = |field: &str| join(&level.path, field);
        // `field!(name, s, path => parse)`: parse the field if set at this level, remember that.
        macro_rules! field {
            ($name:ident, $s:ident, $path:ident => $parse:expr) => {
                if let Some($s) = raw.$name {
                    let $path = p(stringify!($name));
                    let $path = $path.as_str();
                    v.$name = $parse?;
                    set.push((stringify!($name), self.pos($s)));
                }
            };
        }
        const DEPTH: u64 = MAX_TX_DEPTH as u64;
        field!(interval, s, path => self.duration(s, path));
        field!(jitter, s, path => self.jitter(s, path));
        field!(message_size, s, path => self.byte_size(s, path));
        field!(rate_limit, s, path => self.rate_limit(s, path));
        field!(unpaced_every, s, path => self.number(s, path, 0, u64::from(u32::MAX)));
        field!(qps, s, path => self.number(s, path, 1, u64::from(MAX_QPS)));
        field!(tx_depth, s, path => self.number(s, path, 1, DEPTH));
        field!(cq_mod, s, path => self.auto_or(s, path, |s, path| self.number(s, path, 1, DEPTH)));
        field!(post_list, s, path => self.number(s, path, 1, DEPTH));
        field!(mtu, s, path => self.auto_or(s, path, |s, path| self.mtu(s, path)));
        field!(traffic_class, s, path => self.number(s, path, 0, 255));
        field!(service_level, s, path => self.number(s, path, 0, 15));
        field!(qp_timeout, s, path => self.number(s, path, 0, 31));
        field!(timeout, s, path => self.duration(s, path));
        if let Some(burst) = raw.burst {
            v.length = self.burst(burst, &p("burst"))?;
            set.push(("burst", self.pos(burst)));
        }

        // Settings that combine: the plan (size, length, QPs, depths), the pace, the timing.
        let blame = |fields: &[&str], message: String| -> ConfigError {
            let hit = fields
                .iter()
                .find_map(|f| set.iter().find(|(name, _)| name == f));
            let from_defaults = if level.is_peer {
                " (settings this peer does not set come from defaults)"
            } else {
                ""
            };
            match hit {
                Some((name, pos)) => {
                    self.refused(*pos, &p(name), format!("{message}{from_defaults}"))
                }
                None => self.refused(level.pos, &level.path, format!("{message}{from_defaults}")),
            }
        };
        let mut builder = BurstPlan::builder(v.message_size.bytes(), v.length)
            .qps(v.qps)
            .tx_depth(v.tx_depth)
            .post_list(v.post_list);
        if let Some(cq_mod) = v.cq_mod {
            builder = builder.cq_mod(cq_mod);
        }
        let plan = builder.build().map_err(|e| {
            let fields: &[&str] = match &e {
                PlanError::MessageSize(_) => &["message_size"],
                PlanError::TxDepth(_) => &["tx_depth"],
                PlanError::Qps(_) => &["qps"],
                PlanError::Signaling(_) => &["cq_mod", "post_list", "tx_depth"],
                PlanError::TooFewMessages { .. } => &["burst", "qps", "message_size"],
                PlanError::EmptyLength(_) | PlanError::TooLong { .. } => &["burst", "message_size"],
                PlanError::BurstAllowance(_) => &[],
            };
            blame(fields, e.to_string())
        })?;
        let rate = match v.rate_limit {
            // A percentage needs both ends' link rates: resolved per burst at run time.
            Some(RateLimit::PercentOfLink(_)) | None => None,
            Some(limit) => Some(limit.resolve(v.message_size.bytes(), None).map_err(|e| {
                blame(
                    &["rate_limit", "message_size"],
                    format!("rate_limit {limit}: {e}"),
                )
            })?),
        };
        // A burst that cannot end before the next one of its path is due is a mistake.
        let burst_time = match (v.length, rate) {
            (BurstLength::Duration(d), _) => Some(d),
            (length, Some(rate)) => length
                .total_messages(v.message_size.bytes())
                .map(|n| Duration::from_secs_f64((n as f64 / rate.messages_per_second()).min(1e9))),
            _ => None,
        };
        if let Some(t) = burst_time {
            if t >= v.interval {
                let fmt = |d: Duration| humantime::format_duration(d).to_string();
                let what = match v.length {
                    BurstLength::Duration(_) => format!("a burst of {}", fmt(t)),
                    length => format!(
                        "a burst of {length} at {} takes about {}",
                        v.rate_limit.map(|r| r.to_string()).unwrap_or_default(),
                        fmt(if t >= Duration::from_secs(1) {
                            Duration::from_secs(t.as_secs())
                        } else {
                            Duration::from_millis(t.as_millis() as u64)
                        })
                    ),
                };
                return Err(blame(
                    &["burst", "rate_limit", "interval"],
                    format!(
                        "{what}, which is not shorter than the interval {}; shorten the burst or \
                         lengthen the interval",
                        fmt(v.interval)
                    ),
                ));
            }
        }
        Ok((
            ProbeConfig { values: v, plan },
            set.into_iter().map(|(n, _)| n).collect(),
        ))
    }

    /// `auto` (→ `None`) or what `parse` accepts.
    fn auto_or<T>(
        &self,
        scalar: &Scalar,
        path: &str,
        parse: impl Fn(&Scalar, &str) -> Result<T, ConfigError>,
    ) -> Result<Option<T>, ConfigError> {
        if self.short(scalar, path)?.trim() == "auto" {
            return Ok(None);
        }
        parse(scalar, path).map(Some)
    }

    fn mtu(&self, scalar: &Scalar, path: &str) -> Result<u32, ConfigError> {
        let n: u32 = self.number(scalar, path, 0, u64::from(u32::MAX))?;
        PathMtu::from_bytes(n).map(PathMtu::bytes).ok_or_else(|| {
            self.invalid(
                self.pos(scalar),
                path,
                format!(
                    "{n} is not an RDMA MTU (RDMA MTUs count payload only: a 1500-byte Ethernet \
                     MTU carries 1024, a 9000-byte one 4096)"
                ),
            )
        })
    }

    fn jitter(&self, scalar: &Scalar, path: &str) -> Result<f64, ConfigError> {
        self.percentage(scalar, path, |p| (0.0..=MAX_JITTER * 100.0).contains(&p))
    }

    /// `N%` (decimals allowed) as a fraction, when `in_range` accepts N.
    fn percentage(
        &self,
        scalar: &Scalar,
        path: &str,
        in_range: impl Fn(f64) -> bool,
    ) -> Result<f64, ConfigError> {
        let value = self.short(scalar, path)?;
        let pos = self.pos(scalar);
        let number = value
            .trim()
            .strip_suffix('%')
            .ok_or_else(|| {
                self.invalid(pos, path, format!("{} is not a percentage", quote(&value)))
            })?
            .trim();
        let valid_number = !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && number.bytes().filter(|b| *b == b'.').count() <= 1
            && number != ".";
        let percent: f64 = if valid_number {
            number.parse().unwrap_or(f64::NAN)
        } else {
            f64::NAN
        };
        if !in_range(percent) {
            return Err(self.invalid(pos, path, format!("{} is out of range", quote(&value))));
        }
        Ok(percent / 100.0)
    }

    fn schedule(
        &self,
        raw: Option<&Spanned<super::file::RawSchedule>>,
    ) -> Result<Schedule, ConfigError> {
        let mut schedule = Schedule::default();
        if let Some(d) = raw.and_then(|r| r.value.duty_cycle.as_ref()) {
            schedule.duty_cycle = self.percentage(d, "schedule.duty_cycle", |p| {
                (MIN_DUTY_CYCLE * 100.0..=100.0).contains(&p)
            })?;
        }
        Ok(schedule)
    }

    fn series(&self, raw: Option<&Spanned<super::file::RawSeries>>) -> Result<Series, ConfigError> {
        let mut series = Series::default();
        let Some(raw) = raw else {
            return Ok(series);
        };
        if let Some(b) = &raw.value.budget {
            series.budget = self.number(b, "series.budget", 1, MAX_SERIES_BUDGET)?;
        }
        if let Some(t) = &raw.value.ttl {
            let ttl = self.duration(t, "series.ttl")?;
            if !(MIN_SERIES_TTL..=MAX_SERIES_TTL).contains(&ttl) {
                return Err(self.invalid(
                    self.pos(t),
                    "series.ttl",
                    format!("{} is out of range", humantime::format_duration(ttl)),
                ));
            }
            series.ttl = ttl;
        }
        Ok(series)
    }

    fn limits(&self, raw: Option<&Spanned<super::file::RawLimits>>) -> Result<Limits, ConfigError> {
        let mut limits = Limits::default();
        let Some(raw) = raw else {
            return Ok(limits);
        };
        let r = &raw.value;
        if let Some(n) = &r.max_sessions {
            limits.max_sessions = self.number(n, "limits.max_sessions", 1, MAX_MAX_SESSIONS)?;
        }
        if let Some(size) = &r.max_pinned {
            limits.max_pinned_bytes = self.byte_size(size, "limits.max_pinned")?.bytes();
        }
        if let Some(size) = &r.max_session_memory {
            limits.max_session_bytes = self.byte_size(size, "limits.max_session_memory")?.bytes();
        }
        if limits.max_pinned_bytes < limits.max_session_bytes {
            let at = r.max_pinned.as_ref().or(r.max_session_memory.as_ref());
            return Err(self.invalid(
                at.map_or(self.pos(raw), |s| self.pos(s)),
                "limits.max_pinned",
                format!(
                    "{} is less than limits.max_session_memory ({}): not even one session \
                     would fit",
                    ByteSize(limits.max_pinned_bytes),
                    ByteSize(limits.max_session_bytes)
                ),
            ));
        }
        Ok(limits)
    }

    fn rate_limit(&self, scalar: &Scalar, path: &str) -> Result<Option<RateLimit>, ConfigError> {
        let value = self.short(scalar, path)?;
        if value.trim() == "unpaced" {
            return Ok(None);
        }
        // Unit errors list the accepted forms.
        value
            .parse()
            .map(Some)
            .map_err(|e: crate::units::UnitError| {
                let mut message = e.to_string();
                if message.contains(RATE_LIMIT_FORMS) {
                    message.push_str("; or `unpaced` for no limit");
                }
                self.refused(self.pos(scalar), path, message)
            })
    }

    fn burst(&self, raw: &Spanned<RawBurst>, path: &str) -> Result<BurstLength, ConfigError> {
        let b = &raw.value;
        let given: Vec<&str> = [
            ("duration", b.duration.is_some()),
            ("bytes", b.bytes.is_some()),
            ("messages", b.messages.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if given.len() != 1 {
            let what = if given.is_empty() {
                "no length given".to_owned()
            } else {
                format!("{} given together", given.join(" and "))
            };
            return Err(self.invalid(self.pos(raw), path, what));
        }
        if let Some(d) = &b.duration {
            let dpath = join(path, "duration");
            let duration = self.duration(d, &dpath)?;
            if duration > crate::burst::plan::MAX_BURST_DURATION {
                return Err(self.invalid(self.pos(d), &dpath, "too long"));
            }
            return Ok(BurstLength::Duration(duration));
        }
        if let Some(s) = &b.bytes {
            return Ok(BurstLength::Bytes(
                self.byte_size(s, &join(path, "bytes"))?.bytes(),
            ));
        }
        match &b.messages {
            Some(n) => Ok(BurstLength::Messages(self.number(
                n,
                &join(path, "messages"),
                1,
                u64::MAX,
            )?)),
            None => Err(self.invalid(self.pos(raw), path, "no length given")),
        }
    }
}

/// One level of probe settings: `defaults` or a peer.
struct Level<'a> {
    path: String,
    pos: Pos,
    raw: RawProbe<'a>,
    is_peer: bool,
}

/// Most peers `selection.max_peers` and `selection.sample` accept: beyond, a typo.
const MAX_SELECTION_PEERS: u64 = 100_000;

/// A label value from outside the config file (a file_sd list): at most 253 characters, none of
/// them a control character or another that must not reach a terminal or log line unescaped,
/// as the config's own label values and the values a peer says are checked.
pub(crate) fn check_label_value(value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_NAME_LEN {
        return Err(format!("label value longer than {MAX_NAME_LEN} characters"));
    }
    if let Some(c) = value
        .chars()
        .find(|&c| crate::control::message::is_unsafe_char(c))
    {
        return Err(format!(
            "label value contains {}: control characters are not allowed",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// Prometheus label name rules, minus the names the exporter sets itself.
pub(crate) fn check_label_name(name: &str) -> Result<(), String> {
    const RULE: &str = "label names are letters, digits and _, not starting with a digit \
                        (Prometheus' rule), and not starting with __ (reserved)";
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("{} is not a valid label name; {RULE}", quote(name)));
    }
    if name.starts_with("__") {
        return Err(format!(
            "{name:?} starts with __, which Prometheus reserves; {RULE}"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "{name:?} is a label the exporter sets itself ({}); choose another name",
            RESERVED_LABELS.join(", ")
        ));
    }
    Ok(())
}
