//! The wall clock, read one way everywhere: time since the Unix epoch, as
//! zero on a clock set before 1970 (a stamp is information, never a reason
//! to fail).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the epoch; zero before it.
pub(crate) fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// Whole seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    since_epoch().as_secs()
}

/// UTC now as RFC 3339 (seconds).
pub(crate) fn rfc3339_now() -> String {
    rfc3339(now_secs() as i64)
}

/// `secs` since the epoch as an RFC 3339 UTC time (`1970-01-01T00:00:00Z`).
fn rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_civil_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
