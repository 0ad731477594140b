//! How a database failed, classified once per dialect from the server's error code: an outage
//! of the store (nothing may be counted against a row or entry), a refusal of the data, or a
//! statement that breaks the SQL contract.

/// Why the database could not do something, when it was not the data's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutageKind {
    /// Unreachable, dropped, timed out, shutting down, out of resources.
    Connection,
    /// A table, column, type or function the statement uses is missing or different.
    Schema,
    /// The database user lacks a privilege.
    Permission,
    /// The server accepts no writes (a read-only replica, a failover in progress).
    ReadOnly,
    /// Deadlock, serialization failure, lock timeout: passes by itself.
    Conflict,
    /// Anything else refused that is not about the data.
    Other,
}

impl OutageKind {
    pub(crate) const ALL: [OutageKind; 6] = [
        OutageKind::Connection,
        OutageKind::Schema,
        OutageKind::Permission,
        OutageKind::ReadOnly,
        OutageKind::Conflict,
        OutageKind::Other,
    ];

    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            OutageKind::Connection => "connection",
            OutageKind::Schema => "schema",
            OutageKind::Permission => "permission",
            OutageKind::ReadOnly => "read_only",
            OutageKind::Conflict => "conflict",
            OutageKind::Other => "other",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            OutageKind::Connection => "unreachable",
            OutageKind::Schema => "schema does not fit the statement",
            OutageKind::Permission => "permission denied",
            OutageKind::ReadOnly => "read-only",
            OutageKind::Conflict => "lock conflict",
            OutageKind::Other => "refused the statement",
        }
    }
}

/// The class of a failure, by whose doing it is: what may be counted against a row or an entry,
/// and what only waited out or reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// A server unreachable, busy, in a lock conflict: it passes by itself. Back off, count
    /// nothing against any row or entry (invariant 6).
    Outage,
    /// This row's or entry's own data: the only class that may make a row DEAD or an entry
    /// poison (invariant 10).
    Data,
    /// The setup does not fit the work — a statement the schema or the privileges refuse, a
    /// read-only server, a result that breaks the contract: an outage someone must end.
    Setup,
}

/// A database error, classified once per dialect (from the server's error code): either an
/// outage of the store — not the row's or entry's fault, nothing may be poisoned or counted
/// against it (invariants 6 and 10) — or a refusal of this data.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {} during {statement}", kind.describe())]
    Unavailable {
        statement: &'static str,
        kind: OutageKind,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A constraint or data exception: the same data fails the same way every time.
    #[error("the database refused the data in {statement}")]
    Rejected {
        statement: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("claim returned a row that breaks the column contract: {0}")]
    Contract(String),
}

impl StoreError {
    /// A store without a locked claim was asked for one (configuration refuses that before).
    pub(crate) fn no_locked_claim() -> Self {
        StoreError::Contract("this store has no locked claim (claim = \"locked\")".into())
    }

    /// The one question every component asks of a failure: whose doing it is.
    pub(crate) fn class(&self) -> ErrorClass {
        match self {
            StoreError::Rejected { .. } => ErrorClass::Data,
            StoreError::Unavailable { kind: OutageKind::Connection | OutageKind::Conflict, .. } => ErrorClass::Outage,
            StoreError::Unavailable { .. } | StoreError::Contract(_) => ErrorClass::Setup,
        }
    }

    /// Whether the error is about the data the statement carried (only then may a row go DEAD
    /// or an entry to poison because of it).
    pub(crate) fn is_about_the_data(&self) -> bool {
        self.class() == ErrorClass::Data
    }

    /// Whether the database could not be reached at all (as opposed to a statement it refused).
    pub(crate) fn is_connection(&self) -> bool {
        matches!(self, StoreError::Unavailable { kind: OutageKind::Connection, .. })
    }

