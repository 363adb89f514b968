//! Control messages over TCP: a framed connection with deadlines, and the authentication handshake,
//! after which the connection seals every frame it sends and opens every frame it reads with the
//! keys the handshake agreed on (`seal`; not with `auth: none`).
//!
//! Every read and write has a deadline, because a peer that stops talking (crashed, partitioned,
//! or malicious and slow) must cost a probe its timeout, never a stuck task. The handshakes take
//! one deadline for the whole exchange, so a peer cannot stretch it by answering just in time at
//! every step.
//!
//! After a framing error, EOF or a failed read, the incoming stream is out of sync, so further
//! receives fail with [`ControlError::Broken`] (sending one last `Error` frame still works). After a
//! failed or timed-out write a frame may be half on the wire, so the connection refuses all further
//! use. Either way the caller drops it and, for a session, rebuilds it. A receive *timeout* does
//! not break anything: partial frames stay buffered for the next call.
//!
//! Where each part lives: this file has the framed [`Connection`], [`connect`] and TCP keepalive
//! ([`KEEPALIVE`]); `error.rs` the error type, [`ControlError`], and the metric label of each
//! failure; `handshake.rs` the two handshakes, [`client_handshake`] and [`server_handshake`];
//! `tests.rs` the tests of all of them.

mod error;
mod handshake;
#[cfg(test)]
mod tests;

pub use error::ControlError;
pub use handshake::{client_handshake, server_handshake};

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

use super::codec;
use super::message::Message;
use super::seal::FrameKeys;
use crate::ping::packet::PingKey;
use crate::reason::ErrorReason;

/// Bytes read from the socket per `read` call. Frames are small; this bounds the buffer at
/// `MAX_FRAME_LEN + READ_CHUNK` whatever the peer sends.
const READ_CHUNK: usize = 16 * 1024;

/// A framed, deadline-bound control connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    peer: Option<SocketAddr>,
    /// What [`connect`] was asked to reach (`host:port`), or the peer's address for an accepted
    /// or wrapped stream: the prober's `Hello.target`.
    target: String,
    /// This connection's frame keys, from the end of the handshake on (`None` before it, and for
    /// good with `auth: none`): every frame sent is sealed, every frame received must open.
    keys: Option<FrameKeys>,
    /// The key of this session's pings, from the end of the handshake on.
    ping_key: Option<PingKey>,
    /// Received bytes not yet decoded; never more than `MAX_FRAME_LEN + READ_CHUNK`.
    buf: Vec<u8>,
    /// The incoming stream is out of sync (framing error, EOF, read error): no more receiving,
    /// but a final `Error` frame can still be sent to tell the peer why.
    rx_broken: bool,
    /// A frame may have been half written: nothing more can be sent or trusted in either direction.
    tx_broken: bool,
}

/// Open a control connection to `addr` (`host:port`; names are resolved), within `deadline`.
pub async fn connect(addr: &str, deadline: Duration) -> Result<Connection, ControlError> {
    let stream = match tokio::time::timeout(deadline, TcpStream::connect(addr)).await {
        Err(_) => {
            return Err(ControlError::Timeout {
                during: "connecting",
                after: deadline,
            })
        }
        Ok(Err(source)) => {
            return Err(ControlError::Connect {
                addr: addr.to_string(),
                source,
            })
        }
        Ok(Ok(stream)) => stream,
    };
    let mut conn = Connection::new(stream).map_err(|source| ControlError::Connect {
        addr: addr.to_string(),
        source,
    })?;
    conn.target = addr.to_string();
    Ok(conn)
}

/// TCP keepalive on control connections. The channel is silent while a burst runs, so a peer
/// whose node lost power would otherwise be noticed only at the idle timeout: a responder would
/// keep the device's burst claimed (every other prober gets `busy`) for that long. Keepalive
/// probes are answered by the peer's kernel however busy the peer process is, so a long burst
/// is never mistaken for a dead peer.
pub const KEEPALIVE: Keepalive = Keepalive {
    idle: Duration::from_secs(5),
    interval: Duration::from_secs(2),
    retries: 3,
};

