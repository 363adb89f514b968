//! `/metrics`' body: encoded on the blocking pool rather than on the async workers that also
//! answer control handshakes, one encoding at a time, and served again to every scrape of the
//! next [`FRESH_FOR`] (docs/security.md, "What the channel does not protect"). Scrapes back to
//! back, from one client or many, then cost an encoding twice a second at most.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use tokio::sync::Mutex;

use crate::metrics::{EncodeError, Format, Metrics};

/// How long an encoded body is served again: far below any scrape interval, so one scraper
/// always sees fresh figures, and long enough that a flood of scrapes encodes twice a second.
pub const FRESH_FOR: Duration = Duration::from_millis(500);

/// The last body of each format, and when it was encoded.
#[derive(Default)]
struct Bodies {
    open_metrics: Option<(Instant, Bytes)>,
    prometheus_text: Option<(Instant, Bytes)>,
}

impl Bodies {
    fn of(&mut self, format: Format) -> &mut Option<(Instant, Bytes)> {
        match format {
            Format::OpenMetrics => &mut self.open_metrics,
            Format::PrometheusText => &mut self.prometheus_text,
        }
    }
}

/// The encoded bodies of one registry, shared by every connection of the admin server.
#[derive(Clone)]
pub struct ScrapeCache {
    metrics: Metrics,
    fresh_for: Duration,
    /// Held while encoding: a scrape that comes meanwhile waits, then takes the new body.
    bodies: Arc<Mutex<Bodies>>,
}

impl ScrapeCache {
    pub fn new(metrics: Metrics, fresh_for: Duration) -> ScrapeCache {
        ScrapeCache {
            metrics,
            fresh_for,
            bodies: Arc::default(),
        }
    }

    /// The body of a scrape in `format`: the last one if encoded within `fresh_for`, else a
    /// new one.
    pub async fn body(&self, format: Format) -> Result<Bytes, EncodeError> {
        let mut bodies = self.bodies.lock().await;
        if let Some((at, body)) = bodies.of(format) {
            if at.elapsed() < self.fresh_for {
                return Ok(body.clone());
            }
        }
        let metrics = self.metrics.clone();
        let text = tokio::task::spawn_blocking(move || metrics.encode(format))
            .await
            .map_err(|_| EncodeError)??;
        let body = Bytes::from(text);
        *bodies.of(format) = Some((Instant::now(), body.clone()));
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One more accepted session in the responder's counters: a change every encoding shows.
    fn bump(metrics: &Metrics) {
        metrics
            .responder
            .session("rxe0", crate::metrics::SessionResult::Accepted);
    }

    #[tokio::test]
    async fn a_body_is_served_again_while_fresh_and_encoded_anew_after() {
        let m = Metrics::new();
        let cached = ScrapeCache::new(m.clone(), Duration::from_secs(3600));
        let first = cached.body(Format::PrometheusText).await.unwrap();
        bump(&m);
        assert_eq!(cached.body(Format::PrometheusText).await.unwrap(), first);
        // Each format has its own body, encoded when first asked for.
        let om = cached.body(Format::OpenMetrics).await.unwrap();
        assert_ne!(om, first);
        assert!(std::str::from_utf8(&om).unwrap().ends_with("# EOF\n"));

        let fresh = ScrapeCache::new(m.clone(), Duration::ZERO);
        let before = fresh.body(Format::PrometheusText).await.unwrap();
        bump(&m);
        assert_ne!(fresh.body(Format::PrometheusText).await.unwrap(), before);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn scrapes_at_once_share_one_body() {
        let m = Metrics::new();
        let cached = ScrapeCache::new(m.clone(), Duration::from_secs(3600));
        let scrapes: Vec<_> = (0..32)
            .map(|_| {
                let cached = cached.clone();
                let m = m.clone();
                tokio::spawn(async move {
                    let body = cached.body(Format::PrometheusText).await.unwrap();
                    bump(&m);
                    body
                })
            })
            .collect();
        let mut bodies = Vec::new();
        for scrape in scrapes {
            bodies.push(scrape.await.unwrap());
        }
        assert!(bodies.iter().all(|b| *b == bodies[0]), "one encoding");
    }
}
