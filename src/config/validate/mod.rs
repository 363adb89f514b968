//! Raw structs → [`Config`]: interpolation, parsing of every value, and every check, once.
//!
//! Each check reports the position of the value it refuses (or of the mapping a required value
//! is missing from), the field path, and what would be valid ([`field_help`]). A peer's burst
//! plan is built here, from `defaults` overridden by the peer's own fields, so settings that do
//! not combine are a config error at load instead of a failed probe at run time.

mod help;
mod judge;
mod peers;
mod probe;
mod server;
mod topology;
mod values;

use serde_saphyr::Spanned;

use super::error::{ConfigError, Origin, Pos};
use super::file::{RawConfig, RawProbe};
use super::model::*;
use probe::Level;

pub(crate) use help::field_help;

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
        let ping = self.ping(raw.ping.as_ref())?;
        let judge = self.judge(raw.judge.as_ref())?;
        let limits = self.limits(raw.limits.as_ref())?;
        let topology_source = self.topology(raw.topology.as_ref())?;
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
            ping,
            judge,
            limits,
            topology_source,
            topology: None,
        })
    }
}
