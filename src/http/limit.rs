//! Bounds on what HTTP clients can hold: at most [`MAX_CONNECTIONS`] connections at once, each
//! closed after [`IDLE_TIMEOUT`] without a byte either way.
//!
//! The admin port is unauthenticated, and the HTTP server by itself closes no connection that
//! says nothing: enough of them would take every file descriptor the process may open, and with
//! them the responder's control connections and the RDMA devices' own descriptors. With the cap a
//! flood of clients can only keep other scrapers out while it lasts; the probing and the
//! responder keep their descriptors.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::serve::Listener;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// HTTP connections served at once; more are closed as soon as they are accepted. Prometheus
/// keeps one per scraper, a browser a few.
pub const MAX_CONNECTIONS: usize = 64;

/// A connection with no byte read or written for this long is closed. Longer than any scrape
/// interval, so a scraper's kept-alive connection stays up between scrapes.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A listener that serves at most `permits` connections, each closed when idle for `idle`.
pub struct LimitedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    idle: Duration,
}

impl LimitedListener {
    pub fn new(inner: TcpListener, max_connections: usize, idle: Duration) -> Self {
        LimitedListener {
            inner,
            permits: Arc::new(Semaphore::new(max_connections)),
            idle,
        }
    }
}

impl Listener for LimitedListener {
    type Io = LimitedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: keep serving, but do not spin.
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => return (LimitedStream::new(stream, permit, self.idle), addr),
                // Dropping the stream closes it.
                Err(_) => tracing::debug!(%addr, "HTTP connection refused: too many open"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A served connection: holds its permit, and fails its reads and writes once idle too long.
pub struct LimitedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl LimitedStream {
    fn new(stream: TcpStream, permit: OwnedSemaphorePermit, idle: Duration) -> Self {
        LimitedStream {
            stream,
            _permit: permit,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    /// Called on every completed read or write: the connection is alive.
    fn progressed(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// `Err(TimedOut)` once the deadline passed (and registers for it otherwise).
    fn check_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "HTTP connection idle too long",
            )),
            Poll::Pending => Ok(()),
        }
    }

    /// What a read or write that `poll` returned means for the connection: progress restarts
    /// the idle deadline; waiting past it ends the connection.
    fn after_io<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(result) => {
                self.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => match self.check_idle(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        self.after_io(cx, poll)
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.after_io(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.after_io(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn limited(max: usize, idle: Duration) -> (LimitedListener, std::net::SocketAddr) {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        (LimitedListener::new(inner, max, idle), addr)
    }

    #[tokio::test]
    async fn past_the_cap_connections_are_closed_at_once() {
        let (mut listener, addr) = limited(1, Duration::from_secs(60)).await;
        let _first = TcpStream::connect(addr).await.unwrap();
        let (_served, _) = listener.accept().await;
        let mut second = TcpStream::connect(addr).await.unwrap();
        // The listener accepts (and closes) the second while waiting for a third.
        let accepting = tokio::spawn(async move {
            let _ = listener.accept().await;
        });
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(2), second.read(&mut buf))
            .await
            .expect("closed at once");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        accepting.abort();
    }

    #[tokio::test]
    async fn an_idle_connection_fails_and_frees_its_place() {
        let idle = Duration::from_millis(200);
        let (mut listener, addr) = limited(1, idle).await;
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (mut served, _) = listener.accept().await;
        client.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(served.read(&mut buf).await.unwrap(), 1);
        let started = std::time::Instant::now();
        let err = served.read(&mut buf).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= idle - Duration::from_millis(20));
        drop(served);
        let _next = TcpStream::connect(addr).await.unwrap();
        let (_served, _) = tokio::time::timeout(Duration::from_secs(2), listener.accept())
            .await
            .expect("the place is free again");
    }
}
