//! `handoff check`'s production checklist: server settings that do not stop handoff from
//! working but can lose or delay events, read from the live servers. Each line passes or warns
//! (`warn: …`), naming the setting or the key to change; none fails the check.

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, InfoKind, Value};

use crate::broker::redis::RedisStream;
use crate::config::Config;
use crate::tls::TlsMode;

/// A warning line, as `check` prints it.
pub(crate) fn warn(text: impl std::fmt::Display) -> String {
    format!("warn: {text}")
}

/// Redis: what it does when memory runs out, what it keeps across a restart, and whether a
/// failover can lose acknowledged appends that no relay waits for.
pub(crate) async fn redis(stream: &RedisStream, config: &Config) -> Vec<String> {
    let client = stream.client();
    let mut lines = Vec::new();
    let field = |info: &str, name: &str| {
        info.lines().find_map(|l| l.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_owned()))
    };
    // INFO first: a user without CONFIG (the documented ACLs grant none) still gets the answer.
    let memory: Option<String> = client.info(Some(InfoKind::Memory)).await.ok();
    let policy = match memory.as_deref().and_then(|i| field(i, "maxmemory_policy")) {
        Some(policy) => Some(policy),
        None => config_get(client, "maxmemory-policy").await,
    };
    match policy {
        Some(policy) if policy == "noeviction" => lines.push("redis: maxmemory-policy noeviction".to_owned()),
        Some(policy) => lines.push(warn(format!(
            "redis: maxmemory-policy is {policy}: under memory pressure Redis may evict stream entries before a \
             consumer reads them (broker-loss checks re-drive them from the outbox, once); set noeviction"
        ))),
        None => lines.push(warn(
            "redis: maxmemory-policy unreadable (INFO memory and CONFIG GET refused): make sure it is noeviction"
                .to_owned(),
        )),
    }
    let persistence: Option<String> = client.info(Some(InfoKind::Persistence)).await.ok();
    let aof = persistence.as_deref().and_then(|i| field(i, "aof_enabled")).is_some_and(|v| v == "1");
    let rdb = config_get(client, "save").await.map(|s| !s.trim().is_empty());
    lines.push(match (aof, rdb) {
        (true, _) => "redis: appendonly on (entries survive a restart)".to_owned(),
        (false, None) => warn(
            "redis: appendonly off, and CONFIG GET save refused: a restart loses the entries appended since \
             the last snapshot, if any (re-driven from the outbox when broker_loss is on); set appendonly yes",
        ),
        (false, Some(true)) => warn(
            "redis: appendonly off, RDB snapshots only: a restart loses the entries appended since the last \
             snapshot (re-driven from the outbox when broker_loss is on); set appendonly yes",
        ),
        (false, Some(false)) => warn(
            "redis: no persistence (appendonly off, no save): a restart loses every entry not yet taken in \
             (re-driven from the outbox when broker_loss is on); set appendonly yes",
        ),
    });
    let replication: Option<String> = client.info(Some(InfoKind::Replication)).await.ok();
    let replicas = replication.as_deref().and_then(|i| field(i, "connected_slaves")).and_then(|v| v.parse().ok());
    let ungated: Vec<&str> = config
        .relays
        .iter()
        .filter(|r| r.broker == crate::broker::Broker::Redis && r.durability.is_none())
        .map(|r| r.name.as_str())
        .collect();
    if replicas.is_some_and(|n: u32| n > 0) && !ungated.is_empty() {
        lines.push(warn(format!(
            "redis: {} replica(s), and relay(s) {} settle when the primary alone acknowledged: a failover can \
             lose those appends (re-driven from the outbox by broker_loss); set [relay.durability] replicas",
            replicas.unwrap_or_default(),
            ungated.join(", ")
        )));
    }
    lines
}

async fn config_get(client: &Client, name: &str) -> Option<String> {
    let command = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let reply: Value = client.custom(command, vec!["GET", name]).await.ok()?;
    match reply {
        Value::Array(items) => items.get(1).and_then(|v| v.as_string()),
        Value::Map(map) => map.inner().into_iter().next().and_then(|(_, v)| v.as_string()),
        _ => None,
    }
}

/// Each relay with `[relay.notify]`: a trigger on its table must notify its channel, or the
/// relay only polls (`migrate` makes the reference one only for such a relay). A relay without
/// it: a trigger left on its table (from a config that had `[relay.notify]`) makes every insert
/// take Postgres's cluster-wide NOTIFY lock at commit for nobody.
pub(crate) async fn notify_triggers(config: &Config, db: &crate::store::Database) -> Vec<String> {
    let mut lines = Vec::new();
    let mut looked_at = std::collections::HashSet::new();
    for relay in &config.relays {
        let Some(notify) = &relay.notify else {
            // Once per table (several relays may share one).
            let listened = config.relays.iter().any(|r| r.table == relay.table && r.notify.is_some());
            if !listened
                && looked_at.insert(relay.table.as_str())
                && let Ok(Some(true)) = db.has_notify_trigger(&relay.table, None).await
            {
                lines.push(warn(format!(
                    "relay `{}`: a trigger on {} calls handoff_notify, but no relay of this config has \
                     [relay.notify]: each insert then takes Postgres's cluster-wide NOTIFY lock at commit, so \
                     concurrent inserts commit one at a time; drop the trigger unless another process listens \
                     (docs/explanation/delivery.md, low-latency wake-up)",
                    relay.name, relay.table
                )));
            }
            continue;
        };
        match db.has_notify_trigger(&relay.table, Some(&notify.channel)).await {
            Ok(Some(true)) | Ok(None) => {}
            Ok(Some(false)) => lines.push(warn(format!(
                "relay `{}`.notify: no trigger on {} calls handoff_notify('{}'); unless one of your own notifies \
                 that channel, the relay only polls: make it (handoff migrate with this config makes the reference \
                 one; docs/explanation/delivery.md, low-latency wake-up)",
                relay.name, relay.table, notify.channel
            ))),
            Err(e) => lines.push(warn(format!("relay `{}`.notify: the table's triggers unreadable: {e}", relay.name))),
        }
    }
    lines
}

/// The database: a connection that leaves the machine unverified.
pub(crate) fn database(config: &Config) -> Vec<String> {
    let mode = config.database.tls_mode();
    let url = config.database.url.as_ref().map(|u| u.expose()).unwrap_or_default();
    let host = crate::tls::host_port(url).map(|(h, _)| h).unwrap_or_default();
    let local = host.is_empty() || host == "localhost" || host.starts_with("127.") || host == "[::1]" || host == "::1";
    if mode == TlsMode::VerifyFull || local {
        return Vec::new();
    }
    vec![warn(format!(
        "database: tls mode {} to `{host}`: the server's certificate is not checked, so anyone on the path can \
         read or change what handoff sends; set database.tls.mode = \"verify-full\" (and ca_file)",
        mode.name()
    ))]
}
