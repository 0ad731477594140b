//! The reference schema cut by what uses it, so that each role creates only its own tables:
//! an owner's database gets the outbox and no inbox, a consumer's the inbox and no outbox, and
//! a table adopted by configuration (`[relay.sql]`, `[bridge.sql] insert`, `[worker.sql]`, or
//! another table name) is never created nor altered — only handoff's own bookkeeping tables go
//! beside it. Each version file is cut at its `-- part: <name>` lines.

use std::collections::BTreeSet;

use crate::config::Config;

/// A group of tables (with their indexes, functions and triggers) that one need calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// `audit_outbox`: a relay on the reference outbox.
    Outbox,
    /// `consumer_inbox`: a bridge or worker on the reference inbox.
    Inbox,
    /// `consumer_inbox_poison`: a bridge's poison records.
    Poison,
    /// `consumer_inbox_deliveries`: a bridge's delivery counts.
    Deliveries,
    /// `handoff_pauses`: every component reads its pause.
    Pauses,
    /// `handoff_replays`: a relay's replay checkpoints.
    Replays,
    /// `handoff_stream_shards`: the shard count relays and bridges agree on.
    Shards,
    /// `audit_logs`: the demo's and the tests' handler target; only with `--role all`.
    Demo,
    /// The reference outbox's NOTIFY trigger: only for a relay with `[relay.notify]` on it. A
    /// transaction that notifies holds a lock for the whole cluster through its commit, so
    /// with the trigger the owner's inserting transactions commit one at a time.
    Notify,
}

