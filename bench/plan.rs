//! `handoff-bench --plan`: the capacity model of docs/explanation/capacity.md, printed for given inputs.
//!
//! Every output is a per-event cost the benchmark measures, times the events per second that
//! pay it, divided by the share of a core a process may use at peak (the headroom rule). The
//! costs come from a results.json of the benchmark where it holds them (`--costs`), from the
//! figures in docs/explanation/capacity.md otherwise; the printout says which.

use std::path::PathBuf;

/// The share of a host's cores the processes sharing it are planned up to (their sum). The
/// costs are measured with the machine's other core free, or nearly; past this share every
/// process's CPU per event rises with how busy the host is (in the scale run's backlog and in
/// its steady runs on a full machine: the relays up to 2.4×), which the model does not predict.
/// Three quarters is the usual ceiling of capacity planning, where waiting for a core starts to
/// dominate.
pub const HOST_HEADROOM: f64 = 0.75;

/// What a deployment asks of the model.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Owner services, each with its own outbox (and database).
    pub services: u32,
    /// Peak events per second each service writes.
    pub rate: f64,
    /// Bytes of an event's payload.
    pub bytes: f64,
    /// Consumer groups reading every event (each with its own inbox database).
    pub groups: u32,
    /// Stream families the events spread over, evenly (0: one per service, each relay's
    /// template its own family; 1: every event in one family, the hottest case).
    pub families: u32,
    /// Share of one core a process (or a Redis primary, or a database's CPU budget) may use at
    /// peak; the rest is headroom for bursts, failover and catch-up.
    pub headroom: f64,
}

/// CPU per event (µs) of each process, and what an entry takes in Redis.
#[derive(Debug, Clone, PartialEq)]
pub struct Costs {
    /// Owner Postgres per delivered row, the relay's default config, one relay on the outbox.
    pub owner_pg_us: f64,
    /// Owner Postgres per row with two relays on one outbox (the two availability asks for),
    /// as a multiple of one relay's: their claims skip each other's locked rows.
    pub second_relay_pg: f64,
    /// The relay per row at full batches back to back (batch 500, its claim cycles included).
    pub relay_us: f64,
    /// The relay per row apart from its claim cycles: from the relay at batch 500 and at
    /// [`SMALL_BATCH`], back to back.
    pub relay_row_us: f64,
    /// The relay per claim cycle (claim, append, settle) in a deployment that delivers at a
    /// modest rate: each cycle starts after a poll's wait or a busy database's reply, on cold
    /// caches, and costs about twice one run back to back. Measured on the scale run's own
    /// layout with only its relays running, at a rate of its own (`relays_alone`).
    pub relay_cycle_us: f64,
    /// What a claim cycle costs the owner's Postgres and Redis in the same deployment, beyond
    /// their share of one at full batches ([`OWNER_PG_CYCLE`], [`REDIS_APPEND_CYCLE`]): a row
    /// of a cycle carrying `f` rows costs the batch-500 figure + this × (1/f − 1/500).
    pub owner_pg_cycle_us: f64,
    /// Likewise Redis's, for the cycle's appends (spread over the shards' primaries).
    pub redis_append_cycle_us: f64,
    pub redis_append_us: f64,
    /// The bridge applying the handler at take-over (the default for a SQL handler).
    pub bridge_us: f64,
    pub redis_read_us: f64,
    /// Consumer Postgres per event: the inbox insert and the seed's handler, one transaction.
    pub consumer_pg_us: f64,
    /// What a takeover transaction costs the bridge and the consumer's Postgres apart from its
    /// events, from the bridge at batch 500 and at [`SMALL_BATCH`] back to back, or where the
    /// scale run measured them, in a deployment at a modest rate ([`BRIDGE_TXN`],
    /// [`CONSUMER_PG_TXN`]): an event in a batch of `f` costs the batch-500 figure + this ×
    /// (1/f − 1/500).
    pub bridge_txn_us: f64,
    pub consumer_pg_txn_us: f64,
    /// What a bridge's read and acknowledgement cost Redis apart from their events, likewise;
    /// or, where the scale run measured it, in a deployment: reads that block on the layout's
    /// streams and are served as entries arrive ([`REDIS_READ_TXN`]).
    pub redis_read_txn_us: f64,
    /// Redis memory per entry for `entry_payload_bytes` of payload.
    pub entry_bytes: f64,
    pub entry_payload_bytes: f64,
}

/// Where each cost came from, for the printout.
pub struct Sourced {
    pub costs: Costs,
    pub from_results: Vec<&'static str>,
    /// The chain run of the same results (events/s, CPU µs per event of every process), to
    /// check the model's sum against.
    pub chain: Option<(f64, f64)>,
}

