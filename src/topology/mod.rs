//! Where each node sits in the network, read from the Slurm `topology.conf` an HPC site already
//! keeps: its leaf switch (its ToR) and the switch above that for the tree plugin, its block for
//! the block plugin, as [`Topology`] and metric labels ([`Topology::labels`]).
//!
//! Pure: text in, data out. Reading the file, and deciding what to do with nodes the file does
//! not name, is the caller's job. [`hostlist`] expands Slurm's hostlist expressions
//! (`gpu[0001-0032,0040]`), which the file's `Nodes=` and `Switches=` use; [`slurm`] reads the
//! file. Both bound what hostile input can cost: names are counted before they are made, and
//! lines, line lengths and the names in a file are capped.

pub mod hostlist;
pub mod slurm;

#[cfg(test)]
mod tests;

pub use hostlist::{expand, HostlistError};
pub use slurm::{parse, NodePlacement, Topology, TopologyError};
