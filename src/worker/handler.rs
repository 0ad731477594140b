//! Handlers as configured: which one serves an event type, and its effect (SQL statements,
//! bound by the inbox seam's [`HandlerSql`], or an HTTP POST).

use crate::event_types::type_matches;
use crate::sql::params::Placeholder;
use crate::worker::config::{HandlerConfig, WorkerConfig};
use crate::worker::inbox::{HandlerSql, HandlerSqlError};

use super::http::HttpHandler;

pub(crate) enum Effect {
    Sql(Vec<HandlerSql>),
    Http(Box<HttpHandler>),
}

pub(crate) struct Handler {
    event_types: Vec<String>,
    /// The `handler` label of its metrics: configured, or its event type patterns. Bounded by
    /// the configuration, whatever types the producers write.
    pub label: String,
    pub effect: Effect,
}

/// A handler the configuration describes but handoff cannot build; each names its key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandlerError {
    #[error("{key}: {error}")]
    Sql { key: String, error: HandlerSqlError },
    #[error(transparent)]
    Http(#[from] crate::tls::https::EndpointError),
    #[error("{path}: set exactly one of sql, http")]
    NotOne { path: String },
    #[error(
        "{path}.sql: some statements run per event and some per batch (:event_ids, :payloads, …); a handler's statements are all in one form, so that they run in the order written"
    )]
    MixedForms { path: String },
}

impl Handler {
    /// Rewrites the statements for the dialect and checks every parameter name.
    pub(crate) fn build(
        worker: &WorkerConfig,
        index: usize,
        config: &HandlerConfig,
        style: Placeholder,
    ) -> Result<Self, HandlerError> {
        let path = format!("worker `{}` handler[{index}]", worker.name);
        let effect = match (&config.http, config.sql.is_empty()) {
            (Some(http), true) => Effect::Http(Box::new(HttpHandler::new(http, &format!("{path}.http"))?)),
            (None, false) => {
                let statements = config
                    .sql
                    .iter()
                    .enumerate()
                    .map(|(i, sql)| {
                        HandlerSql::parse(sql, style)
                            .map_err(|error| HandlerError::Sql { key: format!("{path}.sql[{i}]"), error })
                    })
                    .collect::<Result<Vec<HandlerSql>, HandlerError>>()?;
                if statements.iter().any(|s| s.form != statements[0].form) {
                    return Err(HandlerError::MixedForms { path });
                }
                Effect::Sql(statements)
            }
            _ => return Err(HandlerError::NotOne { path }),
        };
        let label = config.name.clone().unwrap_or_else(|| config.event_types.join(","));
        Ok(Self { event_types: config.event_types.clone(), label, effect })
    }

    pub(crate) fn serves(&self, event_type: &str) -> bool {
        self.event_types.iter().any(|pattern| type_matches(pattern, event_type))
    }

    /// The handler's SQL texts (for `check`), with a label each.
    pub(crate) fn sql_texts(&self) -> Vec<&str> {
        match &self.effect {
            Effect::Sql(statements) => statements.iter().map(|s| s.sql.as_str()).collect(),
            Effect::Http(_) => Vec::new(),
        }
    }
}