    /// The server's error code: the SQLSTATE on Postgres (`23503`), the error number on MySQL
    /// (`1452`); `None` for a client-side failure.
    pub(crate) fn code(&self) -> Option<String> {
        let source = match self {
            StoreError::Unavailable { source, .. } | StoreError::Rejected { source, .. } => source,
            StoreError::Contract(_) => return None,
        };
        if let Some(pg) = source.downcast_ref::<tokio_postgres::Error>() {
            return pg.code().map(|c| c.code().to_owned());
        }
        match source.downcast_ref::<mysql_async::Error>() {
            Some(mysql_async::Error::Server(server)) => Some(server.code.to_string()),
            _ => None,
        }
    }

    /// The statement that failed (a fixed name: a metric label).
    pub(crate) fn statement(&self) -> &'static str {
        match self {
            StoreError::Unavailable { statement, .. } | StoreError::Rejected { statement, .. } => statement,
            StoreError::Contract(_) => "contract",
        }
    }

    /// Every value of [`kind_label`](Self::kind_label).
    pub(crate) const KIND_LABELS: [&'static str; 8] =
        ["connection", "schema", "permission", "read_only", "conflict", "other", "data", "contract"];

    /// What kind of failure this is, as a metric label: an outage kind, `data` or `contract`.
    pub(crate) fn kind_label(&self) -> &'static str {
        match self {
            StoreError::Unavailable { kind, .. } => kind.label(),
            StoreError::Rejected { .. } => "data",
            StoreError::Contract(_) => "contract",
        }
    }

    /// Whether the failure passes by itself (the server comes back, a lock conflict clears),
    /// as opposed to a statement or row the database refuses until someone changes one: only
    /// the latter is worth an alert of its own when it repeats.
    pub(crate) fn passes_by_itself(&self) -> bool {
        self.class() == ErrorClass::Outage
    }

    /// The outage's kind, for metrics; `None` for an error about the data.
    pub(crate) fn outage_kind(&self) -> Option<OutageKind> {
        match self {
            StoreError::Unavailable { kind, .. } => Some(*kind),
            StoreError::Contract(_) => Some(OutageKind::Other),
            StoreError::Rejected { .. } => None,
        }
    }
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// Why statements could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The database did not answer; worth retrying.
    #[error("{0}")]
    Unreachable(String),
    /// Statements or their results break the contract; every problem, each naming its statement.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

impl PrepareError {
    /// No connection to prepare on, for `what` (`relay \`audit\``).
    pub(crate) fn cannot_connect(what: &str, error: impl std::fmt::Display) -> Self {
        PrepareError::Unreachable(format!("{what}: cannot connect to the database: {error}"))
    }
}

/// A configured statement the store cannot use as written, naming it (`context`); found when
/// the store is built, before anything runs.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {problem}")]
pub struct StatementError {
    pub context: String,
    pub problem: StatementProblem,
}

impl StatementError {
    pub(crate) fn new(context: impl Into<String>, problem: impl Into<StatementProblem>) -> Self {
        Self { context: context.into(), problem: problem.into() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StatementProblem {
    #[error(transparent)]
    Parse(#[from] crate::sql::params::ParseError),
    #[error("one statement expected (only {0} may be scripts)")]
    NotOneStatement(&'static str),
    #[error("the statement has no named parameters")]
    Unnamed,
}

/// Why a database's connection pool could not be built (nothing has been sent yet: the
/// configuration is wrong, not the server).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("database.url is not a valid {dialect} URL: {detail}")]
    Url { dialect: &'static str, detail: String },
    #[error("database.url: unsupported scheme")]
    Scheme,
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("database connection pool")]
    Pool(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why `handoff migrate` stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("another migration holds the lock")]
    Locked,
    #[error("{0}")]
    Layout(String),
    #[error("migration {version} failed")]
    Version {
        version: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("migration {version} does not scan")]
    Scan {
        version: &'static str,
        #[source]
        source: crate::sql::params::ParseError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}
