//! Probe settings: one level (`defaults` or a peer) over another, checked as a whole (the
//! burst plan is built), and the burst length, rate limit and schedule.

use std::time::Duration;

use serde_saphyr::Spanned;

use super::{join, Ctx};
use crate::burst::plan::{MAX_QPS, MAX_TX_DEPTH};
use crate::burst::{BurstLength, BurstPlan, PlanError};
use crate::config::error::{ConfigError, Pos};
use crate::config::file::{RawBurst, RawProbe, Scalar};
use crate::config::model::*;
use crate::text::quote;
use crate::units::{RateLimit, RATE_LIMIT_FORMS};
use crate::verbs::PathMtu;

impl Ctx<'_> {
    /// `base` overridden by the fields set at `level`, checked as a whole (the burst plan is
    /// built). Returns the fields set at this level, too.
    pub(super) fn probe_config(
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
    pub(super) fn percentage(
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

    pub(super) fn schedule(
        &self,
        raw: Option<&Spanned<crate::config::file::RawSchedule>>,
    ) -> Result<Schedule, ConfigError> {
        let mut schedule = Schedule::default();
        if let Some(d) = raw.and_then(|r| r.value.duty_cycle.as_ref()) {
            schedule.duty_cycle = self.percentage(d, "schedule.duty_cycle", |p| {
                (MIN_DUTY_CYCLE * 100.0..=100.0).contains(&p)
            })?;
        }
        Ok(schedule)
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
pub(super) struct Level<'a> {
    pub(super) path: String,
    pub(super) pos: Pos,
    pub(super) raw: RawProbe<'a>,
    pub(super) is_peer: bool,
}
