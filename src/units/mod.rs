//! Units as operators write them: byte sizes (`64KiB`), rate limits (`10Gbps`, `1200MiB/s`,
//! `50000msg/s`, `25%`) and durations (`500ms`).
//!
//! Why a module of its own: the same strings appear in the YAML config, on the command line and in
//! error messages; `config` (which builds burst plans) and `burst` (whose plans carry a rate) both
//! use them, so this module imports nothing else of this crate. And a rate limit that is silently
//! read 8× too high (bits vs bytes) or ignored (perftest's software limiter does nothing below
//! tx_depth messages per second; docs/architecture.md, "Pacing and waiting") is exactly the kind
//! of bug this product exists to avoid. So parsing is strict, every rejection names the accepted
//! forms, and values print back in a form that parses to the same value (`Display` round-trips).
//!
//! Case: units are case-insensitive, except for the one letter that tells bits from bytes where
//! it is the *only* thing that does: `Gb/s` or `MBps` are refused as ambiguous (write `Gbps` for
//! bits or `GB/s` for bytes) instead of being guessed.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Forms accepted for a byte size; quoted in every byte-size error.
pub const BYTE_SIZE_FORMS: &str = "a whole number of bytes with an optional unit: 65536, 64K or \
     64KiB (K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024, as in perftest's -s), 64KB \
     (KB, MB, GB, TB are powers of 1000), 512B";

/// Forms accepted for a rate limit; quoted in every rate-limit error.
pub const RATE_LIMIT_FORMS: &str = "a positive number with a unit: bits per second (50Mbps, \
     10Gbps; also bps, Kbps, Tbps, Gbit/s), bytes per second (1200MiB/s, 1GiB/s, 500MB/s; also \
     B/s, KiB/s, KB/s, GB/s, TiB/s, TB/s), messages per second (50000msg/s) or a percentage of \
     the link rate (25%, more than 0 and at most 100)";

/// Largest byte size accepted (2^60 B = 1 EiB): far above any buffer, far below `u64::MAX`, so
/// products with small counts cannot overflow unnoticed.
pub const MAX_BYTE_SIZE: u64 = 1 << 60;

/// Why a size, rate or duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("empty {what}; expected {accepted}")]
    Empty {
        what: &'static str,
        accepted: &'static str,
    },
    #[error("invalid number in {what} {input:?}; expected {accepted}")]
    InvalidNumber {
        what: &'static str,
        input: String,
        accepted: &'static str,
    },
    #[error("{what} {input:?} must be greater than zero; expected {accepted}")]
    NotPositive {
        what: &'static str,
        input: String,
        accepted: &'static str,
    },
    #[error("unknown unit {unit:?} in {what} {input:?}; expected {accepted}")]
    UnknownUnit {
        what: &'static str,
        input: String,
        unit: String,
        accepted: &'static str,
    },
    #[error("ambiguous unit {unit:?} in {input:?}: {hint}")]
    AmbiguousUnit {
        input: String,
        unit: String,
        hint: &'static str,
    },
    #[error("{what} {input:?} is too large (at most {max})")]
    TooLarge {
        what: &'static str,
        input: String,
        max: String,
    },
    #[error("byte size {input:?} is not a whole number of bytes; expected {BYTE_SIZE_FORMS}")]
    FractionalBytes { input: String },
    #[error("percentage {input:?} must be more than 0 and at most 100")]
    PercentOutOfRange { input: String },
    #[error("invalid duration {input:?}: {reason} (write e.g. 500ms, 3s, 1m 30s)")]
    InvalidDuration { input: String, reason: String },
    #[error("duration {input:?} must be greater than zero")]
    ZeroDuration { input: String },
}

/// Why a [`RateLimit`] could not be turned into a concrete rate for one burst.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "rate limit {limit} is a percentage of the link rate, but the link rate is not known \
         (sysfs gave none for either end); set an absolute limit such as 10Gbps or 1200MiB/s"
    )]
    LinkRateUnknown { limit: String },
    #[error("link rate {0} B/s is not a positive finite number")]
    InvalidLinkRate(f64),
    #[error("message size must be at least 1 byte")]
    ZeroMessageSize,
    #[error(
        "rate {bytes_per_second} B/s = {messages_per_second} msg/s is not a usable positive \
         finite rate"
    )]
    Unusable {
        messages_per_second: f64,
        bytes_per_second: f64,
    },
}

