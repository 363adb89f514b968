//! Unit tests of the parsers: every accepted form, every refusal, and `Display` round trips.

use super::*;
use proptest::prelude::*;

fn size(s: &str) -> u64 {
    s.parse::<ByteSize>().unwrap().0
}

#[test]
fn byte_sizes() {
    assert_eq!(size("65536"), 65536);
    assert_eq!(size("64K"), 65536);
    assert_eq!(size("64k"), 65536);
    assert_eq!(size("64KiB"), 65536);
    assert_eq!(size("64 kib"), 65536);
    assert_eq!(size("64KB"), 64_000);
    assert_eq!(size("1M"), 1 << 20);
    assert_eq!(size("256MiB"), 256 << 20);
    assert_eq!(size("1G"), 1 << 30);
    assert_eq!(size("2GB"), 2_000_000_000);
    assert_eq!(size("1.5KiB"), 1536);
    assert_eq!(size("0.5K"), 512);
    assert_eq!(size("512B"), 512);
    assert_eq!(size("1TiB"), 1 << 40);
    assert_eq!(
        size(" 0 "),
        0,
        "zero is a size; callers decide if it is allowed"
    );
}

#[test]
fn byte_size_errors() {
    for bad in [
        "", "  ", "K", "-1", "64X", "1.3B", "1e3", "inf", "nan", "0x10", "1..2K",
    ] {
        let err = bad.parse::<ByteSize>().unwrap_err();
        let msg = err.to_string();
        assert!(!msg.is_empty(), "{bad:?}");
    }
    assert!(matches!(
        "1.3B".parse::<ByteSize>(),
        Err(UnitError::FractionalBytes { .. })
    ));
    assert!(matches!(
        "-1K".parse::<ByteSize>(),
        Err(UnitError::NotPositive { .. })
    ));
    assert!(matches!(
        "2000000TiB".parse::<ByteSize>(),
        Err(UnitError::TooLarge { .. })
    ));
    assert!(matches!(
        "99999999999999999999999999999999999".parse::<ByteSize>(),
        Err(UnitError::TooLarge { .. })
    ));
    let msg = "64X".parse::<ByteSize>().unwrap_err().to_string();
    assert!(msg.contains("KiB") && msg.contains("\"X\""), "{msg}");
}

#[test]
fn byte_size_display() {
    assert_eq!(ByteSize(65536).to_string(), "64KiB");
    assert_eq!(ByteSize(1 << 30).to_string(), "1GiB");
    assert_eq!(ByteSize(1000).to_string(), "1KB");
    assert_eq!(ByteSize(1001).to_string(), "1001B");
    assert_eq!(ByteSize(0).to_string(), "0B");
}

fn rate(s: &str) -> RateLimit {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn rate_limits() {
    assert_eq!(rate("50Mbps"), RateLimit::BitsPerSecond(50e6));
    assert_eq!(rate("10Gbps"), RateLimit::BitsPerSecond(10e9));
    assert_eq!(rate("10 gbps"), RateLimit::BitsPerSecond(10e9));
    assert_eq!(rate("10GBIT/S"), RateLimit::BitsPerSecond(10e9));
    assert_eq!(rate("2.5Gbps"), RateLimit::BitsPerSecond(2.5e9));
    assert_eq!(
        rate("1200MiB/s"),
        RateLimit::BytesPerSecond(1200.0 * 1048576.0)
    );
    assert_eq!(
        rate("1200mib/s"),
        RateLimit::BytesPerSecond(1200.0 * 1048576.0)
    );
    assert_eq!(rate("1GiB/s"), RateLimit::BytesPerSecond(1073741824.0));
    assert_eq!(rate("500MB/s"), RateLimit::BytesPerSecond(500e6));
    assert_eq!(rate("50000msg/s"), RateLimit::MessagesPerSecond(50000.0));
    assert_eq!(rate("50000 MSG/S"), RateLimit::MessagesPerSecond(50000.0));
    assert_eq!(rate("25%"), RateLimit::PercentOfLink(25.0));
    assert_eq!(rate("100%"), RateLimit::PercentOfLink(100.0));
    assert_eq!(rate("0.5%"), RateLimit::PercentOfLink(0.5));
}

#[test]
fn rate_limit_errors() {
    fn kind(e: &UnitError) -> &'static str {
        match e {
            UnitError::Empty { .. } => "empty",
            UnitError::InvalidNumber { .. } => "number",
            UnitError::NotPositive { .. } => "not_positive",
            UnitError::UnknownUnit { .. } => "unit",
            UnitError::AmbiguousUnit { .. } => "ambiguous",
            UnitError::TooLarge { .. } => "too_large",
            UnitError::PercentOutOfRange { .. } => "percent",
            _ => "other",
        }
    }
    let cases = [
        ("", "empty"),
        ("0Gbps", "not_positive"),
        ("0.0%", "not_positive"),
        ("-5Gbps", "not_positive"),
        ("0%", "not_positive"),
        ("101%", "percent"),
        ("100.001%", "percent"),
        ("NaNGbps", "number"),
        ("infGbps", "number"),
        ("1e9bps", "unit"),
        ("10", "unit"),
        ("10furlongs", "unit"),
        ("10Gb/s", "ambiguous"),
        ("10MBps", "ambiguous"),
        ("10mb/s", "ambiguous"),
        ("Gbps", "number"),
        ("1.2.3Gbps", "number"),
    ];
    for (input, expected) in cases {
        let err = input.parse::<RateLimit>().unwrap_err();
        assert_eq!(kind(&err), expected, "{input:?} gave {err:?}");
    }
    let huge = format!("{}TiB/s", "9".repeat(400));
    assert!(matches!(
        huge.parse::<RateLimit>(),
        Err(UnitError::TooLarge { .. })
    ));
    let msg = "10furlongs".parse::<RateLimit>().unwrap_err().to_string();
    for form in ["Gbps", "MiB/s", "msg/s", "%"] {
        assert!(msg.contains(form), "error should list {form}: {msg}");
    }
}

