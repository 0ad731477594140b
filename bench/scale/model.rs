//! The scale run against the capacity model: what the model predicts for each measured figure,
//! the per-cycle terms the relays alone give it and the per-takeover terms a steady run gives it.

use super::{Cpu, GROUPS, RELAYS_PER_OWNER, RelaysAlone, ScaleRun};
use crate::plan::Costs;

/// One measured figure of a run beside the model's prediction (cores).
pub struct Compared {
    pub what: &'static str,
    pub measured: f64,
    pub predicted: f64,
    /// Of the prediction, what the kind costs at rest (measured before the backlog run).
    pub at_rest: f64,
    /// A share of another figure (a database's backends, of the whole Postgres server), left
    /// out of the host's sum.
    pub share: bool,
}

/// The model's prediction for each measured figure at the rate the run reached: what each kind
/// of process costs at rest (`rest`, measured before the backlog run) and per event. The
/// bridges' and the consumers' costs per event are taken at the events per transaction the run
/// measured. Postgres's measured figure leaves out the producer's inserts.
pub fn compared(run: &ScaleRun, costs: &Costs, rest: &Cpu) -> Vec<Compared> {
    let (rate, g) = (run.rate(), GROUPS as f64);
    let cpu = run.cpu.per_second(run.seconds);
    let cores = |us: f64| rate * us * 1e-6;
    // At the rows the run's claim cycles carried, like the relays.
    let owner_pg = cores(costs.owner_pg_at(RELAYS_PER_OWNER as u32, run.relay_fill));
    let consumer_pg = cores(g * costs.consumer_pg_at(run.bridge_fill));
    let redis_rest: f64 = rest.redis.iter().sum();
    let row = |what, measured, per_event: f64, at_rest: f64| Compared {
        what,
        measured,
        predicted: per_event + at_rest,
        at_rest,
        share: false,
    };
    let share = |what, measured, per_event: f64, at_rest: f64| Compared {
        share: true,
        ..row(what, measured, per_event, at_rest)
    };
    vec![
        // At the rows the run's claim cycles carried (the model's per-cycle term).
        row("relays (8)", cpu.relays, cores(costs.relay_at(run.relay_fill)), rest.relays),
        // At the batch the run's takeover transactions carried (the model's per-batch term).
        row("bridges with their workers (4)", cpu.bridges, cores(g * costs.bridge_at(run.bridge_fill)), rest.bridges),
        row(
            "Redis, 3 primaries",
            cpu.redis.iter().sum(),
            cores(costs.redis_append_at(run.relay_fill) + g * costs.redis_read_at(run.bridge_fill)),
            redis_rest,
        ),
        // The two databases' shares the model predicts apart, by the backends serving each
        // kind of process; the whole server's figure below also holds its background processes.
        share("owner Postgres, the relays' backends", cpu.owner_pg, owner_pg, rest.owner_pg),
        share("consumer Postgres, the bridges' backends", cpu.consumer_pg, consumer_pg, rest.consumer_pg),
        row(
            "Postgres, 4 owners + 2 consumers",
            cpu.postgres - cores(run.insert_us),
            owner_pg + consumer_pg,
            rest.postgres,
        ),
    ]
}

/// The whole host beside the model: every kind of process of the deployment summed (the
/// databases' shares are parts of the whole server's figure), with the producer's inserts (what
/// they measured) in both the measured and the predicted figure. The benchmark's own process is
/// left out of both.
pub fn host(run: &ScaleRun, figures: &[Compared]) -> Compared {
    let inserts = run.rate() * run.insert_us * 1e-6;
    let whole = figures.iter().filter(|f| !f.share);
    let sum = |field: fn(&Compared) -> f64| whole.clone().map(field).sum::<f64>();
    Compared {
        what: "the host (the deployment's processes, the producer's inserts)",
        measured: sum(|f| f.measured) + inserts,
        predicted: sum(|f| f.predicted) + inserts,
        at_rest: sum(|f| f.at_rest),
        share: false,
    }
}

/// What a takeover costs apart from its events, in a deployment: the bridge, its database, and
/// Redis for the read and its acknowledgement (µs each).
pub struct PerTakeover {
    pub bridge_us: f64,
    pub consumer_pg_us: f64,
    pub redis_us: f64,
}

