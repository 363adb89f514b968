//! The probe families of the metric contract (docs/metrics.md), and the one task that writes
//! them.
//!
//! Device workers never touch a metric: they send [`ProbeEvent`]s over a bounded channel to
//! [`ProbeRecorder`], which owns the families and the table of known paths. A scrape encodes the
//! registry (atomics behind read locks) and never waits on a burst; the status page reads a
//! [`PathSnapshot`] copy of the table. One writer also makes the series bookkeeping simple: a
//! path removed by a reload loses every one of its series, reasons and results included.
//!
//! - `event`: what the recorder is told ([`ProbeEvent`], [`ProbeRecord`]);
//! - `families`: the families and their label sets, registered once;
//! - `judged`: every path judged where its probes are, shown per device and crossing;
//! - `recorder`: [`ProbeRecorder`], the one writer of the families and of the path table;
//! - `snapshot`: the path table the status page reads ([`PathStatus`]).

mod bad_rows;
mod event;
mod families;
mod judged;
mod recorder;
mod snapshot;
#[cfg(test)]
mod tests;

pub use event::{
    BurstFigures, CounterRecord, DeferReason, DeviceScheduleFigures, Direction, InfoLabels,
    OtherTrafficRecord, ProbeEvent, ProbeRecord, ProbeResult, Side,
};
pub use families::{PathLabels, ProbeFamilies};
pub(crate) use recorder::unix_now;
pub use recorder::ProbeRecorder;
pub use snapshot::{PathSnapshot, PathStatus};
