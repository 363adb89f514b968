//! perftest's out-of-band messages, encoded and parsed without I/O (docs/perftest.md, "Wire
//! protocol"): the version string, the system data, the MTU, the text key message with or
//! without a GID, the report and the closing word. Every parse checks its input: a server's
//! malformed message is a [`WireError`], never a panic.

use thiserror::Error;

/// `char version[16]`, NUL-padded.
pub const VERSION_LEN: usize = 16;
/// Key message without a GID: 58 characters and a NUL (`KEY_MSG_SIZE`).
pub const KEY_MSG_SIZE: usize = 59;
/// Key message with a GID: 107 characters and a NUL (`KEY_MSG_SIZE_GID`).
pub const KEY_MSG_SIZE_GID: usize = 108;
/// The MTU message of peers at 5.31 and later: the `enum ibv_mtu` in decimal and a NUL.
pub const MTU_MSG_SIZE: usize = 2;
/// Each report field (size, iterations, peak, average, message rate) is 8 bytes big-endian.
pub const REPORT_FIELDS: usize = 5;
/// What each side writes after the closing handshake, before it closes the socket.
pub const DONE_MSG: &[u8; 5] = b"done\0";
/// The version this client advertises: the one whose protocol it speaks (perftest 6.06, as in
/// Debian 12). Servers from 6.29 on skip parameter negotiation with peers below 6.28.
pub const ADVERTISED_VERSION: &str = "6.06";
/// perftest refuses peers older than this (`check_version_compatibility`).
pub const MIN_VERSION: f64 = 5.70;
/// The one version that negotiates parameters with every peer, in a binary structure this client
/// does not speak: 6.28, in hundredths (versions have two decimals).
pub const NEGOTIATING_VERSION_HUNDREDTHS: f64 = 628.0;

/// A malformed or incompatible message from the server.
#[derive(Debug, Error, PartialEq)]
pub enum WireError {
    #[error("the server's version field is not a perftest version: {0:?}")]
    BadVersion(String),
    #[error(
        "the server runs perftest {0}, older than 5.70 (perftest itself refuses peers across that gap)"
    )]
    VersionTooOld(String),
    #[error(
        "the server runs perftest {0}, which always negotiates test parameters in a binary structure \
         this client does not speak; use a server of another version (docs/perftest.md)"
    )]
    NegotiationRequired(String),
    #[error("malformed key message from the server ({problem}): {text:?}")]
    BadKey { problem: String, text: String },
    #[error("malformed MTU message from the server: {0:?}")]
    BadMtu(String),
}

/// The server's perftest version as it sent it, and its numeric value (perftest compares
/// versions with `atof`).
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub text: String,
    pub value: f64,
}

/// Our version message.
pub fn encode_version(version: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    let bytes = version.as_bytes();
    let n = bytes.len().min(VERSION_LEN - 1);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

/// Parses the server's version and checks that this client can speak to it.
pub fn parse_version(raw: &[u8; VERSION_LEN]) -> Result<Version, WireError> {
    // Escaped like every other text from a peer: it reaches the terminal (errors, the report)
    // and the logs, and a version is digits and dots whatever else a server sends.
    let text = crate::control::message::escape_unsafe_chars(&c_string(raw)).into_owned();
    let value = leading_number(&text).ok_or_else(|| WireError::BadVersion(text.clone()))?;
    if value < MIN_VERSION - 1e-9 {
        return Err(WireError::VersionTooOld(text));
    }
    if (value * 100.0 - NEGOTIATING_VERSION_HUNDREDTHS).abs() < 1e-6 {
        return Err(WireError::NegotiationRequired(text));
    }
    Ok(Version { text, value })
}

/// `atof`'s reading of a version: the leading `digits[.digits]`.
fn leading_number(text: &str) -> Option<f64> {
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (c == '.' && i > 0)))
        .map_or(text.len(), |(i, _)| i);
    let number = &text[..end];
    if number.is_empty() || !number.as_bytes()[0].is_ascii_digit() {
        return None;
    }
    number.parse().ok()
}

/// The text before the first NUL (lossy: a server's garbage is shown, not trusted).
fn c_string(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// A 32-bit system value (`cycle_buffer`, `cache_line_size`), big-endian.
pub fn encode_i32(value: i32) -> [u8; 4] {
    value.to_be_bytes()
}

pub fn decode_i32(raw: [u8; 4]) -> i32 {
    i32::from_be_bytes(raw)
}

/// Our MTU message: `enum ibv_mtu` (1 = 256 … 5 = 4096) in decimal.
pub fn encode_mtu(code: u8) -> [u8; MTU_MSG_SIZE] {
    [b'0' + code.min(9), 0]
}

/// The server's MTU code (1..=5).
pub fn parse_mtu(raw: [u8; MTU_MSG_SIZE]) -> Result<u8, WireError> {
    match raw {
        [d @ b'1'..=b'5', 0] => Ok(d - b'0'),
        _ => Err(WireError::BadMtu(
            String::from_utf8_lossy(&raw).into_owned(),
        )),
    }
}

/// One QP's connection data (`struct pingpong_dest` as perftest prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    /// `Some` in the GID form (RoCE, or InfiniBand with a GID index on both sides).
    pub gid: Option<[u8; 16]>,
    pub srqn: u32,
}