/// The per-takeover terms that make the model give back what a steady run measured: each
/// kind's cores beyond rest, less its costs per event at full batches (as measured back to
/// back, batch 500), over the takeovers beyond one per 500 events. Redis's costs per event
/// include the relays' appends at the claim cycles the run carried (the per-cycle term, from
/// the relays alone, measured before).
pub fn per_takeover(run: &ScaleRun, costs: &Costs, rest: &Cpu) -> PerTakeover {
    let (rate, g) = (run.rate(), GROUPS as f64);
    let cpu = run.cpu.per_second(run.seconds);
    let extra_takeovers = g * (1.0 / run.bridge_fill.max(1.0) - 1.0 / 500.0);
    let term =
        |cores: f64, at_rest: f64, per_event_us: f64| ((cores - at_rest) * 1e6 / rate - per_event_us) / extra_takeovers;
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    PerTakeover {
        bridge_us: term(cpu.bridges, rest.bridges, g * costs.bridge_us),
        consumer_pg_us: term(cpu.consumer_pg, rest.consumer_pg, g * costs.consumer_pg_us),
        redis_us: term(
            sum(&cpu.redis),
            sum(&rest.redis),
            costs.redis_append_at(run.relay_fill) + g * costs.redis_read_us,
        ),
    }
}

/// What a claim cycle costs (µs), from the relays alone.
pub struct PerCycle {
    /// The relay, beyond its rows.
    pub relay_us: f64,
    /// The owner's Postgres and Redis, beyond their share of one at full batches.
    pub owner_pg_us: f64,
    pub redis_us: f64,
}

/// The per-cycle terms that make the model give back what the relays alone measured: the
/// relays' CPU beyond rest less the rows' cost apart from their cycles, over the cycles; the
/// owner databases' and Redis's CPU beyond rest, less their costs per row at full batches (back
/// to back, batch 500), over the cycles beyond one per 500 rows.
pub fn per_cycle(alone: &RelaysAlone, costs: &Costs) -> PerCycle {
    let rows = alone.rows.max(1) as f64;
    let extra_cycles = 1.0 / alone.fill().max(1.0) - 1.0 / 500.0;
    let term = |seconds: f64, per_row_us: f64| (seconds * 1e6 / rows - per_row_us) / extra_cycles;
    PerCycle {
        relay_us: (alone.relays_seconds * 1e6 - rows * costs.relay_row_us) / alone.cycles.max(1) as f64,
        owner_pg_us: term(alone.owner_pg_seconds, costs.owner_pg_at(RELAYS_PER_OWNER as u32, 500.0)),
        redis_us: term(alone.redis_seconds, costs.redis_append_us),
    }
}

