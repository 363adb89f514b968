//! Burst statistics: the perftest numbers, plus what the mean hides.
//!
//! Bandwidth and message rate follow perftest (docs/architecture.md, "ib_write_bw semantics"):
//! payload bytes, and completed WRs, over the elapsed time from the burst start to the last
//! completion. Next to them come the lowest bandwidth over short windows and the longest gap
//! between completions, so that a PFC pause or a stall shows up even when the average looks fine.
//!
//! Everything is aggregated incrementally in O(QPs) memory: a 10 GB burst is not a list of
//! 150 000 completion times.
//!
//! ## Definitions
//! - **Start**: [`BurstStats::on_start`] if called (a paced burst passes the pacer's `t = 0`,
//!   see [`super::pacing`]), else the first post, else the first completion.
//! - **Elapsed**: start → last completion. Zero elapsed gives zero rates, never NaN or ∞.
//! - **Windows**: fixed windows of `window` length aligned to the start. A completion's bytes
//!   are spread evenly over the time since the previous completion (any QP; the first one over
//!   the time since the start): they are what moved in that interval. So a steady stream gives
//!   every window the same bandwidth whatever the phase of completions against window edges (no
//!   ±1-completion artefact, no short first window), and a pause shows as windows holding only
//!   a thin share of the one completion that ended it — near zero.
//! - **Final partial window**: the window holding the last completion is cut short by the end of
//!   the burst; it is merged into the window before it (bandwidth = their bytes over their
//!   combined length), so a tiny tail can produce neither a fake low nor a fake high value.
//! - **Burst shorter than one window**: the minimum window bandwidth is the burst's bandwidth.
//! - **Completion gap**: the longest time between consecutive completions (all QPs together),
//!   counting the first post → first completion interval.
//! - **Per-QP bandwidth**: a QP's bytes over start → its last completion (0 for a QP that
//!   completed nothing); reported as a minimum when there are several QPs.

use std::time::Duration;

use serde::{Serialize, Serializer};

/// Default length of the short windows for [`BurstReport::min_window_bandwidth_bytes_per_second`].
pub const DEFAULT_WINDOW: Duration = Duration::from_millis(10);

/// A window should span at least this many completions at the expected pace, else the jitter
/// of a single completion time moves a window's bandwidth a lot (with 20, one completion that
/// arrives a whole interval late changes a window by about 5%).
pub const MIN_COMPLETIONS_PER_WINDOW: u32 = 20;

/// The window to use for a burst expected to run at `messages_per_second` with one completion
/// every `messages_per_completion` messages: [`DEFAULT_WINDOW`], or longer so that a window holds
/// [`MIN_COMPLETIONS_PER_WINDOW`] completions (e.g. 20 ms at 1000 msg/s signaling every WR).
/// Unknown rate: the default.
pub fn window_for_rate(messages_per_second: Option<f64>, messages_per_completion: u32) -> Duration {
    let Some(rate) = messages_per_second.filter(|r| r.is_finite() && *r > 0.0) else {
        return DEFAULT_WINDOW;
    };
    let needed =
        f64::from(MIN_COMPLETIONS_PER_WINDOW) * f64::from(messages_per_completion.max(1)) / rate;
    // Capped at an hour: longer than any burst, so the whole burst is one window.
    let needed = Duration::try_from_secs_f64(needed.min(3600.0)).unwrap_or(DEFAULT_WINDOW);
    needed.max(DEFAULT_WINDOW)
}

