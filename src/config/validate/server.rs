//! The node's own service: where it listens, how its control channel is authenticated, where
//! peers' RDMA traffic may go, its series budget and its responder limits.

use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde_saphyr::Spanned;

use super::Ctx;
use crate::config::error::{ConfigError, Pos};
use crate::config::file::{RawAuth, Scalar};
use crate::config::model::*;
use crate::rdma_address::parse_network;
use crate::text::quote;
use crate::units::ByteSize;

impl Ctx<'_> {
    pub(super) fn listen(
        &self,
        raw: Option<&Spanned<crate::config::file::RawListen>>,
    ) -> Result<Listen, ConfigError> {
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

    pub(super) fn auth(&self, raw: Option<&Spanned<RawAuth>>) -> Result<Auth, ConfigError> {
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

    pub(super) fn rdma_networks(
        &self,
        raw: Option<&Spanned<Vec<Scalar>>>,
    ) -> Result<Vec<IpNet>, ConfigError> {
        let mut out: Vec<IpNet> = Vec::new();
        for (i, scalar) in raw.map_or(&[][..], |r| &r.value).iter().enumerate() {
            let path = format!("rdma_networks[{i}]");
            let value = self.non_empty(scalar, &path)?;
            let network = parse_network(&value).map_err(|why| {
                self.invalid(self.pos(scalar), &path, format!("{}: {why}", quote(&value)))
            })?;
            out.push(network);
        }
        Ok(out)
    }

    pub(super) fn series(
        &self,
        raw: Option<&Spanned<crate::config::file::RawSeries>>,
    ) -> Result<Series, ConfigError> {
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

    pub(super) fn ping(
        &self,
        raw: Option<&Spanned<crate::config::file::RawPing>>,
    ) -> Result<Ping, ConfigError> {
        let mut ping = Ping::default();
        let Some(raw) = raw else {
            return Ok(ping);
        };
        let r = &raw.value;
        let within = |scalar: &Scalar, path: &str, range: std::ops::RangeInclusive<Duration>| {
            let d = self.duration(scalar, path)?;
            if range.contains(&d) {
                Ok(d)
            } else {
                Err(self.invalid(
                    self.pos(scalar),
                    path,
                    format!(
                        "{} is out of range ({} to {})",
                        humantime::format_duration(d),
                        humantime::format_duration(*range.start()),
                        humantime::format_duration(*range.end())
                    ),
                ))
            }
        };
        if let Some(i) = &r.interval {
            ping.interval = match self.text(i, "ping.interval")?.as_str() {
                "off" => None,
                _ => Some(within(i, "ping.interval", PING_INTERVALS)?),
            };
        }
        if let Some(t) = &r.timeout {
            ping.timeout = within(t, "ping.timeout", PING_TIMEOUTS)?;
        }
        let interval = ping.interval.unwrap_or(Duration::ZERO);
        if let Some(w) = &r.window {
            ping.window = within(
                w,
                "ping.window",
                interval.max(ping.timeout)..=MAX_PING_WINDOW,
            )?;
        } else if ping.window < interval.max(ping.timeout) {
            ping.window = interval.max(ping.timeout);
        }
        if let Some(n) = &r.max_rate {
            ping.max_rate = self.number(n, "ping.max_rate", 1, MAX_PING_RATE)?;
        }
        if let Some(n) = &r.max_paths {
            ping.max_paths = self.number(n, "ping.max_paths", 1, MAX_PING_PATHS)?;
        }
        Ok(ping)
    }

    pub(super) fn limits(
        &self,
        raw: Option<&Spanned<crate::config::file::RawLimits>>,
    ) -> Result<Limits, ConfigError> {
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
}
