//! Every integration test, as modules of one test binary: the shared harness (`common`) and the
//! crate's generic code are compiled and linked once instead of once per file (the tests' build
//! after the library: 1m41s with 27 binaries, 36 s as one). Each file is still a suite of its
//! own: `cargo nextest run -E 'test(/^relay_locked::/)'` runs one.

mod common;

mod admin;
mod apply_at_takeover;
mod both_brokers;
mod bridge;
mod bridge_memory;
mod broker_loss;
mod claim_plans;
mod cli_reference;
mod config_check;
mod config_reference;
mod consumer_foreign_layout;
mod consumer_outage;
mod container_entrypoint;
mod end_to_end;
mod hostile_servers;
mod kafka_bridge;
mod kafka_relay;
mod least_privilege;
mod mariadb_consumer;
mod mariadb_relay;
mod metrics_reference;
mod nats_bridge;
mod nats_stream;
mod operations;
mod partitions;
mod redis_failover;
mod relay_claim_stress;
mod relay_clock;
mod relay_delivery;
mod relay_failures;
mod relay_foreign_layout;
mod relay_hostile_rows;
mod relay_locked;
mod relay_ordering;
mod relay_outages;
mod relay_semantics;
mod scale_out;
mod silent_network;
mod telemetry;
mod tls;
mod tracing;
mod worker;
mod worker_locked;