// ---------------------------------------------------------------------------------------------
// Shared lexing

/// Splits `"  64 KiB "` into `("64", "KiB")`. The number is the leading run of ASCII digits and
/// dots (a sign is kept so it can be reported as "must be greater than zero").
fn split_number(input: &str) -> (&str, &str) {
    let s = input.trim();
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '-' || c == '+'))))
        .map_or(s.len(), |(i, _)| i);
    (&s[..end], s[end..].trim())
}

/// Checks the `digits[.digits]` grammar (no exponent, no `inf`/`nan`, at most one dot, a digit
/// on at least one side of it). Returns `(integer digits, fraction digits)`.
fn decimal_parts(number: &str) -> Option<(&str, &str)> {
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    Some((int, frac))
}

/// Parses the numeric part shared by sizes and rates, rejecting signs with a clear error.
fn parse_positive_decimal<'a>(
    input: &str,
    number: &'a str,
    what: &'static str,
    accepted: &'static str,
) -> Result<(&'a str, &'a str), UnitError> {
    if number.is_empty() {
        return Err(if input.trim().is_empty() {
            UnitError::Empty { what, accepted }
        } else {
            UnitError::InvalidNumber {
                what,
                input: input.to_owned(),
                accepted,
            }
        });
    }
    if number.starts_with('-') {
        return Err(UnitError::NotPositive {
            what,
            input: input.to_owned(),
            accepted,
        });
    }
    let unsigned = number.strip_prefix('+').unwrap_or(number);
    decimal_parts(unsigned).ok_or_else(|| UnitError::InvalidNumber {
        what,
        input: input.to_owned(),
        accepted,
    })
}

/// The shortest of `candidates` (value printed in that unit) that parses back to exactly `value`.
fn shortest_exact(value: f64, units: &[(f64, &str)], fallback: &str) -> String {
    let mut best = format!("{value}{fallback}");
    for &(scale, name) in units {
        let q = value / scale;
        if q >= 1.0 && q.is_finite() && q * scale == value {
            let s = format!("{q}{name}");
            if s.len() < best.len() {
                best = s;
            }
        }
    }
    best
}

// ---------------------------------------------------------------------------------------------
// ByteSize

/// A size in bytes as operators write it: `65536`, `64K`, `64KiB`, `64KB`.
///
/// `K`/`M`/`G`/`T` mean powers of 1024 because that is what perftest's `-s 64K` means, and
/// operators copy flags from perftest; `KB`/`MB`/... are SI powers of 1000. Fractions are allowed
/// when the result is a whole number of bytes (`1.5KiB` = 1536).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

