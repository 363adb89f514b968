//! Paced RDMA WRITE bursts: pure pacing, signaling and statistics, plus the engine that drives a QP set.

pub mod pacing;
pub mod signal;
