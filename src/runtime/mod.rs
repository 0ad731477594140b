//! The loop machinery every component shares, below them all: the claim loop of the relay and
//! the worker, backoff, waiting out an outage, work under a renewed lease, periodic work, the
//! supervisor every task runs under, and the signals that stop them.

pub mod backoff;
pub mod claim_loop;
pub mod lease;
pub mod outage;
pub mod periodic;
pub mod signal;
pub mod supervisor;
pub mod turns;
pub mod wait;
