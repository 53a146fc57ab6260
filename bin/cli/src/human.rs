//! Times and sizes for people: text output shows local time and how long
//! ago, and sizes in binary units; JSON output keeps the raw numbers.

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

/// `12 B`, `2.0 KiB`, `200.0 MiB`: `bytes` in the largest of `units`
/// (`B` first, then each 1024 times the one before) that leaves at least
/// one, to one decimal place.
pub fn bytes_in(bytes: u64, units: &[&str]) -> String {
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
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
    fn sizes_stop_at_the_largest_unit_given() {
        let units = ["B", "KiB", "MiB", "GiB"];
        assert_eq!(bytes_in(1023, &units), "1023 B");
        assert_eq!(bytes_in(1536, &units), "1.5 KiB");
        assert_eq!(bytes_in(2 << 40, &units), "2048.0 GiB");
        assert_eq!(
            bytes_in(2 << 40, &["B", "KiB", "MiB", "GiB", "TiB"]),
            "2.0 TiB"
        );
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
