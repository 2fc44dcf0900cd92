//! Wall-clock formatting for the log lines and bodies the actors print: RFC 3339 with
//! nanoseconds (CRI logs), klog headers, Go's `time.Time.String()` (kube-proxy health
//! bodies) and Calico's `2006-01-02 15:04:05.000`. All in UTC; no time-zone database.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A broken-down UTC time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Utc {
    /// Year.
    pub year: i64,
    /// Month 1..=12.
    pub month: u32,
    /// Day 1..=31.
    pub day: u32,
    /// Hour.
    pub hour: u32,
    /// Minute.
    pub minute: u32,
    /// Second.
    pub second: u32,
    /// Nanoseconds.
    pub nanos: u32,
}

impl Utc {
    /// The current time.
    pub fn now() -> Self {
        Self::from_system(SystemTime::now())
    }

    /// Converts a `SystemTime` (before 1970 clamps to the epoch).
    pub fn from_system(t: SystemTime) -> Self {
        let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let secs = d.as_secs() as i64;
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            nanos: d.subsec_nanos(),
        }
    }

    /// `2026-11-30T08:03:01.123456789Z` (CRI log timestamps).
    pub fn rfc3339_nanos(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.nanos
        )
    }

    /// `1130 08:03:01.123456` (klog header after the severity letter).
    pub fn klog(&self) -> String {
        format!(
            "{:02}{:02} {:02}:{:02}:{:02}.{:06}",
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanos / 1000
        )
    }

    /// `2026-11-30 08:03:01.123` (Calico's log format).
    pub fn calico(&self) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanos / 1_000_000
        )
    }

    /// `2026-11-30 08:03:01` (firewalld's log format).
    pub fn firewalld(&self) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// Go's `time.Time.String()` with a monotonic reading:
    /// `2026-11-30 08:03:01.123456789 +0000 UTC m=+12.345678901`.
    pub fn go_string(&self, since_start: Duration) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} +0000 UTC m=+{}.{:09}",
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanos,
            since_start.as_secs(),
            since_start.subsec_nanos()
        )
    }
}

/// Go's `time.Time.String()` of an `Instant`, given the process start.
pub fn go_string_of(at: Instant, start: Instant) -> String {
    let now = Instant::now();
    let wall = if at <= now {
        SystemTime::now() - (now - at)
    } else {
        SystemTime::now() + (at - now)
    };
    Utc::from_system(wall).go_string(at.saturating_duration_since(start))
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 to (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_a_known_instant() {
        // 2024-06-16 13:10:38.185046097 UTC
        let t = UNIX_EPOCH + Duration::new(1_718_543_438, 185_046_097);
        let u = Utc::from_system(t);
        assert_eq!(u.rfc3339_nanos(), "2024-06-16T13:10:38.185046097Z");
        assert_eq!(u.klog(), "0616 13:10:38.185046");
        assert_eq!(u.calico(), "2024-06-16 13:10:38.185");
        assert_eq!(
            u.go_string(Duration::new(18599, 921_395_918)),
            "2024-06-16 13:10:38.185046097 +0000 UTC m=+18599.921395918"
        );
    }

    #[test]
    fn leap_years_and_month_ends() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(19_783), (2024, 3, 1));
    }
}
