//! LISTEN on Postgres: a dedicated connection that hears of outbox inserts (`relay.notify`),
//! so a relay claims at once instead of at its next poll.

use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use crate::store::config::DatabaseConfig;
use crate::store::postgres::connect::{ConnectError, connect_config};

/// Why a LISTEN connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListenError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("the LISTEN connection failed")]
    Connection(#[from] tokio_postgres::Error),
}

/// One connection's life: LISTEN on `channel` (`listening` runs once it listens), then
/// `notified` on each notification, until the connection ends or `shutdown`.
pub(crate) async fn notifications(
    database: &DatabaseConfig,
    channel: &str,
    listening: impl FnOnce(),
    notified: impl Fn(),
    shutdown: &CancellationToken,
) -> Result<(), ListenError> {
    let (config, tls) = connect_config(database, "handoff-listen")?;
    let (client, mut connection) = config.connect(tls).await?;
    let listen = async {
        client.batch_execute(&format!("LISTEN {}", quote_identifier(channel))).await?;
        listening();
        std::future::pending::<Result<(), tokio_postgres::Error>>().await
    };
    // Drives the connection (the LISTEN above needs it too) and forwards notifications.
    let pump = async {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => notified(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    };
    tokio::select! {
        result = listen => Ok(result?),
        result = pump => Ok(result?),
        _ = shutdown.cancelled() => Ok(()),
    }
}

/// `"name"` with inner quotes doubled, so any configured channel name is one identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_are_quoted() {
        assert_eq!(quote_identifier("handoff_outbox"), "\"handoff_outbox\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}
