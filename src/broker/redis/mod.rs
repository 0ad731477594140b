//! Redis Streams via `fred`: standalone, sentinel or cluster, chosen by the URL scheme.

mod build;
pub(crate) mod client;
pub(crate) mod config;
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

pub(crate) use client::{ConnectError, RedisStream};
pub(crate) use consumer::RedisGroup;