/// When a silent peer is declared dead: `idle + interval * retries` after its last sign of life.
#[derive(Debug, Clone, Copy)]
pub struct Keepalive {
    pub idle: Duration,
    pub interval: Duration,
    pub retries: u32,
}

impl Keepalive {
    /// Longest time from a peer's last sign of life to a failed read.
    pub fn detection_bound(&self) -> Duration {
        self.idle + self.interval * self.retries
    }

    fn to_socket2(self) -> socket2::TcpKeepalive {
        socket2::TcpKeepalive::new()
            .with_time(self.idle)
            .with_interval(self.interval)
            .with_retries(self.retries)
    }
}

impl Connection {
    /// Wrap an accepted or connected stream. Sets `TCP_NODELAY`: control messages are small
    /// request/response pairs, and Nagle would add up to a delayed-ACK timeout to each round trip
    /// (which shows up in the measured setup time). Turns on TCP keepalive (see [`KEEPALIVE`]).
    pub fn new(stream: TcpStream) -> io::Result<Connection> {
        stream.set_nodelay(true)?;
        socket2::SockRef::from(&stream).set_tcp_keepalive(&KEEPALIVE.to_socket2())?;
        let peer = stream.peer_addr().ok();
        Ok(Connection {
            stream,
            peer,
            target: peer.map(|p| p.to_string()).unwrap_or_default(),
            keys: None,
            ping_key: None,
            buf: Vec::new(),
            rx_broken: false,
            tx_broken: false,
        })
    }

    /// The remote address, if the OS still knows it (for logs).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Whether frames are protected (from the end of a handshake with a pre-shared key on).
    pub fn is_protected(&self) -> bool {
        self.keys.is_some()
    }

    /// The key that tags this session's pings (both ends derive the same), once the handshake
    /// succeeded.
    pub fn ping_key(&self) -> Option<&PingKey> {
        self.ping_key.as_ref()
    }

    /// The frame `msg` becomes: sealed once the handshake agreed on keys, clear before.
    fn frame(&mut self, msg: &Message) -> Result<Vec<u8>, ControlError> {
        match &mut self.keys {
            Some(keys) => Ok(keys.sealer.seal(msg)?),
            None => Ok(codec::encode(msg)?),
        }
    }

    /// The next message in the receive buffer, opened with the frame keys once there are some.
    fn decode_buffered(&mut self) -> Result<Option<(Message, usize)>, ControlError> {
        match &mut self.keys {
            Some(keys) => Ok(keys.opener.open(&self.buf)?),
            None => Ok(codec::decode(&self.buf)?),
        }
    }

    /// Send one message, giving up after `deadline`.
    pub async fn send(&mut self, msg: &Message, deadline: Duration) -> Result<(), ControlError> {
        self.send_before(msg, Instant::now() + deadline, deadline)
            .await
    }

    /// Receive one message, giving up after `deadline`. Returns every kind of message as is,
    /// including `Error` and `Close`; use [`ControlError::unexpected`] for the ones a caller did
    /// not expect. EOF is [`ControlError::Closed`].
    pub async fn recv(&mut self, deadline: Duration) -> Result<Message, ControlError> {
        self.recv_before(Instant::now() + deadline, deadline).await
    }

    /// Send `msg` and wait for the answer, all within `deadline`. A peer `Error` or `Close` in
    /// reply is returned as `Err` (see [`ControlError::unexpected`]), so callers only match on the
    /// answers they expect.
    pub async fn request(
        &mut self,
        msg: &Message,
        deadline: Duration,
    ) -> Result<Message, ControlError> {
        let until = Instant::now() + deadline;
        self.send_before(msg, until, deadline).await?;
        match self.recv_before(until, deadline).await? {
            Message::Error { reason, message } => Err(ControlError::Peer { reason, message }),
            Message::Close => Err(ControlError::Closed),
            reply => Ok(reply),
        }
    }

