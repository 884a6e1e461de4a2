//! Time as data. The core never reads a clock: callers pass the current time in.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC). The only time type the core uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// `self + ms`, saturating at `u64::MAX`.
    #[must_use]
    pub fn plus_millis(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    /// `self - ms`, saturating at zero.
    #[must_use]
    pub fn minus_millis(self, ms: u64) -> Self {
        Self(self.0.saturating_sub(ms))
    }
}

impl std::fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}ms", self.0)
    }
}