fn serialize_seconds<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The result of one burst (the data phase only; setup time is measured elsewhere).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BurstReport {
    /// Payload bytes completed.
    pub bytes: u64,
    /// Messages (WRs) completed.
    pub messages: u64,
    /// Completion queue entries seen (one per signaled WR).
    pub completions: u64,
    /// Start → last completion.
    #[serde(rename = "elapsed_seconds", serialize_with = "serialize_seconds")]
    pub elapsed: Duration,
    /// bytes / elapsed.
    pub bandwidth_bytes_per_second: f64,
    /// messages / elapsed.
    pub message_rate_per_second: f64,
    /// Lowest bandwidth over the short windows (see the module docs).
    pub min_window_bandwidth_bytes_per_second: f64,
    /// The window length used for the minimum.
    #[serde(rename = "window_seconds", serialize_with = "serialize_seconds")]
    pub window: Duration,
    /// Longest interval between consecutive completions, including first post → first one.
    #[serde(
        rename = "completion_gap_max_seconds",
        serialize_with = "serialize_seconds"
    )]
    pub completion_gap_max: Duration,
    /// CPU time the burst thread used; filled in by the engine.
    pub cpu_seconds: Option<f64>,
    /// Lowest per-QP bandwidth when the burst used several QPs, else `None`: on RoCE v2 each QP
    /// takes its own ECMP path, so one slow path among good ones shows here, not in the total.
    pub per_qp_bandwidth_min_bytes_per_second: Option<f64>,
    /// Highest per-QP bandwidth when the burst used several QPs, else `None`.
    pub per_qp_bandwidth_max_bytes_per_second: Option<f64>,
    /// Each QP's bandwidth, in QP order.
    pub per_qp_bandwidth_bytes_per_second: Vec<f64>,
}

