//! The status page: one server-rendered HTML document (no script, no build step), readable on
//! a phone, refreshing itself. Per relay, bridge stream and worker: its state — running, paused
//! (by whom, why) or degraded (why) — its backlog and oldest age, DEAD rows and lag; then the
//! latest DEAD rows and poison records with their errors. Everything shown from the data is
//! escaped.

use std::fmt::Write;

use super::state::AdminState;
use crate::ops;
use crate::ops::status::Line;

/// How often the page reloads itself, in seconds.
const REFRESH_SECONDS: u32 = 10;
/// Rows of each list shown.
const LATEST: u32 = 10;

pub(super) async fn render(state: &AdminState) -> String {
    let lines = ops::status::collect(&state.config, &state.db, state.brokers()).await;
    let dead_filter = crate::dead::Filter {
        relay: None,
        worker: None,
        rows: crate::dead::DeadFilter { limit: LATEST, ..Default::default() },
    };
    let dead = crate::dead::run(&state.config, &state.db, &dead_filter, crate::dead::DeadAction::List, true).await;
    let poison_filter = crate::poison::Filter {
        bridge: None,
        records: crate::poison::PoisonFilter { reason: None, event_id: None, limit: LATEST, offset: 0 },
    };
    let poison = crate::poison::list(&state.config, &state.db, &poison_filter).await;

    let mut html = String::with_capacity(8 * 1024);
    let _ = write!(
        html,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>handoff status</title>
<style>
body{{font:15px/1.4 system-ui,sans-serif;margin:0 auto;padding:12px;max-width:1100px;color:#222}}
h1{{font-size:20px}} h2{{font-size:17px;margin-top:24px}}
.table{{overflow-x:auto}} table{{border-collapse:collapse;width:100%}}
th,td{{text-align:left;padding:6px 8px;border-bottom:1px solid #ddd;vertical-align:top}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}}
.state{{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600}}
.running{{background:#d8f3dc}} .paused{{background:#ffe8a3}} .degraded{{background:#ffd6d6}} .unknown{{background:#e9e9e9}}
.why{{color:#555;font-size:13px}} code{{font-size:13px;word-break:break-all}}
</style></head><body>
<h1>handoff</h1>
<p class="why">Refreshes every {REFRESH_SECONDS}s. Read-only: changes go through the CLI or the API.</p>
<h2>Components</h2>
<div class="table"><table id="components">
<tr><th>component</th><th>state</th><th>pending</th><th>in flight</th><th>DEAD</th><th>lag</th><th>oldest</th></tr>
"#
    );
    for line in &lines {
        component_row(&mut html, line);
    }
    html.push_str("</table></div>\n<h2>Latest DEAD rows</h2>\n");
    match dead {
        Ok(rows) if rows.is_empty() => html.push_str("<p>None.</p>\n"),
        Ok(rows) => {
            html.push_str("<div class=\"table\"><table id=\"dead\"><tr><th>where</th><th>event</th><th>type</th><th>attempts</th><th>DEAD for</th><th>last error</th></tr>\n");
            for r in rows {
                let _ = writeln!(
                    html,
                    "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
                    escape(&r.source),
                    escape(&r.event_id),
                    escape(&r.event_type),
                    r.attempts,
                    age(r.dead_for_seconds),
                    escape(r.last_error.as_deref().unwrap_or("-"))
                );
            }
            html.push_str("</table></div>\n");
        }
        Err(e) => {
            let _ = writeln!(html, "<p class=\"why\">Cannot list DEAD rows: {}</p>", escape(&e.to_string()));
        }
    }
    html.push_str("<h2>Latest poison records</h2>\n");
    match poison {
        Ok(rows) if rows.is_empty() => html.push_str("<p>None.</p>\n"),
        Ok(rows) => {
            html.push_str("<div class=\"table\"><table id=\"poison\"><tr><th>bridge</th><th>stream</th><th>event</th><th>reason</th><th>age</th><th>detail</th></tr>\n");
            for r in rows {
                let _ = writeln!(
                    html,
                    "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
                    escape(&r.bridge),
                    escape(&r.record.stream),
                    escape(r.record.event_id.as_deref().unwrap_or("-")),
                    escape(&r.record.reason),
                    age(r.record.age_seconds),
                    escape(&r.record.detail)
                );
            }
            html.push_str("</table></div>\n");
        }
        Err(e) => {
            let _ = writeln!(html, "<p class=\"why\">Cannot list poison records: {}</p>", escape(&e.to_string()));
        }
    }
    html.push_str("<h2>Broker loss</h2>\n");
    let losses = broker_losses(&state.registry);
    if losses.is_empty() {
        html.push_str("<p>None seen by this replica since it started.</p>\n");
    } else {
        html.push_str(
            "<p class=\"why\">Seen by this replica since it started (handoff_relay_broker_* counters).</p>\n",
        );
        html.push_str("<div class=\"table\"><table id=\"loss\"><tr><th>relay</th><th>events</th><th>entries lost</th><th>rows re-driven</th></tr>\n");
        for (relay, [events, lost, redriven]) in losses {
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td class=\"n\">{events}</td><td class=\"n\">{lost}</td><td class=\"n\">{redriven}</td></tr>",
                escape(&relay)
            );
        }
        html.push_str("</table></div>\n");
    }
    html.push_str("</body></html>\n");
    html
}

/// Per relay with a broker-loss event: events, entries lost, rows re-driven — as this process's
/// counters have them.
fn broker_losses(registry: &prometheus::Registry) -> Vec<(String, [u64; 3])> {
    const FAMILIES: [&str; 3] = [
        "handoff_relay_broker_loss_events_total",
        "handoff_relay_broker_lost_entries_total",
        "handoff_relay_broker_redriven_total",
    ];
    let mut by_relay: std::collections::BTreeMap<String, [u64; 3]> = Default::default();
    for family in registry.gather() {
        let Some(column) = FAMILIES.iter().position(|name| *name == family.name()) else { continue };
        for metric in family.get_metric() {
            let relay = metric.get_label().iter().find(|l| l.name() == "relay").map(|l| l.value().to_owned());
            let value = metric.get_counter().get_value() as u64;
            if let (Some(relay), true) = (relay, value > 0) {
                by_relay.entry(relay).or_default()[column] = value;
            }
        }
    }
    by_relay.into_iter().filter(|(_, counts)| counts[0] > 0).collect()
}

/// One component's row: its state and why, then its numbers.
fn component_row(html: &mut String, line: &Line) {
    let (state, why) = match (&line.paused, &line.error, line.dead) {
        (Some(p), _, _) => (
            "paused",
            format!(
                "by {} {} ago{}",
                p.paused_by,
                age(p.paused_for_seconds),
                p.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            ),
        ),
        (None, Some(error), _) => ("degraded", error.clone()),
        (None, None, Some(dead)) if dead > 0 => ("degraded", format!("{dead} DEAD row(s)")),
        _ if line.state == "unknown" => ("unknown", "the pauses cannot be read".to_owned()),
        _ => ("running", String::new()),
    };
    let cell = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let _ = writeln!(
        html,
        "<tr><td>{}</td><td><span class=\"state {state}\">{state}</span><div class=\"why\">{}</div></td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        escape(&line.component),
        escape(&why),
        cell(line.pending),
        cell(line.in_flight),
        cell(line.dead),
        cell(line.lag),
        line.oldest_pending_age_seconds.map_or("-".to_owned(), age),
    );
}

/// Seconds as a short age: `42s`, `7m`, `3h`, `2d`.
fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Text as HTML: event ids, errors and reasons come from data.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_losses_come_from_the_relays_counters() {
        let registry = prometheus::Registry::new();
        let relays = crate::telemetry::metrics::RelayMetrics::register(&registry).unwrap();
        let (_quiet, lossy) = (relays.for_relay("quiet", "redis"), relays.for_relay("lossy", "redis"));
        assert!(broker_losses(&registry).is_empty(), "no loss, no line");
        lossy.loss_events.inc();
        lossy.lost_entries.inc_by(3);
        lossy.redriven.inc_by(2);
        assert_eq!(broker_losses(&registry), [("lossy".to_owned(), [1, 3, 2])]);
    }

    #[test]
    fn data_is_escaped_and_ages_are_short() {
        assert_eq!(escape("<script>alert('x')</script>&"), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;");
        assert_eq!([age(5.0), age(420.0), age(7200.0), age(200_000.0)], ["5s", "7m", "2h", "2d"]);
    }
}