impl Costs {
    /// The costs docs/explanation/capacity.md states: the 2-vCPU development machine, one sitting of
    /// `scripts/bench --scale` (2026-12-05 08:03 UTC; the relay, replicas and consumer parts, the
    /// relays alone at 2,000 events/s for the per-cycle terms and the deployment at 1,500 events/s
    /// for the per-takeover terms): what `--costs` with that sitting's results.json gives.
    pub const MEASURED: Costs = Costs {
        owner_pg_us: 21.6,
        // 25.2 / 21.0 µs per row, two relay replicas against one.
        second_relay_pg: 1.20,
        relay_us: 4.5,
        relay_row_us: 4.0,
        relay_cycle_us: 423.0,
        owner_pg_cycle_us: 194.0,
        redis_append_cycle_us: 369.0,
        redis_append_us: 2.6,
        bridge_us: 8.4,
        redis_read_us: 2.2,
        consumer_pg_us: 25.7,
        bridge_txn_us: 282.0,
        consumer_pg_txn_us: 492.0,
        redis_read_txn_us: 61.0,
        entry_bytes: 487.0,
        entry_payload_bytes: 300.0,
    };

    /// The built-in costs, each replaced by the one in `paths` (results.json files, a later one
    /// winning) where they hold it.
    pub fn load(paths: &[PathBuf]) -> Sourced {
        Self::from_figures(&figures_in(paths))
    }

    /// The built-in costs, each replaced by the one `figures` (the benchmark's, as in a
    /// results.json; a later one winning) hold.
    pub fn from_figures(figures: &[serde_json::Value]) -> Sourced {
        let mut costs = Self::MEASURED;
        let mut from_results = Vec::new();
        let find = |name: &str| {
            figures.iter().rev().find(|f| f["name"].as_str() == Some(name)).and_then(|f| f["value"].as_f64())
        };
        let per_100k = |v: f64| v * 10.0; // s per 100k events → µs per event
        let mut take = |field: &mut f64, label: &'static str, name: &str, scale: &dyn Fn(f64) -> f64| {
            if let Some(v) = find(name) {
                *field = scale(v);
                from_results.push(label);
            }
        };
        let same = |v: f64| v;
        take(
            &mut costs.owner_pg_us,
            "owner Postgres",
            "Postgres CPU per delivered row, 1 relay, concurrency 2, claim locked (the default config), batch 500",
            &same,
        );
        take(&mut costs.relay_us, "relay", "relay CPU per 100k events, claim locked, batch 500", &per_100k);
        take(&mut costs.relay_cycle_us, "relay per cycle", RELAY_CYCLE, &same);
        take(&mut costs.owner_pg_cycle_us, "owner Postgres per cycle", OWNER_PG_CYCLE, &same);
        take(&mut costs.redis_append_cycle_us, "Redis append per cycle", REDIS_APPEND_CYCLE, &same);
        take(
            &mut costs.redis_append_us,
            "Redis append",
            "Redis CPU per 100k events, claim locked, batch 500",
            &per_100k,
        );
        take(&mut costs.bridge_us, "bridge", "bridge CPU per 100k events, applying at take-over", &per_100k);
        take(
            &mut costs.redis_read_us,
            "Redis read",
            "Redis CPU per 100k events, bridge, applying at take-over",
            &per_100k,
        );
        take(
            &mut costs.consumer_pg_us,
            "consumer Postgres",
            "Postgres CPU per event taken over, bridge, applying at take-over",
            &same,
        );
        take(&mut costs.entry_bytes, "entry bytes", "Redis memory per stream entry, ~300-byte payload", &same);
        let replicas = |n: &str| find(&format!("{n}, default config, batch 500: Postgres CPU per row"));
        if let (Some(one), Some(two)) = (replicas("1 relay replica"), replicas("2 relay replicas")) {
            costs.second_relay_pg = two / one;
            from_results.push("second relay");
        }
        // The per-transaction terms, where both batch sizes were measured.
        if let (Some(big), Some(little)) = (
            find("relay CPU per 100k events, claim locked, batch 500"),
            find(&format!("relay CPU per 100k events, claim locked, batch {SMALL_BATCH}")),
        ) {
            // A batch of b rows costs a cycle + b × a row: two batch sizes give both.
            let (b, s) = (500.0, SMALL_BATCH as f64);
            costs.relay_row_us = (per_100k(big) * b - per_100k(little) * s) / (b - s);
            from_results.push("relay per row");
        }
        let small = |name: &str| find(&format!("{name}, applying at take-over, batch {SMALL_BATCH}"));
        let per_txn = |at_500: f64, at_small: f64| (at_small - at_500) / (1.0 / SMALL_BATCH as f64 - 1.0 / 500.0);
        // Each per-takeover term: measured in a deployment where the scale run did, else back to
        // back from the two batch sizes.
        let mut per_takeover =
            |field: &mut f64, in_deployment: &str, labels: [&'static str; 2], pair: Option<(f64, f64)>| {
                if let Some(v) = find(in_deployment) {
                    *field = v;
                    from_results.push(labels[1]);
                } else if let Some((big, little)) = pair {
                    *field = per_txn(big, little);
                    from_results.push(labels[0]);
                }
            };
        per_takeover(
            &mut costs.bridge_txn_us,
            BRIDGE_TXN,
            ["bridge per transaction", "bridge per transaction, in a deployment"],
            find("bridge CPU per 100k events, applying at take-over")
                .zip(small("bridge CPU per 100k events"))
                .map(|(big, little)| (per_100k(big), per_100k(little))),
        );
        per_takeover(
            &mut costs.consumer_pg_txn_us,
            CONSUMER_PG_TXN,
            ["consumer Postgres per transaction", "consumer Postgres per transaction, in a deployment"],
            find("Postgres CPU per event taken over, bridge, applying at take-over")
                .zip(small("Postgres CPU per event taken over, bridge")),
        );
        per_takeover(
            &mut costs.redis_read_txn_us,
            REDIS_READ_TXN,
            ["Redis read per transaction", "Redis read per transaction, in a deployment"],
            find("Redis CPU per 100k events, bridge, applying at take-over")
                .zip(small("Redis CPU per 100k events, bridge"))
                .map(|(big, little)| (per_100k(big), per_100k(little))),
        );
        let chain = find("outbox → audit_logs, bridge applies at take-over, batch handler")
            .zip(find("all processes, bridge applies at take-over, batch handler"));
        Sourced { costs, from_results, chain }
    }
}

