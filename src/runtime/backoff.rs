//! Exponential backoff with jitter, for row retries and for outages: shared by the relay, the
//! bridge, the worker and the store.

use std::time::Duration;

use serde::Deserialize;

/// Exponential backoff: `initial × multiplier^(n-1)`, capped at `max`, ± `jitter` (a fraction).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BackoffConfig {
    /// The first delay.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// The longest delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    /// Each delay is the one before times this.
    pub multiplier: f64,
    /// Each delay is moved at random by up to this fraction of it, so replicas spread out.
    pub jitter: f64,
}

impl BackoffConfig {
    /// Row failures: 1s, 2s, 4s … capped at 10m, ±20%.
    pub(crate) fn row_default() -> Self {
        Self { initial: Duration::from_secs(1), max: Duration::from_secs(600), multiplier: 2.0, jitter: 0.2 }
    }

    /// Outages: 200ms, 400ms … capped at 30s, ±20%.
    pub(crate) fn outage_default() -> Self {
        Self { initial: Duration::from_millis(200), max: Duration::from_secs(30), multiplier: 2.0, jitter: 0.2 }
    }

    /// What cannot hold, each naming its key under `path`.
    pub(crate) fn problems(&self, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        if self.initial.is_zero() {
            errors.push(format!("{path}.initial must be > 0"));
        }
        if self.max < self.initial {
            errors.push(format!("{path}.max must be >= initial"));
        }
        if !(self.multiplier >= 1.0 && self.multiplier <= 10.0) {
            errors.push(format!("{path}.multiplier must be between 1 and 10"));
        }
        if !(0.0..1.0).contains(&self.jitter) {
            errors.push(format!("{path}.jitter must be >= 0 and < 1"));
        }
        errors
    }
}

/// Delay before the `n`-th retry (`n` ≥ 1): `initial × multiplier^(n-1)` capped at `max`, then
/// spread by ± `jitter` so that rows failing together do not retry together, never above `max`.
pub(crate) fn delay(config: &BackoffConfig, n: u32) -> Duration {
    let exponent = n.saturating_sub(1).min(64) as i32;
    let base = config.initial.as_secs_f64() * config.multiplier.powi(exponent);
    let capped = base.min(config.max.as_secs_f64());
    let spread = if config.jitter > 0.0 { rand::random_range(-config.jitter..config.jitter) } else { 0.0 };
    Duration::from_secs_f64((capped * (1.0 + spread)).clamp(0.0, config.max.as_secs_f64()))
}

/// Consecutive-failure state for reconnecting: grows while failures repeat, resets on success.
#[derive(Debug)]
pub(crate) struct Retrier {
    config: BackoffConfig,
    failures: u32,
}

impl Retrier {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        Self { config, failures: 0 }
    }

    /// Records a failure and returns how long to wait before trying again.
    pub(crate) fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        delay(&self.config, self.failures)
    }

    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Failures since the last success.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(initial_ms: u64, max_ms: u64, multiplier: f64, jitter: f64) -> BackoffConfig {
        BackoffConfig {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            multiplier,
            jitter,
        }
    }

    #[test]
    fn without_jitter_it_doubles_up_to_the_cap() {
        let c = config(100, 1000, 2.0, 0.0);
        let delays: Vec<u128> = (1..=6).map(|n| delay(&c, n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn retrier_resets_after_success() {
        let mut r = Retrier::new(config(100, 10_000, 2.0, 0.0));
        r.failed();
        assert_eq!(r.failed(), Duration::from_millis(200));
        r.succeeded();
        assert_eq!(r.failed(), Duration::from_millis(100));
    }

    proptest! {
        #[test]
        fn delay_stays_within_jitter_of_the_capped_base(
            initial in 1u64..5_000, extra in 0u64..100_000, multiplier in 1.0f64..5.0,
            jitter in 0.0f64..0.99, n in 1u32..200,
        ) {
            let c = config(initial, initial + extra, multiplier, jitter);
            let d = delay(&c, n).as_secs_f64();
            let base = (c.initial.as_secs_f64() * multiplier.powi((n - 1).min(64) as i32)).min(c.max.as_secs_f64());
            prop_assert!(d <= c.max.as_secs_f64() + 1e-9);
            prop_assert!(d >= base * (1.0 - jitter) - 1e-9);
            prop_assert!(d <= base * (1.0 + jitter) + 1e-9);
        }

        #[test]
        fn delay_never_shrinks_as_failures_grow_without_jitter(
            initial in 1u64..1_000, extra in 0u64..100_000, multiplier in 1.0f64..4.0, n in 1u32..100,
        ) {
            let c = config(initial, initial + extra, multiplier, 0.0);
            prop_assert!(delay(&c, n + 1) >= delay(&c, n));
        }
    }
}
