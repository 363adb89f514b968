//! The data-integrity pattern written by a burst and checked by the responder
//! (docs/architecture.md, "Data integrity").
//!
//! Why a keyed, position-addressed generator: the prober fills its send buffer, the responder
//! regenerates the same bytes from the per-burst seed and the QP index (the *stream*) and checks
//! what arrived, without the data ever crossing the control channel. Each 8-byte word is
//! `splitmix64(key + index · γ)`, so any byte range can be produced or checked on its own
//! ([`fill_at`]/[`verify_at`]: a region that only mirrors part of the buffer, or several threads),
//! and a mismatch is reported at its exact byte offset. Different seeds or streams give
//! unrelated data, so a write that landed in the wrong QP's region, or stale data from the
//! previous burst, does not verify. This detects corruption and misplacement; it is not a MAC
//! and is not meant to resist a forger.

/// Weyl-sequence increment of splitmix64 (2^64 / φ).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's finaliser: a bijection on u64 with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The stream key: distinct for distinct `stream`s under one seed and distinct for distinct
/// seeds under one stream (both steps are bijections).
fn key(seed: u64, stream: u32) -> u64 {
    mix(seed.wrapping_add(mix(u64::from(stream).wrapping_add(GAMMA))))
}

/// The pattern word at word index `i` of a stream.
fn word(key: u64, i: u64) -> [u8; 8] {
    mix(key.wrapping_add(i.wrapping_mul(GAMMA))).to_le_bytes()
}

/// The first byte that differs from the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("data mismatch at byte {offset}: expected {expected:#04x}, found {found:#04x}")]
pub struct Mismatch {
    /// Offset from the start of the checked slice.
    pub offset: usize,
    pub expected: u8,
    pub found: u8,
}

/// Fills `buf` with the pattern of (`seed`, `stream`) starting at stream position 0.
pub fn fill(seed: u64, stream: u32, buf: &mut [u8]) {
    fill_at(seed, stream, 0, buf);
}

/// Checks that `buf` holds the pattern of (`seed`, `stream`) from stream position 0.
pub fn verify(seed: u64, stream: u32, buf: &[u8]) -> Result<(), Mismatch> {
    verify_at(seed, stream, 0, buf)
}

/// Fills `buf` with the bytes at stream positions `offset..offset + buf.len()`.
pub fn fill_at(seed: u64, stream: u32, offset: u64, buf: &mut [u8]) {
    let key = key(seed, stream);
    let mut pos = offset;
    let mut rest = buf;
    // Unaligned head.
    let skip = (pos % 8) as usize;
    if skip != 0 {
        let w = word(key, pos / 8);
        let n = (8 - skip).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&w[skip..skip + n]);
        rest = tail;
        pos = pos.wrapping_add(n as u64);
    }
    let mut index = pos / 8;
    let mut chunks = rest.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word(key, index));
        index = index.wrapping_add(1);
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let n = tail.len();
        tail.copy_from_slice(&word(key, index)[..n]);
    }
}