/// The figures of the results.json files at `paths`, in order (files that cannot be read
/// are skipped).
pub fn figures_in(paths: &[PathBuf]) -> Vec<serde_json::Value> {
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .flat_map(|json| json["figures"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// What the model says a deployment needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Events per second across every service.
    pub total: f64,
    pub owner_pg_cores: f64,
    pub relays_per_service: u32,
    pub redis_cores: f64,
    pub redis_primaries: u32,
    /// Most events per second one stream (one key, so one primary) may carry.
    pub stream_ceiling: f64,
    pub shards_per_family: u32,
    /// Events per second each stream carries (the rate each group reads it at).
    pub stream_rate: f64,
    pub bridges_per_group: u32,
    pub consumer_pg_cores: f64,
    /// Redis memory one minute of unread backlog takes.
    pub backlog_minute_bytes: f64,
    /// Bytes per second into Redis (payloads alone; every group reads them out again).
    pub ingress_bytes: f64,
}

/// Processes a load needs when each may use `headroom` of a core; at least one.
fn processes(cores: f64, headroom: f64) -> u32 {
    ((cores / headroom).ceil() as u32).max(1)
}

pub fn plan(i: &Inputs, c: &Costs) -> Plan {
    let total = i.services as f64 * i.rate;
    let us = 1e-6;
    let redis_per_event = c.redis_append_us + i.groups as f64 * c.redis_read_us;
    let redis_cores = total * redis_per_event * us;
    // Redis runs commands on one thread: a primary is one core.
    let redis_primaries = processes(redis_cores, i.headroom);
    let stream_ceiling = i.headroom / (redis_per_event * us);
    // A family is sharded only as far as Redis needs: its streams must stay under one primary's
    // ceiling, and all streams together must number four or more per primary to hash about
    // evenly over the slots. Fewer shards than that leave each stream more events per read,
    // which the bridges' cost depends on (a takeover's cost is spread over its events).
    let families = if i.families == 0 { i.services } else { i.families }.max(1);
    let family_rate = total / families as f64;
    let hot = (family_rate / stream_ceiling).ceil().max(1.0) as u32;
    let spread = if redis_primaries == 1 { 1 } else { (4 * redis_primaries).div_ceil(families) };
    let shards_per_family = hot.max(spread).next_power_of_two();
    let entry = c.entry_bytes - c.entry_payload_bytes + i.bytes;
    Plan {
        total,
        owner_pg_cores: i.rate * c.owner_pg_at(2, 500.0) * us,
        relays_per_service: processes(i.rate * c.relay_us * us, i.headroom),
        redis_cores,
        redis_primaries,
        stream_ceiling,
        shards_per_family,
        stream_rate: family_rate / shards_per_family as f64,
        bridges_per_group: processes(total * c.bridge_us * us, i.headroom),
        consumer_pg_cores: total * c.consumer_pg_us * us,
        backlog_minute_bytes: total * 60.0 * entry,
        ingress_bytes: total * i.bytes,
    }
}

/// The batch of the second point the bridge's per-transaction costs and the relay's per-row
/// cost are measured at, back to back.
pub const SMALL_BATCH: u32 = 20;

/// The figure the relay's cost per claim cycle is held under in a results.json.
pub const RELAY_CYCLE: &str = "relays alone at a steady rate: relay CPU per claim cycle";
/// Likewise, what a claim cycle costs the owner's Postgres and Redis beyond a full batch's share.
pub const OWNER_PG_CYCLE: &str =
    "relays alone at a steady rate: owner Postgres CPU per claim cycle, apart from its rows";
pub const REDIS_APPEND_CYCLE: &str = "relays alone at a steady rate: Redis CPU per claim cycle, apart from its rows";

/// The figures a takeover's costs in a deployment are held under: the bridge's, its
/// database's, Redis's for the read and its acknowledgement.
pub const BRIDGE_TXN: &str = "the deployment at a steady rate: bridge CPU per takeover, apart from its events";
pub const CONSUMER_PG_TXN: &str =
    "the deployment at a steady rate: consumer Postgres CPU per takeover, apart from its events";
pub const REDIS_READ_TXN: &str = "the deployment at a steady rate: Redis CPU per bridge read, apart from its events";

impl Costs {
    /// The bridge's CPU per event (µs) when its transactions carry `fill` events.
    pub fn bridge_at(&self, fill: f64) -> f64 {
        self.bridge_us + self.bridge_txn_us * (1.0 / fill.max(1.0) - 1.0 / 500.0)
    }

    /// The relay's CPU per row (µs) in a deployment whose claim cycles carry `fill` rows.
    pub fn relay_at(&self, fill: f64) -> f64 {
        self.relay_row_us + self.relay_cycle_us / fill.max(1.0)
    }

    /// The consumer Postgres's CPU per event (µs) when takeover transactions carry `fill` events.
    pub fn consumer_pg_at(&self, fill: f64) -> f64 {
        self.consumer_pg_us + self.consumer_pg_txn_us * (1.0 / fill.max(1.0) - 1.0 / 500.0)
    }

    /// Owner Postgres per row (µs) with `relays` relay processes on the outbox, whose claim
    /// cycles carry `fill` rows: one relay, or two and more at the figure of two (the model
    /// plans two, for availability; more replicas add contention the model does not count, see
    /// docs/explanation/scaling.md on replicas).
    pub fn owner_pg_at(&self, relays: u32, fill: f64) -> f64 {
        let full = if relays >= 2 { self.owner_pg_us * self.second_relay_pg } else { self.owner_pg_us };
        full + self.owner_pg_cycle_us * (1.0 / fill.max(1.0) - 1.0 / 500.0)
    }

    /// Redis's CPU per event (µs) for the relays' appends, their claim cycles carrying `fill` rows.
    pub fn redis_append_at(&self, fill: f64) -> f64 {
        self.redis_append_us + self.redis_append_cycle_us * (1.0 / fill.max(1.0) - 1.0 / 500.0)
    }

    /// Redis's CPU per event (µs) for a bridge's reads and acknowledgements of `fill` events.
    pub fn redis_read_at(&self, fill: f64) -> f64 {
        self.redis_read_us + self.redis_read_txn_us * (1.0 / fill.max(1.0) - 1.0 / 500.0)
    }

    /// CPU of every process for one event through the whole chain, one group: what the chain
    /// measured alone should use, if the components cost together what they cost apart.
    pub fn chain_us(&self) -> f64 {
        self.owner_pg_us
            + self.relay_us
            + self.redis_append_us
            + self.bridge_us
            + self.redis_read_us
            + self.consumer_pg_us
    }
}

/// The costs a results.json may hold (every field of [`Costs`] but the payload size its entry
/// bytes were measured at): when it holds them all, the printout says so in a word.
const SOURCED_COSTS: usize = 15;

pub fn print(i: &Inputs, sourced: &Sourced) {
    let c = &sourced.costs;
    let p = plan(i, c);
    let from = if sourced.from_results.is_empty() {
        "built-in (docs/explanation/capacity.md)".to_owned()
    } else if sourced.from_results.len() == SOURCED_COSTS {
        "results.json".to_owned()
    } else {
        format!("results.json for {}, built-in for the rest", sourced.from_results.join(", "))
    };
    println!(
        "inputs: {} services × {} events/s × {} bytes, {} consumer group(s), {} stream families, headroom {:.0}% of a core per process",
        i.services,
        i.rate,
        i.bytes,
        i.groups,
        if i.families == 0 { i.services } else { i.families },
        i.headroom * 100.0
    );
    println!(
        "costs, {from}: owner Postgres {:.1} µs/row ({:.1} with two relays on the outbox), relay {:.1} µs at full batches ({:.1} µs a row + {:.0} µs a claim cycle at modest rates), Redis {:.1} µs per append + {:.1} µs per read+ack, bridge {:.1} µs, consumer Postgres {:.1} µs, {:.0} bytes per entry of {:.0}",
        c.owner_pg_us,
        c.owner_pg_at(2, 500.0),
        c.relay_us,
        c.relay_row_us,
        c.relay_cycle_us,
        c.redis_append_us,
        c.redis_read_us,
        c.bridge_us,
        c.consumer_pg_us,
        c.entry_bytes,
        c.entry_payload_bytes
    );
    println!();
    let rows = [
        ("events/s, all services", format!("{:.0}", p.total), "S × R".to_owned()),
        (
            "owner Postgres CPU, each database",
            format!("{:.2} cores", p.owner_pg_cores),
            "R × owner Postgres µs, two relays".into(),
        ),
        (
            "relay processes, each outbox",
            format!("{}", p.relays_per_service),
            "⌈R × relay µs / headroom⌉ (2 for availability)".into(),
        ),
        ("Redis CPU, all primaries", format!("{:.2} cores", p.redis_cores), "S × R × (append + G × read) µs".into()),
        ("Redis primaries", format!("{}", p.redis_primaries), "⌈Redis cores / headroom⌉".into()),
        (
            "one stream's ceiling",
            format!("{:.0} events/s", p.stream_ceiling),
            "headroom / (append + G × read) µs".into(),
        ),
        (
            "shards per stream family",
            format!("{}", p.shards_per_family),
            "power of 2 ≥ family rate / ceiling, and ≥ 4 × primaries over all families".into(),
        ),
        ("events/s each stream carries", format!("{:.0}", p.stream_rate), "S × R / (families × shards)".into()),
        (
            "bridge processes, each group",
            format!("{}", p.bridges_per_group),
            "⌈S × R × bridge µs / headroom⌉ (2 for availability)".into(),
        ),
        (
            "consumer Postgres CPU, each group",
            format!("{:.2} cores", p.consumer_pg_cores),
            "S × R × consumer Postgres µs".into(),
        ),
        (
            "Redis memory per minute of backlog",
            format!("{:.1} MiB", p.backlog_minute_bytes / 1048576.0),
            "S × R × 60 × entry bytes".into(),
        ),
        ("payload bytes into Redis", format!("{:.1} MiB/s", p.ingress_bytes / 1048576.0), "S × R × E (× G out)".into()),
    ];
    for (what, value, how) in rows {
        println!("  {what:<36} {value:>16}   {how}");
    }
    println!();
    println!(
        "bridges, consumer databases and relays are counted at full batches (500 events a takeover, 500 \
         rows a claim cycle); a takeover carrying f events costs each event {:.0}/f µs more of the bridge, \
         {:.0}/f µs more of its database and {:.0}/f µs more of Redis; a relay whose claim cycles carry \
         f rows costs {:.1} + {:.0}/f µs a row, and each row {:.0}/f µs more of its database and {:.0}/f µs \
         more of Redis (less a full batch's share, 1/500 of each)",
        c.bridge_txn_us,
        c.consumer_pg_txn_us,
        c.redis_read_txn_us,
        c.relay_row_us,
        c.relay_cycle_us,
        c.owner_pg_cycle_us,
        c.redis_append_cycle_us
    );
    println!(
        "processes sharing a host: plan their sum to at most {:.0}% of its cores; past it each pays more CPU per \
         event, which the model does not predict (docs/dev/scaling-sittings.md, the scale run)",
        HOST_HEADROOM * 100.0
    );
    if let Some((rate, measured_us)) = sourced.chain {
        let model_us = c.chain_us();
        println!();
        println!(
            "check: the chain of the same results ran {rate:.0} events/s using {measured_us:.1} µs of CPU per event \
             (every process, {:.2} cores); the model's costs measured apart sum to {model_us:.1} µs ({:.2} cores, {:+.0}%)",
            rate * measured_us * 1e-6,
            rate * model_us * 1e-6,
            (model_us / measured_us - 1.0) * 100.0
        );
    }
}

#[cfg(test)]
mod tests;
