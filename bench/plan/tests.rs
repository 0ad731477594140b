use super::*;

/// Round costs, so that the arithmetic below can be checked by hand.
const COSTS: Costs = Costs {
    owner_pg_us: 20.0,
    second_relay_pg: 1.25,
    relay_us: 4.0,
    relay_row_us: 3.0,
    relay_cycle_us: 500.0,
    owner_pg_cycle_us: 1000.0,
    redis_append_cycle_us: 100.0,
    redis_append_us: 3.0,
    bridge_us: 10.0,
    redis_read_us: 3.0,
    consumer_pg_us: 40.0,
    bridge_txn_us: 100.0,
    consumer_pg_txn_us: 400.0,
    redis_read_txn_us: 50.0,
    entry_bytes: 500.0,
    entry_payload_bytes: 300.0,
};

fn inputs() -> Inputs {
    Inputs { services: 40, rate: 2000.0, bytes: 300.0, groups: 2, families: 0, headroom: 0.5 }
}

#[test]
fn forty_services_at_two_thousand_need_two_primaries_and_no_shards() {
    let p = plan(&inputs(), &COSTS);
    assert_eq!(p.total, 80_000.0);
    // 80k × (3 + 2 × 3) µs = 0.72 cores of Redis → 2 primaries at half a core each.
    assert!((p.redis_cores - 0.72).abs() < 1e-9, "{}", p.redis_cores);
    // 40 families hash over 2 primaries without sharding, and none outgrows a stream.
    assert_eq!((p.redis_primaries, p.shards_per_family, p.stream_rate), (2, 1, 2000.0));
    let one_family = plan(&Inputs { families: 1, ..inputs() }, &COSTS);
    assert_eq!((one_family.shards_per_family, one_family.stream_rate), (8, 10_000.0));
    assert!((p.stream_ceiling - 0.5 / 9e-6).abs() < 1e-6);
    // 80k × 10 µs = 0.8 cores → 2 bridges per group; 2k × 4 µs → 1 relay per outbox.
    assert_eq!((p.bridges_per_group, p.relays_per_service), (2, 1));
    // 2k × 20 µs × 1.25: two relays on each outbox, for availability.
    assert!((p.owner_pg_cores - 0.05).abs() < 1e-9);
    assert!((p.consumer_pg_cores - 3.2).abs() < 1e-9);
    assert!((p.backlog_minute_bytes - 80_000.0 * 60.0 * 500.0).abs() < 1e-3);
}

#[test]
fn a_load_on_four_primaries_spreads_each_family_over_sixteen_shards() {
    let p = plan(&Inputs { services: 1, rate: 200_000.0, ..inputs() }, &COSTS);
    // 200k × 9 µs = 1.8 cores → 4 primaries → 16 shards.
    assert_eq!((p.redis_primaries, p.shards_per_family), (4, 16));
    let tighter = plan(&Inputs { services: 1, rate: 200_000.0, headroom: 0.25, ..inputs() }, &COSTS);
    assert_eq!((tighter.redis_primaries, tighter.shards_per_family), (8, 32));
    // Four families share the spread: 16 streams over 4 primaries from 4 shards each.
    let four = plan(&Inputs { services: 4, rate: 50_000.0, ..inputs() }, &COSTS);
    assert_eq!((four.redis_primaries, four.shards_per_family), (4, 4));
}

#[test]
fn a_small_load_needs_no_sharding() {
    let p = plan(&Inputs { services: 2, rate: 500.0, ..inputs() }, &COSTS);
    assert_eq!((p.redis_primaries, p.shards_per_family, p.bridges_per_group), (1, 1, 1));
}

#[test]
fn bigger_payloads_take_more_memory_per_entry() {
    let p = plan(&Inputs { bytes: 1300.0, ..inputs() }, &COSTS);
    assert!((p.backlog_minute_bytes - 80_000.0 * 60.0 * 1500.0).abs() < 1e-3);
}