#[test]
fn rate_limit_display() {
    assert_eq!(rate("10Gbps").to_string(), "10Gbps");
    assert_eq!(rate("50Mbps").to_string(), "50Mbps");
    assert_eq!(rate("1200MiB/s").to_string(), "1200MiB/s");
    assert_eq!(rate("1GB/s").to_string(), "1GB/s");
    assert_eq!(rate("50000msg/s").to_string(), "50000msg/s");
    assert_eq!(rate("25%").to_string(), "25%");
    assert_eq!(rate("1bps").to_string(), "1bps");
}

#[test]
fn resolve() {
    let r = rate("10Gbps").resolve(65536, None).unwrap();
    assert_eq!(r.bytes_per_second(), 1.25e9);
    assert!((r.messages_per_second() - 1.25e9 / 65536.0).abs() < 1e-9);
    let r = rate("50000msg/s").resolve(4096, None).unwrap();
    assert_eq!(r.messages_per_second(), 50000.0);
    assert_eq!(r.bytes_per_second(), 50000.0 * 4096.0);
    let r = rate("1200MiB/s").resolve(1 << 20, None).unwrap();
    assert_eq!(r.messages_per_second(), 1200.0);
    let r = rate("25%").resolve(65536, Some(12.5e9)).unwrap();
    assert_eq!(r.bytes_per_second(), 3.125e9);
    let err = rate("25%").resolve(65536, None).unwrap_err();
    assert!(matches!(err, ResolveError::LinkRateUnknown { .. }));
    assert!(err.to_string().contains("25%"), "{err}");
    assert!(matches!(
        rate("25%").resolve(65536, Some(f64::NAN)),
        Err(ResolveError::InvalidLinkRate(_))
    ));
    assert!(matches!(
        rate("25%").resolve(65536, Some(0.0)),
        Err(ResolveError::InvalidLinkRate(_))
    ));
    assert_eq!(
        rate("1Gbps").resolve(0, None),
        Err(ResolveError::ZeroMessageSize)
    );
}

