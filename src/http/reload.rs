//! `POST /-/reload`: off unless the exporter was started with it, then only for a caller that
//! proves it may (docs/security.md, "The reload endpoint").
//!
//! - **Off by default** (as Prometheus' `--web.enable-lifecycle`): SIGHUP and the file watcher
//!   reload without it.
//! - **Who may:** with `--reload-token-file`, a request carrying `Authorization: Bearer TOKEN`
//!   from any address; without, only a client on this host (a loopback address) that sends the
//!   header [`RELOAD_HEADER`].
//! - **Not cross-site:** both ways need a header a browser's form or simple request cannot send, so
//!   a page the operator's browser opens cannot make it reload (no CORS answer, so no preflight
//!   passes).
//! - **Not a loop:** one reload at a time and at most one per [`MIN_INTERVAL`]; more get 429.
//! - **No detail to the client:** a refused file answers a generic 400; the error (file, line,
//!   field) is in the log.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use subtle::ConstantTimeEq as _;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::time::Instant;
use zeroize::Zeroizing;

use crate::reload::ReloadRequest;

/// The header a loopback caller must send (any value): a browser cannot add it to a cross-site
/// request without a CORS preflight, which this server never grants.
pub const RELOAD_HEADER: &str = "x-rdma-probe-reload";

/// The shortest time between two reloads through HTTP.
pub const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// How long `POST /-/reload` waits for the exporter to take the new file.
const RELOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Who may use `POST /-/reload`.
#[derive(Clone, Default)]
pub enum ReloadAccess {
    /// Nobody (the default): 403.
    #[default]
    Disabled,
    /// A client on a loopback address that sends [`RELOAD_HEADER`].
    Loopback,
    /// A client from any address with `Authorization: Bearer` and this token.
    Token(Arc<Zeroizing<String>>),
}

impl std::fmt::Debug for ReloadAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadAccess::Disabled => f.write_str("Disabled"),
            ReloadAccess::Loopback => f.write_str("Loopback"),
            ReloadAccess::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// Shortest token accepted from `--reload-token-file`.
pub const MIN_TOKEN_LEN: usize = 16;

impl ReloadAccess {
    /// Clients anywhere that send `token`.
    pub fn token(token: String) -> ReloadAccess {
        ReloadAccess::Token(Arc::new(Zeroizing::new(token)))
    }

    /// Reads the token file: its first line, at least [`MIN_TOKEN_LEN`] characters. The file's
    /// content never appears in the error.
    pub fn token_file(path: &std::path::Path) -> Result<ReloadAccess, String> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| format!("reading the reload token {}: {e}", path.display()))?,
        );
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < MIN_TOKEN_LEN {
            return Err(format!(
                "the reload token in {} has {} characters, fewer than {MIN_TOKEN_LEN}: \
                 make one with `head -c 32 /dev/urandom | base64 > {}`",
                path.display(),
                token.len(),
                path.display()
            ));
        }
        Ok(ReloadAccess::token(token.to_owned()))
    }

    /// Whether a request from `peer` with `headers` may reload: `Err` is the status to answer.
    pub fn check(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(), StatusCode> {
        match self {
            ReloadAccess::Disabled => Err(StatusCode::FORBIDDEN),
            ReloadAccess::Loopback => {
                if peer.to_canonical().is_loopback() && headers.contains_key(RELOAD_HEADER) {
                    Ok(())
                } else {
                    Err(StatusCode::FORBIDDEN)
                }
            }
            ReloadAccess::Token(token) => {
                let given = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or("");
                if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                    Ok(())
                } else {
                    Err(StatusCode::UNAUTHORIZED)
                }
            }
        }
    }
}

/// The exporter's reload endpoint: where requests go, who may send them, and when the last one
/// ran.
#[derive(Clone, Debug)]
pub struct ReloadEndpoint {
    sender: mpsc::Sender<ReloadRequest>,
    access: ReloadAccess,
    last: Arc<Mutex<Option<Instant>>>,
}

