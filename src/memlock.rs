//! Whether this process may pin the memory its limits let RDMA sessions register, checked at
//! startup so that a too-low `RLIMIT_MEMLOCK` is one clear error, not a `qp_setup` failure
//! ("failed to register memory region: Cannot allocate memory") at every session.
//!
//! The kernel counts the pages a memory registration pins against `RLIMIT_MEMLOCK` unless the
//! process holds `CAP_IPC_LOCK` (docs/deploy.md, "Memory locking"). What the process may pin is
//! bounded by its limits: the sessions it serves (at most `max_pinned` together) and the
//! sessions of the paths it probes (one warm session per path, each region within the session
//! budget). [`check`] is pure; [`Allowance::current`] reads the process's limit and capability.

use std::fmt;

use thiserror::Error;

use crate::units::ByteSize;

/// `CAP_IPC_LOCK`'s bit in the capability sets (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// What the process may pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// `RLIMIT_MEMLOCK` is unlimited.
    Unlimited,
    /// The process holds `CAP_IPC_LOCK` in its effective set: the limit does not apply.
    CapIpcLock,
    /// At most this many bytes (the soft `RLIMIT_MEMLOCK`).
    Limit(u64),
}

/// Memory a process may have to pin at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Need {
    /// Regions of the sessions it serves: its pinned-memory budget (a session larger than the
    /// session budget still gets one message's slot, so only the pinned budget bounds them).
    pub served_bytes: u64,
    /// The sessions it serves at most.
    pub served_sessions: usize,
    /// Regions of the sessions of the paths it probes, each kept warm between bursts.
    pub probed_bytes: u64,
    /// The paths it probes.
    pub probed_paths: usize,
}

impl Need {
    /// A responder serving at most `sessions` sessions, pinning at most `pinned_bytes` together.
    pub fn serving(sessions: usize, pinned_bytes: u64) -> Need {
        Need {
            served_bytes: pinned_bytes,
            served_sessions: sessions,
            ..Need::default()
        }
    }

    /// Adds the sessions of the probed paths, one region of the given size each.
    pub fn probing(self, regions: impl IntoIterator<Item = u64>) -> Need {
        let (paths, bytes) = regions
            .into_iter()
            .fold((0usize, 0u64), |(n, sum), r| (n + 1, sum.saturating_add(r)));
        Need {
            probed_bytes: bytes,
            probed_paths: paths,
            ..self
        }
    }

    pub fn total(&self) -> u64 {
        self.served_bytes.saturating_add(self.probed_bytes)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "up to {}", ByteSize(self.total()))?;
        let mut parts = Vec::new();
        if self.served_sessions > 0 {
            parts.push(format!(
                "{} for the at most {} sessions it serves",
                ByteSize(self.served_bytes),
                self.served_sessions
            ));
        }
        if self.probed_paths > 0 {
            parts.push(format!(
                "{} for the sessions of the {} {} it probes",
                ByteSize(self.probed_bytes),
                self.probed_paths,
                if self.probed_paths == 1 {
                    "path"
                } else {
                    "paths"
                }
            ));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(" and "))?;
        }
        Ok(())
    }
}

/// The limit is below what the process may pin, and it cannot exceed it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "RLIMIT_MEMLOCK is {limit} and the process lacks CAP_IPC_LOCK, but RDMA sessions may pin \
     {need}: memory registrations would fail. Fix: raise the limit (`ulimit -l unlimited` in \
     the shell that starts it; systemd: LimitMEMLOCK=infinity; a container: add the capability \
     IPC_LOCK, as the Kubernetes DaemonSet does, since Kubernetes cannot set the limit), or \
     lower {knobs} (docs/security.md, \"Memory and session limits\")",
    limit = ByteSize(*.limit)
)]
pub struct MemlockError {
    pub limit: u64,
    pub need: Need,
    /// The settings that bound the need, as the user writes them.
    pub knobs: &'static str,
}

/// `Err` when `allowance` is a limit below `need`.
pub fn check(need: Need, allowance: Allowance, knobs: &'static str) -> Result<(), MemlockError> {
    match allowance {
        Allowance::Limit(limit) if limit < need.total() => Err(MemlockError { limit, need, knobs }),
        _ => Ok(()),
    }
}

