//! Which partitions should exist: spans of `created_at` aligned to UTC multiples of `every`
//! since the Unix epoch (so a daily partition starts at midnight UTC), named after their start.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One partition's span of `created_at`: `[from, to)` in whole seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub from: u64,
    pub to: u64,
}

impl Span {
    /// The span of width `every` that holds `at`.
    pub fn holding(at: SystemTime, every: Duration) -> Self {
        let width = every.as_secs().max(1);
        let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let from = secs - secs % width;
        Self { from, to: from + width }
    }

    /// The span after this one.
    pub fn next(self) -> Self {
        Self { from: self.to, to: self.to + (self.to - self.from) }
    }

    /// The partition's table name: the outbox's name, `_p`, and the start as `YYYYMMDD` (or
    /// `YYYYMMDDtHH` for spans shorter than whole days), in the outbox's schema.
    pub fn name(self, table: &str) -> String {
        let stamp = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(self.from)).to_string();
        // "2026-12-04T13:00:00Z"
        let day: String = stamp[..10].chars().filter(char::is_ascii_digit).collect();
        if (self.to - self.from).is_multiple_of(86_400) && self.from.is_multiple_of(86_400) {
            format!("{table}_p{day}")
        } else {
            format!("{table}_p{day}t{}", &stamp[11..13])
        }
    }

    /// The bounds as SQL timestamp literals in UTC.
    pub(crate) fn bounds(self) -> (String, String) {
        let literal =
            |secs: u64| format!("'{}'", humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)));
        (literal(self.from), literal(self.to))
    }
}

/// The span holding `now` and the `ahead` after it: the partitions that must exist.
pub(crate) fn wanted(now: SystemTime, every: Duration, ahead: u32) -> Vec<Span> {
    let mut span = Span::holding(now, every);
    let mut spans = vec![span];
    for _ in 0..ahead {
        span = span.next();
        spans.push(span);
    }
    spans
}

/// Whether a partition whose span ends at `to` (seconds since the epoch) is old enough to drop.
pub(crate) fn past(to: f64, now: SystemTime, drop_after: Duration) -> bool {
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    to + drop_after.as_secs_f64() <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_daily_span_starts_at_midnight_utc_and_is_named_after_its_day() {
        // 2026-12-04T17:30:00Z
        let span = Span::holding(at(1_796_405_400), DAY);
        assert_eq!(span.bounds(), ("'2026-12-04T00:00:00Z'".into(), "'2026-12-05T00:00:00Z'".into()));
        assert_eq!(span.name("audit_outbox"), "audit_outbox_p20261204");
        assert_eq!(span.name("app.audit_outbox"), "app.audit_outbox_p20261204");
    }

    #[test]
    fn the_last_second_of_a_day_and_midnight_fall_in_neighbouring_spans() {
        let midnight = 1_796_428_800; // 2026-12-05T00:00:00Z
        let before = Span::holding(at(midnight - 1), DAY);
        let after = Span::holding(at(midnight), DAY);
        assert_eq!(before.to, midnight);
        assert_eq!(after.from, midnight);
        assert_eq!(before.next(), after);
    }

    #[test]
    fn hourly_spans_carry_the_hour_in_their_name() {
        let span = Span::holding(at(1_796_405_400), Duration::from_secs(3600));
        assert_eq!(span.name("audit_outbox"), "audit_outbox_p20261204t17");
        assert_eq!(span.to - span.from, 3600);
    }

    #[test]
    fn wanted_is_the_current_span_and_those_ahead_without_gaps() {
        let spans = wanted(at(1_796_405_400), DAY, 3);
        assert_eq!(spans.len(), 4);
        assert!(spans.windows(2).all(|w| w[0].to == w[1].from));
        assert!(spans[0].from <= 1_796_405_400 && 1_796_405_400 < spans[0].to);
    }

    #[test]
    fn a_span_is_past_only_once_drop_after_has_gone_by_since_its_end() {
        let end = 1_796_428_800.0;
        assert!(!past(end, at(1_796_428_800), DAY));
        assert!(!past(end, at(1_796_428_800 + 86_399), DAY));
        assert!(past(end, at(1_796_428_800 + 86_400), DAY));
    }
}
