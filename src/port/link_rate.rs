//! The port's `rate` file: "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "200 Gb/sec (4X HDR)".
//!
//! The kernel prints width × per-lane signalling rate (4X QDR = "40 Gb/sec", 4X FDR =
//! "56 Gb/sec"), and for a speed code it does not know it prints SDR; for a width it does not
//! know the read fails. Old kernels print SDR without a name ("10 Gb/sec (4X)"). A speed name
//! this build does not know is kept as text ([`LinkSpeed::Other`]), never an error.

use std::fmt;

use serde::{Serialize, Serializer};

/// Per-lane speed generation as the `rate` file names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LinkSpeed {
    Sdr,
    Ddr,
    Qdr,
    Fdr10,
    Fdr,
    Edr,
    Hdr,
    Ndr,
    Xdr,
    /// A name this build does not know (a newer generation).
    Other(String),
}

impl LinkSpeed {
    pub fn from_name(name: &str) -> Self {
        match name {
            "SDR" => LinkSpeed::Sdr,
            "DDR" => LinkSpeed::Ddr,
            "QDR" => LinkSpeed::Qdr,
            "FDR10" => LinkSpeed::Fdr10,
            "FDR" => LinkSpeed::Fdr,
            "EDR" => LinkSpeed::Edr,
            "HDR" => LinkSpeed::Hdr,
            "NDR" => LinkSpeed::Ndr,
            "XDR" => LinkSpeed::Xdr,
            other => LinkSpeed::Other(other.to_owned()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            LinkSpeed::Sdr => "SDR",
            LinkSpeed::Ddr => "DDR",
            LinkSpeed::Qdr => "QDR",
            LinkSpeed::Fdr10 => "FDR10",
            LinkSpeed::Fdr => "FDR",
            LinkSpeed::Edr => "EDR",
            LinkSpeed::Hdr => "HDR",
            LinkSpeed::Ndr => "NDR",
            LinkSpeed::Xdr => "XDR",
            LinkSpeed::Other(name) => name,
        }
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for LinkSpeed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What the `rate` file says; every part the text does not give is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkRate {
    /// The file's text, trimmed ("100 Gb/sec (4X EDR)").
    pub text: String,
    /// The rate the file states, in bit/s (10^9 per "Gb").
    pub bits_per_second: Option<u64>,
    /// Active lanes: 4 for "4X".
    pub lanes: Option<u32>,
    /// Per-lane speed: EDR for "4X EDR".
    pub speed: Option<LinkSpeed>,
}

impl LinkRate {
    /// Decodes a `rate` text; never fails (parts it cannot read are `None`).
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        let bits_per_second = text
            .split_once(" Gb/sec")
            .and_then(|(number, _)| scaled_decimal(number.trim(), 1_000_000_000));
        let inside = text
            .split_once('(')
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(inside, _)| inside.trim());
        let (lanes, speed) = match inside {
            Some(inside) => {
                let mut words = inside.split_whitespace();
                let lanes = words
                    .next()
                    .and_then(|w| w.strip_suffix('X'))
                    .and_then(|n| n.parse().ok());
                // "(4X)" without a name is SDR on kernels before the name was printed.
                let speed = Some(words.next().map_or(LinkSpeed::Sdr, LinkSpeed::from_name));
                (lanes, speed)
            }
            None => (None, None),
        };
        LinkRate {
            text: text.to_owned(),
            bits_per_second,
            lanes,
            speed,
        }
    }

    /// "4X EDR", or the raw text when the width or speed is not known.
    pub fn description(&self) -> String {
        match (self.lanes, &self.speed) {
            (Some(lanes), Some(speed)) => format!("{lanes}X {speed}"),
            _ => self.text.clone(),
        }
    }
}

/// A non-negative decimal ("2.5", "100", "16.0") times `scale`, exactly, rounded down; `None`
/// for anything else or on overflow.
pub(super) fn scaled_decimal(text: &str, scale: u64) -> Option<u64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 18 {
        return None;
    }
    let whole: u128 = whole.parse().ok()?;
    let mut value = whole.checked_mul(u128::from(scale))?;
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().ok()?;
        let denominator = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        value = value.checked_add(numerator.checked_mul(u128::from(scale))? / denominator)?;
    }
    u64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_as_the_kernel_prints_them() {
        let cases = [
            ("2.5 Gb/sec (1X SDR)\n", 2_500_000_000, 1, LinkSpeed::Sdr),
            ("10 Gb/sec (4X)", 10_000_000_000, 4, LinkSpeed::Sdr),
            ("40 Gb/sec (4X QDR)", 40_000_000_000, 4, LinkSpeed::Qdr),
            ("56 Gb/sec (4X FDR)", 56_000_000_000, 4, LinkSpeed::Fdr),
            ("25 Gb/sec (1X EDR)", 25_000_000_000, 1, LinkSpeed::Edr),
            ("50 Gb/sec (2X EDR)", 50_000_000_000, 2, LinkSpeed::Edr),
            ("100 Gb/sec (4X EDR)", 100_000_000_000, 4, LinkSpeed::Edr),
            ("200 Gb/sec (4X HDR)", 200_000_000_000, 4, LinkSpeed::Hdr),
            ("400 Gb/sec (4X NDR)", 400_000_000_000, 4, LinkSpeed::Ndr),
            ("800 Gb/sec (4X XDR)", 800_000_000_000, 4, LinkSpeed::Xdr),
            ("600 Gb/sec (12X HDR)", 600_000_000_000, 12, LinkSpeed::Hdr),
        ];
        for (text, bits, lanes, speed) in cases {
            let rate = LinkRate::parse(text);
            assert_eq!(rate.bits_per_second, Some(bits), "{text}");
            assert_eq!(rate.lanes, Some(lanes), "{text}");
            assert_eq!(rate.speed, Some(speed), "{text}");
            assert_eq!(rate.text, text.trim());
        }
        assert_eq!(
            LinkRate::parse("100 Gb/sec (4X EDR)").description(),
            "4X EDR"
        );
    }

    #[test]
    fn unknown_generations_are_values_not_errors() {
        let rate = LinkRate::parse("1600 Gb/sec (8X GDR)");
        assert_eq!(rate.bits_per_second, Some(1_600_000_000_000));
        assert_eq!(rate.lanes, Some(8));
        assert_eq!(rate.speed, Some(LinkSpeed::Other("GDR".into())));
        assert_eq!(rate.description(), "8X GDR");
        for garbage in ["", "fast", "N/A", "Gb/sec", "1e3 Gb/sec (?X)"] {
            let rate = LinkRate::parse(garbage);
            assert_eq!(rate.bits_per_second, None, "{garbage}");
            assert_eq!(rate.description(), garbage.trim());
        }
        let negative = LinkRate::parse("-5 Gb/sec (4X EDR)");
        assert_eq!(negative.bits_per_second, None);
        assert_eq!(negative.description(), "4X EDR");
        let half = LinkRate::parse("12.5 Gb/sec (5X SDR)");
        assert_eq!(half.bits_per_second, Some(12_500_000_000));
        assert_eq!(half.lanes, Some(5));
    }

    #[test]
    fn scaled_decimals_are_exact() {
        assert_eq!(scaled_decimal("2.5", 1_000_000_000), Some(2_500_000_000));
        assert_eq!(scaled_decimal("16.0", 1_000_000_000), Some(16_000_000_000));
        assert_eq!(scaled_decimal("0.001", 1000), Some(1));
        assert_eq!(scaled_decimal("13.64", 1_000_000_000), Some(13_640_000_000));
        assert_eq!(scaled_decimal("99999999999999999999", 1), None);
        for bad in ["", ".5", "1.2.3", "-1", "+1", "1e9", " 1", "1,5"] {
            assert_eq!(scaled_decimal(bad, 10), None, "{bad}");
        }
    }
}
