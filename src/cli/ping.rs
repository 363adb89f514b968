//! `probe --ping`: pings one path from the local device's ping engine, then prints what
//! `ib_write_lat` prints (the round trip's min, median, tail and max) and the loss.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use crate::ping::path::{Counts, WindowSummary};
use crate::ping::{PingReports, PingSettings, Pinger};
use crate::prober::{self, device_placement, BurstWorker, ProbeSettings};
use crate::verbs::Context;

/// A ping whose first answer (the ack) has not come after this is lost.
const TIMEOUT: Duration = Duration::from_secs(1);

/// What `probe --ping --json` prints.
#[derive(Debug, Serialize)]
struct PingOutcome {
    target: String,
    device: String,
    peer_device: String,
    timestamps: &'static str,
    sent: u64,
    lost: u64,
    loss_ratio: f64,
    /// Answered pings whose timestamps contradict each other (no RTT).
    invalid: u64,
    samples: usize,
    rtt_min_us: Option<f64>,
    rtt_p50_us: Option<f64>,
    rtt_p90_us: Option<f64>,
    rtt_p99_us: Option<f64>,
    rtt_max_us: Option<f64>,
    responder_p50_us: Option<f64>,
}

/// Sends `count` pings `interval` apart on the path `settings` names and prints the figures.
/// Exit status 0 when at least one ping was answered.
pub(super) async fn run(
    settings: &ProbeSettings,
    count: u64,
    interval: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let local = &settings.local;
    let ctx = Context::open(local.device.as_deref(), local.port)?;
    let device = ctx.device_name().to_owned();
    let (reports_tx, reports) = mpsc::channel::<PingReports<()>>();
    // Every sample stays in the window, and the target for as long as the run.
    let run_for = interval.mul_f64(1.1 * count as f64 + 1.0) + TIMEOUT;
    let engine = PingSettings {
        interval,
        timeout: TIMEOUT,
        window: run_for,
        max_rate: 100_000,
        ttl: run_for + TIMEOUT,
        max_paths: 1,
    };
    let report = Box::new(move |r| {
        let _ = reports_tx.send(r);
    });
    let pinger = Pinger::start(&device, local.port, engine, report)?;
    let worker = BurstWorker::start(device_placement(&device).await)?;
    let (mut target, peer_device) =
        prober::learn_ping_target(ctx, worker, settings, pinger.qpn()).await?;
    target.count = Some(count);
    pinger.confirm((), target);
    // The last ping goes out within `count` jittered intervals of the first, which goes within
    // one; it is answered or lost `TIMEOUT` later, and reported within an interval after that.
    tokio::time::sleep(run_for + 2 * interval).await;
    let last = reports
        .try_iter()
        .filter_map(|r| r.paths.into_iter().next().map(|p| (r.timestamps, p)))
        .last()
        .context("the ping engine reported nothing")?;
    let (timestamps, path) = last;
    let outcome = outcome(
        &settings.target,
        device,
        peer_device,
        timestamps.label(),
        path.counts,
        path.window,
    );
    print(&outcome, json)?;
    Ok(if outcome.samples > 0 || outcome.sent > outcome.lost {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: no ping to {} was answered ({} sent)",
            settings.target, outcome.sent
        );
        ExitCode::FAILURE
    })
}

fn outcome(
    target: &str,
    device: String,
    peer_device: String,
    timestamps: &'static str,
    counts: Counts,
    window: Option<WindowSummary>,
) -> PingOutcome {
    let us = |f: fn(&WindowSummary) -> Duration| window.map(|w| f(&w).as_secs_f64() * 1e6);
    PingOutcome {
        target: target.to_owned(),
        device,
        peer_device,
        timestamps,
        sent: counts.sent,
        lost: counts.lost,
        loss_ratio: if counts.sent == 0 {
            0.0
        } else {
            counts.lost as f64 / counts.sent as f64
        },
        invalid: counts.invalid,
        samples: window.map_or(0, |w| w.samples),
        rtt_min_us: us(|w| w.rtt_min),
        rtt_p50_us: us(|w| w.rtt_p50),
        rtt_p90_us: us(|w| w.rtt_p90),
        rtt_p99_us: us(|w| w.rtt_p99),
        rtt_max_us: us(|w| w.rtt_max),
        responder_p50_us: us(|w| w.responder_p50),
    }
}

fn print(o: &PingOutcome, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let text = if json {
        serde_json::to_string(o).context("serializing the ping outcome")? + "\n"
    } else {
        table(o)
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

fn table(o: &PingOutcome) -> String {
    let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    format!(
        " target           : {} ({} -> {})\n \
         timestamps       : {}\n \
         pings            : {} sent, {} lost ({:.2}%), {} measured\n \
         RTT usec         : min {}  median {}  p90 {}  p99 {}  max {}\n \
         responder usec   : median {} (taken out of each RTT)\n",
        o.target,
        o.device,
        o.peer_device,
        o.timestamps,
        o.sent,
        o.lost,
        100.0 * o.loss_ratio,
        o.samples,
        us(o.rtt_min_us),
        us(o.rtt_p50_us),
        us(o.rtt_p90_us),
        us(o.rtt_p99_us),
        us(o.rtt_max_us),
        us(o.responder_p50_us),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_every_figure_and_absent_ones_as_a_dash() {
        let target = "node-b:18516";
        let ms = Duration::from_millis;
        let window = WindowSummary {
            samples: 98,
            rtt_min: ms(2),
            rtt_p50: ms(3),
            rtt_p90: ms(4),
            rtt_p99: ms(9),
            rtt_max: ms(12),
            responder_p50: Duration::from_micros(150),
        };
        let counts = Counts {
            sent: 100,
            lost: 2,
            ..Counts::default()
        };
        let o = outcome(
            target,
            "rxe0".into(),
            "rxe1".into(),
            "software",
            counts,
            Some(window),
        );
        let text = table(&o);
        assert!(text.contains("node-b:18516 (rxe0 -> rxe1)"), "{text}");
        assert!(
            text.contains("100 sent, 2 lost (2.00%), 98 measured"),
            "{text}"
        );
        assert!(
            text.contains("min 2000.00  median 3000.00  p90 4000.00  p99 9000.00  max 12000.00"),
            "{text}"
        );
        let json = serde_json::to_value(&o).unwrap();
        assert_eq!(json["loss_ratio"], 0.02);
        assert_eq!(json["rtt_p99_us"], 9000.0);
        let none = outcome(
            target,
            "rxe0".into(),
            "rxe1".into(),
            "software",
            counts,
            None,
        );
        assert!(table(&none).contains("min -  median -"), "{}", table(&none));
    }
}
