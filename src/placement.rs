//! Where a device's burst thread and its buffers run: on the NUMA node of the NIC, when the
//! platform says which (docs/architecture.md, "NUMA placement").
//!
//! A burst moves every byte between the NIC and the buffers, and its thread polls the NIC's
//! completion queue: on a multi-socket host both belong on the socket the NIC hangs off, or
//! every DMA and every poll crosses the inter-socket link. The decision ([`decide`]) is pure:
//! the device's `numa_node` (sysfs: -1, no node, on VMs and single-socket hosts), the node's
//! CPUs, and the CPUs this process may use (its affinity: a container's cpuset, `taskset`).
//! Applying it pins the burst thread to those CPUs for good, and the thread that registers a
//! session's memory for the registration only: registering pins the pages, and the kernel
//! allocates a page on the node of the CPU that first touches it, so the buffers land on the
//! NIC's node too (best effort: memory the allocator hands out again keeps the node it has).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use thiserror::Error;

use crate::port::Sysfs;

/// Why a device's work is not placed on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anywhere {
    /// sysfs gives no NUMA node for the device (-1, or no PCI function: a software device).
    NoNumaNode,
    /// The node's CPU list is missing or empty (a memory-only node).
    NoCpusOnNode { node: u32 },
    /// None of the node's CPUs is one this process may run on.
    NoAllowedCpuOnNode { node: u32 },
}

/// Where a device's burst thread and buffers go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On `cpus`, the CPUs of NUMA node `node` this process may use (sorted, at least one).
    Node { node: u32, cpus: Arc<[usize]> },
    /// Wherever the scheduler puts them.
    Anywhere(Anywhere),
}

impl Placement {
    /// The CPUs to run on, if any.
    pub fn cpus(&self) -> Option<&[usize]> {
        match self {
            Placement::Node { cpus, .. } => Some(cpus),
            Placement::Anywhere(_) => None,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Node { node, cpus } => {
                write!(f, "NUMA node {node}, CPUs {}", format_cpu_list(cpus))
            }
            Placement::Anywhere(Anywhere::NoNumaNode) => f.write_str("no NUMA node"),
            Placement::Anywhere(Anywhere::NoCpusOnNode { node }) => {
                write!(f, "NUMA node {node} has no CPUs")
            }
            Placement::Anywhere(Anywhere::NoAllowedCpuOnNode { node }) => {
                write!(
                    f,
                    "none of NUMA node {node}'s CPUs is allowed to this process"
                )
            }
        }
    }
}

/// The placement of a device on NUMA node `numa_node` (`None`: none known) whose CPUs are
/// `node_cpus` (`None`: unreadable), for a process allowed on `allowed`.
pub fn decide(numa_node: Option<u32>, node_cpus: Option<&[usize]>, allowed: &[usize]) -> Placement {
    let Some(node) = numa_node else {
        return Placement::Anywhere(Anywhere::NoNumaNode);
    };
    let node_cpus = node_cpus.unwrap_or_default();
    if node_cpus.is_empty() {
        return Placement::Anywhere(Anywhere::NoCpusOnNode { node });
    }
    let mut cpus: Vec<usize> = node_cpus
        .iter()
        .copied()
        .filter(|c| allowed.contains(c))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return Placement::Anywhere(Anywhere::NoAllowedCpuOnNode { node });
    }
    Placement::Node {
        node,
        cpus: cpus.into(),
    }
}

/// The kernel's CPU list format (`cpulist`, `Cpus_allowed_list`): `0-3,8,10-11`; empty for an
/// empty list, `None` for anything else.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let cpu = part.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        // A range wider than any machine is a corrupt file, not 2^64 CPUs to list.
        if last < first || last - first > 1 << 16 {
            return None;
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// `0-3,8,10-11` for a sorted list.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// The placement of `device` on this host: its NUMA node from sysfs, that node's CPUs, and
/// this process's affinity. Reads a few small files; never fails (an unreadable fact places
/// nothing).
pub fn for_device(sysfs: &Sysfs, device: &str) -> Placement {
    for_device_allowed(sysfs, device, &allowed_cpus().unwrap_or_default())
}

/// [`for_device`] for a process allowed on `allowed`.
fn for_device_allowed(sysfs: &Sysfs, device: &str, allowed: &[usize]) -> Placement {
    let numa_node = sysfs
        .device(device)
        .ok()
        .and_then(|d| d.pci)
        .and_then(|p| p.numa_node);
    let node_cpus = numa_node.and_then(|node| node_cpus(sysfs.root(), node));
    decide(numa_node, node_cpus.as_deref(), allowed)
}

/// `<root>/devices/system/node/node<N>/cpulist`.
fn node_cpus(root: &Path, node: u32) -> Option<Vec<usize>> {
    let path = root
        .join("devices/system/node")
        .join(format!("node{node}"))
        .join("cpulist");
    parse_cpu_list(&std::fs::read_to_string(path).ok()?)
}

/// Why a thread could not be placed.
#[derive(Debug, Error)]
pub enum PlacementError {
    #[error("CPU {cpu} is beyond the affinity mask this build supports")]
    CpuOutOfRange { cpu: usize },
    #[error("setting the thread's CPU affinity: {0}")]
    Affinity(#[from] nix::Error),
}

/// The CPUs the calling thread may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, PlacementError> {
    let set = sched_getaffinity(Pid::from_raw(0))?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Restricts the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> Result<(), PlacementError> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .map_err(|_| PlacementError::CpuOutOfRange { cpu })?;
    }
    sched_setaffinity(Pid::from_raw(0), &set)?;
    Ok(())
}

