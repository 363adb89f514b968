//! `judge:`: the thresholds and windows each path is judged by, each checked alone, then
//! together (a loss band that is empty judges nothing).

use serde_saphyr::Spanned;

use super::Ctx;
use crate::config::error::ConfigError;
use crate::config::file::{RawJudge, Scalar};
use crate::config::model::{Judge, MAX_JUDGE_COUNT, MAX_JUDGE_WINDOW};

impl Ctx<'_> {
    pub(super) fn judge(&self, raw: Option<&Spanned<RawJudge>>) -> Result<Judge, ConfigError> {
        let mut judge = Judge::default();
        let Some(raw) = raw else {
            return Ok(judge);
        };
        let r = &raw.value;
        let count = |s: &Scalar, field: &str| {
            self.number::<u32>(s, &format!("judge.{field}"), 1, MAX_JUDGE_COUNT)
        };
        let window = |s: &Scalar, field: &str| {
            self.number::<u32>(s, &format!("judge.{field}"), 1, MAX_JUDGE_WINDOW)
        };
        // A fraction above 0% and at most 100%.
        let fraction = |s: &Scalar, field: &str| {
            self.percentage(s, &format!("judge.{field}"), |p| p > 0.0 && p <= 100.0)
        };
        macro_rules! set {
            ($field:ident, $parse:expr) => {
                if let Some(s) = &r.$field {
                    judge.$field = $parse(s, stringify!($field))?;
                }
            };
        }
        set!(probes_bad, count);
        set!(degraded_ratio, fraction);
        set!(baseline_drop, fraction);
        set!(stall_min_window_ratio, fraction);
        set!(gap_factor, count);
        set!(gap_floor, |s, f: &str| self
            .duration(s, &format!("judge.{f}")));
        set!(stale_probes, count);
        set!(baseline, window);
        set!(validation_window, window);
        set!(responder_window, window);
        set!(ping_loss_ratio, fraction);
        set!(ping_loss_min, window);
        set!(ping_loss_below, fraction);
        set!(ping_loss_window, window);
        set!(ping_rtt_factor, count);
        set!(ping_rtt_floor, |s, f: &str| self
            .duration(s, &format!("judge.{f}")));
        set!(ping_baseline, window);
        if judge.ping_loss_below <= judge.ping_loss_ratio {
            let at = r.ping_loss_below.as_ref().or(r.ping_loss_ratio.as_ref());
            return Err(self.invalid(
                at.map_or(self.pos(raw), |s| self.pos(s)),
                "judge.ping_loss_below",
                format!(
                    "{}% is not above judge.ping_loss_ratio ({}%): no loss would be judged lossy",
                    judge.ping_loss_below * 100.0,
                    judge.ping_loss_ratio * 100.0
                ),
            ));
        }
        Ok(judge)
    }
}
