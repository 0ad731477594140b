//! `[bridge] apply`: which worker's SQL handlers a bridge runs at take-over. Absent, the bridge
//! applies where it can (one worker of the same inbox in the file, every condition met), as
//! `claim = "auto"` chooses; `"off"` never; a worker's name, that worker or a configuration error.

use crate::bridge::config::BridgeConfig;
use crate::config::file::Config;
use crate::sql::params::Placeholder;
use crate::store::config::Dialect;
use crate::worker::config::WorkerConfig;
use crate::worker::inbox::contract::WorkerStatement;

/// `apply = "off"`: the worker applies everything.
pub(crate) const OFF: &str = "off";

/// Why bridge `bridge` cannot apply worker `name`'s handlers at take-over (none: it can).
pub(crate) fn problems(config: &Config, bridge: &BridgeConfig, name: &str, style: Placeholder) -> Vec<String> {
    let Some(worker) = config.workers.iter().find(|w| w.name == name) else {
        return vec![format!("no worker named `{name}` in this file (the handlers applied are a worker's)")];
    };
    let mut problems = Vec::new();
    if style != Placeholder::Numbered {
        problems.push("apply at take-over needs Postgres".to_owned());
    }
    if !same_inbox(bridge, worker) {
        problems.push(format!(
            "worker `{name}` serves consumer `{}` in table {}, the bridge consumer `{}` in table {}: they must be the same inbox",
            worker.consumer, worker.table, bridge.consumer, bridge.table
        ));
    }
    if bridge.sql.insert.is_some() || bridge.sql.existing.is_some() {
        problems.push(
            "apply at take-over inserts with the reference statements; remove sql.insert / sql.existing".to_owned(),
        );
    }
    if WorkerStatement::ALL.iter().any(|s| worker.sql.get(*s).is_some()) {
        problems.push(format!(
            "worker `{name}` has [worker.sql] overrides (an inbox of another layout); apply at take-over needs the reference inbox"
        ));
    }
    if worker.handlers.iter().all(|h| h.sql.is_empty()) {
        problems.push(format!("worker `{name}` has no SQL handler to apply"));
    }
    problems
}

fn same_inbox(bridge: &BridgeConfig, worker: &WorkerConfig) -> bool {
    worker.consumer == bridge.consumer && worker.table == bridge.table
}

/// Settles every bridge's `apply` to a worker's name or none, recording why in `apply_chosen`.
/// Runs on a valid configuration (an explicit worker already passed [`problems`]).
pub(crate) fn resolve(config: &mut Config) {
    let dialect = config.database.dialect();
    let style = dialect.unwrap_or(Dialect::Postgres).placeholder();
    let chosen: Vec<(Option<String>, String)> = config
        .bridges
        .iter()
        .map(|bridge| match bridge.apply.as_deref() {
            Some(OFF) => (None, "configured".to_owned()),
            Some(name) => (Some(name.to_owned()), "configured".to_owned()),
            None => auto(config, bridge, style),
        })
        .collect();
    for (bridge, (apply, why)) in config.bridges.iter_mut().zip(chosen) {
        bridge.apply = apply;
        bridge.apply_chosen = Some(why);
    }
}

/// What `apply` absent means for `bridge`: the one worker of its inbox, if it can.
fn auto(config: &Config, bridge: &BridgeConfig, style: Placeholder) -> (Option<String>, String) {
    let workers: Vec<&WorkerConfig> = config.workers.iter().filter(|w| same_inbox(bridge, w)).collect();
    match workers.as_slice() {
        [] => (None, "auto: no worker of this inbox in this file".to_owned()),
        [worker] => match problems(config, bridge, &worker.name, style).into_iter().next() {
            None => (Some(worker.name.clone()), "auto: the one worker of this inbox, every condition holds".to_owned()),
            Some(problem) => (None, format!("auto: {problem}")),
        },
        _ => (None, format!("auto: {} workers serve this inbox; name one", workers.len())),
    }
}
