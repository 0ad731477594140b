//! The README's metrics reference and the registry agree: every exported family is documented
//! and every documented one is exported.

use std::collections::BTreeSet;

use prometheus::Registry;

fn documented() -> BTreeSet<String> {
    let readme = include_str!("../README.md");
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("| `handoff_"))
        .filter_map(|rest| rest.split('`').next())
        .map(|name| format!("handoff_{name}"))
        .collect()
}

fn exported() -> BTreeSet<String> {
    let registry = Registry::new();
    let relays = handoff::telemetry::metrics::RelayMetrics::register(&registry).unwrap();
    let _bound = relays.for_relay("reference");
    registry.gather().iter().map(|family| family.name().to_owned()).collect()
}

#[test]
fn every_exported_metric_is_documented_and_vice_versa() {
    let documented = documented();
    let exported = exported();
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&exported).collect();
    assert!(undocumented.is_empty(), "exported but not in the README: {undocumented:?}");
    assert!(missing.is_empty(), "in the README but not exported: {missing:?}");
}

#[test]
fn names_follow_prometheus_conventions() {
    let registry = Registry::new();
    let relays = handoff::telemetry::metrics::RelayMetrics::register(&registry).unwrap();
    let _bound = relays.for_relay("reference");
    for family in registry.gather() {
        let name = family.name();
        match family.get_field_type() {
            prometheus::proto::MetricType::COUNTER => assert!(name.ends_with("_total"), "{name}"),
            _ => assert!(!name.ends_with("_total"), "{name}"),
        }
        assert!(!family.help().is_empty(), "{name} has help text");
    }
}
