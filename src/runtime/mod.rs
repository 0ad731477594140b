//! The loop machinery every component shares, below them all: the claim loop of the relay and
//! the worker, backoff, waiting out an outage, work under a renewed lease, periodic work, the
//! supervisor every task runs under, and the signals that stop them.

pub(crate) mod backoff;
pub(crate) mod claim_loop;
pub(crate) mod lease;
pub(crate) mod loop_config;
pub(crate) mod outage;
pub(crate) mod periodic;
pub(crate) mod signal;
pub(crate) mod supervisor;
pub(crate) mod turns;
pub(crate) mod wait;