/// `amount / seconds`, or 0 when no time passed.
fn per_second(amount: f64, elapsed_ns: u64) -> f64 {
    if elapsed_ns == 0 {
        0.0
    } else {
        amount * 1e9 / elapsed_ns as f64
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct QpTotals {
    bytes: u64,
    last_completion_ns: Option<u64>,
}

/// Incremental minimum over fixed windows of spread completion bytes (O(1) memory).
#[derive(Debug, Clone)]
struct Windows {
    window_ns: u64,
    /// Index of the open window and the bytes attributed to it so far.
    index: u64,
    bytes: f64,
    /// The last closed window's bytes, kept aside so the final partial window can merge in.
    previous: Option<f64>,
    /// Lowest bytes of the closed windows before `previous`.
    min_closed: Option<f64>,
}

impl Windows {
    fn new(window_ns: u64) -> Self {
        Self {
            window_ns,
            index: 0,
            bytes: 0.0,
            previous: None,
            min_closed: None,
        }
    }

    fn commit(&mut self, bytes: f64) {
        self.min_closed = Some(self.min_closed.map_or(bytes, |m| m.min(bytes)));
    }

    /// Closes the open window; the full windows strictly between it and `next` each hold
    /// `middle_bytes`; window `next` opens.
    fn close(&mut self, next: u64, middle_bytes: f64) {
        if let Some(previous) = self.previous.take() {
            self.commit(previous);
        }
        let middle = next.saturating_sub(self.index).saturating_sub(1);
        let mut last = self.bytes;
        if middle >= 1 {
            self.commit(last);
            if middle >= 2 {
                self.commit(middle_bytes);
            }
            last = middle_bytes;
        }
        self.previous = Some(last);
        self.index = next;
        self.bytes = 0.0;
    }

    /// Spreads `bytes` evenly over `[a, t)` (ns since the origin); an empty interval puts them
    /// at `t`. Intervals arrive in order and back to back.
    fn add(&mut self, a: u64, t: u64, bytes: f64) {
        let w = self.window_ns;
        if t <= a {
            let k = t / w;
            if k > self.index {
                self.close(k, 0.0);
            }
            self.bytes += bytes;
            return;
        }
        let density = bytes / (t - a) as f64;
        let (first, last) = (a / w, (t - 1) / w);
        if first > self.index {
            self.close(first, 0.0);
        }
        if first == last {
            self.bytes += bytes;
            return;
        }
        self.bytes += ((first + 1) * w - a) as f64 * density;
        self.close(last, w as f64 * density);
        self.bytes += (t - last * w) as f64 * density;
    }

    /// Lowest window bandwidth for a burst that ended at `end` (ns since the origin), or `None`
    /// if it fits in one window.
    fn min_bandwidth(&self, end: u64) -> Option<f64> {
        let w = self.window_ns;
        let tail = end.saturating_sub(self.index.saturating_mul(w));
        let closed = self.min_closed.map(|b| per_second(b, w));
        let candidate = match self.previous {
            // Never left the first window (then `tail <= w`): the burst is its own window.
            None => return None,
            // The open window is in fact complete.
            Some(p) if tail >= w => per_second(p, w).min(per_second(self.bytes, w)),
            // Merge the final partial window into the last full one.
            Some(p) => per_second(p + self.bytes, w.saturating_add(tail)),
        };
        Some(closed.map_or(candidate, |c| c.min(candidate)))
    }
}

/// Accumulates one burst's completions; see the module docs for the definitions.
///
/// Times are [`Duration`]s since any fixed reference the engine chooses (e.g. the burst start
/// `Instant`); they should not go backwards, and a time that does is treated as "no time passed".
#[derive(Debug, Clone)]
pub struct BurstStats {
    start_ns: Option<u64>,
    first_post_ns: Option<u64>,
    /// Latest time seen (post or completion), for the gap and monotonicity.
    last_event_ns: Option<u64>,
    last_completion_ns: Option<u64>,
    /// The due time of a paced burst's last message, when it was posted before it.
    paced_end_ns: Option<u64>,
    bytes: u64,
    messages: u64,
    completions: u64,
    gap_max_ns: u64,
    windows: Windows,
    per_qp: Vec<QpTotals>,
    cpu_seconds: Option<f64>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl BurstStats {
    /// Statistics for a burst over `qps` QPs with windows of `window` (zero is taken as
    /// [`DEFAULT_WINDOW`]).
    pub fn new(qps: u16, window: Duration) -> Self {
        let window = if window.is_zero() {
            DEFAULT_WINDOW
        } else {
            window
        };
        Self {
            start_ns: None,
            first_post_ns: None,
            last_event_ns: None,
            last_completion_ns: None,
            paced_end_ns: None,
            bytes: 0,
            messages: 0,
            completions: 0,
            gap_max_ns: 0,
            windows: Windows::new(nanos(window)),
            per_qp: vec![QpTotals::default(); usize::from(qps.max(1))],
            cpu_seconds: None,
        }
    }

    /// Sets the burst start explicitly (a paced burst: the pacer's `t = 0`, one interval before
    /// the first post). Call before the first completion; later calls are ignored.
    pub fn on_start(&mut self, t: Duration) {
        if self.start_ns.is_none() && self.completions == 0 {
            self.start_ns = Some(nanos(t));
        }
    }

    /// A paced burst posted a message before its due time `due` (the closing message of a
    /// duration burst, posted when the duration is up): the burst is timed to that due time at
    /// least, so that it never reads above its pace. The latest due time told counts.
    pub fn on_paced_end(&mut self, due: Duration) {
        let due = nanos(due);
        self.paced_end_ns = Some(self.paced_end_ns.map_or(due, |d| d.max(due)));
    }

    /// The end of the timed interval: the last completion, or a later due time of the last
    /// message ([`BurstStats::on_paced_end`]); `None` before any completion.
    fn end_ns(&self, last_completion_ns: Option<u64>) -> Option<u64> {
        last_completion_ns.map(|l| self.paced_end_ns.map_or(l, |s| l.max(s)))
    }

    /// Records the first post (later calls are ignored).
    pub fn on_first_post(&mut self, t: Duration) {
        if self.first_post_ns.is_none() {
            let t = nanos(t);
            self.first_post_ns = Some(t);
            self.last_event_ns = Some(self.last_event_ns.map_or(t, |l| l.max(t)));
        }
    }

    /// Records the CPU time of the burst thread (the engine measures it).
    pub fn set_cpu_seconds(&mut self, seconds: f64) {
        self.cpu_seconds = Some(seconds).filter(|s| s.is_finite() && *s >= 0.0);
    }

    fn origin_ns(&self) -> Option<u64> {
        self.start_ns.or(self.first_post_ns)
    }

    /// Records one successful completion on QP `qp` at `t`, covering `messages` WRs and `bytes`
    /// payload bytes (with CQ moderation one completion covers several WRs).
    pub fn on_completion(&mut self, qp: u16, t: Duration, messages: u64, bytes: u64) {
        let mut t = nanos(t);
        if let Some(last) = self.last_event_ns {
            t = t.max(last);
            self.gap_max_ns = self.gap_max_ns.max(t - last);
        }
        self.last_event_ns = Some(t);
        if self.origin_ns().is_none() {
            self.first_post_ns = Some(t);
        }
        let origin = self.origin_ns().unwrap_or(t);
        // The bytes moved since the previous completion (or since the start).
        let covered_from = self
            .last_completion_ns
            .unwrap_or(origin)
            .saturating_sub(origin);
        self.windows
            .add(covered_from, t.saturating_sub(origin), bytes as f64);

        self.bytes = self.bytes.saturating_add(bytes);
        self.messages = self.messages.saturating_add(messages);
        self.completions += 1;
        self.last_completion_ns = Some(t);

        let qp = usize::from(qp);
        if qp >= self.per_qp.len() {
            self.per_qp.resize(qp + 1, QpTotals::default());
        }
        let totals = &mut self.per_qp[qp];
        totals.bytes = totals.bytes.saturating_add(bytes);
        totals.last_completion_ns = Some(t);
    }

    /// The report so far (normally called once, after the last completion).
    pub fn finish(&self) -> BurstReport {
        let origin = self.origin_ns();
        let elapsed_ns = match (origin, self.end_ns(self.last_completion_ns)) {
            (Some(o), Some(l)) => l.saturating_sub(o),
            _ => 0,
        };
        let bandwidth = per_second(self.bytes as f64, elapsed_ns);
        let min_window = self.windows.min_bandwidth(elapsed_ns).unwrap_or(bandwidth);
        let per_qp: Vec<f64> = self
            .per_qp
            .iter()
            .map(|q| match (origin, self.end_ns(q.last_completion_ns)) {
                (Some(o), Some(l)) => per_second(q.bytes as f64, l.saturating_sub(o)),
                _ => 0.0,
            })
            .collect();
        let several = per_qp.len() > 1;
        let per_qp_min = several.then(|| per_qp.iter().copied().fold(f64::INFINITY, f64::min));
        let per_qp_max = several.then(|| per_qp.iter().copied().fold(0.0, f64::max));
        BurstReport {
            bytes: self.bytes,
            messages: self.messages,
            completions: self.completions,
            elapsed: Duration::from_nanos(elapsed_ns),
            bandwidth_bytes_per_second: bandwidth,
            message_rate_per_second: per_second(self.messages as f64, elapsed_ns),
            min_window_bandwidth_bytes_per_second: min_window,
            window: Duration::from_nanos(self.windows.window_ns),
            completion_gap_max: Duration::from_nanos(self.gap_max_ns),
            cpu_seconds: self.cpu_seconds,
            per_qp_bandwidth_min_bytes_per_second: per_qp_min,
            per_qp_bandwidth_max_bytes_per_second: per_qp_max,
            per_qp_bandwidth_bytes_per_second: per_qp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn empty_burst_is_all_zero() {
        let r = BurstStats::new(1, DEFAULT_WINDOW).finish();
        assert_eq!(r.bytes, 0);
        assert_eq!(r.elapsed, Duration::ZERO);
        assert_eq!(r.bandwidth_bytes_per_second, 0.0);
        assert_eq!(r.message_rate_per_second, 0.0);
        assert_eq!(r.min_window_bandwidth_bytes_per_second, 0.0);
        assert_eq!(r.per_qp_bandwidth_min_bytes_per_second, None);
    }

    #[test]
    fn zero_elapsed_gives_zero_not_nan() {
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(ms(5));
        s.on_completion(0, ms(5), 1, 65536);
        let r = s.finish();
        assert_eq!(r.bandwidth_bytes_per_second, 0.0);
        assert_eq!(r.min_window_bandwidth_bytes_per_second, 0.0);
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("NaN") && !json.contains("inf"), "{json}");
    }

    #[test]
    fn a_message_posted_before_its_due_time_is_timed_to_its_due_time() {
        // Paced at 1,000 msg/s from t = 0: four messages complete at their due times (1..4 ms),
        // the closing one is posted at 4.5 ms (the duration is up) and completes at 4.6 ms; its
        // due time is 5 ms. Timed to 4.6 ms the 5 messages would read 8.7% above the pace.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_start(Duration::ZERO);
        s.on_first_post(ms(1));
        for i in 1..=4 {
            s.on_completion(0, ms(i), 1, 1000);
        }
        s.on_paced_end(ms(5));
        s.on_completion(0, Duration::from_micros(4600), 1, 1000);
        let r = s.finish();
        assert_eq!(r.elapsed, ms(5));
        assert!(close(r.bandwidth_bytes_per_second, 1e6), "{r:?}");
        assert!(close(r.message_rate_per_second, 1000.0));
        assert!(close(r.per_qp_bandwidth_bytes_per_second[0], 1e6));
        // A completion after the due time ends the burst where it came.
        s.on_completion(0, ms(7), 1, 1000);
        assert_eq!(s.finish().elapsed, ms(7));
    }

    #[test]
    fn steady_burst() {
        // 1 GB/s: a 1 MB completion every ms for 100 ms, first post at 0.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..=100 {
            s.on_completion(0, ms(i), 16, 1_000_000);
        }
        let r = s.finish();
        assert_eq!(r.bytes, 100_000_000);
        assert_eq!(r.messages, 1600);
        assert_eq!(r.completions, 100);
        assert_eq!(r.elapsed, ms(100));
        assert!(close(r.bandwidth_bytes_per_second, 1e9));
        assert!(close(r.message_rate_per_second, 16_000.0));
        assert!(close(r.min_window_bandwidth_bytes_per_second, 1e9), "{r:?}");
        assert_eq!(r.completion_gap_max, ms(1));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["elapsed_seconds"], 0.1);
        assert_eq!(json["completion_gap_max_seconds"], 0.001);
        assert_eq!(json["cpu_seconds"], serde_json::Value::Null);
    }

    #[test]
    fn a_pause_shows_in_min_window_and_gap() {
        // 1 GB/s for 200 ms with a 30 ms pause (no completions) in the middle.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in (1..=200).filter(|i| !(100..130).contains(i)) {
            s.on_completion(0, ms(i), 1, 1_000_000);
        }
        let r = s.finish();
        // The completion that ended the pause is spread over its 31 ms: the windows inside the
        // pause hold 10/31 of 1 MB each, 32 MB/s against 1 GB/s.
        assert!(
            close(r.min_window_bandwidth_bytes_per_second, 1e6 / 0.031),
            "{r:?}"
        );
        assert_eq!(r.completion_gap_max, ms(31));
        assert!(r.bandwidth_bytes_per_second > 0.8e9);
    }

    #[test]
    fn a_slow_stretch_shows_in_min_window() {
        // 1 GB/s, but 20 ms (two whole windows) at half rate.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..=100u64 {
            let slow = (40..60).contains(&i);
            if !slow || i % 2 == 0 {
                s.on_completion(0, ms(i), 1, 1_000_000);
            }
        }
        let r = s.finish();
        assert!(
            close(r.min_window_bandwidth_bytes_per_second, 0.5e9),
            "{r:?}"
        );
    }

    #[test]
    fn tiny_final_partial_window_is_merged() {
        // Steady 1 GB/s for 100 ms, then one last completion 0.1 ms into the next window.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..100 {
            s.on_completion(0, ms(i), 1, 1_000_000);
        }
        s.on_completion(0, ms(100) + Duration::from_micros(100), 1, 1_000_000);
        let r = s.finish();
        // Neither the 0.1 ms tail over a full window (fake low) nor over its own length (fake
        // high): merged, 9+1 MB over 10.1 ms.
        assert!(r.min_window_bandwidth_bytes_per_second > 0.98e9, "{r:?}");
        assert!(r.min_window_bandwidth_bytes_per_second <= 1.0e9, "{r:?}");
    }

    #[test]
    fn burst_shorter_than_a_window() {
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        s.on_completion(0, ms(2), 1, 2_000_000);
        s.on_completion(0, ms(4), 1, 2_000_000);
        let r = s.finish();
        assert!(close(r.min_window_bandwidth_bytes_per_second, 1e9));
        assert!(close(r.bandwidth_bytes_per_second, 1e9));
    }

    #[test]
    fn paced_start_is_used_for_elapsed() {
        // Paced at 1000 msg/s: epoch 0, posts at 1, 2, ... 10 ms, completions 10 µs later.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_start(Duration::ZERO);
        s.on_first_post(ms(1));
        for i in 1..=10 {
            s.on_completion(0, ms(i) + Duration::from_micros(10), 1, 1000);
        }
        let r = s.finish();
        assert_eq!(r.elapsed, ms(10) + Duration::from_micros(10));
        // 10 messages over 10.01 ms, not over 9.01 ms (the (N-1) bias).
        assert!((r.message_rate_per_second - 1000.0).abs() < 1.0, "{r:?}");
        assert_eq!(r.completion_gap_max, ms(1));
    }

    #[test]
    fn per_qp_minimum() {
        let mut s = BurstStats::new(3, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..=10 {
            s.on_completion(0, ms(i), 1, 1000);
            s.on_completion(1, ms(i), 1, 500);
        }
        let r = s.finish();
        // QP 2 completed nothing: its bandwidth is 0, and that is the minimum.
        assert_eq!(r.per_qp_bandwidth_min_bytes_per_second, Some(0.0));
        let mut s = BurstStats::new(2, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..=10 {
            s.on_completion(0, ms(i), 1, 1000);
            s.on_completion(1, ms(i), 1, 500);
        }
        let r = s.finish();
        assert!(close(
            r.per_qp_bandwidth_min_bytes_per_second.unwrap(),
            500_000.0
        ));
        assert!(close(
            r.per_qp_bandwidth_max_bytes_per_second.unwrap(),
            1_000_000.0
        ));
        assert_eq!(r.per_qp_bandwidth_bytes_per_second.len(), 2);
        assert!(close(r.bandwidth_bytes_per_second, 1_500_000.0));
    }

    #[test]
    fn one_slow_qp_among_fast_ones_shows_in_the_per_qp_figures() {
        // Three QPs finish 100 KB each in 10 ms; the fourth, on a slow path, takes 100 ms.
        let mut s = BurstStats::new(4, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        for i in 1..=10 {
            for q in 0..3 {
                s.on_completion(q, ms(i), 1, 10_000);
            }
        }
        for i in 1..=10 {
            s.on_completion(3, ms(10 * i), 1, 10_000);
        }
        let r = s.finish();
        let per_qp = &r.per_qp_bandwidth_bytes_per_second;
        assert!(
            close(per_qp[0], 10e6) && close(per_qp[2], 10e6),
            "{per_qp:?}"
        );
        assert!(close(per_qp[3], 1e6), "{per_qp:?}");
        assert!(close(r.per_qp_bandwidth_min_bytes_per_second.unwrap(), 1e6));
        assert!(close(
            r.per_qp_bandwidth_max_bytes_per_second.unwrap(),
            10e6
        ));
        // The total is bytes over the whole burst: the slow QP drags it, but hides which QP.
        assert!(close(r.bandwidth_bytes_per_second, 4e6));
        // One QP: no per-QP figures beyond the total's.
        let mut s = BurstStats::new(1, DEFAULT_WINDOW);
        s.on_first_post(Duration::ZERO);
        s.on_completion(0, ms(1), 1, 1000);
        let r = s.finish();
        assert_eq!(r.per_qp_bandwidth_max_bytes_per_second, None);
        assert_eq!(r.per_qp_bandwidth_bytes_per_second.len(), 1);
    }

    #[test]
    fn window_for_rate_keeps_enough_completions() {
        assert_eq!(window_for_rate(None, 1), DEFAULT_WINDOW);
        assert_eq!(window_for_rate(Some(1e6), 1), DEFAULT_WINDOW);
        assert_eq!(window_for_rate(Some(1000.0), 1), ms(20));
        assert_eq!(window_for_rate(Some(100.0), 1), ms(200));
        assert_eq!(window_for_rate(Some(1e5), 100), ms(20));
        assert_eq!(window_for_rate(Some(1e-9), 1), Duration::from_secs(3600));
        assert_eq!(window_for_rate(Some(f64::NAN), 1), DEFAULT_WINDOW);
    }

    proptest! {
        /// Arbitrary (even backwards or huge) times and amounts never produce NaN, infinity or a
        /// panic, and the invariants hold.
        #[test]
        fn report_is_always_finite(
            qps in 0u16..4,
            window_us in 0u64..50_000,
            start in proptest::option::of(0u64..1_000_000_000),
            first_post in proptest::option::of(0u64..1_000_000_000),
            events in proptest::collection::vec(
                (0u16..6, 0u64..2_000_000_000, 0u64..1_000, 0u64..(1 << 40)), 0..200),
        ) {
            let mut s = BurstStats::new(qps, Duration::from_micros(window_us));
            if let Some(t) = start { s.on_start(Duration::from_nanos(t)); }
            if let Some(t) = first_post { s.on_first_post(Duration::from_nanos(t)); }
            for (qp, t, m, b) in &events {
                s.on_completion(*qp, Duration::from_nanos(*t), *m, *b);
            }
            let r = s.finish();
            for v in [r.bandwidth_bytes_per_second, r.message_rate_per_second,
                      r.min_window_bandwidth_bytes_per_second] {
                prop_assert!(v.is_finite() && v >= 0.0, "{:?}", r);
            }
            if let Some(v) = r.per_qp_bandwidth_min_bytes_per_second {
                prop_assert!(v.is_finite() && v >= 0.0);
            }
            prop_assert_eq!(r.completions, events.len() as u64);
            // Windows partition the burst, so the lowest cannot exceed the mean.
            prop_assert!(
                r.min_window_bandwidth_bytes_per_second
                    <= r.bandwidth_bytes_per_second * (1.0 + 1e-9),
                "{:?}", r
            );
        }

        /// For a steady stream the minimum window is the mean bandwidth, whatever the window
        /// length, the completion interval and the burst length.
        #[test]
        fn steady_stream_min_window_matches_mean(
            interval_us in 1u64..20_000,
            count in 1u64..3_000,
            window_ms in 1u64..50,
            paced_start in any::<bool>(),
        ) {
            let mut s = BurstStats::new(1, ms(window_ms));
            if paced_start {
                s.on_start(Duration::ZERO);
                s.on_first_post(Duration::from_micros(interval_us));
            } else {
                s.on_first_post(Duration::ZERO);
            }
            for i in 1..=count {
                s.on_completion(0, Duration::from_micros(i * interval_us), 1, 1000);
            }
            let r = s.finish();
            let mean = r.bandwidth_bytes_per_second;
            prop_assert!(close(mean, 1e9 / interval_us as f64));
            prop_assert!(
                (r.min_window_bandwidth_bytes_per_second / mean - 1.0).abs() < 1e-9,
                "min {} mean {}", r.min_window_bandwidth_bytes_per_second, mean
            );
        }
    }
}