fn byte_unit_multiplier(unit: &str) -> Option<u64> {
    const K: u64 = 1 << 10;
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => K,
        "m" | "mib" => K * K,
        "g" | "gib" => K * K * K,
        "t" | "tib" => K * K * K * K,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

impl std::str::FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "byte size";
        let (number, unit) = split_number(input);
        let (int, frac) = parse_positive_decimal(input, number, WHAT, BYTE_SIZE_FORMS)?;
        let multiplier = byte_unit_multiplier(unit).ok_or_else(|| UnitError::UnknownUnit {
            what: WHAT,
            input: input.to_owned(),
            unit: unit.to_owned(),
            accepted: BYTE_SIZE_FORMS,
        })?;
        let too_large = || UnitError::TooLarge {
            what: WHAT,
            input: input.to_owned(),
            max: format!("{}", ByteSize(MAX_BYTE_SIZE)),
        };
        // Exact decimal arithmetic: mantissa / 10^scale * multiplier, in u128.
        let int = int.trim_start_matches('0');
        let frac = frac.trim_end_matches('0');
        if int.len() + frac.len() > 30 {
            return Err(too_large());
        }
        // At most 30 digits: fits u128 (< 3.4e38); the product below is checked.
        let mantissa: u128 = format!("0{int}{frac}").parse().map_err(|_| too_large())?;
        let denominator = 10u128.pow(frac.len() as u32);
        let scaled = mantissa
            .checked_mul(u128::from(multiplier))
            .ok_or_else(too_large)?;
        if scaled % denominator != 0 {
            return Err(UnitError::FractionalBytes {
                input: input.to_owned(),
            });
        }
        let bytes = scaled / denominator;
        if bytes > u128::from(MAX_BYTE_SIZE) {
            return Err(too_large());
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides exactly, else the largest SI unit, else bytes:
    /// `64KiB`, `1GB`, `1000B`... always parses back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 8] = [
            (1 << 40, "TiB"),
            (1 << 30, "GiB"),
            (1 << 20, "MiB"),
            (1 << 10, "KiB"),
            (1_000_000_000_000, "TB"),
            (1_000_000_000, "GB"),
            (1_000_000, "MB"),
            (1_000, "KB"),
        ];
        let n = self.0;
        match UNITS.iter().find(|(u, _)| n >= *u && n.is_multiple_of(*u)) {
            Some((u, name)) => write!(f, "{}{name}", n / u),
            None => write!(f, "{n}B"),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    /// From a string (`"64KiB"`) or a plain non-negative integer (`65536`, as YAML gives it).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(BYTE_SIZE_FORMS)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                if v > MAX_BYTE_SIZE {
                    return Err(E::custom(format!(
                        "byte size {v} is too large (at most {})",
                        ByteSize(MAX_BYTE_SIZE)
                    )));
                }
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "byte size {v} must not be negative; expected {BYTE_SIZE_FORMS}"
                    ))),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// RateLimit