#[test]
fn small_batches_add_each_transaction_s_cost_spread_over_fewer_events() {
    assert!((COSTS.bridge_at(500.0) - 10.0).abs() < 1e-9);
    assert!((COSTS.bridge_at(10.0) - (10.0 + 100.0 * (0.1 - 0.002))).abs() < 1e-9);
    assert!((COSTS.consumer_pg_at(1.0) - (40.0 + 400.0 * 0.998)).abs() < 1e-9);
    // A relay's cycle is not in its per-row term: at 500 rows a cycle it still adds 1 µs.
    assert!((COSTS.relay_at(500.0) - 4.0).abs() < 1e-9);
    assert!((COSTS.relay_at(50.0) - 13.0).abs() < 1e-9);
    // The owner's Postgres and Redis count a cycle beyond a full batch's share: none at 500.
    assert!((COSTS.owner_pg_at(2, 500.0) - 25.0).abs() < 1e-9);
    assert!((COSTS.owner_pg_at(1, 50.0) - (20.0 + 1000.0 * 0.018)).abs() < 1e-9);
    assert!((COSTS.redis_append_at(50.0) - (3.0 + 100.0 * 0.018)).abs() < 1e-9);
}

#[test]
fn the_relay_s_row_cost_comes_from_two_batch_sizes() {
    let figure = |name: &str, value: f64| serde_json::json!({"name": name, "value": value});
    let sourced = Costs::from_figures(&[
        // 3.5 µs a row at 500, 10.7 at 20: a cycle of b rows costs 150 µs + 3.2 µs × b.
        figure("relay CPU per 100k events, claim locked, batch 500", 0.35),
        figure("relay CPU per 100k events, claim locked, batch 20", 1.07),
        figure(RELAY_CYCLE, 900.0),
    ]);
    assert!((sourced.costs.relay_row_us - 3.2).abs() < 1e-9, "{}", sourced.costs.relay_row_us);
    assert_eq!(sourced.costs.relay_cycle_us, 900.0);
    assert_eq!(sourced.from_results, vec!["relay", "relay per cycle", "relay per row"]);
}

#[test]
fn costs_come_from_results_where_they_are_held() {
    let dir = std::env::temp_dir().join(format!("handoff-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("results.json");
    let json = serde_json::json!({"figures": [
        {"section": "resources", "name": "relay CPU per 100k events, claim locked, batch 500", "value": 0.5, "unit": "s"}
    ]});
    std::fs::write(&path, json.to_string()).unwrap();
    let sourced = Costs::load(&[dir.join("missing.json"), path]);
    assert_eq!(sourced.costs.relay_us, 5.0);
    assert_eq!(sourced.costs.bridge_us, Costs::MEASURED.bridge_us);
    assert_eq!(sourced.from_results, vec!["relay"]);
    assert_eq!(Costs::load(&[dir.join("missing.json")]).costs, Costs::MEASURED);
}

#[test]
fn redis_s_cost_per_read_in_a_deployment_wins_over_the_one_back_to_back() {
    let figure = |name: &str, value: f64| serde_json::json!({"name": name, "value": value});
    let back_to_back = [
        figure("Redis CPU per 100k events, bridge, applying at take-over", 0.16),
        figure("Redis CPU per 100k events, bridge, applying at take-over, batch 20", 0.4),
    ];
    // (4.0 − 1.6) µs over (1/20 − 1/500) reads per event: 50 µs a read.
    let sourced = Costs::from_figures(&back_to_back);
    assert!((sourced.costs.redis_read_txn_us - 50.0).abs() < 1e-9, "{}", sourced.costs.redis_read_txn_us);
    let mut figures = back_to_back.to_vec();
    figures.push(figure(REDIS_READ_TXN, 70.0));
    let sourced = Costs::from_figures(&figures);
    assert_eq!(sourced.costs.redis_read_txn_us, 70.0);
    assert!(sourced.from_results.contains(&"Redis read per transaction, in a deployment"));
}
