//! A path's own recent past, for its medians: values over a time window, thinned to a bounded
//! number of samples so that a path probed every few seconds costs no more than one probed every
//! minute.

use std::collections::VecDeque;

/// At most this many samples a baseline keeps (one per `window / SAMPLES` at most).
pub const SAMPLES: usize = 64;

/// Values of the last `window` seconds, at most one per `window / SAMPLES` seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    window: f64,
    samples: VecDeque<(f64, f64)>,
}

impl Baseline {
    pub fn new(window_seconds: f64) -> Self {
        Baseline {
            window: window_seconds,
            samples: VecDeque::new(),
        }
    }

    /// Adds `value` seen at `at` (Unix seconds), unless a sample was kept less than
    /// `window / SAMPLES` before it; forgets what is older than the window. A time before the
    /// newest sample (a clock stepped back) starts the baseline over.
    pub fn push(&mut self, at: f64, value: f64) {
        if !value.is_finite() {
            return;
        }
        if self.samples.back().is_some_and(|(t, _)| at < *t) {
            self.samples.clear();
        }
        self.forget_before(at - self.window);
        let spacing = self.window / SAMPLES as f64;
        if self.samples.back().is_some_and(|(t, _)| at - t < spacing) {
            return;
        }
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at, value));
    }

    fn forget_before(&mut self, start: f64) {
        while self.samples.front().is_some_and(|(t, _)| *t < start) {
            self.samples.pop_front();
        }
    }

    /// The median of the kept samples and `current` (the value being judged, which the rules'
    /// window includes too); `None` without any.
    pub fn median_with(&self, current: f64) -> Option<f64> {
        median(
            self.samples
                .iter()
                .map(|(_, v)| *v)
                .chain(Some(current).filter(|v| v.is_finite())),
        )
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The median as Prometheus's `quantile(0.5, …)` takes it: the middle value, or halfway
/// between the two middle ones; `None` for no values. Values that are not finite are left out.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_or_halfway_between_the_two_middle_values() {
        assert_eq!(median([]), None);
        assert_eq!(median([3.0]), Some(3.0));
        assert_eq!(median([5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median([f64::NAN, 1.0, f64::INFINITY]), Some(1.0));
    }

    #[test]
    fn a_baseline_forgets_what_left_its_window_and_thins_what_comes_too_often() {
        let mut b = Baseline::new(640.0);
        // Every second for 20 minutes: one sample per 10 s kept, only the last 640 s.
        for t in 0..1200 {
            b.push(t as f64, t as f64);
        }
        assert!(b.len() <= SAMPLES, "{}", b.len());
        assert!(b.len() >= SAMPLES - 1, "{}", b.len());
        let oldest = b.samples.front().unwrap().0;
        assert!(oldest >= 1199.0 - 640.0, "{oldest}");
        // The median of the window's values, the current one included.
        let m = b.median_with(1199.0).unwrap();
        assert!((m - (1199.0 - 320.0)).abs() <= 10.0, "{m}");
    }

    #[test]
    fn a_clock_stepped_back_starts_the_baseline_over() {
        let mut b = Baseline::new(600.0);
        b.push(1000.0, 1.0);
        b.push(1100.0, 1.0);
        b.push(900.0, 5.0);
        assert_eq!(b.len(), 1);
        assert_eq!(b.median_with(5.0), Some(5.0));
    }

    #[test]
    fn values_that_are_not_finite_are_not_kept() {
        let mut b = Baseline::new(600.0);
        b.push(1.0, f64::NAN);
        b.push(2.0, f64::INFINITY);
        assert!(b.is_empty());
        assert_eq!(b.median_with(f64::NAN), None);
    }
}
