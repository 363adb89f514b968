//! The standard `process_*` metrics every Prometheus client library exports (same names, no
//! `rdma_probe_` prefix), read from the kernel at each scrape: operators compare the exporter's
//! CPU and memory with the jobs it shares the node with, with the queries they already have.

use nix::sys::resource::{getrlimit, Resource};
use nix::unistd::{sysconf, SysconfVar};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use crate::cpu_time::process_cpu_seconds;

/// What `/proc/self/stat` tells that `getrusage` does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    pub num_threads: u64,
    /// Clock ticks after boot at which the process started.
    pub start_ticks: u64,
    pub virtual_bytes: u64,
    pub resident_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses, so
/// the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<StatFields> {
    let after_name = &text[text.rfind(')')? + 1..];
    // Fields from 3 (state) on; proc(5) numbers them from 1.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(StatFields {
        num_threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The boot time (`btime`, unix seconds) from `/proc/stat`.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Unix time at which the process started.
pub fn start_time_seconds(boot_time: u64, start_ticks: u64, ticks_per_second: u64) -> f64 {
    boot_time as f64 + start_ticks as f64 / ticks_per_second.max(1) as f64
}

/// Scrape-time collector of this process's CPU, memory, threads and file descriptors. A value
/// the kernel does not give is left out of the scrape, never reported as zero.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(cpu) = process_cpu_seconds() {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent in seconds.",
                Some(&Unit::Seconds),
                counter.metric_type(),
            )?)?;
        }
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|t| parse_stat(&t));
        let ticks = sysconf(SysconfVar::CLK_TCK).ok().flatten();
        let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten();
        if let Some(stat) = stat {
            if let Some(page) = page.and_then(|p| u64::try_from(p).ok()) {
                gauge(
                    &mut encoder,
                    "process_resident_memory",
                    "Resident memory size in bytes.",
                    Some(Unit::Bytes),
                    stat.resident_pages.saturating_mul(page) as f64,
                )?;
            }
            gauge(
                &mut encoder,
                "process_virtual_memory",
                "Virtual memory size in bytes.",
                Some(Unit::Bytes),
                stat.virtual_bytes as f64,
            )?;
            gauge(
                &mut encoder,
                "process_threads",
                "Number of OS threads in the process.",
                None,
                stat.num_threads as f64,
            )?;
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_boot_time(&t));
            if let (Some(boot), Some(ticks)) = (boot, ticks.and_then(|t| u64::try_from(t).ok())) {
                gauge(
                    &mut encoder,
                    "process_start_time",
                    "Start time of the process since unix epoch in seconds.",
                    Some(Unit::Seconds),
                    start_time_seconds(boot, stat.start_ticks, ticks),
                )?;
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                None,
                dir.count() as f64,
            )?;
        }
        if let Ok((soft, _hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                None,
                soft as f64,
            )?;
        }
        Ok(())
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    gauge.encode(encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real line, with a command name that holds a space and a parenthesis.
    const STAT: &str = "4242 (rdma (probe) x) S 1 4242 4242 0 -1 4194560 2269 0 0 0 12 7 0 0 \
                        20 0 6 0 98765 1234567168 3210 18446744073709551615 1 1 0 0 0 0 0 \
                        4096 1260 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.num_threads, 6);
        assert_eq!(s.start_ticks, 98765);
        assert_eq!(s.virtual_bytes, 1234567168);
        assert_eq!(s.resident_pages, 3210);
    }

    #[test]
    fn truncated_or_garbled_stat_is_none() {
        assert_eq!(parse_stat("4242 (x) S 1 2 3"), None);
        assert_eq!(parse_stat("no parenthesis at all"), None);
        assert_eq!(parse_stat(&STAT.replace("98765", "-x-")), None);
    }

    #[test]
    fn boot_time_comes_from_the_btime_line() {
        let text = "cpu  1 2 3\nintr 5 6\nbtime 1764400000\nprocesses 77\n";
        assert_eq!(parse_boot_time(text), Some(1764400000));
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }

    #[test]
    fn start_time_adds_ticks_to_boot_time() {
        assert_eq!(start_time_seconds(1000, 250, 100), 1002.5);
        // A zero tick rate from a broken sysconf cannot divide by zero.
        assert_eq!(start_time_seconds(1000, 250, 0), 1250.0);
    }

    #[test]
    fn this_process_can_be_read() {
        let stat = parse_stat(&std::fs::read_to_string("/proc/self/stat").unwrap()).unwrap();
        assert!(stat.num_threads >= 1);
        assert!(stat.resident_pages > 0);
        let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").unwrap()).unwrap();
        assert!(boot > 1_000_000_000);
    }
}