impl ReloadEndpoint {
    pub fn new(sender: mpsc::Sender<ReloadRequest>, access: ReloadAccess) -> ReloadEndpoint {
        ReloadEndpoint {
            sender,
            access,
            last: Arc::default(),
        }
    }

    /// Answers one `POST /-/reload` from `peer`.
    pub async fn answer(&self, peer: SocketAddr, headers: &HeaderMap) -> (StatusCode, String) {
        if let Err(status) = self.access.check(peer.ip(), headers) {
            tracing::warn!(%peer, status = status.as_u16(), "POST /-/reload refused");
            let body = match self.access {
                ReloadAccess::Disabled => {
                    "the reload endpoint is off: start with --enable-reload-endpoint, or send SIGHUP\n"
                }
                _ => "not allowed to reload (docs/security.md, \"The reload endpoint\")\n",
            };
            return (status, body.into());
        }
        // One at a time, at most one per MIN_INTERVAL: a client that loops gets 429s, and the
        // service loop sees a reload a second at most.
        let Ok(mut last) = self.last.try_lock() else {
            return too_many();
        };
        if last.is_some_and(|at| at.elapsed() < MIN_INTERVAL) {
            return too_many();
        }
        tracing::info!(%peer, "POST /-/reload: reloading the config");
        let (reply, answer) = oneshot::channel();
        if self
            .sender
            .send(ReloadRequest { reply: Some(reply) })
            .await
            .is_err()
        {
            return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into());
        }
        let result = tokio::time::timeout(RELOAD_WAIT, answer).await;
        *last = Some(Instant::now());
        match result {
            Ok(Ok(Ok(()))) => (StatusCode::OK, "config reloaded\n".into()),
            // The error (file, line, field) is logged by the service; the client learns only
            // that the file was refused.
            Ok(Ok(Err(_))) => (
                StatusCode::BAD_REQUEST,
                "config not reloaded (the previous config keeps running): the error is in the \
                 exporter's log\n"
                    .into(),
            ),
            Ok(Err(_)) | Err(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the reload did not complete\n".into(),
            ),
        }
    }
}

fn too_many() -> (StatusCode, String) {
    (
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "a reload ran less than {} s ago or is running: try again later\n",
            MIN_INTERVAL.as_secs()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn loopback_needs_a_loopback_peer_and_the_header() {
        let access = ReloadAccess::Loopback;
        let with = headers(&[(RELOAD_HEADER, "1")]);
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let remote: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(access.check(local, &with), Ok(()));
        assert_eq!(access.check(mapped, &with), Ok(()));
        assert_eq!(access.check("::1".parse().unwrap(), &with), Ok(()));
        assert_eq!(access.check(remote, &with), Err(StatusCode::FORBIDDEN));
        assert_eq!(
            access.check(local, &HeaderMap::new()),
            Err(StatusCode::FORBIDDEN)
        );
    }

    #[test]
    fn a_token_is_needed_from_anywhere_and_disabled_refuses_all() {
        let access = ReloadAccess::Token(Arc::new(Zeroizing::new("s3cret-token-0123".into())));
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let good = headers(&[("authorization", "Bearer s3cret-token-0123")]);
        assert_eq!(access.check("10.0.0.7".parse().unwrap(), &good), Ok(()));
        for bad in [
            headers(&[("authorization", "Bearer s3cret-token-012")]),
            headers(&[("authorization", "s3cret-token-0123")]),
            headers(&[(RELOAD_HEADER, "1")]),
            HeaderMap::new(),
        ] {
            assert_eq!(access.check(local, &bad), Err(StatusCode::UNAUTHORIZED));
        }
        assert_eq!(
            ReloadAccess::Disabled.check(local, &headers(&[(RELOAD_HEADER, "1")])),
            Err(StatusCode::FORBIDDEN)
        );
        assert!(!format!("{access:?}").contains("s3cret"));
    }
}
