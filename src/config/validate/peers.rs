//! The node's devices and its peers: static labels, the device list and exclusions, the peer
//! list, discovery and the selection of large clusters.

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

use super::probe::Level;
use super::{items, join, Ctx};
use crate::config::address::{address_name, DEFAULT_CONTROL_PORT, PERFTEST_PORT};
use crate::config::error::{ConfigError, Pos};
use crate::config::file::{LabelMap, RawDevice, RawPeer, Scalar};
use crate::config::model::*;
use crate::label::{check_label_name, MAX_NAME_LEN};
use crate::text::quote;

/// Most peers `selection.max_peers` and `selection.sample` accept: beyond, a typo.
const MAX_SELECTION_PEERS: u64 = 100_000;

impl Ctx<'_> {
    pub(super) fn labels(
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

    pub(super) fn exclude_devices(
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

    pub(super) fn devices(
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

    pub(super) fn peers(
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

    pub(super) fn discovery(
        &self,
        raw: &Spanned<crate::config::file::RawDiscovery>,
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

    pub(super) fn selection(
        &self,
        raw: &Spanned<crate::config::file::RawSelection>,
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
}
