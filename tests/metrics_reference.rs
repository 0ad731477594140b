//! The metrics reference (docs/reference/metrics.md) and the registry agree: every
//! exported family is documented and every documented one is exported.

use std::collections::BTreeSet;

use prometheus::Registry;

fn documented() -> BTreeSet<String> {
    let reference = include_str!("../docs/reference/metrics.md");
    reference
        .lines()
        .filter(|line| line.starts_with("| `handoff_") || line.starts_with("| `process_"))
        .filter_map(|line| line.strip_prefix("| `")?.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// A registry with every component's families and one child each, so every family encodes.
fn populated() -> Registry {
    let registry = Registry::new();
    handoff::register_metrics(&registry).unwrap();
    registry
}

fn exported() -> BTreeSet<String> {
    populated().gather().iter().map(|family| family.name().to_owned()).collect()
}

#[test]
fn every_exported_metric_is_documented_and_vice_versa() {
    let documented = documented();
    let exported = exported();
    let undocumented: Vec<_> = exported.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&exported).collect();
    assert!(undocumented.is_empty(), "exported but not in docs/reference/metrics.md: {undocumented:?}");
    assert!(missing.is_empty(), "in docs/reference/metrics.md but not exported: {missing:?}");
}

#[test]
fn names_follow_prometheus_conventions() {
    for family in populated().gather() {
        let name = family.name();
        match family.get_field_type() {
            prometheus::proto::MetricType::COUNTER => assert!(name.ends_with("_total"), "{name}"),
            _ => assert!(!name.ends_with("_total"), "{name}"),
        }
        assert!(!family.help().is_empty(), "{name} has help text");
    }
}
