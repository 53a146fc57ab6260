//! Times for people: text output shows local time and how long ago; JSON
//! output keeps the raw numbers.

use jiff::{tz::TimeZone, Timestamp};

/// `2026-12-01 09:30:12 CET (5 min ago)` for a time in milliseconds since
/// the epoch, or the number itself when it is out of range.
pub fn time_ms(unix_ms: u64) -> String {
    let now = Timestamp::now();
    match i64::try_from(unix_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => format!(
            "{} ({})",
            t.to_zoned(TimeZone::system())
                .strftime("%Y-%m-%d %H:%M:%S %Z"),
            ago(now.as_second().saturating_sub(t.as_second()))
        ),
        None => format!("{unix_ms} ms since the epoch"),
    }
}

/// `12 s ago`, `5 min ago`, `3 h ago`, `2 days ago`; `in the future` for
/// a negative age (a clock that moved back).
pub fn ago(secs: i64) -> String {
    match secs {
        s if s < 0 => "in the future".into(),
        s if s < 120 => format!("{s} s ago"),
        s if s < 2 * 3600 => format!("{} min ago", s / 60),
        s if s < 2 * 86400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(ago(0), "0 s ago");
        assert_eq!(ago(119), "119 s ago");
        assert_eq!(ago(120), "2 min ago");
        assert_eq!(ago(3 * 3600), "3 h ago");
        assert_eq!(ago(5 * 86400 + 1), "5 days ago");
        assert_eq!(ago(-1), "in the future");
    }

    #[test]
    fn times_show_a_date_and_an_age() {
        let t = time_ms(1_700_000_000_000);
        assert!(t.starts_with("2023-11-1"), "{t}");
        assert!(t.ends_with("days ago)"), "{t}");
        assert_eq!(
            time_ms(u64::MAX),
            format!("{} ms since the epoch", u64::MAX)
        );
    }
}
