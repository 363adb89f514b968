//! A handle on a device's ping engine ([`super::engine`]): what the exporter, the responder and
//! `probe --ping` tell it (paths to ping, keys to answer with) and what it reports back
//! (docs/architecture.md, "Pings").

use std::fmt;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use crate::verbs::{Route, VerbsError};

use super::delay::Source;
use super::engine;
use super::packet::PingKey;
use super::path::{Counts, WindowSummary};

/// Commands waiting for the thread at most; past it a confirmation is dropped (the next burst
/// confirms again) and a key to answer with is refused (that session's pings go unanswered).
const COMMAND_QUEUE: usize = 4096;

/// Silent paths waiting for the watcher at most; past it one is dropped (asked again later).
const SILENT_QUEUE: usize = 64;

/// How a device's pings run (the config's `ping` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingSettings {
    pub interval: Duration,
    /// A ping whose first answer (the ack) has not come after this is lost.
    pub timeout: Duration,
    /// The RTT percentiles cover this much of the past.
    pub window: Duration,
    /// The most pings a second the device sends.
    pub max_rate: u32,
    /// A target no burst confirmed for this long stops being pinged, and a key no ping used for
    /// this long is forgotten.
    pub ttl: Duration,
    /// The most paths the device pings.
    pub max_paths: usize,
}

/// Where one path's pings go: the peer device's ping QP, and the session key that tags them.
#[derive(Clone)]
pub struct PingTarget {
    pub route: Route,
    pub qpn: u32,
    /// The responder's name for `key`.
    pub key_id: u32,
    pub key: PingKey,
    /// Stop after this many pings (`probe --ping`); `None`: as long as bursts confirm the path.
    pub count: Option<u64>,
}

impl fmt::Debug for PingTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PingTarget")
            .field("route", &self.route)
            .field("qpn", &self.qpn)
            .field("key_id", &self.key_id)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

/// One path's figures: counts since it was first pinged, and its window's quantiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingReport<K> {
    pub path: K,
    pub counts: Counts,
    /// Pings lost since the last answered one.
    pub lost_in_a_row: u64,
    pub window: Option<WindowSummary>,
    /// The path is no longer pinged: its series go.
    pub gone: bool,
}

/// What a device's engine reports every interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingReports<K> {
    pub device: String,
    pub timestamps: Source,
    /// Pings of other nodes answered, and packets refused (no key, wrong tag, not a ping), since
    /// the start.
    pub answered: u64,
    pub refused: u64,
    /// The network RTTs measured since the last report, of every path (for the device's
    /// histogram; at most 65,536 a report).
    pub rtts: Vec<Duration>,
    pub paths: Vec<PingReport<K>>,
}

pub(super) enum Command<K> {
    Confirm(K, PingTarget),
    Retain(Vec<K>),
    Answer {
        key_id: u32,
        route: Route,
        qpn: u32,
        key: PingKey,
    },
    Watch(tokio::sync::mpsc::Sender<K>),
}

/// A handle on a device's ping engine; the engine stops when the last handle is dropped.
pub struct Pinger<K> {
    commands: SyncSender<Command<K>>,
    /// Written to after each command, so the sleeping thread wakes for it.
    wake: Arc<UnixStream>,
    qpn: u32,
    device: Arc<str>,
    next_key_id: Arc<AtomicU32>,
}

impl<K> Clone for Pinger<K> {
    fn clone(&self) -> Self {
        Pinger {
            commands: self.commands.clone(),
            wake: Arc::clone(&self.wake),
            qpn: self.qpn,
            device: Arc::clone(&self.device),
            next_key_id: Arc::clone(&self.next_key_id),
        }
    }
}

impl<K> fmt::Debug for Pinger<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pinger")
            .field("device", &self.device)
            .field("qpn", &self.qpn)
            .finish()
    }
}

impl<K: Ord + Clone + Send + 'static> Pinger<K> {
    /// Opens `device`'s `port`, creates the ping QP and starts the engine's thread, which hands
    /// `reports` its figures every `settings.interval`.
    pub fn start(
        device: &str,
        port: u8,
        settings: PingSettings,
        reports: Box<dyn FnMut(PingReports<K>) + Send>,
    ) -> Result<Pinger<K>, VerbsError> {
        let (commands, commands_rx) = mpsc::sync_channel(COMMAND_QUEUE);
        let (wake, woken) = UnixStream::pair()
            .and_then(|(w, r)| {
                w.set_nonblocking(true)?;
                r.set_nonblocking(true)?;
                Ok((w, r))
            })
            .map_err(|e| VerbsError::InvalidArgument(format!("the ping thread's wake-up: {e}")))?;
        let started = engine::spawn(device, port, settings, commands_rx, woken, reports)?;
        Ok(Pinger {
            commands,
            wake: Arc::new(wake),
            qpn: started.qpn,
            device: Arc::from(device),
            next_key_id: Arc::new(AtomicU32::new(started.seed as u32 | 1)),
        })
    }

    /// The device's ping QP number (what a `SessionAccept` or `SessionRequest` tells the peer).
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// A burst session to `path` (re)learnt where its pings go: ping it from now on, or keep
    /// pinging it.
    pub fn confirm(&self, path: K, target: PingTarget) {
        self.send(Command::Confirm(path, target), "a path to ping");
    }

    /// The paths whose pings have gone unanswered for a while, as they go silent: their peer may
    /// have restarted with a new ping QP and new keys, which only a new session tells. A path is
    /// named after 3 pings lost in a row, then after twice as many each time (at most 120 more)
    /// until one is answered ([`super::path::PathPings::relearn_due`]). One watcher per engine:
    /// the last to ask.
    pub fn watch_silent(&self) -> tokio::sync::mpsc::Receiver<K> {
        let (tx, rx) = tokio::sync::mpsc::channel(SILENT_QUEUE);
        self.send(Command::Watch(tx), "a watcher of silent paths");
        rx
    }

    /// The device's paths are now `paths` (after a reload): stop pinging the others.
    pub fn retain(&self, paths: Vec<K>) {
        self.send(Command::Retain(paths), "the paths to keep pinging");
    }

    /// Answer the pings tagged with `key` that come from the prober's ping QP `qpn` along
    /// `route` (back to the prober); returns the key's id, which the prober's pings carry.
    pub fn answer(&self, route: Route, qpn: u32, key: PingKey) -> u32 {
        let key_id = self.next_key_id.fetch_add(1, Ordering::Relaxed);
        let command = Command::Answer {
            key_id,
            route,
            qpn,
            key,
        };
        self.send(command, "a prober's key");
        key_id
    }

    fn send(&self, command: Command<K>, what: &str) {
        match self.commands.try_send(command) {
            // A full socket buffer already holds a wake-up: nothing is lost by ignoring it.
            Ok(()) => drop((&*self.wake).write(&[1])),
            Err(TrySendError::Full(_)) => {
                tracing::warn!(device = %self.device, "ping engine busy: {what} was dropped");
            }
            Err(TrySendError::Disconnected(_)) => {
                tracing::debug!(device = %self.device, "ping engine stopped: {what} was dropped");
            }
        }
    }
}
