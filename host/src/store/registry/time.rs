//! The index's expiry: an RFC 3339 time in UTC, to the second.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A UTC time to the second, written `2026-12-01T17:20:00Z` (RFC 3339;
/// fractions of a second and a `+00:00` offset are read, other offsets
/// are refused so an expiry is never ambiguous).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcTime {
    unix: u64,
}

impl UtcTime {
    /// The time `unix` seconds after 1970-01-01T00:00:00Z.
    pub fn from_unix(unix: u64) -> Self {
        Self { unix }
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    pub fn unix(self) -> u64 {
        self.unix
    }

    /// A [`SystemTime`] to the second (before 1970: 1970).
    pub fn from_system(time: SystemTime) -> Self {
        Self::from_unix(
            time.duration_since(UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs()),
        )
    }

    /// This time as a [`SystemTime`].
    pub fn to_system(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.unix)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|+00:00)`.
    ///
    /// # Errors
    ///
    /// What is wrong, as a phrase.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{}` is not an RFC 3339 UTC time such as `2026-12-31T00:00:00Z`",
                crate::text::Shown(text)
            )
        };
        let rest = text
            .strip_suffix('Z')
            .or_else(|| text.strip_suffix('z'))
            .or_else(|| text.strip_suffix("+00:00"))
            .ok_or_else(bad)?;
        let rest = match rest.split_once('.') {
            Some((whole, fraction))
                if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) =>
            {
                whole
            }
            Some(_) => return Err(bad()),
            None => rest,
        };
        let bytes = rest.as_bytes();
        let shape_ok = bytes.len() == 19
            && bytes.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                10 => *b == b'T' || *b == b't',
                13 | 16 => *b == b':',
                _ => b.is_ascii_digit(),
            });
        if !shape_ok {
            return Err(bad());
        }
        let number = |from: usize, to: usize| -> u64 {
            rest[from..to]
                .bytes()
                .fold(0, |n, b| n * 10 + u64::from(b - b'0'))
        };
        let (year, month, day) = (number(0, 4), number(5, 7), number(8, 10));
        let (hour, minute, second) = (number(11, 13), number(14, 16), number(17, 19));
        let valid = year >= 1970
            && (1..=12).contains(&month)
            && (1..=days_in_month(year, month)).contains(&day)
            && hour < 24
            && minute < 60
            && second < 61;
        if !valid {
            return Err(bad());
        }
        let days = days_from_civil(year, month, day);
        Ok(Self::from_unix(
            days * 86_400 + hour * 3600 + minute * 60 + second.min(59),
        ))
    }
}

impl fmt::Display for UtcTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (year, month, day) = civil_from_days(self.unix / 86_400);
        let secs = self.unix % 86_400;
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

impl serde::Serialize for UtcTime {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for UtcTime {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date from 1970 on.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let before_years: u64 = (1970..year)
        .map(|y| if is_leap(y) { 366 } else { 365 })
        .sum();
    let before_months: u64 = (1..month).map(|m| days_in_month(year, m)).sum();
    before_years + before_months + day - 1
}

fn civil_from_days(mut days: u64) -> (u64, u64, u64) {
    let mut year = 1970;
    loop {
        let length = if is_leap(year) { 366 } else { 365 };
        if days < length {
            break;
        }
        days -= length;
        year += 1;
    }
    let mut month = 1;
    while days >= days_in_month(year, month) {
        days -= days_in_month(year, month);
        month += 1;
    }
    (year, month, days + 1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_and_print_as_rfc_3339_utc() {
        let cases = [
            ("1970-01-01T00:00:00Z", 0, "1970-01-01T00:00:00Z"),
            ("2000-02-29T12:34:56Z", 951_827_696, "2000-02-29T12:34:56Z"),
            (
                "2026-12-01T17:20:00.123Z",
                1_796_145_600,
                "2026-12-01T17:20:00Z",
            ),
            (
                "2026-12-01t17:20:00+00:00",
                1_796_145_600,
                "2026-12-01T17:20:00Z",
            ),
        ];
        for (text, unix, shown) in cases {
            let time = UtcTime::parse(text).unwrap();
            assert_eq!(time.unix(), unix, "{text}");
            assert_eq!(time.to_string(), shown, "{text}");
            assert_eq!(UtcTime::parse(shown).unwrap(), time);
        }
        for bad in [
            "",
            "2026-12-01",
            "2026-12-01T17:20:00",
            "2026-12-01T17:20:00+02:00",
            "2026-02-30T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "2026-13-01T00:00:00Z",
            "2026-12-01T24:00:00Z",
            "2026-12-01T17:20:00.Z",
            "２026-12-01T17:20:00Z",
        ] {
            assert!(UtcTime::parse(bad).is_err(), "{bad}");
        }
    }
}
