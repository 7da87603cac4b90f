//! Cron expressions (five fields, as a CronJob takes them) and their
//! times: [`Cron::parse`] with an error that names the field and the value,
//! [`Cron::next_after`] in a time zone, and [`Cron::latest_due`], the most
//! recent time due since the last run (a catch-up after a downtime starts
//! only that one). Pure.
//!
//! Days: as in Vixie cron and Kubernetes, when both day-of-month and
//! day-of-week are restricted (neither starts with `*`), a day matching
//! either runs; otherwise both must match. Daylight saving: each wall-clock
//! time of the schedule runs once; one that does not exist (the hour the
//! clocks skip) runs at the moment after the gap, and one that exists twice
//! runs at its first occurrence.
//!
//! May import: nothing of the crate.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// A parsed cron expression: each field as the set of values it allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    /// Bits 1..=31.
    days: u32,
    /// Bits 1..=12.
    months: u16,
    /// Bits 0..=6, Sunday 0.
    weekdays: u8,
    /// Day-of-month or day-of-week started with `*`: both must match.
    day_star: bool,
    weekday_star: bool,
}

/// How far ahead [`Cron::next_after`] looks: eight years covers a
/// February 29th that a leap year skipped (2100 is none).
const HORIZON_DAYS: u32 = 8 * 366 + 1;

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// 7 is Sunday too (as in cron); folded onto 0 after parsing.
const WEEKDAY: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Cron {
    /// Five fields (`m h dom mon dow`) or a macro (`@hourly`, `@daily`,
    /// `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`).
    pub fn parse(expr: &str) -> Result<Cron, String> {
        let expr = expr.trim();
        let expanded = match expr.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!(
                    "{expr:?} is not a known macro: use @hourly, @daily, @weekly, @monthly or @yearly, or five fields"
                ))
            }
            _ => expr,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "{expr:?} has {} fields; a schedule has five: minute hour day-of-month month day-of-week, such as \"0 2 * * *\"",
                fields.len()
            ));
        }
        let weekdays = bits(fields[4], &WEEKDAY)?;
        Ok(Cron {
            minutes: bits(fields[0], &MINUTE)?,
            hours: bits(fields[1], &HOUR)? as u32,
            days: bits(fields[2], &DAY)? as u32,
            months: bits(fields[3], &MONTH)? as u16,
            // Sunday as 7 is Sunday as 0.
            weekdays: ((weekdays & 0x7f) | (weekdays >> 7)) as u8,
            day_star: fields[2].starts_with('*'),
            weekday_star: fields[4].starts_with('*'),
        })
    }

    fn day_matches(&self, date: Date) -> bool {
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        if self.day_star || self.weekday_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first time of the schedule strictly after `after`, in `tz`;
    /// `None` when none comes within eight years (`0 0 31 2 *`).
    pub fn next_after(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let start = after.to_zoned(tz.clone()).datetime();
        let mut date = start.date();
        for _ in 0..HORIZON_DAYS {
            if self.months & (1 << date.month()) != 0 && self.day_matches(date) {
                let today = date == start.date();
                let first_hour = if today { start.hour() } else { 0 };
                for hour in first_hour..24 {
                    if self.hours & (1 << hour) == 0 {
                        continue;
                    }
                    let first_minute = if today && hour == start.hour() {
                        start.minute()
                    } else {
                        0
                    };
                    for minute in first_minute..60 {
                        if self.minutes & (1 << minute) == 0 {
                            continue;
                        }
                        let civil =
                            DateTime::new(date.year(), date.month(), date.day(), hour, minute, 0, 0).ok()?;
                        let at = tz.to_ambiguous_timestamp(civil).compatible().ok()?;
                        if at > after {
                            return Some(at);
                        }
                    }
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The most recent time of the schedule in `(since, now]`, and whether
    /// an earlier one in that span was missed too; `None` when nothing is
    /// due. Looks back from `now` in growing windows, so a long downtime of
    /// a schedule every minute costs no more than a short one.
    pub fn latest_due(&self, since: Timestamp, now: Timestamp, tz: &TimeZone) -> Option<(Timestamp, bool)> {
        let first = self.next_after(since, tz)?;
        if first > now {
            return None;
        }
        for hours in [1, 24, 32 * 24, 367 * 24, HORIZON_DAYS as i64 * 24] {
            let from = now
                .checked_sub(SignedDuration::from_hours(hours))
                .ok()
                .map_or(since, |t| t.max(since));
            let Some(mut at) = self.next_after(from, tz).filter(|t| *t <= now) else {
                continue;
            };
            while let Some(later) = self.next_after(at, tz).filter(|t| *t <= now) {
                at = later;
            }
            return Some((at, first < at));
        }
        Some((first, false))
    }
}

/// The bit set of one field's values.
fn bits(text: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for part in text.split(',') {
        let bad = |why: String| Err(format!("{} field {text:?}: {why}", field.name));
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => match step.parse::<u32>() {
                Ok(s) if s >= 1 => (range, s),
                _ => return bad(format!("step {step:?} must be a whole number of at least 1")),
            },
            None => (part, 1),
        };
        let (low, high) = if range == "*" {
            (field.min, field.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, field)?, value(b, field)?)
        } else {
            let v = value(range, field)?;
            // `5/15`: from 5 to the end, every 15 (as robfig/cron reads it).
            (v, if part.contains('/') { field.max } else { v })
        };
        if low > high {
            return bad(format!("range {range:?} runs backwards"));
        }
        for v in (low..=high).step_by(step as usize) {
            set |= 1 << v;
        }
    }
    Ok(set)
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        return Ok(i as u32 + field.min);
    }
    match text.parse::<u32>() {
        Ok(v) if (field.min..=field.max).contains(&v) => Ok(v),
        Ok(v) => Err(format!(
            "{} field: {v} is out of range {}-{}",
            field.name, field.min, field.max
        )),
        Err(_) if field.names.is_empty() => Err(format!(
            "{} field: {text:?} is not a number {}-{}",
            field.name, field.min, field.max
        )),
        Err(_) => Err(format!(
            "{} field: {text:?} is neither a number {}-{} nor a name ({})",
            field.name,
            field.min,
            field.max,
            field.names.join(", ")
        )),
    }
}

/// The time zone `name` (IANA, such as `Europe/Berlin`), UTC when unset.
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, String> {
    match name {
        None | Some("UTC") | Some("Etc/UTC") => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|_| {
            format!("time zone {name:?} is not an IANA time zone name, such as Europe/Berlin, America/New_York or UTC")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(expr: &str, after: &str, tz: &str) -> String {
        let tz = time_zone(Some(tz)).unwrap();
        Cron::parse(expr)
            .unwrap()
            .next_after(ts(after), &tz)
            .unwrap()
            .to_string()
    }

    #[test]
    fn every_minute_is_the_next_whole_minute() {
        assert_eq!(
            next("* * * * *", "2026-11-27T03:40:20Z", "UTC"),
            "2026-11-27T03:41:00Z"
        );
        assert_eq!(
            next("* * * * *", "2026-11-27T03:41:00Z", "UTC"),
            "2026-11-27T03:42:00Z"
        );
    }

    #[test]
    fn fields_ranges_lists_steps_and_names() {
        assert_eq!(
            next("0 2 * * *", "2026-11-27T03:00:00Z", "UTC"),
            "2026-11-28T02:00:00Z"
        );
        assert_eq!(
            next("*/15 9-17 * * mon-fri", "2026-11-27T17:50:00Z", "UTC"),
            "2026-11-30T09:00:00Z"
        );
        assert_eq!(
            next("5/20 * * * *", "2026-11-27T03:06:00Z", "UTC"),
            "2026-11-27T03:25:00Z"
        );
        assert_eq!(
            next("0 0 1 jan,JUL *", "2026-02-01T00:00:00Z", "UTC"),
            "2026-07-01T00:00:00Z"
        );
        assert_eq!(
            next("0 0 * * 7", "2026-11-27T00:00:00Z", "UTC"),
            "2026-11-29T00:00:00Z",
            "7 is Sunday"
        );
        assert_eq!(
            next("@weekly", "2026-11-27T00:00:00Z", "UTC"),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-03-01T00:00:00Z", "UTC"),
            "2028-02-29T00:00:00Z"
        );
        assert!(Cron::parse("0 0 31 2 *")
            .unwrap()
            .next_after(ts("2026-01-01T00:00:00Z"), &TimeZone::UTC)
            .is_none());
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 1st of the month or any Monday: Monday 30 November comes first.
        assert_eq!(
            next("0 0 1 * mon", "2026-11-27T00:00:00Z", "UTC"),
            "2026-11-30T00:00:00Z"
        );
        // `*/2` starts with a star: both must match (an odd day that is a Monday).
        assert_eq!(
            next("0 0 */2 * mon", "2026-11-27T00:00:00Z", "UTC"),
            "2026-12-07T00:00:00Z"
        );
    }

    #[test]
    fn a_time_zone_moves_the_wall_clock_and_daylight_saving_runs_each_time_once() {
        assert_eq!(
            next("0 2 * * *", "2026-11-27T00:00:00Z", "Europe/Berlin"),
            "2026-11-27T01:00:00Z"
        );
        // 2026-03-29 02:30 does not exist in Berlin: run right after the gap.
        assert_eq!(
            next("30 2 * * *", "2026-03-28T12:00:00Z", "Europe/Berlin"),
            "2026-03-29T01:30:00Z"
        );
        // 2026-10-25 02:30 exists twice: only the first.
        let tz = time_zone(Some("Europe/Berlin")).unwrap();
        let cron = Cron::parse("30 2 * * *").unwrap();
        let first = cron.next_after(ts("2026-10-24T12:00:00Z"), &tz).unwrap();
        assert_eq!(first.to_string(), "2026-10-25T00:30:00Z");
        assert_eq!(
            cron.next_after(first, &tz).unwrap().to_string(),
            "2026-10-26T01:30:00Z"
        );
    }

    #[test]
    fn bad_expressions_say_which_field_and_why() {
        let err = |e: &str| Cron::parse(e).unwrap_err();
        assert!(
            err("61 * * * *").contains("minute field: 61 is out of range 0-59"),
            "{}",
            err("61 * * * *")
        );
        assert!(err("* * * *").contains("has 4 fields"));
        assert!(err("* * * foo *").contains("month field: \"foo\" is neither a number 1-12 nor a name"));
        assert!(err("*/0 * * * *").contains("step \"0\""));
        assert!(err("5-1 * * * *").contains("runs backwards"));
        assert!(err("@often").contains("not a known macro"));
        assert!(err("").contains("has 0 fields"));
    }

    #[test]
    fn a_bad_time_zone_names_itself() {
        let e = time_zone(Some("Mars/Olympus_Mons")).unwrap_err();
        assert!(
            e.contains("\"Mars/Olympus_Mons\" is not an IANA time zone"),
            "{e}"
        );
        assert!(time_zone(Some("America/New_York")).is_ok());
        assert_eq!(time_zone(None).unwrap(), TimeZone::UTC);
    }

    #[test]
    fn after_a_downtime_only_the_latest_missed_time_is_due() {
        let cron = Cron::parse("* * * * *").unwrap();
        let utc = TimeZone::UTC;
        // A week down: the latest minute, and that some were missed.
        let (at, missed) = cron
            .latest_due(ts("2026-11-20T00:00:00Z"), ts("2026-11-27T03:40:20Z"), &utc)
            .unwrap();
        assert_eq!((at.to_string().as_str(), missed), ("2026-11-27T03:40:00Z", true));
        // Exactly one due: not missed.
        let (at, missed) = cron
            .latest_due(ts("2026-11-27T03:39:00Z"), ts("2026-11-27T03:40:20Z"), &utc)
            .unwrap();
        assert_eq!((at.to_string().as_str(), missed), ("2026-11-27T03:40:00Z", false));
        assert!(cron
            .latest_due(ts("2026-11-27T03:40:00Z"), ts("2026-11-27T03:40:59Z"), &utc)
            .is_none());
        // A yearly schedule two years behind.
        let yearly = Cron::parse("@yearly").unwrap();
        let (at, missed) = yearly
            .latest_due(ts("2024-06-01T00:00:00Z"), ts("2026-11-27T00:00:00Z"), &utc)
            .unwrap();
        assert_eq!((at.to_string().as_str(), missed), ("2026-01-01T00:00:00Z", true));
    }
}
