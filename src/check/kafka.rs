//! `handoff check` on Kafka: the cluster answers, the topics the relays and bridges name exist
//! (handoff creates none), and each one's settings: a relay's `entry_max_bytes` over the topic's
//! `max.message.bytes` is a problem (a row in between would turn DEAD); fewer than 3 replicas or
//! `min.insync.replicas` below 2 is a warning (an acknowledged message on one broker only).

use std::collections::BTreeMap;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::consumer::BaseConsumer;

use super::servers::warn;
use crate::bridge::config::BridgeConfig;
use crate::broker::kafka::client::{self, Logged};
use crate::broker::kafka::config::KafkaConfig;
use crate::relay::config::RelayConfig;

/// A topic as check reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopicSettings {
    pub partitions: usize,
    pub replicas: usize,
    pub min_insync: Option<u32>,
    pub max_message_bytes: Option<usize>,
}

/// Lines for one topic that `who` (`relay `r`` or `bridge `b``) uses: what passes or warns, and
/// the problems. `entry_max_bytes`: the relay's, for a topic a relay produces to.
pub(crate) fn review_topic(
    who: &str,
    topic: &str,
    settings: &TopicSettings,
    entry_max_bytes: Option<usize>,
) -> (Vec<String>, Vec<String>) {
    let (mut ok, mut problems) = (Vec::new(), Vec::new());
    let min_insync = settings.min_insync.unwrap_or(1);
    let line = format!(
        "{who}: topic {topic}: {} partitions, {} replicas, min.insync.replicas {min_insync}",
        settings.partitions, settings.replicas
    );
    if settings.replicas < 3 || min_insync < 2 {
        ok.push(warn(format!(
            "{line}: an acknowledged message may live on one broker only, and that broker's loss loses it; use 3 replicas and min.insync.replicas 2"
        )));
    } else {
        ok.push(line);
    }
    if let (Some(entry), Some(max)) = (entry_max_bytes, settings.max_message_bytes)
        && entry > max
    {
        problems.push(format!(
            "{who}.entry_max_bytes: {entry} is over topic {topic}'s max.message.bytes {max}: a row whose message falls between would be refused and turn DEAD; set entry_max_bytes below {max}"
        ));
    }
    (ok, problems)
}

/// Topic → each user of it: (who, the relay's `entry_max_bytes`).
type Users = BTreeMap<String, Vec<(String, Option<usize>)>>;

/// The topics `relays` and `bridges` name that can be known before a row renders them (a
/// relay's template without a column, every bridge stream), and a line for each relay whose
/// topics are rendered per row.
fn named_topics(relays: &[&RelayConfig], bridges: &[&BridgeConfig]) -> (Users, Vec<String>) {
    let (mut topics, mut rendered) = (Users::new(), Vec::new());
    for relay in relays {
        let who = format!("relay `{}`", relay.name);
        if relay.stream.contains('{') {
            rendered.push(format!(
                "{who}: topics are rendered per row from `{}`: not checked here (create them, or let the brokers auto-create them)",
                relay.stream
            ));
        } else {
            topics.entry(relay.stream.clone()).or_default().push((who, Some(relay.entry_max_bytes)));
        }
    }
    for bridge in bridges {
        for source in &bridge.streams {
            topics.entry(source.key.clone()).or_default().push((format!("bridge `{}`", bridge.name), None));
        }
    }
    (topics, rendered)
}

/// Reads the cluster and reviews every topic the configuration names: (ok lines, problems).
pub(crate) async fn check(
    config: &KafkaConfig,
    relays: &[&RelayConfig],
    bridges: &[&BridgeConfig],
) -> (Vec<String>, Vec<String>) {
    let (topics, mut ok) = named_topics(relays, bridges);
    let mut problems = Vec::new();
    let made = client::admin_config(config).map_err(|e| e.to_string()).and_then(|c| {
        let admin: AdminClient<Logged> = c.create_with_context(Logged).map_err(|e| e.to_string())?;
        let reader: BaseConsumer<Logged> = c.create_with_context(Logged).map_err(|e| e.to_string())?;
        Ok((admin, reader))
    });
    let (admin, reader) = match made {
        Ok(clients) => clients,
        Err(e) => return (ok, vec![format!("kafka: {e}")]),
    };
    let timeout = config.timeout;
    let metadata = tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::Consumer;
        let metadata = reader.fetch_metadata(None, timeout).map_err(|e| e.to_string())?;
        let brokers = metadata.brokers().len();
        let listed: BTreeMap<String, TopicSettings> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| {
                let replicas = t.partitions().iter().map(|p| p.replicas().len()).min().unwrap_or(0);
                (
                    t.name().to_owned(),
                    TopicSettings { partitions: t.partitions().len(), replicas, ..Default::default() },
                )
            })
            .collect();
        Ok::<_, String>((brokers, listed))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    let (brokers, mut listed) = match metadata {
        Ok(found) => found,
        Err(e) => {
            problems.push(format!("kafka: {} does not answer within {timeout:?} ({e})", config.bootstrap_servers));
            return (ok, problems);
        }
    };
    ok.insert(0, format!("kafka: reachable at {} ({brokers} brokers)", config.bootstrap_servers));
    let present: Vec<&str> = topics.keys().map(String::as_str).filter(|t| listed.contains_key(*t)).collect();
    let specifiers: Vec<ResourceSpecifier<'_>> = present.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let options = AdminOptions::new().request_timeout(Some(timeout));
    if let Ok(described) = admin.describe_configs(&specifiers, &options).await {
        for resource in described.into_iter().flatten() {
            let rdkafka::admin::OwnedResourceSpecifier::Topic(name) = &resource.specifier else { continue };
            let value = |key: &str| resource.get(key).and_then(|e| e.value.clone()).unwrap_or_default();
            if let Some(settings) = listed.get_mut(name) {
                settings.min_insync = value("min.insync.replicas").parse().ok();
                settings.max_message_bytes = value("max.message.bytes").parse().ok();
            }
        }
    }
    for (topic, users) in &topics {
        for (who, entry_max_bytes) in users {
            match listed.get(topic) {
                None => problems
                    .push(format!("{who}: topic {topic} does not exist on the cluster; create it (handoff does not)")),
                Some(settings) => {
                    let (fine, wrong) = review_topic(who, topic, settings, *entry_max_bytes);
                    ok.extend(fine);
                    problems.extend(wrong);
                }
            }
        }
    }
    (ok, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_replica_warns_and_an_entry_over_the_topics_limit_is_a_problem() {
        let safe =
            TopicSettings { partitions: 6, replicas: 3, min_insync: Some(2), max_message_bytes: Some(1_048_588) };
        let (ok, problems) = review_topic("relay `r`", "audit.user", &safe, Some(1_048_576));
        assert_eq!(ok, ["relay `r`: topic audit.user: 6 partitions, 3 replicas, min.insync.replicas 2"]);
        assert!(problems.is_empty());
        let single = TopicSettings { replicas: 1, min_insync: None, max_message_bytes: Some(2048), ..safe };
        let (ok, problems) = review_topic("relay `r`", "audit.user", &single, Some(1_048_576));
        assert!(
            ok[0].starts_with("warn: relay `r`: topic audit.user") && ok[0].contains("min.insync.replicas 1"),
            "{ok:?}"
        );
        assert!(
            problems[0]
                .starts_with("relay `r`.entry_max_bytes: 1048576 is over topic audit.user's max.message.bytes 2048"),
            "{problems:?}"
        );
        let (_, problems) = review_topic("bridge `b`", "audit.user", &single, None);
        assert!(problems.is_empty(), "a bridge produces nothing there");
    }
}