#[test]
fn serde_forms() {
    #[derive(Deserialize, Serialize, Debug)]
    struct C {
        size: ByteSize,
        rate: RateLimit,
        #[serde(deserialize_with = "deserialize_positive_duration", skip_serializing)]
        burst: Duration,
    }
    let c: C = serde_json::from_str(r#"{"size":"64KiB","rate":"25%","burst":"500ms"}"#).unwrap();
    assert_eq!(c.size, ByteSize(65536));
    assert_eq!(c.rate, RateLimit::PercentOfLink(25.0));
    assert_eq!(c.burst, Duration::from_millis(500));
    let c: C = serde_json::from_str(r#"{"size":65536,"rate":"10Gbps","burst":"3s"}"#).unwrap();
    assert_eq!(c.size, ByteSize(65536));
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        r#"{"size":"64KiB","rate":"10Gbps"}"#
    );
    let err = serde_json::from_str::<C>(r#"{"size":-1,"rate":"1Gbps","burst":"1s"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("negative"), "{err}");
    let err = serde_json::from_str::<C>(r#"{"size":1,"rate":10,"burst":"1s"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no unit"), "{err}");
    let err = serde_json::from_str::<C>(r#"{"size":1,"rate":"1Gbps","burst":"0s"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("greater than zero"), "{err}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration(" 3s ").unwrap(), Duration::from_secs(3));
    assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
    assert!(matches!(
        parse_positive_duration("0ms"),
        Err(UnitError::ZeroDuration { .. })
    ));
    let err = parse_duration("3 parsecs").unwrap_err();
    assert!(err.to_string().contains("3 parsecs"), "{err}");
    assert!(parse_duration("").is_err());
}

fn any_rate() -> impl Strategy<Value = RateLimit> {
    prop_oneof![
        (1e-3f64..1e15).prop_map(RateLimit::BitsPerSecond),
        (1e-3f64..1e15).prop_map(RateLimit::BytesPerSecond),
        (1u64..1u64 << 50).prop_map(|v| RateLimit::BytesPerSecond(v as f64)),
        (1e-3f64..1e12).prop_map(RateLimit::MessagesPerSecond),
        (1e-6f64..=100.0).prop_map(RateLimit::PercentOfLink),
    ]
}

proptest! {
    #[test]
    fn byte_size_display_round_trips(n in 0u64..=MAX_BYTE_SIZE) {
        let s = ByteSize(n).to_string();
        prop_assert_eq!(s.parse::<ByteSize>().unwrap(), ByteSize(n), "{}", s);
    }

    #[test]
    fn byte_size_units_multiply(n in 0u64..1 << 20, unit in 0usize..6) {
        let (name, mult) = [("K", 1u64 << 10), ("MiB", 1 << 20), ("g", 1 << 30),
            ("KB", 1000), ("mb", 1_000_000), ("", 1)][unit];
        prop_assert_eq!(format!("{n}{name}").parse::<ByteSize>().unwrap().0, n * mult);
    }

    #[test]
    fn rate_display_round_trips(r in any_rate()) {
        let s = r.to_string();
        prop_assert_eq!(s.parse::<RateLimit>().unwrap(), r, "{}", s);
    }

    #[test]
    fn resolved_rates_are_positive_and_finite(
        r in any_rate(),
        size in 1u64..=1 << 30,
        link in proptest::option::of(1e3f64..1e13),
    ) {
        match r.resolve(size, link) {
            Ok(rr) => {
                prop_assert!(rr.messages_per_second().is_finite());
                prop_assert!(rr.messages_per_second() > 0.0);
                prop_assert!(rr.bytes_per_second().is_finite());
                prop_assert!(rr.bytes_per_second() > 0.0);
            }
            Err(ResolveError::LinkRateUnknown { .. }) => {
                prop_assert!(matches!(r, RateLimit::PercentOfLink(_)));
                prop_assert!(link.is_none());
            }
            Err(e) => prop_assert!(false, "{r} size {size}: {e}"),
        }
    }

    #[test]
    fn parsing_never_panics(s in "\\PC{0,24}") {
        let _ = s.parse::<RateLimit>();
        let _ = s.parse::<ByteSize>();
        let _ = parse_duration(&s);
    }

    #[test]
    fn parsing_never_panics_near_misses(
        num in "[-+]?[0-9.]{0,12}",
        sp in " ?",
        unit in "(%|[kKmMgGtT]?[iI]?([bB]ps|[bB]/s|bit/s)|msg/s|[kKmMgG][bB]?|[bB]|xyz)",
    ) {
        let s = format!("{num}{sp}{unit}");
        if let Ok(r) = s.parse::<RateLimit>() {
            let ok = match r {
                RateLimit::BitsPerSecond(v) | RateLimit::BytesPerSecond(v)
                | RateLimit::MessagesPerSecond(v) => v > 0.0 && v.is_finite(),
                RateLimit::PercentOfLink(p) => p > 0.0 && p <= 100.0,
            };
            prop_assert!(ok, "{} -> {:?}", s, r);
        }
        let _ = s.parse::<ByteSize>();
    }
}