/// Checks `buf` against the bytes at stream positions `offset..offset + buf.len()`.
pub fn verify_at(seed: u64, stream: u32, offset: u64, buf: &[u8]) -> Result<(), Mismatch> {
    let key = key(seed, stream);
    let compare = |at: usize, expected: &[u8], found: &[u8]| -> Result<(), Mismatch> {
        if expected == found {
            return Ok(());
        }
        let (i, (&e, &f)) = expected
            .iter()
            .zip(found)
            .enumerate()
            .find(|(_, (e, f))| e != f)
            .unwrap_or((0, (&0, &0)));
        Err(Mismatch {
            offset: at + i,
            expected: e,
            found: f,
        })
    };
    let mut pos = offset;
    let mut at = 0usize;
    let skip = (pos % 8) as usize;
    if skip != 0 {
        let w = word(key, pos / 8);
        let n = (8 - skip).min(buf.len());
        compare(0, &w[skip..skip + n], &buf[..n])?;
        at = n;
        pos = pos.wrapping_add(n as u64);
    }
    let mut index = pos / 8;
    let mut chunks = buf[at..].chunks_exact(8);
    for chunk in &mut chunks {
        compare(at, &word(key, index), chunk)?;
        at += 8;
        index = index.wrapping_add(1);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        compare(at, &word(key, index)[..tail.len()], tail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_all_small_lengths_and_offsets() {
        for len in 0..70 {
            for offset in 0..17u64 {
                let mut buf = vec![0u8; len];
                fill_at(7, 3, offset, &mut buf);
                assert_eq!(
                    verify_at(7, 3, offset, &buf),
                    Ok(()),
                    "len {len} offset {offset}"
                );
            }
        }
    }

    /// The pattern is a contract between prober and responder, which may run different
    /// versions during a rolling upgrade: these bytes must never change.
    #[test]
    fn deterministic_known_prefix() {
        let mut a = [0u8; 16];
        fill(1, 0, &mut a);
        assert_eq!(
            a,
            [
                0xfd, 0xf8, 0x07, 0xd1, 0x10, 0xfb, 0x3a, 0x94, 0xc6, 0x26, 0x2a, 0x4e, 0xf7, 0x14,
                0xd6, 0x01
            ]
        );
        // Another seed and stream, at an unaligned offset past the first page.
        let mut b = [0u8; 16];
        fill_at(42, 3, 4096 + 5, &mut b);
        assert_eq!(
            b,
            [
                0x26, 0x30, 0x4a, 0xff, 0xb4, 0xc4, 0x0c, 0x7f, 0x84, 0x3d, 0x0b, 0x66, 0x63, 0xac,
                0x88, 0x5b
            ]
        );
        assert_eq!(verify_at(42, 3, 4096 + 5, &b), Ok(()));
    }

    #[test]
    fn seeds_and_streams_differ() {
        let mut base = vec![0u8; 4096];
        fill(42, 0, &mut base);
        for (seed, stream) in [(43, 0), (42, 1), (0, 0), (42, u32::MAX)] {
            let mut other = vec![0u8; 4096];
            fill(seed, stream, &mut other);
            assert_ne!(base, other, "seed {seed} stream {stream}");
            assert!(verify(42, 0, &other).is_err());
            // Not merely different: nearly every byte differs (unrelated streams).
            let same = base.iter().zip(&other).filter(|(a, b)| a == b).count();
            assert!(same < 64, "{same} equal bytes of 4096");
        }
    }

    #[test]
    fn mismatch_reports_exact_byte() {
        let mut buf = vec![0u8; 1000];
        fill(9, 2, &mut buf);
        buf[777] ^= 0x10;
        let m = verify(9, 2, &buf).unwrap_err();
        assert_eq!(m.offset, 777);
        assert_eq!(m.found ^ m.expected, 0x10);
        assert!(m.to_string().contains("byte 777"), "{m}");
    }

    #[test]
    fn large_buffer_is_fast_enough() {
        // 16 MiB: the order of a probe's remote region. Debug builds are slow; this is a smoke
        // test that nothing is quadratic, not a benchmark.
        let mut buf = vec![0u8; 16 << 20];
        fill(5, 1, &mut buf);
        assert_eq!(verify(5, 1, &buf), Ok(()));
    }

    proptest! {
        #[test]
        fn any_corruption_is_found_at_its_offset(
            seed in any::<u64>(),
            stream in any::<u32>(),
            offset in any::<u64>(),
            len in 1usize..2000,
            pos_frac in 0.0f64..1.0,
            flip in 1u8..=255,
        ) {
            let mut buf = vec![0u8; len];
            fill_at(seed, stream, offset, &mut buf);
            prop_assert_eq!(verify_at(seed, stream, offset, &buf), Ok(()));
            let pos = ((len as f64 * pos_frac) as usize).min(len - 1);
            buf[pos] ^= flip;
            let m = verify_at(seed, stream, offset, &buf).unwrap_err();
            prop_assert_eq!(m.offset, pos);
        }

        #[test]
        fn slices_agree_with_the_whole(
            seed in any::<u64>(),
            stream in any::<u32>(),
            len in 0usize..500,
            start_frac in 0.0f64..1.0,
        ) {
            let mut whole = vec![0u8; len];
            fill(seed, stream, &mut whole);
            let start = (len as f64 * start_frac) as usize;
            let mut part = vec![0u8; len - start];
            fill_at(seed, stream, start as u64, &mut part);
            prop_assert_eq!(&whole[start..], &part[..]);
            prop_assert_eq!(verify_at(seed, stream, start as u64, &whole[start..]), Ok(()));
        }
    }
}
