//! This process's CPU time so far, read from the kernel: the `process_cpu_seconds_total` metric
//! and the prober's CPU cost of a burst both read it. A leaf module, so that `metrics` and
//! `prober` need not import each other.

use nix::sys::resource::{getrusage, UsageWho};

/// User plus system CPU time of the whole process (all threads) so far.
pub fn process_cpu_seconds() -> Option<f64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    Some(timeval_seconds(usage.user_time()) + timeval_seconds(usage.system_time()))
}

fn timeval_seconds(tv: nix::sys::time::TimeVal) -> f64 {
    tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6
}
