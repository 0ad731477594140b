//! `handoff grants`: the least each role's database user needs, as GRANT statements for the
//! config's own tables (adopted ones by their configured names). Run them as the tables' owner
//! after `handoff migrate`; the user needs no DDL, and nothing of the other side's tables.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::migrate::parts::Role;
use crate::store::config::Dialect;

/// The GRANTs for `user` in `dialect`, for `roles` (none: the config's sections'); on Postgres
/// the tables are in `schema`.
pub(crate) fn statements(config: &Config, roles: &[Role], user: &str, schema: &str, dialect: Dialect) -> Vec<String> {
    let mut roles = roles.to_vec();
    if roles.is_empty() || roles.contains(&Role::All) {
        roles = [
            (!config.relays.is_empty(), Role::Relay),
            (!config.bridges.is_empty(), Role::Bridge),
            (!config.workers.is_empty(), Role::Worker),
            // The admin API runs the operator commands as the service's own user.
            (config.admin.is_some(), Role::Operator),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, role)| role)
        .collect();
    }
    // table → privileges, merged over every role and component.
    let mut tables: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut grant = |table: &str, privileges: &[&'static str]| {
        let entry = tables.entry(table.to_owned()).or_default();
        for p in privileges {
            if !entry.contains(p) {
                entry.push(p);
            }
        }
    };
    for role in &roles {
        grant("handoff_pauses", &["SELECT"]);
        match role {
            Role::Relay => {
                for relay in &config.relays {
                    // Claims and settles update rows; `settle = "delete"` and retention delete them.
                    grant(&relay.table, &["SELECT", "UPDATE", "DELETE"]);
                }
                grant("handoff_stream_shards", &["SELECT", "INSERT"]);
            }
            Role::Bridge => {
                for bridge in &config.bridges {
                    // Applying at take-over also marks the rows it inserts PROCESSED.
                    let inbox: &[&str] =
                        if bridge.apply.is_some() { &["SELECT", "INSERT", "UPDATE"] } else { &["SELECT", "INSERT"] };
                    grant(&bridge.table, inbox);
                    grant(&bridge.poison_table, &["SELECT", "INSERT"]);
                    grant(&bridge.deliveries_table, &["SELECT", "INSERT", "UPDATE", "DELETE"]);
                }
                grant("handoff_stream_shards", &["SELECT", "INSERT"]);
            }
            Role::Worker => {
                for worker in &config.workers {
                    // Claims, settles and retention.
                    grant(&worker.table, &["SELECT", "UPDATE", "DELETE"]);
                }
            }
            Role::Operator => {
                // pause and resume (MySQL's resume locks the row first: UPDATE too).
                grant("handoff_pauses", &["SELECT", "INSERT", "UPDATE", "DELETE"]);
                for relay in &config.relays {
                    // dead retry and purge, verify --repair; replay reads.
                    grant(&relay.table, &["SELECT", "UPDATE", "DELETE"]);
                }
                if !config.relays.is_empty() {
                    // A replay job's checkpoint; reshard's agreement.
                    grant("handoff_replays", &["SELECT", "INSERT", "UPDATE"]);
                    grant("handoff_stream_shards", &["SELECT", "INSERT", "UPDATE"]);
                }
                for bridge in &config.bridges {
                    // poison retry counts each re-drive on its record.
                    grant(&bridge.poison_table, &["SELECT", "UPDATE"]);
                }
                for worker in &config.workers {
                    // dead retry and purge, inbox reprocess.
                    grant(&worker.table, &["SELECT", "UPDATE", "DELETE"]);
                }
            }
            Role::All => {}
        }
    }
    let quote = |name: &str| match dialect {
        Dialect::Postgres => format!("\"{}\"", name.replace('"', "\"\"")),
        Dialect::Mysql => format!("`{}`", name.replace('`', "``")),
    };
    let who = match dialect {
        Dialect::Postgres => quote(user),
        Dialect::Mysql => format!("'{}'@'%'", user.replace('\'', "''")),
    };
    let mut out = Vec::new();
    if dialect == Dialect::Postgres {
        out.push(format!("GRANT USAGE ON SCHEMA {} TO {who};", quote(schema)));
    }
    for (table, privileges) in tables {
        out.push(format!("GRANT {} ON {} TO {who};", privileges.join(", "), quote(&table)));
    }
    if roles.contains(&Role::Worker) || config.bridges.iter().any(|b| b.apply.is_some()) {
        out.push("-- and what your handlers' statements read and write".to_owned());
    }
    out
}
