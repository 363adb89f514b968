//! The client side of perftest's out-of-band exchange over any byte stream (a TCP socket in
//! use, an in-memory pipe in tests): every exchange writes ours first, then reads exactly the
//! server's message of the same size within the timeout (docs/perftest.md, "Wire protocol").

use std::time::Duration;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::wire::{self, Key, Report, Version, WireError};

/// Which exchange of the sequence was under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Version,
    SystemData,
    Mtu,
    /// The QP key exchange, round 1 (connect) or 2 (confirm).
    Keys(u8),
    StartBarrier,
    EndBarrier,
    Report,
    Close,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Version => f.write_str("version exchange"),
            Step::SystemData => f.write_str("system data exchange"),
            Step::Mtu => f.write_str("MTU exchange"),
            Step::Keys(round) => write!(f, "QP key exchange (round {round})"),
            Step::StartBarrier => f.write_str("barrier before the test"),
            Step::EndBarrier => f.write_str("barrier after the test"),
            Step::Report => f.write_str("report exchange"),
            Step::Close => f.write_str("closing handshake"),
        }
    }
}

/// Why the exchange with the server failed.
#[derive(Debug, Error)]
pub enum ChannelError {
    #[error(
        "{step}: the server sent {got} of {expected} bytes within {timeout:?}{}",
        hint(*step, *got, *expected)
    )]
    Timeout {
        step: Step,
        got: usize,
        expected: usize,
        timeout: Duration,
    },
    #[error("{step}: the server closed the connection after {got} of {expected} bytes{}",
        hint(*step, *got, *expected))]
    Closed {
        step: Step,
        got: usize,
        expected: usize,
    },
    #[error("{step}: {source}")]
    Io {
        step: Step,
        #[source]
        source: std::io::Error,
    },
    #[error("{step}: {source}")]
    Wire {
        step: Step,
        #[source]
        source: WireError,
    },
}

/// What a short message most likely means.
fn hint(step: Step, got: usize, expected: usize) -> &'static str {
    match step {
        Step::Version if got == 0 => {
            " (is it an ib_write_bw server without -R/-z, and not already serving another client?)"
        }
        Step::Keys(_) | Step::StartBarrier if got > 0 && got < expected => {
            " (the server sends keys without a GID: use a GID on both sides, e.g. its -x and our --gid-index)"
        }
        Step::Keys(_) if got == 0 => {
            " (does the server run more QPs (-q) or another test than this probe? see docs/perftest.md)"
        }
        Step::Close | Step::Report => {
            " (is the server run with options this client does not speak, e.g. --report-per-port?)"
        }
        _ => "",
    }
}

/// The server's answers to the opening exchanges.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerHello {
    pub version: Version,
    /// max(ours, the server's) page size: the server's buffer per QP is at least this.
    pub cycle_buffer: u32,
    pub cache_line: u32,
}

