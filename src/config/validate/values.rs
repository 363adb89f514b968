//! The values every check is built on: text with `${VAR}` substituted, names, numbers,
//! durations, sizes and addresses, each refused with its position and what would be valid.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde_saphyr::Spanned;

use super::{field_help, Ctx};
use crate::config::address::{parse_host_port, HostPort};
use crate::config::error::{ConfigError, Pos};
use crate::config::file::Scalar;
use crate::config::interpolate::interpolate;
use crate::label::check_name;
use crate::text::quote;
use crate::units::{parse_positive_duration, ByteSize};

/// Longest value of a number, size, rate or duration: anything longer is a mistake, and is
/// refused before it is parsed or echoed.
const MAX_UNIT_LEN: usize = 64;

impl Ctx<'_> {
    pub(super) fn pos<T>(&self, spanned: &Spanned<T>) -> Pos {
        Pos::from_location(&spanned.referenced)
    }

    /// A refusal of a value, with what the field accepts appended.
    pub(super) fn invalid(&self, pos: Pos, path: &str, what: impl Into<String>) -> ConfigError {
        let mut message = what.into();
        if let Some(help) = field_help(path) {
            message.push_str("; expected ");
            message.push_str(&help);
        }
        self.origin.value(pos, path, message)
    }

    /// A refusal whose message already says what would be valid.
    pub(super) fn refused(&self, pos: Pos, path: &str, message: impl Into<String>) -> ConfigError {
        self.origin.value(pos, path, message)
    }

    /// The value of a scalar with `${VAR}` references substituted.
    pub(super) fn text(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        interpolate(&scalar.value, self.env)
            .map(|v| v.into_owned())
            .map_err(|e| {
                self.origin
                    .env(self.offset_pos(scalar, e.offset), path, e.message)
            })
    }

    /// The value of a number, size, rate or duration field (at most [`MAX_UNIT_LEN`] long).
    pub(super) fn short(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
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
    pub(super) fn address(
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
    pub(super) fn non_empty(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        let value = self.text(scalar, path)?;
        let value = value.trim();
        if value.is_empty() {
            return Err(self.invalid(self.pos(scalar), path, "empty value"));
        }
        Ok(value.to_owned())
    }

    /// A name, as [`check_name`] allows.
    pub(super) fn name(&self, scalar: &Scalar, path: &str) -> Result<String, ConfigError> {
        let value = self.text(scalar, path)?;
        check_name(&value).map_err(|e| self.invalid(self.pos(scalar), path, e))?;
        Ok(value)
    }

    /// A whole number in `min..=max`.
    pub(super) fn number<T: TryFrom<u64>>(
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

    pub(super) fn duration(&self, scalar: &Scalar, path: &str) -> Result<Duration, ConfigError> {
        let value = self.short(scalar, path)?;
        parse_positive_duration(&value)
            .map_err(|e| self.invalid(self.pos(scalar), path, e.to_string()))
    }

    pub(super) fn byte_size(&self, scalar: &Scalar, path: &str) -> Result<ByteSize, ConfigError> {
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

    pub(super) fn socket_addr(
        &self,
        scalar: &Scalar,
        path: &str,
    ) -> Result<SocketAddr, ConfigError> {
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
}
