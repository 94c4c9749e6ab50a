//! Scheduled actions (`guard.schedule`): which cron slot is due at a given time, as values.
//!
//! A slot is a time the schedule names, read in its time zone (IANA names, `UTC` by default);
//! the action's guard value is the slot's UTC time, so its idempotency key, and with it the
//! name of what it creates, is the same for every replica and after every restart: one run per
//! slot. Only the latest slot counts: a missed one runs once, late, while `startingDeadline`
//! allows, and the slots between it and the last run are skipped and counted. Slots before the
//! parent existed never run, as a new CronJob does not catch up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Most skipped slots counted between two runs; more is reported as this many.
const MAX_COUNTED: u32 = 10_000;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    cron: Cron,
    zone: Tz,
}

/// What the schedule says at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    /// No slot since the parent was created: nothing to run before `next`.
    NotYet {
        /// The next slot.
        next: Option<jiff::Timestamp>,
    },
    /// `slot` is the latest and may run now.
    Due {
        /// The slot's time.
        slot: jiff::Timestamp,
        /// Slots between the last run's slot and this one, never run.
        skipped: u32,
        /// The slot after it.
        next: Option<jiff::Timestamp>,
    },
    /// The latest slot is older than `startingDeadline`: it is skipped.
    Missed {
        /// The slot's time.
        slot: jiff::Timestamp,
        /// The next slot.
        next: Option<jiff::Timestamp>,
    },
}

impl Schedule {
    /// Parses a five-field cron expression (minute hour day-of-month month day-of-week, Sunday
    /// is 0 or 7, names and `@daily`-style nicknames allowed) and an IANA time zone name.
    pub(crate) fn parse(expression: &str, time_zone: Option<&str>) -> Result<Self, String> {
        let parser = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(expression)
            .map_err(|e| format!("schedule {expression:?} is not a five-field cron expression: {e}"))?;
        let zone = match time_zone {
            None => Tz::UTC,
            Some(name) => name
                .parse::<Tz>()
                .map_err(|_| format!("timeZone {name:?} is not an IANA time zone name (e.g. Europe/Berlin)"))?,
        };
        Ok(Schedule { cron, zone })
    }

    /// The slot due at `now`, for a parent created at `created` whose last run was for the
    /// slot `last_run`, with `deadline` the `startingDeadline`.
    pub(crate) fn due(
        &self,
        now: jiff::Timestamp,
        created: Option<jiff::Timestamp>,
        last_run: Option<jiff::Timestamp>,
        deadline: Option<Duration>,
    ) -> Slot {
        let at = |t: jiff::Timestamp| to_chrono(t).map(|t| t.with_timezone(&self.zone));
        // Slots are whole minutes: the search keeps the sub-second part of its start.
        let Some(now_here) = at(whole_seconds(now)) else {
            return Slot::NotYet { next: None };
        };
        let next = self
            .cron
            .find_next_occurrence(&now_here, false)
            .ok()
            .and_then(|t| from_chrono(&t.with_timezone(&Utc)));
        let latest = self
            .cron
            .find_previous_occurrence(&now_here, true)
            .ok()
            .and_then(|t| from_chrono(&t.with_timezone(&Utc)));
        let Some(slot) = latest.filter(|slot| created.is_none_or(|c| *slot >= c)) else {
            return Slot::NotYet { next };
        };
        let late = Duration::try_from(now.duration_since(slot)).unwrap_or(Duration::ZERO);
        if deadline.is_some_and(|deadline| late > deadline) {
            return Slot::Missed { slot, next };
        }
        let skipped = last_run
            .filter(|last| *last < slot)
            .map_or(0, |last| self.between(last, slot));
        Slot::Due { slot, skipped, next }
    }

    /// Slots strictly between `after` and `before`, counted up to [`MAX_COUNTED`].
    fn between(&self, after: jiff::Timestamp, before: jiff::Timestamp) -> u32 {
        let (Some(after), Some(before)) = (to_chrono(after), to_chrono(before)) else {
            return 0;
        };
        let before = before.with_timezone(&self.zone);
        self.cron
            .iter_after(after.with_timezone(&self.zone))
            .take_while(|t| *t < before)
            .take(MAX_COUNTED as usize)
            .count() as u32
    }
}

