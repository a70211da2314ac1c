//! Time as a value: the engine reads its clock and passes the reading in; simulations
//! pass virtual time. Nothing in this crate reads a clock.

use std::time::Duration;

/// A point in time, as a duration since an origin the caller chose (a session's start,
/// or a simulation's zero). Monotonic by the caller's contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// `since` after the origin.
    #[must_use]
    pub const fn from_origin(since: Duration) -> Instant {
        Instant(since)
    }

    /// How long after the origin.
    #[must_use]
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// Seconds after the origin, as a float (for rates).
    #[must_use]
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }

    /// `self - earlier`, or zero when `earlier` is later.
    #[must_use]
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0 + d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturating_since_never_goes_negative() {
        let a = Instant::from_origin(Duration::from_millis(5));
        let b = a + Duration::from_millis(7);
        assert_eq!(b.saturating_since(a), Duration::from_millis(7));
        assert_eq!(a.saturating_since(b), Duration::ZERO);
    }
}