impl Allowance {
    /// This process's allowance: its soft `RLIMIT_MEMLOCK` and whether `CAP_IPC_LOCK` is in its
    /// effective set (`/proc/self/status`). Unreadable facts count as no capability, and an
    /// unreadable limit as unlimited: the check then cannot help, and registration errors still
    /// say what failed.
    pub fn current() -> Allowance {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
            .ok()
            .map(|(soft, _hard)| soft);
        Allowance::from_facts(limit, has_cap_ipc_lock(&status))
    }

    /// The allowance of a soft limit (`None` or `RLIM_INFINITY`: unlimited) and capability.
    pub fn from_facts(soft_limit: Option<u64>, cap_ipc_lock: bool) -> Allowance {
        match soft_limit {
            _ if cap_ipc_lock => Allowance::CapIpcLock,
            None => Allowance::Unlimited,
            Some(limit) if limit == nix::sys::resource::RLIM_INFINITY => Allowance::Unlimited,
            Some(limit) => Allowance::Limit(limit),
        }
    }
}

/// Whether the `CapEff:` line of a `/proc/PID/status` text has `CAP_IPC_LOCK`.
fn has_cap_ipc_lock(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const KNOBS: &str = "limits.max_pinned";

    #[test]
    fn the_capability_is_read_from_the_effective_set() {
        let status = |eff: &str| {
            format!("Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t{eff}\nCapBnd:\t000001ffffffffff\n")
        };
        assert!(has_cap_ipc_lock(&status("0000000000004000")));
        assert!(has_cap_ipc_lock(&status("000001ffffffffff")));
        assert!(!has_cap_ipc_lock(&status("0000000000000000")));
        assert!(!has_cap_ipc_lock(&status("00000000a80425fb")));
        assert!(!has_cap_ipc_lock("CapEff:\tnot hex\n"));
        assert!(!has_cap_ipc_lock(""));
    }

    #[test]
    fn allowance_from_limit_and_capability() {
        let inf = nix::sys::resource::RLIM_INFINITY;
        assert_eq!(
            Allowance::from_facts(Some(65536), true),
            Allowance::CapIpcLock
        );
        assert_eq!(
            Allowance::from_facts(Some(inf), false),
            Allowance::Unlimited
        );
        assert_eq!(Allowance::from_facts(None, false), Allowance::Unlimited);
        assert_eq!(
            Allowance::from_facts(Some(65536), false),
            Allowance::Limit(65536)
        );
    }

    #[test]
    fn the_need_is_served_budget_plus_probed_regions() {
        let need = Need::serving(16, 1 << 30).probing([64 * MIB, 20 * 65536]);
        assert_eq!(need.served_bytes, 1 << 30);
        assert_eq!(need.probed_paths, 2);
        assert_eq!(need.total(), (1 << 30) + 64 * MIB + 20 * 65536);
        assert_eq!(Need::serving(1, u64::MAX).probing([1]).total(), u64::MAX);
        assert_eq!(Need::default().probing([]).total(), 0);
    }

    #[test]
    fn a_limit_below_the_need_is_an_error_naming_limit_need_and_fix() {
        let need = Need::serving(16, 1 << 30).probing([64 * MIB; 2]);
        let err = check(need, Allowance::Limit(64 << 10), KNOBS).unwrap_err();
        let text = err.to_string();
        for part in [
            "RLIMIT_MEMLOCK is 64KiB",
            "lacks CAP_IPC_LOCK",
            "up to 1152MiB (1GiB for the at most 16 sessions it serves and 128MiB for the \
             sessions of the 2 paths it probes)",
            "ulimit -l unlimited",
            "LimitMEMLOCK=infinity",
            "IPC_LOCK",
            "lower limits.max_pinned",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        assert!(check(need, Allowance::Limit(need.total()), KNOBS).is_ok());
        assert!(check(need, Allowance::Unlimited, KNOBS).is_ok());
        assert!(check(need, Allowance::CapIpcLock, KNOBS).is_ok());
    }
}