impl Part {
    pub const ALL: [Part; 9] = [
        Part::Outbox,
        Part::Inbox,
        Part::Poison,
        Part::Deliveries,
        Part::Pauses,
        Part::Replays,
        Part::Shards,
        Part::Demo,
        Part::Notify,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Part::Outbox => "outbox",
            Part::Inbox => "inbox",
            Part::Poison => "poison",
            Part::Deliveries => "deliveries",
            Part::Pauses => "pauses",
            Part::Replays => "replays",
            Part::Shards => "shards",
            Part::Demo => "demo",
            Part::Notify => "notify",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Part::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Who the schema is for (`handoff migrate --role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Relay,
    Bridge,
    Worker,
    /// The operator commands and the admin API: pause, resume, dead retry / purge, poison retry,
    /// replay, inbox reprocess, reshard. It owns no table: `migrate --role operator` makes only
    /// `handoff_pauses`, which every role reads, and the grants are the point.
    Operator,
    /// Every table, the demo's included (one database for everything, as the demo runs).
    All,
}

/// A version file cut into its parts, in order; the lines before the first marker (the file's
/// heading) go with the first part. A marker naming no part is a bug in the file: it panics,
/// and a unit test reads every file.
pub(crate) fn split(sql: &str) -> Vec<(Part, String)> {
    let mut parts: Vec<(Part, String)> = Vec::new();
    let mut heading = String::new();
    for line in sql.lines() {
        if let Some(name) = line.strip_prefix("-- part: ") {
            let part = Part::parse(name.trim()).unwrap_or_else(|| panic!("unknown schema part `{name}`"));
            parts.push((part, std::mem::take(&mut heading)));
            continue;
        }
        let text = match parts.last_mut() {
            Some((_, text)) => text,
            None => &mut heading,
        };
        text.push_str(line);
        text.push('\n');
    }
    parts
}

/// The parts `roles` need in the database `config` points at. No role given: the roles of the
/// config's sections (`[[relay]]`, `[[bridge]]`, `[[worker]]`), or every part when it has none.
pub(crate) fn needed(config: &Config, roles: &[Role]) -> BTreeSet<Part> {
    let mut roles = roles.to_vec();
    if roles.is_empty() {
        let present = [
            (!config.relays.is_empty(), Role::Relay),
            (!config.bridges.is_empty(), Role::Bridge),
            (!config.workers.is_empty(), Role::Worker),
        ];
        roles = present.into_iter().filter(|(on, _)| *on).map(|(_, role)| role).collect();
    }
    let notify = config.relays.iter().any(|r| {
        r.sql.is_empty()
            && r.table == "audit_outbox"
            && r.notify.as_ref().is_some_and(|n| n.channel == "handoff_outbox")
    });
    if roles.is_empty() || roles.contains(&Role::All) {
        return Part::ALL.into_iter().filter(|p| *p != Part::Notify || notify).collect();
    }
    let mut parts = BTreeSet::from([Part::Pauses]);
    for role in roles {
        match role {
            Role::Relay => {
                parts.extend([Part::Replays, Part::Shards]);
                let adopted = |r: &crate::relay::config::RelayConfig| !r.sql.is_empty() || r.table != "audit_outbox";
                if config.relays.is_empty() || config.relays.iter().any(|r| !adopted(r)) {
                    parts.insert(Part::Outbox);
                }
            }
            Role::Bridge => {
                parts.extend([Part::Poison, Part::Deliveries, Part::Shards]);
                let adopted =
                    |b: &crate::bridge::config::BridgeConfig| b.sql.insert.is_some() || b.table != "consumer_inbox";
                if config.bridges.is_empty() || config.bridges.iter().any(|b| !adopted(b)) {
                    parts.insert(Part::Inbox);
                }
            }
            Role::Worker => {
                let adopted = |w: &crate::worker::config::WorkerConfig| {
                    w.table != "consumer_inbox"
                        || crate::worker::inbox::contract::WorkerStatement::ALL.iter().any(|s| w.sql.get(*s).is_some())
                };
                if config.workers.is_empty() || config.workers.iter().any(|w| !adopted(w)) {
                    parts.insert(Part::Inbox);
                }
            }
            Role::Operator => {}
            Role::All => unreachable!("handled above"),
        }
    }
    if notify && parts.contains(&Part::Outbox) {
        parts.insert(Part::Notify);
    }
    parts
}

/// How a part applied on its own is recorded (`0002_consumer_inbox#poison`); a version whose
/// every part is applied is recorded by its name alone, as before parts existed.
pub(crate) fn recorded(version: &str, part: Part) -> String {
    format!("{version}#{}", part.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::{MYSQL, POSTGRES, POSTGRES_PARTITIONED};

    #[test]
    fn every_version_of_every_dialect_is_cut_into_known_parts_losing_nothing() {
        for (version, sql) in POSTGRES.iter().chain(POSTGRES_PARTITIONED).chain(MYSQL) {
            let parts = split(sql);
            assert!(!parts.is_empty(), "{version} has no `-- part:` line");
            let kept: String = parts.iter().map(|(_, text)| text.as_str()).collect();
            let original: String =
                sql.lines().filter(|l| !l.starts_with("-- part: ")).map(|l| format!("{l}\n")).collect();
            assert_eq!(kept, original, "{version}");
        }
    }

    fn config(toml: &str) -> Config {
        crate::config::load_str(&format!("[database]\nurl = \"postgres://x@h/db\"\n{toml}")).unwrap()
    }

    #[test]
    fn each_role_gets_its_own_tables_and_an_adopted_table_is_left_alone() {
        let names = |parts: BTreeSet<Part>| parts.into_iter().map(Part::name).collect::<Vec<_>>();
        let owner = config("[[relay]]\nname = \"a\"\n");
        assert_eq!(names(needed(&owner, &[])), ["outbox", "pauses", "replays", "shards"]);
        let consumer = config(
            "[[bridge]]\nname = \"b\"\nconsumer = \"c\"\nstreams = [{ key = \"s\" }]\n[[worker]]\nname = \"w\"\nconsumer = \"c\"\n[[worker.handler]]\nevent_types = [\"*\"]\nsql = [\"SELECT 1\"]\n",
        );
        assert_eq!(names(needed(&consumer, &[])), ["inbox", "poison", "deliveries", "pauses", "shards"]);
        let adopted =
            config("[[bridge]]\nname = \"b\"\nconsumer = \"c\"\nstreams = [{ key = \"s\" }]\ntable = \"app_inbox\"\n");
        assert_eq!(names(needed(&adopted, &[])), ["poison", "deliveries", "pauses", "shards"]);
        assert_eq!(needed(&owner, &[Role::All]).len(), Part::ALL.len() - 1, "all but the NOTIFY trigger");
        assert_eq!(needed(&config(""), &[]).len(), Part::ALL.len() - 1, "no sections: every table, as the demo needs");
    }

    #[test]
    fn the_notify_trigger_is_made_only_for_a_relay_that_listens_on_the_reference_outbox() {
        let listening = config("[[relay]]\nname = \"a\"\n[relay.notify]\n");
        assert!(needed(&listening, &[]).contains(&Part::Notify));
        assert!(needed(&listening, &[Role::All]).contains(&Part::Notify));
        assert!(!needed(&listening, &[Role::Bridge]).contains(&Part::Notify), "not without the outbox");
        let own_channel = config("[[relay]]\nname = \"a\"\n[relay.notify]\nchannel = \"mine\"\n");
        assert!(!needed(&own_channel, &[]).contains(&Part::Notify), "another channel needs its own trigger");
        assert!(!needed(&config("[[relay]]\nname = \"a\"\n"), &[]).contains(&Part::Notify));
    }
}