/// A software rate limit as configured, before the message size and link rate are known.
///
/// Each variant holds its value in the base unit of its kind (bit/s, B/s, msg/s, percent); the
/// unit the operator wrote is not kept, `Display` picks the shortest exact form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// Bits per second (SI: `Mbps` = 10^6 bit/s, `Gbps` = 10^9 bit/s, like perftest's Gb/s).
    BitsPerSecond(f64),
    /// Payload bytes per second (`MiB/s` = 2^20 B/s like perftest's default unit, `MB/s` = 10^6).
    BytesPerSecond(f64),
    /// RDMA WRITE messages (work requests) per second.
    MessagesPerSecond(f64),
    /// Percent of the link rate (the lower of both ends), in `(0, 100]`.
    PercentOfLink(f64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum RateKind {
    Bits,
    Bytes,
    Messages,
    Percent,
}

/// Maps a unit (already split from its number) to a kind and multiplier.
fn rate_unit(input: &str, unit: &str) -> Result<(RateKind, f64), UnitError> {
    let lower = unit.to_ascii_lowercase();
    let si = |prefix: &str| -> Option<f64> {
        Some(match prefix {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            "t" => 1e12,
            _ => return None,
        })
    };
    let iec = |prefix: &str| -> Option<f64> {
        Some(match prefix {
            "ki" => 1024.0,
            "mi" => 1024.0 * 1024.0,
            "gi" => 1024.0 * 1024.0 * 1024.0,
            "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return None,
        })
    };
    let ambiguous = |hint| UnitError::AmbiguousUnit {
        input: input.to_owned(),
        unit: unit.to_owned(),
        hint,
    };
    if lower == "%" {
        return Ok((RateKind::Percent, 1.0));
    }
    if matches!(
        lower.as_str(),
        "msg/s" | "msgs/s" | "message/s" | "messages/s"
    ) {
        return Ok((RateKind::Messages, 1.0));
    }
    for suffix in ["bit/s", "bits/s"] {
        if let Some(m) = lower.strip_suffix(suffix).and_then(si) {
            return Ok((RateKind::Bits, m));
        }
    }
    if let Some(prefix) = lower.strip_suffix("bps") {
        if let Some(m) = si(prefix) {
            // `MBps` is read as megabytes by some and megabits by others: refuse to guess.
            if unit.as_bytes()[prefix.len()] == b'B' {
                return Err(ambiguous(
                    "\"Bps\" with a capital B is read as bytes by some and bits by others; \
                     write Mbps/Gbps for bits or MB/s, MiB/s for bytes",
                ));
            }
            return Ok((RateKind::Bits, m));
        }
    }
    if let Some(prefix) = lower.strip_suffix("b/s") {
        if let Some(m) = iec(prefix) {
            return Ok((RateKind::Bytes, m));
        }
        if let Some(m) = si(prefix) {
            // `Gb/s` is perftest's spelling of gigabits, `GB/s` is gigabytes; one letter's case
            // must not silently change the rate 8×.
            if unit.as_bytes()[prefix.len()] == b'b' {
                return Err(ambiguous(
                    "a lowercase b in \"b/s\" means bits, but units are otherwise \
                     case-insensitive; write Gbps or Gbit/s for bits, GB/s or GiB/s for bytes",
                ));
            }
            return Ok((RateKind::Bytes, m));
        }
    }
    Err(UnitError::UnknownUnit {
        what: "rate limit",
        input: input.to_owned(),
        unit: unit.to_owned(),
        accepted: RATE_LIMIT_FORMS,
    })
}

impl std::str::FromStr for RateLimit {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "rate limit";
        let (number, unit) = split_number(input);
        parse_positive_decimal(input, number, WHAT, RATE_LIMIT_FORMS)?;
        if unit.is_empty() {
            return Err(UnitError::UnknownUnit {
                what: WHAT,
                input: input.to_owned(),
                unit: String::new(),
                accepted: RATE_LIMIT_FORMS,
            });
        }
        let (kind, multiplier) = rate_unit(input, unit)?;
        let value: f64 = number
            .strip_prefix('+')
            .unwrap_or(number)
            .parse()
            .map_err(|_| UnitError::InvalidNumber {
                what: WHAT,
                input: input.to_owned(),
                accepted: RATE_LIMIT_FORMS,
            })?;
        let value = value * multiplier;
        if value.is_infinite() {
            return Err(UnitError::TooLarge {
                what: WHAT,
                input: input.to_owned(),
                max: format!("{}", f64::MAX),
            });
        }
        if value.is_nan() || value <= 0.0 {
            return Err(UnitError::NotPositive {
                what: WHAT,
                input: input.to_owned(),
                accepted: RATE_LIMIT_FORMS,
            });
        }
        Ok(match kind {
            RateKind::Bits => RateLimit::BitsPerSecond(value),
            RateKind::Bytes => RateLimit::BytesPerSecond(value),
            RateKind::Messages => RateLimit::MessagesPerSecond(value),
            RateKind::Percent if value > 100.0 => {
                return Err(UnitError::PercentOutOfRange {
                    input: input.to_owned(),
                })
            }
            RateKind::Percent => RateLimit::PercentOfLink(value),
        })
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KI: f64 = 1024.0;
        match *self {
            RateLimit::BitsPerSecond(v) => f.write_str(&shortest_exact(
                v,
                &[(1e12, "Tbps"), (1e9, "Gbps"), (1e6, "Mbps"), (1e3, "Kbps")],
                "bps",
            )),
            RateLimit::BytesPerSecond(v) => f.write_str(&shortest_exact(
                v,
                &[
                    (KI * KI * KI * KI, "TiB/s"),
                    (KI * KI * KI, "GiB/s"),
                    (KI * KI, "MiB/s"),
                    (KI, "KiB/s"),
                    (1e12, "TB/s"),
                    (1e9, "GB/s"),
                    (1e6, "MB/s"),
                    (1e3, "KB/s"),
                ],
                "B/s",
            )),
            RateLimit::MessagesPerSecond(v) => write!(f, "{v}msg/s"),
            RateLimit::PercentOfLink(v) => write!(f, "{v}%"),
        }
    }
}

