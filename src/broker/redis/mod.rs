//! Redis Streams via `fred`: standalone, sentinel or cluster, chosen by the URL scheme.

mod build;
mod client;
mod consumer;
mod durable;
pub(crate) mod group;
mod link;
mod loss;
mod plain;
mod replies;
mod resp;
#[cfg(fuzzing)]
pub(crate) use resp::parse as parse_reply;
mod scripted;
mod shards;
mod sweep;
pub(crate) mod trim;

pub use client::{ConnectError, RedisStream};
pub use consumer::RedisGroup;
pub use replies::{entry_millis, is_outage};
