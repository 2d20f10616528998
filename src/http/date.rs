//! HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850
//! and asctime forms recipients must accept. The cache policy crate reads
//! dates with a lenient RFC 2822 parser that takes neither obsolete form
//! and accepts what HTTP calls invalid (extra spaces, other zones), so
//! the proxy parses them itself and hands the crate IMF-fixdate: strict
//! on layout (single spaces, field widths, GMT), lenient where leniency
//! is harmless (names in any case, a day name that does not match the
//! date), as the public cache test suite expects of a good cache.

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Seconds since the epoch of an HTTP date in any of its three forms
/// (surrounding whitespace allowed); `None` for anything else.
pub fn parse(s: &str) -> Option<i64> {
    let s = s.trim_matches([' ', '\t']);
    imf_fixdate(s).or_else(|| rfc850(s)).or_else(|| asctime(s))
}

/// Seconds since the epoch in IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn format(unix: i64) -> Option<String> {
    let t = OffsetDateTime::from_unix_timestamp(unix).ok()?;
    let day = DAYS[t.weekday().number_days_from_monday() as usize];
    let month = MONTHS[u8::from(t.month()) as usize - 1];
    Some(format!(
        "{day}, {:02} {month} {:04} {:02}:{:02}:{:02} GMT",
        t.day(),
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    ))
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn month(s: &str) -> Option<Month> {
    let i = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(s))?;
    Month::try_from(i as u8 + 1).ok()
}

/// `HH:MM:SS`, two digits each.
fn clock(s: &str) -> Option<Time> {
    let b = s.as_bytes();
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, sec) = (digits(&s[..2])?, digits(&s[3..5])?, digits(&s[6..])?);
    Time::from_hms(h as u8, m as u8, sec as u8).ok()
}

fn build(year: i32, month: Month, day: u32, time: Time) -> Option<i64> {
    let date = Date::from_calendar_date(year, month, u8::try_from(day).ok()?).ok()?;
    Some(
        PrimitiveDateTime::new(date, time)
            .assume_utc()
            .unix_timestamp(),
    )
}

/// Whether `s` is one of `names`, in any case.
fn day_name(names: &[&str], s: &str) -> bool {
    names.iter().any(|d| d.eq_ignore_ascii_case(s))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`: single spaces, exact field widths.
fn imf_fixdate(s: &str) -> Option<i64> {
    let (name, rest) = s.split_once(", ")?;
    let f: Vec<&str> = rest.split(' ').collect();
    let [day, mon, year, time, gmt] = f.as_slice() else {
        return None;
    };
    if !day_name(&DAYS, name) || !gmt.eq_ignore_ascii_case("GMT") {
        return None;
    }
    if day.len() != 2 || year.len() != 4 {
        return None;
    }
    build(
        digits(year)? as i32,
        month(mon)?,
        digits(day)?,
        clock(time)?,
    )
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`. A two-digit year more than 50 years
/// ahead is the most recent past year ending in those digits (RFC 9110
/// §5.6.7).
fn rfc850(s: &str) -> Option<i64> {
    let (name, rest) = s.split_once(", ")?;
    let f: Vec<&str> = rest.split(' ').collect();
    let [date, time, gmt] = f.as_slice() else {
        return None;
    };
    if !day_name(&LONG_DAYS, name) || !gmt.eq_ignore_ascii_case("GMT") {
        return None;
    }
    let d: Vec<&str> = date.split('-').collect();
    let [day, mon, yy] = d.as_slice() else {
        return None;
    };
    if day.len() != 2 || yy.len() != 2 {
        return None;
    }
    let this_year = OffsetDateTime::now_utc().year();
    let yy = digits(yy)? as i32;
    let mut year = this_year - this_year.rem_euclid(100) + yy;
    if year > this_year + 50 {
        year -= 100;
    }
    build(year, month(mon)?, digits(day)?, clock(time)?)
}

/// `Sun Nov  6 08:49:37 1994` (a one-digit day is padded with a space).
fn asctime(s: &str) -> Option<i64> {
    if !day_name(&DAYS, s.get(..3)?) {
        return None;
    }
    let rest = s.get(3..)?.strip_prefix(' ')?;
    let (mon, rest) = rest.split_once(' ')?;
    let (day, rest) = match rest.strip_prefix(' ') {
        Some(r) => r.split_at_checked(1)?,
        None => rest.split_at_checked(2)?,
    };
    let f: Vec<&str> = rest.strip_prefix(' ')?.split(' ').collect();
    let [time, year] = f.as_slice() else {
        return None;
    };
    if year.len() != 4 {
        return None;
    }
    build(
        digits(year)? as i32,
        month(mon)?,
        digits(day)?,
        clock(time)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    #[test]
    fn the_three_forms_of_rfc_9110() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(T));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), Some(T));
        assert_eq!(parse(" Sun, 06 Nov 1994 08:49:37 GMT "), Some(T));
        assert_eq!(format(T).as_deref(), Some("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert_eq!(format(0).as_deref(), Some("Thu, 01 Jan 1970 00:00:00 GMT"));
        // RFC 850 with a year in the past century (more than 50 years ahead).
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), Some(T));
        assert_eq!(
            parse("Thursday, 01-Jan-26 00:00:00 GMT"),
            Some(1_767_225_600)
        );
    }

    #[test]
    fn anything_else_is_invalid() {
        for bad in [
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun, 06  Nov 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37 +0000",
            "Mo, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "0",
            "-1",
            "",
            "Sun Nov 6 08:49:37 1994",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
