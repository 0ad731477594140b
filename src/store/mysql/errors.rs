//! The one place that decides, for MySQL / MariaDB, what an error means: an outage of the store
//! (and which kind) or a refusal of the data, from the server's error code.

use crate::store::error::{OutageKind, PrepareError, StoreError};

/// Server error codes of data the statement cannot store: retrying cannot help. 1153: a value
/// larger than the server's `max_allowed_packet` (one entry's payload; the rest of its batch
/// goes in without it).
pub(crate) const DATA_ERRORS: &[u16] = &[1048, 1062, 1153, 1264, 1265, 1292, 1366, 1406, 1451, 1452, 3140, 4025];

/// The one place that decides, for MySQL / MariaDB, whether an error is an outage of the store
/// (and which kind) or a refusal of the data: from the server's error code.
pub(crate) fn error(statement: &'static str, e: mysql_async::Error) -> StoreError {
    let kind = match &e {
        mysql_async::Error::Server(server) => match server.code {
            code if DATA_ERRORS.contains(&code) => return StoreError::Rejected { statement, source: Box::new(e) },
            1205 | 1213 => OutageKind::Conflict,
            1290 | 1792 | 1836 => OutageKind::ReadOnly,
            // Too many connections (server, user, resources), lost or killed connections,
            // interrupted queries, a server shutting down or idle-disconnecting the client.
            1040 | 1053 | 1152 | 1158 | 1159 | 1160 | 1161 | 1203 | 1226 | 1317 | 1927 | 4031 => OutageKind::Connection,
            1044 | 1045 | 1142 | 1143 | 1227 | 1370 => OutageKind::Permission,
            // The statement does not fit the tables: an unknown database, column, table or
            // routine, a syntax error, a column count or a NOT NULL column without a default
            // the statement does not fill (1136, 1364: the statement's shape, not a row's data).
            1046 | 1049 | 1054 | 1064 | 1091 | 1136 | 1146 | 1305 | 1364 => OutageKind::Schema,
            _ => OutageKind::Other,
        },
        mysql_async::Error::Url(_) => OutageKind::Other,
        // The client refuses to send a packet over the server's max_allowed_packet (it learnt
        // the value when it connected): the value is too large, not the server gone.
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) if packet_too_large(io) => {
            return StoreError::Rejected { statement, source: Box::new(e) };
        }
        _ => OutageKind::Connection,
    };
    StoreError::Unavailable { statement, kind, source: Box::new(e) }
}

fn packet_too_large(io: &std::io::Error) -> bool {
    use mysql_common::proto::codec::error::PacketCodecError;
    io.get_ref()
        .and_then(|e| e.downcast_ref::<PacketCodecError>())
        .is_some_and(|e| matches!(e, PacketCodecError::PacketTooLarge))
}

/// The server's message and code for a rejected statement; the plain text otherwise.
pub(crate) fn describe(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => format!("{} (error {})", s.message, s.code),
        other => other.to_string(),
    }
}

/// A statement the database refused to prepare, as a message naming `context`; `Unreachable`
/// when the connection went away meanwhile (then startup waits and tries again).
pub(crate) fn prepare_refusal(context: &str, e: mysql_async::Error) -> Result<String, PrepareError> {
    let text = format!("{context}: {}", describe(&e));
    if error("prepare", e).is_connection() { Err(PrepareError::Unreachable(text)) } else { Ok(text) }
}
