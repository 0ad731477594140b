//! A fred client with handoff's connection settings.

use fred::prelude::*;

/// A client with handoff's connection settings: connect and command timeouts, few resends (a
/// command cut off by a dropped connection soon fails back to the caller, which does the long
/// retrying itself), reconnection with exponential backoff, forever.
pub fn build(config: Config, command_timeout: std::time::Duration) -> Result<Client, Error> {
    Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = command_timeout;
            c.internal_command_timeout = command_timeout;
            c.max_command_attempts = 2;
        })
        .with_performance_config(|p| p.default_command_timeout = command_timeout)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
        .build()
}