/// One perftest session's control channel, client side.
pub struct Channel<S> {
    stream: S,
    timeout: Duration,
    /// Whether key messages carry a GID (must match the server's choice).
    with_gid: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Channel<S> {
    pub fn new(stream: S, timeout: Duration, with_gid: bool) -> Self {
        Channel {
            stream,
            timeout,
            with_gid,
        }
    }

    /// Writes `ours` in one piece, then reads exactly `theirs.len()` bytes within the timeout.
    async fn exchange(
        &mut self,
        step: Step,
        ours: &[u8],
        theirs: &mut [u8],
    ) -> Result<(), ChannelError> {
        let deadline = Instant::now() + self.timeout;
        let io = |source| ChannelError::Io { step, source };
        match tokio::time::timeout_at(deadline, self.stream.write_all(ours)).await {
            Ok(result) => result.map_err(io)?,
            Err(_) => {
                return Err(ChannelError::Timeout {
                    step,
                    got: 0,
                    expected: theirs.len(),
                    timeout: self.timeout,
                })
            }
        }
        self.stream.flush().await.map_err(io)?;
        let mut got = 0;
        while got < theirs.len() {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut theirs[got..])).await {
                Err(_) => {
                    return Err(ChannelError::Timeout {
                        step,
                        got,
                        expected: theirs.len(),
                        timeout: self.timeout,
                    })
                }
                Ok(Ok(0)) => {
                    return Err(ChannelError::Closed {
                        step,
                        got,
                        expected: theirs.len(),
                    })
                }
                Ok(Ok(n)) => got += n,
                Ok(Err(e)) => return Err(io(e)),
            }
        }
        Ok(())
    }

    /// Version, then (both at ≥ 5.32) page size and cache line size.
    pub async fn hello(
        &mut self,
        page_size: u32,
        cache_line: u32,
    ) -> Result<ServerHello, ChannelError> {
        let mut raw = [0u8; wire::VERSION_LEN];
        self.exchange(
            Step::Version,
            &wire::encode_version(wire::ADVERTISED_VERSION),
            &mut raw,
        )
        .await?;
        let version = wire::parse_version(&raw).map_err(|source| ChannelError::Wire {
            step: Step::Version,
            source,
        })?;
        let mut theirs = [0u8; 4];
        self.exchange(
            Step::SystemData,
            &wire::encode_i32(page_size as i32),
            &mut theirs,
        )
        .await?;
        let cycle_buffer = (wire::decode_i32(theirs).max(0) as u32).max(page_size);
        self.exchange(
            Step::SystemData,
            &wire::encode_i32(cache_line as i32),
            &mut theirs,
        )
        .await?;
        let cache_line = (wire::decode_i32(theirs).max(0) as u32).max(cache_line);
        Ok(ServerHello {
            version,
            cycle_buffer,
            cache_line,
        })
    }

    /// Sends our MTU code and returns the one both use: the lower.
    pub async fn mtu(&mut self, ours: u8) -> Result<u8, ChannelError> {
        let mut raw = [0u8; wire::MTU_MSG_SIZE];
        self.exchange(Step::Mtu, &wire::encode_mtu(ours), &mut raw)
            .await?;
        let theirs = wire::parse_mtu(raw).map_err(|source| ChannelError::Wire {
            step: Step::Mtu,
            source,
        })?;
        Ok(ours.min(theirs))
    }

    /// One `ctx_hand_shake`: our key out, the server's back.
    pub async fn keys(&mut self, step: Step, ours: &Key) -> Result<Key, ChannelError> {
        let mut raw = vec![0u8; Key::message_size(self.with_gid)];
        let mut mine = *ours;
        if !self.with_gid {
            mine.gid = None;
        } else if mine.gid.is_none() {
            mine.gid = Some([0; 16]);
        }
        self.exchange(step, &mine.encode(), &mut raw).await?;
        Key::parse(&raw, self.with_gid).map_err(|source| ChannelError::Wire { step, source })
    }

    /// The report: our figures out, the server's (meaningless for a WRITE server) back.
    pub async fn report(&mut self, ours: &Report) -> Result<(), ChannelError> {
        let mut theirs = [0u8; 8];
        for field in ours.encode() {
            self.exchange(Step::Report, &field, &mut theirs).await?;
        }
        Ok(())
    }

    /// `ctx_close_connection`: a last handshake, then "done". The server's "done" is read
    /// when it comes within a moment (so the close sends no reset), not waited for.
    pub async fn close(mut self, ours: &Key) -> Result<(), ChannelError> {
        self.keys(Step::Close, ours).await?;
        self.stream
            .write_all(wire::DONE_MSG)
            .await
            .map_err(|source| ChannelError::Io {
                step: Step::Close,
                source,
            })?;
        let mut done = [0u8; wire::DONE_MSG.len()];
        let _ = tokio::time::timeout(
            Duration::from_millis(500).min(self.timeout),
            self.stream.read_exact(&mut done),
        )
        .await;
        let _ = self.stream.shutdown().await;
        Ok(())
    }
}
