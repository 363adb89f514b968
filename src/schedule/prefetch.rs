//! A cache hint for callers that keep many schedulers (the cluster simulation).

/// The cache line of the CPUs this is tuned for (x86-64, and most others).
pub const CACHE_LINE: usize = 64;

/// Asks the CPU to start loading the cache line that holds `value`, without waiting for it. A
/// hint only: it changes no result, and it is a no-op where the target has no prefetch.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    ))]
    safe_arch::prefetch_t0(value);
    #[cfg(not(all(
        any(target_arch = "x86", target_arch = "x86_64"),
        target_feature = "sse"
    )))]
    let _ = value;
}
