//! The path table the status page reads: a copy of each path's last result, written only by
//! the recorder.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;

use super::{PathLabels, ProbeRecord, ProbeResult};
use crate::reason::ErrorReason;

/// The last result of one path, and its counts, for the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathStatus {
    pub path: PathLabels,
    pub last: Option<ProbeRecord>,
    pub last_success_unix_seconds: Option<f64>,
    /// The last failure's reason and message, and when, kept after later successes.
    pub last_error: Option<(ErrorReason, String, f64)>,
    pub runs: u64,
    pub failures: u64,
}

/// A copy of the path table, read by the status page; written only by the recorder.
pub type PathSnapshot = Arc<RwLock<BTreeMap<PathLabels, PathStatus>>>;

impl PathStatus {
    /// A path attempted, not yet finished.
    pub(super) fn new(path: PathLabels) -> Self {
        PathStatus {
            path,
            last: None,
            last_success_unix_seconds: None,
            last_error: None,
            runs: 0,
            failures: 0,
        }
    }

    /// Takes a finished probe: a deferral is not a run, and the last failure stays after
    /// later successes.
    pub(super) fn record(&mut self, record: ProbeRecord) {
        match &record.result {
            ProbeResult::Success { .. } => {
                self.runs += 1;
                self.last_success_unix_seconds = Some(record.at_unix_seconds);
            }
            ProbeResult::Failure {
                reason, message, ..
            } => {
                self.runs += 1;
                self.failures += 1;
                self.last_error = Some((*reason, message.clone(), record.at_unix_seconds));
            }
            ProbeResult::Deferred { .. } => {}
        }
        self.last = Some(record);
    }
}
