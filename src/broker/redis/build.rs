//! A fred client with handoff's connection settings.

use std::time::Duration;

use fred::prelude::*;

/// A client with handoff's connection settings: connect and command timeouts, few resends (a
/// command cut off by a dropped connection soon fails back to the caller, which does the long
/// retrying itself), reconnection with exponential backoff, forever.
///
/// A connection that leaves a command unanswered for `command_timeout` is closed and made
/// again (`unresponsive`): after a silent network failure (a partition, a lost NAT entry, no
/// RST) the command timeout alone only fails each command in turn on the same dead connection,
/// for ever. Blocking reads are exempt while they block.
pub(super) fn build(config: Config, command_timeout: std::time::Duration) -> Result<Client, Error> {
    Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = command_timeout;
            c.internal_command_timeout = command_timeout;
            c.max_command_attempts = 2;
            c.unresponsive.max_timeout = Some(command_timeout);
            c.unresponsive.interval = (command_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        })
        .with_performance_config(|p| p.default_command_timeout = command_timeout)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build()
}