/// The relays alone against the model at the rows their claim cycles carried, as (what,
/// measured CPU-seconds beyond rest, predicted).
pub fn alone_compared(alone: &RelaysAlone, costs: &Costs) -> [(&'static str, f64, f64); 3] {
    let (fill, seconds) = (alone.fill(), |per_row_us: f64| alone.rows as f64 * per_row_us * 1e-6);
    [
        ("relays (8)", alone.relays_seconds, seconds(costs.relay_at(fill))),
        (
            "owner Postgres, the relays' backends",
            alone.owner_pg_seconds,
            seconds(costs.owner_pg_at(RELAYS_PER_OWNER as u32, fill)),
        ),
        ("Redis, 3 primaries", alone.redis_seconds, seconds(costs.redis_append_at(fill))),
    ]
}

/// CPU per event of every process of this deployment, as the model counts it.
pub fn modelled_us(costs: &Costs) -> f64 {
    let g = GROUPS as f64;
    costs.owner_pg_at(RELAYS_PER_OWNER as u32, 500.0)
        + costs.relay_at(500.0)
        + costs.redis_append_us
        + g * (costs.bridge_us + costs.redis_read_us + costs.consumer_pg_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_per_cycle_terms_give_back_the_relays_they_came_from() {
        // 20,000 rows in 250 cycles (80 a cycle) using 1.2 CPU-seconds of the relays, 0.7 of
        // their databases and 0.06 of Redis beyond rest.
        let alone =
            RelaysAlone { relays_seconds: 1.2, owner_pg_seconds: 0.7, redis_seconds: 0.06, rows: 20_000, cycles: 250 };
        // Costs of its own: 25 µs a row of the owner's database with two relays, below the run's 35.
        let mut costs = Costs {
            owner_pg_us: 20.0,
            second_relay_pg: 1.25,
            relay_row_us: 3.0,
            redis_append_us: 2.0,
            ..Costs::MEASURED
        };
        let terms = per_cycle(&alone, &costs);
        assert!(terms.relay_us > 0.0 && terms.owner_pg_us > 0.0 && terms.redis_us > 0.0);
        (costs.relay_cycle_us, costs.owner_pg_cycle_us, costs.redis_append_cycle_us) =
            (terms.relay_us, terms.owner_pg_us, terms.redis_us);
        for (what, measured, modelled) in alone_compared(&alone, &costs) {
            assert!((modelled - measured).abs() < 1e-9, "{what}: modelled {modelled}, measured {measured}");
        }
        // At other fills the same terms give other figures: the comparison reads the fill.
        let fuller = RelaysAlone { cycles: 100, ..alone };
        assert!(alone_compared(&fuller, &costs).iter().all(|(_, measured, modelled)| modelled < measured));
    }

    #[test]
    fn the_per_takeover_terms_predict_back_the_run_they_came_from() {
        let cpu = Cpu { redis: vec![0.3, 0.3, 0.4], bridges: 2.5, consumer_pg: 6.0, ..Cpu::default() };
        let rest = Cpu { redis: vec![0.001, 0.001, 0.001], bridges: 0.01, consumer_pg: 0.02, ..Cpu::default() };
        let run = ScaleRun {
            events: 15_000,
            seconds: 10.0,
            cpu,
            bridge_fill: 4.0,
            relay_fill: 80.0,
            rest: None,
            insert_us: 0.0,
        };
        let mut costs = Costs::MEASURED;
        let terms = per_takeover(&run, &costs, &rest);
        assert!(terms.bridge_us > 0.0 && terms.consumer_pg_us > 0.0 && terms.redis_us > 0.0);
        (costs.bridge_txn_us, costs.consumer_pg_txn_us, costs.redis_read_txn_us) =
            (terms.bridge_us, terms.consumer_pg_us, terms.redis_us);
        for Compared { what, measured, predicted, .. } in compared(&run, &costs, &rest) {
            if what.starts_with("Redis") || what.starts_with("bridges") || what.starts_with("consumer") {
                assert!((measured - predicted).abs() < 1e-9, "{what}: measured {measured} predicted {predicted}");
            }
        }
    }

    #[test]
    fn the_host_sums_each_kind_once_with_the_producers_inserts() {
        let cpu = Cpu {
            relays: 1.0,
            bridges: 2.0,
            redis: vec![0.5, 0.5],
            postgres: 8.0,
            owner_pg: 3.0,
            consumer_pg: 4.0,
            ..Cpu::default()
        };
        // 10,000 events in 10 s, the producer's inserts 20 µs each: 0.02 cores of the server.
        let run = ScaleRun {
            events: 10_000,
            seconds: 10.0,
            cpu,
            bridge_fill: 50.0,
            relay_fill: 200.0,
            rest: None,
            insert_us: 20.0,
        };
        let rest = Cpu { relays: 0.01, bridges: 0.02, redis: vec![0.003], postgres: 0.05, ..Cpu::default() };
        let figures = compared(&run, &Costs::MEASURED, &rest);
        let Compared { measured, predicted, at_rest, .. } = host(&run, &figures);
        assert!((at_rest - 0.083).abs() < 1e-9, "at rest {at_rest}");
        // Relays, bridges, Redis and the whole server (the databases' backends are shares of it).
        assert!((measured - (0.1 + 0.2 + 0.1 + 0.8)).abs() < 1e-9, "measured {measured}");
        let parts: f64 = figures.iter().filter(|f| !f.share).map(|f| f.predicted).sum();
        assert!((predicted - (parts + 0.02)).abs() < 1e-9, "predicted {predicted}");
        // Beyond rest, the server's prediction is its two kinds of database's.
        let shares: f64 = figures.iter().filter(|f| f.share).map(|f| f.predicted - f.at_rest).sum();
        let server = figures.iter().find(|f| f.what.starts_with("Postgres")).map_or(0.0, |f| f.predicted - f.at_rest);
        assert!((shares - server).abs() < 1e-9, "shares {shares}, server {server}");
    }
}
