//! The admin HTTP server: `/metrics` for Prometheus, `/healthz` (the process answers) and
//! `/readyz` (it can serve probes) for Kubernetes, and at `/` a short index, or in the exporter
//! the status page of every probed path ([`status`]). Read-only but for `POST /-/reload`, which
//! is off unless enabled and then limited ([`reload`]). Connections are capped and closed when
//! idle ([`limit`]); `/metrics` is encoded off the async workers and served again for a moment
//! ([`scrape`]).

pub mod limit;
pub mod reload;
pub mod scrape;
pub mod status;

use std::future::Future;
use std::net::SocketAddr;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::IncomingStream;
use axum::Router;
use thiserror::Error;
use tokio::net::TcpListener;

pub use reload::{ReloadAccess, ReloadEndpoint};

use crate::metrics::probe::PathSnapshot;
use crate::metrics::{Format, Metrics};
use crate::readiness::Readiness;
use scrape::ScrapeCache;

#[derive(Debug, Error)]
#[error("serving HTTP: {0}")]
pub struct HttpError(#[source] std::io::Error);

#[derive(Clone)]
struct AppState {
    scrapes: ScrapeCache,
    readiness: Readiness,
    /// The exporter's path table, for the status page; `None` in a responder-only process.
    paths: Option<PathSnapshot>,
    /// Where `POST /-/reload` goes; `None` in a responder-only process.
    reload: Option<ReloadEndpoint>,
}

/// What only the exporter serves: the status page's path table, and reloads.
#[derive(Debug, Clone)]
pub struct ExporterPages {
    pub paths: PathSnapshot,
    pub reload: ReloadEndpoint,
}

/// The client's address, for the reload endpoint's loopback rule.
#[derive(Debug, Clone, Copy)]
struct Peer(SocketAddr);

impl Connected<IncomingStream<'_, limit::LimitedListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, limit::LimitedListener>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

/// Serves the admin endpoints on `listener` until `shutdown` completes, then finishes the
/// requests in flight and returns.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    serve_with_status(listener, metrics, readiness, None, shutdown).await
}

/// [`serve`], with the status page of `paths` at `/`.
pub async fn serve_with_status(
    listener: TcpListener,
    metrics: Metrics,
    readiness: Readiness,
    paths: Option<PathSnapshot>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics");
    }
    let state = AppState {
        scrapes: ScrapeCache::new(metrics, scrape::FRESH_FOR),
        readiness,
        paths,
        reload: None,
    };
    serve_state(listener, state, shutdown).await
}

/// The exporter's admin server: also the status page and `POST /-/reload`.
pub async fn serve_exporter(
    listener: TcpListener,
    metrics: Metrics,
    readiness: Readiness,
    pages: ExporterPages,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics and the status page");
    }
    let state = AppState {
        scrapes: ScrapeCache::new(metrics, scrape::FRESH_FOR),
        readiness,
        paths: Some(pages.paths),
        reload: Some(pages.reload),
    };
    serve_state(listener, state, shutdown).await
}

async fn serve_state(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HttpError> {
    let listener =
        limit::LimitedListener::new(listener, limit::MAX_CONNECTIONS, limit::IDLE_TIMEOUT);
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(HttpError)
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/metrics", get(scrape))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/-/reload", post(reload).get(reload_needs_post))
        .with_state(state)
}

/// `POST /-/reload`: 200 when the exporter took the file, 400 when it kept the old config (as
/// Prometheus answers its own reload endpoint); 403, 401 or 429 when the caller may not reload
/// now ([`reload`]).
async fn reload(
    State(state): State<AppState>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    match &state.reload {
        Some(endpoint) => endpoint.answer(peer, &headers).await,
        None => (
            StatusCode::NOT_FOUND,
            "this process has no config to reload\n".into(),
        ),
    }
}

async fn reload_needs_post() -> (
    StatusCode,
    [(header::HeaderName, &'static str); 1],
    &'static str,
) {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        "use POST to reload the config\n",
    )
}

async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::from_accept(accept);
    match state.scrapes.body(format).await {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response()
        }
    }
}

/// 200 `ready` when every readiness condition holds; else 503 with `not ready:` and one line per
/// condition that does not (e.g. `device rxe1 port 1: port is down`): which device holds the
/// node back.
async fn ready(State(state): State<AppState>) -> (StatusCode, String) {
    let not_ready = state.readiness.not_ready();
    if not_ready.is_empty() {
        return (StatusCode::OK, "ready\n".to_owned());
    }
    let mut body = String::from("not ready:\n");
    for line in not_ready {
        body.push_str(&line);
        body.push('\n');
    }
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

async fn index(State(state): State<AppState>) -> Html<String> {
    let Some(paths) = &state.paths else {
        return Html(INDEX.to_string());
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let table = paths
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    Html(status::render(&table, now))
}

/// The index of a process that probes nothing (the responder).
const INDEX: &str = concat!(
    "<!doctype html><title>rdma-probe-exporter</title>",
    "<h1>rdma-probe-exporter ",
    env!("CARGO_PKG_VERSION"),
    "</h1><ul>",
    "<li><a href=\"/metrics\">/metrics</a>: for Prometheus</li>",
    "<li><a href=\"/healthz\">/healthz</a>: the process answers</li>",
    "<li><a href=\"/readyz\">/readyz</a>: every RDMA device is open and its port ACTIVE</li>",
    "</ul>\n"
);