impl Serialize for RateLimit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RateLimit {
    /// From a string only: a bare number has no unit, and guessing one is how rates go 8× wrong.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RateLimit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(RATE_LIMIT_FORMS)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RateLimit, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RateLimit, E> {
                Err(E::custom(format!(
                    "rate limit {v} has no unit; expected {RATE_LIMIT_FORMS}"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RateLimit, E> {
                Err(E::custom(format!(
                    "rate limit {v} has no unit; expected {RATE_LIMIT_FORMS}"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RateLimit, E> {
                Err(E::custom(format!(
                    "rate limit {v} has no unit; expected {RATE_LIMIT_FORMS}"
                )))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A rate limit made concrete for one burst: a message size and (for `%`) a link rate applied.
///
/// Both views are kept because the pacer works in messages and the metrics in bytes. The fields
/// are private so that every value in circulation is positive and finite (checked once, here).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ResolvedRate {
    messages_per_second: f64,
    bytes_per_second: f64,
}

impl ResolvedRate {
    /// A rate of `messages_per_second` messages of `message_size` bytes.
    pub fn from_messages_per_second(
        messages_per_second: f64,
        message_size: u64,
    ) -> Result<Self, ResolveError> {
        if message_size == 0 {
            return Err(ResolveError::ZeroMessageSize);
        }
        Self::checked(
            messages_per_second,
            messages_per_second * message_size as f64,
        )
    }

    /// A rate of `bytes_per_second` payload bytes in messages of `message_size` bytes.
    pub fn from_bytes_per_second(
        bytes_per_second: f64,
        message_size: u64,
    ) -> Result<Self, ResolveError> {
        if message_size == 0 {
            return Err(ResolveError::ZeroMessageSize);
        }
        Self::checked(bytes_per_second / message_size as f64, bytes_per_second)
    }

    fn checked(messages_per_second: f64, bytes_per_second: f64) -> Result<Self, ResolveError> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if ok(messages_per_second) && ok(bytes_per_second) {
            Ok(Self {
                messages_per_second,
                bytes_per_second,
            })
        } else {
            Err(ResolveError::Unusable {
                messages_per_second,
                bytes_per_second,
            })
        }
    }

    /// Messages (RDMA WRITE work requests) per second; what the pacer meters.
    pub fn messages_per_second(&self) -> f64 {
        self.messages_per_second
    }

    /// Payload bytes per second; what `rdma_probe_target_bandwidth_bytes_per_second` reports.
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes_per_second
    }
}

impl RateLimit {
    /// Turns the configured limit into a concrete rate for messages of `message_size` bytes.
    ///
    /// `link_rate_bytes_per_second` is the lower link rate of both ends (docs/architecture.md,
    /// "ib_write_bw semantics"); it is only needed, and only checked, for a percentage.
    pub fn resolve(
        &self,
        message_size: u64,
        link_rate_bytes_per_second: Option<f64>,
    ) -> Result<ResolvedRate, ResolveError> {
        match *self {
            RateLimit::BitsPerSecond(bits) => {
                ResolvedRate::from_bytes_per_second(bits / 8.0, message_size)
            }
            RateLimit::BytesPerSecond(bytes) => {
                ResolvedRate::from_bytes_per_second(bytes, message_size)
            }
            RateLimit::MessagesPerSecond(msgs) => {
                ResolvedRate::from_messages_per_second(msgs, message_size)
            }
            RateLimit::PercentOfLink(percent) => {
                let link =
                    link_rate_bytes_per_second.ok_or_else(|| ResolveError::LinkRateUnknown {
                        limit: self.to_string(),
                    })?;
                if !(link.is_finite() && link > 0.0) {
                    return Err(ResolveError::InvalidLinkRate(link));
                }
                ResolvedRate::from_bytes_per_second(link * percent / 100.0, message_size)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Durations

/// Parses a human duration (`500ms`, `3s`, `1m 30s`, `2h`) via humantime, with an error that
/// names the input. Zero is allowed here (e.g. "no jitter"); see [`parse_positive_duration`].
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    humantime::parse_duration(input.trim()).map_err(|e| UnitError::InvalidDuration {
        input: input.to_owned(),
        reason: e.to_string(),
    })
}

/// Like [`parse_duration`] but refuses zero, for intervals, timeouts and burst lengths where zero
/// would mean "spin forever" or "never finish".
pub fn parse_positive_duration(input: &str) -> Result<Duration, UnitError> {
    let d = parse_duration(input)?;
    if d.is_zero() {
        return Err(UnitError::ZeroDuration {
            input: input.to_owned(),
        });
    }
    Ok(d)
}

/// `#[serde(deserialize_with = "...")]` helper: a duration from a human string.
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(de::Error::custom)
}

/// `#[serde(deserialize_with = "...")]` helper: a non-zero duration from a human string.
pub fn deserialize_positive_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_positive_duration(&s).map_err(de::Error::custom)
}

#[cfg(test)]
mod tests;