impl Key {
    /// The message size of this key's form.
    pub fn message_size(with_gid: bool) -> usize {
        if with_gid {
            KEY_MSG_SIZE_GID
        } else {
            KEY_MSG_SIZE
        }
    }

    /// The fixed-size message: `%04x:%04x:%06x:%06x:%08x:%016llx:` then 16 `%02x:` GID bytes and
    /// `%08x:` (GID form), or `%08x` (no GID), NUL-terminated.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        match self.gid {
            Some(gid) => {
                for b in gid {
                    text.push_str(&format!("{b:02x}:"));
                }
                text.push_str(&format!("{:08x}:", self.srqn));
            }
            None => text.push_str(&format!("{:08x}", self.srqn)),
        }
        let mut out = text.into_bytes();
        out.resize(Key::message_size(self.gid.is_some()), 0);
        out
    }

    /// Parses the server's key message of the form `with_gid` says (both sides must use the
    /// same form; see docs/perftest.md).
    pub fn parse(raw: &[u8], with_gid: bool) -> Result<Key, WireError> {
        let text = c_string(raw);
        let bad = |problem: &str| WireError::BadKey {
            problem: problem.to_owned(),
            text: text.clone(),
        };
        if raw.len() != Key::message_size(with_gid) || !raw.contains(&0) {
            return Err(bad(if with_gid {
                "not a NUL-terminated 108-byte GID key"
            } else {
                "not a NUL-terminated 59-byte key: does the server use a GID (-x) where we do not?"
            }));
        }
        let mut fields: Vec<&str> = text.split(':').collect();
        let expected = if with_gid { 23 } else { 7 };
        if with_gid && fields.last() == Some(&"") {
            fields.pop();
        }
        if fields.len() != expected {
            return Err(bad(&format!(
                "{} fields instead of {expected}",
                fields.len()
            )));
        }
        let hex = |i: usize, name: &str, max: u64| -> Result<u64, WireError> {
            u64::from_str_radix(fields[i], 16)
                .ok()
                .filter(|&v| v <= max)
                .ok_or_else(|| bad(&format!("{name} {:?}", fields[i])))
        };
        let gid = if with_gid {
            let mut gid = [0u8; 16];
            for (k, b) in gid.iter_mut().enumerate() {
                *b = hex(6 + k, "GID byte", 0xff)? as u8;
            }
            Some(gid)
        } else {
            None
        };
        Ok(Key {
            lid: hex(0, "LID", 0xffff)? as u16,
            out_reads: hex(1, "out_reads", 0xffff)? as u16,
            qpn: hex(2, "QPN", 0xff_ffff)? as u32,
            psn: hex(3, "PSN", 0xff_ffff)? as u32,
            rkey: hex(4, "rkey", u64::from(u32::MAX))? as u32,
            vaddr: hex(5, "vaddr", u64::MAX)?,
            gid,
            srqn: hex(expected - 1, "SRQN", u64::from(u32::MAX))? as u32,
        })
    }
}

/// Whether a GID is IPv4-mapped (`::ffff:a.b.c.d`): perftest requires both ends to agree.
pub fn is_v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// The figures the client sends after the test; the server prints them as its report, in its
/// own units (MiB/s by default, Gb/s with `--report_gbits`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Million messages per second.
    pub msg_rate: f64,
}

impl Report {
    /// The five 8-byte fields in exchange order, big-endian (perftest byte-swaps doubles too).
    pub fn encode(&self) -> [[u8; 8]; REPORT_FIELDS] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_be_bytes(),
            self.bw_avg.to_be_bytes(),
            self.msg_rate.to_be_bytes(),
        ]
    }

    pub fn decode(fields: [[u8; 8]; REPORT_FIELDS]) -> Report {
        Report {
            size: u64::from_be_bytes(fields[0]),
            iters: u64::from_be_bytes(fields[1]),
            bw_peak: f64::from_be_bytes(fields[2]),
            bw_avg: f64::from_be_bytes(fields[3]),
            msg_rate: f64::from_be_bytes(fields[4]),
        }
    }
}