/// Runs `f` on the calling thread restricted to `cpus` (nothing changes for `None`), and gives
/// the thread its CPUs back afterwards: for work on a shared blocking thread, such as
/// registering a session's memory, that must happen on a device's node.
pub fn with_cpus<T>(cpus: Option<&[usize]>, f: impl FnOnce() -> T) -> T {
    let Some(cpus) = cpus else {
        return f();
    };
    let before = allowed_cpus();
    if let Err(e) = pin_current_thread(cpus) {
        tracing::debug!(error = %e, "could not place the thread on the device's node");
        return f();
    }
    let result = f();
    if let Ok(before) = before {
        if let Err(e) = pin_current_thread(&before) {
            tracing::warn!(error = %e, "could not give a blocking thread its CPUs back");
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3,1-2,2"), Some(vec![1, 2, 3]));
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "0-99999999999"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad}");
        }
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[]), "");
    }

    #[test]
    fn a_device_without_a_numa_node_stays_where_the_scheduler_puts_it() {
        // sysfs numa_node -1 (the lab's VMs, single-socket hosts): no placement at all.
        let allowed: Vec<usize> = (0..8).collect();
        assert_eq!(
            decide(None, Some(&[0, 1]), &allowed),
            Placement::Anywhere(Anywhere::NoNumaNode)
        );
        assert_eq!(decide(None, None, &allowed).cpus(), None);
    }

    #[test]
    fn a_device_on_a_node_runs_on_the_allowed_cpus_of_that_node() {
        let node1: Vec<usize> = (16..32).chain(48..64).collect();
        let all: Vec<usize> = (0..64).collect();
        let p = decide(Some(1), Some(&node1), &all);
        assert_eq!(p.cpus(), Some(&node1[..]));
        assert_eq!(p.to_string(), "NUMA node 1, CPUs 16-31,48-63");
        // A container limited to CPUs 20-23 and 40-43: only those of node 1.
        let cpuset: Vec<usize> = (20..24).chain(40..44).collect();
        assert_eq!(
            decide(Some(1), Some(&node1), &cpuset).cpus(),
            Some(&[20, 21, 22, 23][..])
        );
        // None of the node's CPUs allowed, or a node without CPUs: left alone.
        assert_eq!(
            decide(Some(1), Some(&node1), &[0, 1]),
            Placement::Anywhere(Anywhere::NoAllowedCpuOnNode { node: 1 })
        );
        assert_eq!(
            decide(Some(2), Some(&[]), &all),
            Placement::Anywhere(Anywhere::NoCpusOnNode { node: 2 })
        );
        assert_eq!(
            decide(Some(2), None, &all),
            Placement::Anywhere(Anywhere::NoCpusOnNode { node: 2 })
        );
    }

    fn fixture(tree: &str) -> Sysfs {
        Sysfs::new(
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sysfs")
                .join(tree),
        )
    }

    #[test]
    fn devices_are_placed_from_their_sysfs() {
        let all: Vec<usize> = (0..64).collect();
        let two_sockets = fixture("mlx5-roce");
        assert_eq!(
            for_device_allowed(&two_sockets, "mlx5_0", &all).to_string(),
            "NUMA node 0, CPUs 0-15,32-47"
        );
        assert_eq!(
            for_device_allowed(&two_sockets, "mlx5_1", &all).to_string(),
            "NUMA node 1, CPUs 16-31,48-63"
        );
        // Soft-RoCE has no PCI function of its own: nothing to place (the lab's case).
        assert_eq!(
            for_device_allowed(&fixture("rxe"), "rxe0", &all),
            Placement::Anywhere(Anywhere::NoNumaNode)
        );
        // No such device: nothing to place, no error.
        assert_eq!(
            for_device_allowed(&two_sockets, "mlx5_9", &all),
            Placement::Anywhere(Anywhere::NoNumaNode)
        );
        // The InfiniBand tree names node 1 but has no node directory: left alone.
        assert_eq!(
            for_device_allowed(&fixture("mlx5-ib"), "mlx5_0", &all),
            Placement::Anywhere(Anywhere::NoCpusOnNode { node: 1 })
        );
    }

    #[test]
    fn a_placed_call_runs_on_the_given_cpus_and_gives_them_back() {
        let before = allowed_cpus().expect("this thread's affinity");
        let first = before[0];
        // On a real thread of this test: pinned during the call, restored after it.
        std::thread::spawn(move || {
            let inside = with_cpus(Some(&[first]), || allowed_cpus().unwrap());
            assert_eq!(inside, [first]);
            assert_eq!(allowed_cpus().unwrap(), before);
            // None changes nothing.
            assert_eq!(with_cpus(None, || allowed_cpus().unwrap()), before);
        })
        .join()
        .unwrap();
    }
}
