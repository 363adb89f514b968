//! Pings: small UD SENDs between devices, answered twice, for latency and loss between bursts.
//!
//! A burst measures bandwidth and is heavy, so a path gets one every few minutes at fleet size; a
//! ping is 48 bytes and cheap enough for every path every few seconds. The prober sends a ping
//! from its device's UD QP to the peer device's; the responder answers it at once (the ack) and,
//! when that answer's send has completed, again with how long it held the ping (the delay), so
//! the network's share of the round trip is measured on both ends rather than guessed.
//!
//! The pure parts:
//! - [`packet`]: the datagram, tagged with a key of the control session's, so a forged or
//!   altered answer is dropped unmeasured;
//! - [`delay`]: the six timestamps of a ping, the NIC's or the CPU's clock, and the network RTT,
//!   responder and prober delays they give;
//! - [`path`]: a prober's pings of one path: outstanding pings, answers, losses at the timeout,
//!   and the quantiles of a sliding window;
//! - `receive`: what a receive slot holds and what a receive completion means (a packet,
//!   refused, or a QP to reset), and whether a datagram came from the GID a key was registered
//!   with;
//! - `replay`: the answering side's window of the sequence numbers seen under one key, so each
//!   ping is answered once;
//! - `bucket`: how fast one source's pings are answered;
//! - [`schedule`]: when each target is pinged (interval, jitter, the device's rate cap) and how
//!   long it stays a target.
//!
//! And the I/O around them, [`engine`]: a thread per device with one UD QP that pings the
//! device's targets and answers other nodes' pings, driven through its handle, [`pinger`].

mod bucket;
pub mod delay;
pub mod engine;
pub mod packet;
pub mod path;
pub mod pinger;
mod receive;
mod replay;
pub mod schedule;

pub use engine::PING_QKEY;
pub use pinger::{PingReport, PingReports, PingSettings, PingTarget, Pinger};