fn whole_seconds(t: jiff::Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn to_chrono(t: jiff::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().try_into().ok()?)
}

fn from_chrono(t: &DateTime<Utc>) -> Option<jiff::Timestamp> {
    jiff::Timestamp::from_second(t.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn the_latest_slot_is_due_in_the_schedules_time_zone() {
        let daily = Schedule::parse("0 3 * * *", Some("Europe/Berlin")).expect("valid");
        // 03:00 in Berlin is 02:00 UTC in winter; the slot is whole, whatever the plan's time.
        assert_eq!(
            daily.due(
                at("2026-12-02T10:00:00.734Z"),
                Some(at("2026-11-01T00:00:00Z")),
                None,
                None
            ),
            Slot::Due {
                slot: at("2026-12-02T02:00:00Z"),
                skipped: 0,
                next: Some(at("2026-12-03T02:00:00Z"))
            }
        );
    }

    #[test]
    fn slots_before_the_parent_existed_never_run() {
        let daily = Schedule::parse("@daily", None).expect("valid");
        assert_eq!(
            daily.due(at("2026-12-02T10:00:00Z"), Some(at("2026-12-02T09:00:00Z")), None, None),
            Slot::NotYet {
                next: Some(at("2026-12-03T00:00:00Z"))
            }
        );
    }

    #[test]
    fn a_late_slot_runs_once_within_the_deadline_and_counts_the_slots_it_skipped() {
        let hourly = Schedule::parse("0 * * * *", None).expect("valid");
        let created = Some(at("2026-12-01T00:00:00Z"));
        let last = Some(at("2026-12-02T05:00:00Z"));
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(
            hourly.due(at("2026-12-02T09:30:00Z"), created, last, hour),
            Slot::Due {
                slot: at("2026-12-02T09:00:00Z"),
                skipped: 3,
                next: Some(at("2026-12-02T10:00:00Z"))
            }
        );
        let ten_minutes = Some(Duration::from_secs(600));
        assert_eq!(
            hourly.due(at("2026-12-02T09:30:00Z"), created, last, ten_minutes),
            Slot::Missed {
                slot: at("2026-12-02T09:00:00Z"),
                next: Some(at("2026-12-02T10:00:00Z"))
            }
        );
    }

    #[test]
    fn a_forged_last_run_decades_ago_costs_a_bounded_count() {
        // Whoever can write status could record a last slot of 1970: the count stops.
        let minutely = Schedule::parse("* * * * *", None).expect("valid");
        let started = std::time::Instant::now();
        let slot = minutely.due(at("2026-12-02T10:00:30Z"), None, Some(at("1970-01-01T00:00:00Z")), None);
        assert!(
            matches!(
                slot,
                Slot::Due {
                    skipped: MAX_COUNTED,
                    ..
                }
            ),
            "{slot:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[test]
    fn sunday_is_0_as_in_posix_cron_and_kubernetes_cronjobs() {
        let sundays = Schedule::parse("0 12 * * 0", None).expect("valid");
        // 2026-12-06 is a Sunday.
        assert_eq!(
            sundays.due(at("2026-12-06T13:00:00Z"), None, None, None),
            Slot::Due {
                slot: at("2026-12-06T12:00:00Z"),
                skipped: 0,
                next: Some(at("2026-12-13T12:00:00Z"))
            }
        );
    }

    #[test]
    fn a_bad_expression_or_time_zone_says_what_is_wrong() {
        let seconds = Schedule::parse("0 0 3 * * *", None).expect_err("six fields");
        assert!(seconds.contains("five-field"), "{seconds}");
        let zone = Schedule::parse("0 3 * * *", Some("Mars/Olympus")).expect_err("no such zone");
        assert!(zone.contains("Mars/Olympus"), "{zone}");
    }
}
