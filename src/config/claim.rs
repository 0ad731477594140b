//! `claim = "auto"` (the default) resolved once the configuration is valid: the locked claim
//! wherever every condition it needs holds, the leased claim elsewhere, with the reason.

use std::time::Duration;

use super::{ClaimMode, Config, Dialect, RelayConfig};
use crate::config::statements::StatementKind;

/// Replaces every `auto` claim with `locked` or `leased` and records why in `claim_chosen`.
pub fn resolve(config: &mut Config) {
    let dialect = config.database.url.as_ref().and_then(|url| Dialect::of(url.expose()));
    let append = |relay: &RelayConfig| {
        config.redis.command_timeout + relay.durability.as_ref().map_or(Duration::ZERO, |d| d.timeout)
    };
    let blockers: Vec<Option<String>> =
        config.relays.iter().map(|relay| relay_blocker(relay, dialect, append(relay))).collect();
    // Each locked loop holds a pooled connection while it appends; the gauges, retention and
    // broker-loss checks need one more. Either every eligible relay fits, or none goes locked
    // (a mix decided by file order would surprise more than it saves).
    let locked_loops: u32 = config
        .relays
        .iter()
        .zip(&blockers)
        .filter(|(relay, blocker)| {
            relay.claim == ClaimMode::Locked || (relay.claim == ClaimMode::Auto && blocker.is_none())
        })
        .map(|(relay, _)| relay.concurrency)
        .sum();
    let pool_blocker = (locked_loops as usize >= config.database.pool_size).then(|| {
        format!(
            "database.pool_size ({}) is not larger than the locked claim loops would need ({locked_loops})",
            config.database.pool_size
        )
    });
    for (relay, blocker) in config.relays.iter_mut().zip(blockers) {
        if relay.claim != ClaimMode::Auto {
            continue;
        }
        match blocker.or_else(|| pool_blocker.clone()) {
            None => {
                relay.claim = ClaimMode::Locked;
                relay.claim_chosen = Some("auto: every condition for the locked claim holds".into());
            }
            Some(reason) => {
                relay.claim = ClaimMode::Leased;
                relay.claim_chosen = Some(format!("auto: {reason}"));
            }
        }
    }
}

/// What keeps this relay from the locked claim, if anything (the pool aside).
fn relay_blocker(relay: &RelayConfig, dialect: Option<Dialect>, append: Duration) -> Option<String> {
    if dialect != Some(Dialect::Postgres) {
        return Some("the locked claim needs Postgres".into());
    }
    if relay.ordering.is_some() {
        return Some("ordering keeps per-key runs with the leased claim".into());
    }
    let overridden: Vec<&str> = StatementKind::ALL
        .iter()
        .filter(|kind| kind.settles_a_claim() && relay.sql.get(**kind).is_some())
        .map(|kind| kind.name())
        .collect();
    if !overridden.is_empty() {
        return Some(format!("sql.{} replace(s) the reference statements", overridden.join(", sql.")));
    }
    if relay.lease <= append {
        return Some(format!(
            "lease ({}) is not longer than an append may take ({}), and it would be the locked batch's idle-in-transaction timeout",
            humantime::format_duration(relay.lease),
            humantime::format_duration(append)
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::config::{ClaimMode, load_str};

    const BASE: &str = "[database]\nurl = \"postgres://u@h/db\"\n";

    fn claims(toml: &str) -> Vec<(ClaimMode, String)> {
        let config = load_str(toml).unwrap();
        config.relays.iter().map(|r| (r.claim, r.claim_chosen.clone().unwrap_or_default())).collect()
    }

    #[test]
    fn the_default_is_the_locked_claim_where_it_applies() {
        let got = claims(&format!("{BASE}[[relay]]\nname = \"a\"\nstream = \"s\"\n"));
        assert_eq!(got[0].0, ClaimMode::Locked, "{got:?}");
    }

    #[test]
    fn auto_falls_back_to_leased_and_says_why() {
        let toml = format!(
            "{BASE}[[relay]]\nname = \"ordered\"\nstream = \"s\"\n[relay.ordering]\non_failure = \"hold\"\n\
             [[relay]]\nname = \"short\"\nstream = \"t\"\nlease = \"2s\"\n\
             [[relay]]\nname = \"explicit\"\nstream = \"u\"\nclaim = \"leased\"\n"
        );
        let got = claims(&toml);
        assert_eq!(got[0].0, ClaimMode::Leased);
        assert!(got[0].1.contains("ordering"), "{}", got[0].1);
        assert_eq!(got[1].0, ClaimMode::Leased);
        assert!(got[1].1.contains("lease (2s)"), "{}", got[1].1);
        assert_eq!(got[2], (ClaimMode::Leased, String::new()), "an explicit choice stays");
        let mysql = claims("[database]\nurl = \"mysql://u@h/db\"\n[[relay]]\nname = \"m\"\nstream = \"s\"\n");
        assert_eq!(mysql[0].0, ClaimMode::Leased);
        assert!(mysql[0].1.contains("Postgres"));
    }

    #[test]
    fn auto_stays_leased_for_every_relay_when_the_pool_cannot_hold_their_loops() {
        let toml = format!(
            "{BASE}pool_size = 4\n[[relay]]\nname = \"a\"\nstream = \"s\"\n[[relay]]\nname = \"b\"\nstream = \"t\"\n"
        );
        let got = claims(&toml);
        assert!(got.iter().all(|(mode, why)| *mode == ClaimMode::Leased && why.contains("pool_size (4)")), "{got:?}");
        let roomy = claims(&toml.replace("pool_size = 4", "pool_size = 5"));
        assert!(roomy.iter().all(|(mode, _)| *mode == ClaimMode::Locked), "{roomy:?}");
    }
}