/// `enum ibv_mtu` code of an MTU in bytes (256 → 1 … 4096 → 5).
pub fn mtu_code(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The MTU in bytes of an `enum ibv_mtu` code.
pub fn mtu_bytes(code: u8) -> Option<u32> {
    (1..=5).contains(&code).then(|| 128u32 << code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(gid: Option<[u8; 16]>) -> Key {
        Key {
            lid: 0,
            out_reads: 1,
            qpn: 0x108,
            psn: 0x63ad7d,
            rkey: 0x17eedf,
            vaddr: 0x7f76_0c94_7000,
            gid,
            srqn: 0,
        }
    }

    const V4_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0xff, 0xff, 5];

    #[test]
    fn gid_key_matches_perftests_text() {
        let raw = key(Some(V4_GID)).encode();
        assert_eq!(raw.len(), KEY_MSG_SIZE_GID);
        let text = "0000:0001:000108:63ad7d:0017eedf:00007f760c947000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:ff:ff:05:00000000:";
        assert_eq!(&raw[..text.len()], text.as_bytes());
        assert_eq!(raw[text.len()], 0);
        assert_eq!(Key::parse(&raw, true), Ok(key(Some(V4_GID))));
    }

    #[test]
    fn plain_key_matches_perftests_text() {
        let raw = key(None).encode();
        assert_eq!(raw.len(), KEY_MSG_SIZE);
        assert_eq!(
            &raw[..58],
            b"0000:0001:000108:63ad7d:0017eedf:00007f760c947000:00000000"
        );
        assert_eq!(Key::parse(&raw, false), Ok(key(None)));
    }

    #[test]
    fn malformed_keys_are_errors_not_panics() {
        let gid = key(Some(V4_GID)).encode();
        // The wrong form: the first 59 bytes of a GID key hold no NUL.
        assert!(matches!(
            Key::parse(&gid[..59], false),
            Err(WireError::BadKey { .. })
        ));
        let mut bad = gid.clone();
        bad[0] = b'z';
        assert!(matches!(
            Key::parse(&bad, true),
            Err(WireError::BadKey { .. })
        ));
        let mut short = b"0000:0001".to_vec();
        short.resize(KEY_MSG_SIZE_GID, 0);
        assert!(matches!(
            Key::parse(&short, true),
            Err(WireError::BadKey { .. })
        ));
        let mut big_qpn = b"0000:0001:1000000:000000:00000000:0000000000000000:00000000".to_vec();
        big_qpn.resize(KEY_MSG_SIZE, 0);
        assert!(Key::parse(&big_qpn[..KEY_MSG_SIZE], false).is_err());
        assert!(Key::parse(&[0xffu8; KEY_MSG_SIZE_GID], true).is_err());
        assert!(Key::parse(&[], true).is_err());
    }

    #[test]
    fn versions_are_read_as_atof_reads_them() {
        let v = parse_version(&encode_version("6.06")).unwrap();
        assert_eq!(v.text, "6.06");
        assert!((v.value - 6.06).abs() < 1e-9);
        assert!(parse_version(&encode_version("6.29")).is_ok());
        assert!(parse_version(&encode_version("5.70")).is_ok());
        assert!(matches!(
            parse_version(&encode_version("5.6")),
            Err(WireError::VersionTooOld(_))
        ));
        assert!(matches!(
            parse_version(&encode_version("6.28")),
            Err(WireError::NegotiationRequired(_))
        ));
        assert!(matches!(
            parse_version(&[0u8; VERSION_LEN]),
            Err(WireError::BadVersion(_))
        ));
        assert!(matches!(
            parse_version(&encode_version("GET / HTTP")),
            Err(WireError::BadVersion(_))
        ));
        assert_eq!(&encode_version(ADVERTISED_VERSION)[..5], b"6.06\0");
    }

    #[test]
    fn mtu_and_report_codecs() {
        assert_eq!(encode_mtu(5), *b"5\0");
        assert_eq!(parse_mtu(*b"3\0"), Ok(3));
        assert!(parse_mtu(*b"9\0").is_err());
        assert!(parse_mtu(*b"55").is_err());
        assert_eq!(mtu_code(1024), Some(3));
        assert_eq!(mtu_bytes(5), Some(4096));
        assert_eq!(mtu_bytes(0), None);
        let r = Report {
            size: 65536,
            iters: 500,
            bw_peak: 0.0,
            bw_avg: 1234.5,
            msg_rate: 0.019,
        };
        let fields = r.encode();
        assert_eq!(fields[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(Report::decode(fields), r);
        assert_eq!(decode_i32(encode_i32(4096)), 4096);
        assert_eq!(encode_i32(64), [0, 0, 0, 64]);
        assert!(is_v4_mapped(&V4_GID));
        assert!(!is_v4_mapped(&[
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1
        ]));
    }

    #[test]
    fn a_version_with_terminal_controls_reaches_no_terminal_raw() {
        let mut raw = [0u8; VERSION_LEN];
        let evil = "5.0\u{1b}[2J\u{202e}";
        raw[..evil.len()].copy_from_slice(evil.as_bytes());
        let err = parse_version(&raw).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, WireError::VersionTooOld(_)), "{text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("5.0\\u{1b}[2J\\u{202e}"), "{text}");
        // An accepted version keeps its escaped text for the report.
        let mut raw = [0u8; VERSION_LEN];
        let odd = "6.06\r\n";
        raw[..odd.len()].copy_from_slice(odd.as_bytes());
        let version = parse_version(&raw).unwrap();
        assert_eq!(version.text, "6.06\\u{d}\\u{a}");
        assert!((version.value - 6.06).abs() < 1e-9);
    }
}
