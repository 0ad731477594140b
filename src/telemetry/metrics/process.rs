//! The process itself: which build it is, and its CPU, memory and file descriptors, read from
//! /proc at each scrape (Linux; elsewhere those read as absent). The process_* names are the
//! ones Prometheus client libraries use, so generic dashboards and alerts work unchanged.

use std::sync::Mutex;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, IntGaugeVec, Opts, Registry};

/// Registers `handoff_build_info` and the process collector.
pub(crate) fn register(registry: &Registry) -> prometheus::Result<()> {
    let build = IntGaugeVec::new(
        Opts::new(
            "handoff_build_info",
            "Always 1; the labels say which build runs (commit from HANDOFF_COMMIT at build time).",
        ),
        &["version", "commit"],
    )?;
    build.with_label_values(&[env!("CARGO_PKG_VERSION"), option_env!("HANDOFF_COMMIT").unwrap_or("unknown")]).set(1);
    registry.register(Box::new(build))?;
    registry.register(Box::new(ProcessCollector::new()?))
}

struct ProcessCollector {
    cpu: Counter,
    /// CPU seconds already counted (the counter only moves forward by the difference).
    cpu_seen: Mutex<f64>,
    resident: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start_time: Gauge,
    descs: Vec<Desc>,
}

impl ProcessCollector {
    fn new() -> prometheus::Result<Self> {
        let cpu = Counter::new("process_cpu_seconds_total", "User and system CPU time spent, in seconds.")?;
        let resident = Gauge::new("process_resident_memory_bytes", "Resident memory size, in bytes.")?;
        let open_fds = Gauge::new("process_open_fds", "Open file descriptors.")?;
        let max_fds = Gauge::new("process_max_fds", "Limit on open file descriptors.")?;
        let start_time = Gauge::new("process_start_time_seconds", "Start time since the Unix epoch, in seconds.")?;
        let descs = [&cpu as &dyn Collector, &resident, &open_fds, &max_fds, &start_time]
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        Ok(Self { cpu, cpu_seen: Mutex::new(0.0), resident, open_fds, max_fds, start_time, descs })
    }

    /// Reads /proc; what cannot be read keeps its last value.
    fn sample(&self) {
        // Clock ticks per second: 100 on every Linux architecture handoff ships for.
        const TICKS: f64 = 100.0;
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the command name (which may hold spaces) start at field 3.
            let fields: Vec<&str> =
                stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default().split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
            if let (Some(user), Some(system)) = (field(14), field(15)) {
                let total = (user + system) / TICKS;
                let mut seen = self.cpu_seen.lock().expect("cpu lock");
                if total > *seen {
                    self.cpu.inc_by(total - *seen);
                    *seen = total;
                }
            }
            let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse::<f64>().ok())
            });
            if let (Some(boot), Some(start)) = (boot, field(22)) {
                self.start_time.set(boot + start / TICKS);
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status")
            && let Some(kib) = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))
            && let Some(kib) = kib.split_whitespace().next().and_then(|v| v.parse::<f64>().ok())
        {
            self.resident.set(kib * 1024.0);
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(entries.count() as f64);
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
            && let Some(line) = limits.lines().find(|l| l.starts_with("Max open files"))
            && let Some(soft) = line.split_whitespace().nth(3).and_then(|v| v.parse::<f64>().ok())
        {
            self.max_fds.set(soft);
        }
    }
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.sample();
        [&self.cpu as &dyn Collector, &self.resident, &self.open_fds, &self.max_fds, &self.start_time]
            .iter()
            .flat_map(|c| c.collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reports_its_own_memory_and_descriptors() {
        let registry = Registry::new();
        register(&registry).unwrap();
        let families = registry.gather();
        let value = |name: &str| {
            let family = families.iter().find(|f| f.name() == name).unwrap_or_else(|| panic!("{name} missing"));
            let metric = &family.get_metric()[0];
            if family.name().ends_with("_total") {
                metric.get_counter().get_value()
            } else {
                metric.get_gauge().get_value()
            }
        };
        assert!(value("process_resident_memory_bytes") > 1e6, "a running process holds more than 1 MB");
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_start_time_seconds") > 1.7e9);
        let build = families.iter().find(|f| f.name() == "handoff_build_info").unwrap();
        assert_eq!(build.get_metric()[0].get_gauge().get_value(), 1.0);
    }
}