    /// Tell the peer why we give up, without waiting long and ignoring failures: the connection is
    /// about to be dropped anyway, and the local error is what gets reported.
    pub async fn send_error_best_effort(&mut self, reason: ErrorReason, message: &str) {
        let msg = Message::Error {
            reason,
            message: message.to_string(),
        };
        let grace = Duration::from_millis(500);
        let _ = self.send_before(&msg, Instant::now() + grace, grace).await;
    }

    /// Flush and half-close the write side (FIN), so the peer reads our last frame and then EOF.
    pub async fn shutdown(&mut self, deadline: Duration) -> Result<(), ControlError> {
        match tokio::time::timeout(deadline, self.stream.shutdown()).await {
            Err(_) => Err(ControlError::Timeout {
                during: "closing",
                after: deadline,
            }),
            Ok(r) => r.map_err(ControlError::Io),
        }
    }

    async fn send_before(
        &mut self,
        msg: &Message,
        until: Instant,
        budget: Duration,
    ) -> Result<(), ControlError> {
        if self.tx_broken {
            return Err(ControlError::Broken);
        }
        // Encoding errors are ours (e.g. an oversize message): the stream is still in sync.
        let frame = self.frame(msg)?;
        self.write_frame(&frame, until, budget).await
    }

    /// Sends `json` as one message's payload, unchecked (sealed once the handshake agreed on
    /// keys): for tools that play a peer sending what this build never would, such as a session
    /// request for more QPs than the protocol allows (examples/hostile.rs).
    pub async fn send_unchecked_payload(
        &mut self,
        json: &[u8],
        deadline: Duration,
    ) -> Result<(), ControlError> {
        if self.tx_broken {
            return Err(ControlError::Broken);
        }
        let frame = match &mut self.keys {
            Some(keys) => keys.sealer.seal_payload(json)?,
            None => {
                let mut frame = codec::header(codec::FrameFlags::CLEAR, json.len())?.to_vec();
                frame.extend_from_slice(json);
                frame
            }
        };
        self.write_frame(&frame, Instant::now() + deadline, deadline)
            .await
    }

    async fn write_frame(
        &mut self,
        frame: &[u8],
        until: Instant,
        budget: Duration,
    ) -> Result<(), ControlError> {
        match timeout_at(until, self.stream.write_all(frame)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.tx_broken = true;
                self.rx_broken = true;
                Err(io_error(e))
            }
            Err(_) => {
                // Part of the frame may be on the wire: the stream can no longer be trusted.
                self.tx_broken = true;
                self.rx_broken = true;
                Err(ControlError::Timeout {
                    during: "sending",
                    after: budget,
                })
            }
        }
    }

    async fn recv_before(
        &mut self,
        until: Instant,
        budget: Duration,
    ) -> Result<Message, ControlError> {
        if self.rx_broken {
            return Err(ControlError::Broken);
        }
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match self.decode_buffered() {
                Ok(Some((msg, used))) => {
                    self.buf.drain(..used);
                    return Ok(msg);
                }
                Ok(None) => {}
                Err(e) => {
                    self.rx_broken = true;
                    self.buf = Vec::new();
                    return Err(e);
                }
            }
            // `read` is cancel-safe: on timeout no bytes are lost, and what was buffered stays for
            // the next call, so a receive timeout does not break the connection.
            let n = match timeout_at(until, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => {
                    self.rx_broken = true;
                    return Err(io_error(e));
                }
                Err(_) => {
                    return Err(ControlError::Timeout {
                        during: "waiting for a control message",
                        after: budget,
                    })
                }
            };
            if n == 0 {
                self.rx_broken = true;
                return Err(ControlError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn io_error(e: io::Error) -> ControlError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => ControlError::Closed,
        _ => ControlError::Io(e),
    }
}
