//! Apply at take-over (`[bridge] apply = "<worker>"`): the SQL handlers of a worker of the same
//! inbox, bound for the events the bridge is taking over, so that the takeover inserts them as
//! PROCESSED with their effects in one transaction. Which handler serves an event is decided as
//! the worker decides it (the first whose `event_types` match); an event served by an HTTP
//! handler, by none, or whose statements cannot be bound (a payload field missing) is inserted
//! PENDING and left to the worker, which applies its own rules to it.

use crate::bridge::takeover::{Effects, InboxEvent};
use crate::event_types::type_matches;
use crate::pause::PauseSwitch;
use crate::sql::params::Placeholder;
use crate::worker::config::{HandlerErrors, WorkerConfig};
use crate::worker::inbox::{BoundStatement, EventInput, HandlerSql, HandlerSqlError};

pub(crate) struct Apply {
    /// Every handler of the worker in order: its event type patterns and, for a SQL handler,
    /// its statements.
    handlers: Vec<(Vec<String>, Option<Vec<HandlerSql>>)>,
    errors: HandlerErrors,
    /// The worker's pause: while it is paused, the bridge applies nothing either (the events
    /// wait PENDING for the worker), or pausing a worker would not stop its handlers.
    worker_pause: Option<PauseSwitch>,
}

impl Apply {
    /// The handlers of `worker`, in the dialect's placeholders.
    pub(crate) fn new(worker: &WorkerConfig, style: Placeholder) -> Result<Self, HandlerSqlError> {
        let handlers = worker
            .handlers
            .iter()
            .map(|h| {
                let sql = (!h.sql.is_empty())
                    .then(|| h.sql.iter().map(|s| HandlerSql::parse(s, style)).collect::<Result<Vec<_>, _>>())
                    .transpose()?;
                Ok((h.event_types.clone(), sql))
            })
            .collect::<Result<_, HandlerSqlError>>()?;
        Ok(Self { handlers, errors: worker.handler_errors.clone(), worker_pause: None })
    }

    /// Applies nothing while `switch` (the worker's) holds.
    pub(crate) fn paused_with(mut self, switch: PauseSwitch) -> Self {
        self.worker_pause = Some(switch);
        self
    }

    /// Whether the worker is paused (or its pauses are not known yet).
    pub(crate) fn worker_paused(&self) -> bool {
        self.worker_pause.as_ref().is_some_and(PauseSwitch::holds)
    }

    /// The statements each of `events` is applied with (`None`: left PENDING for the worker).
    pub(crate) fn effects<'a>(&'a self, events: &[InboxEvent]) -> Effects<'a> {
        let statements = events.iter().map(|event| self.bind(event)).collect();
        Effects { statements, errors: &self.errors }
    }

    fn bind<'a>(&'a self, event: &InboxEvent) -> Option<Vec<BoundStatement<'a>>> {
        if event.ignored {
            return None;
        }
        let (_, statements) =
            self.handlers.iter().find(|(types, _)| types.iter().any(|t| type_matches(t, &event.event_type)))?;
        let input = EventInput::new(event);
        statements.as_ref()?.iter().enumerate().map(|(i, s)| s.bind(i, &input).ok()).collect()
    }
}
