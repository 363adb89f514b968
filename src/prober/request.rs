//! What one burst of a warm session is asked to do, and the kind of burst that makes it.

use serde::Serialize;

use crate::burst::BurstLength;
use crate::units::RateLimit;

use super::ProbeSettings;

/// What one burst of a warm session does; the session's shape (QPs, message size, tx depth,
/// signaling) is fixed when it is set up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstRequest {
    pub length: BurstLength,
    /// `None` runs unpaced (a capacity check).
    pub rate_limit: Option<RateLimit>,
}

impl BurstRequest {
    pub fn kind(&self) -> BurstKind {
        BurstKind::of(self.rate_limit.as_ref())
    }
}

/// Whether a burst was paced or measured the path's capacity, so that the two are never
/// compared with each other (docs/metrics.md, "Paced and capacity bursts").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BurstKind {
    /// Held to a rate limit: fails only when the path falls below the pace.
    #[default]
    Paced,
    /// Unpaced, aiming at the lower link rate of both ends: what the path can carry.
    Capacity,
}

impl BurstKind {
    /// The kind of a burst with this rate limit (`None`: unpaced).
    pub fn of(rate_limit: Option<&RateLimit>) -> Self {
        match rate_limit {
            Some(_) => BurstKind::Paced,
            None => BurstKind::Capacity,
        }
    }

    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BurstKind::Paced => "paced",
            BurstKind::Capacity => "capacity",
        }
    }
}

impl From<&ProbeSettings> for BurstRequest {
    fn from(settings: &ProbeSettings) -> Self {
        BurstRequest {
            length: settings.length,
            rate_limit: settings.rate_limit,
        }
    }
}
