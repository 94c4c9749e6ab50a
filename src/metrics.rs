//! Counters exported at `/metrics` in the Prometheus text format.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A set of labelled counters.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(&'static str, String), u64>>,
    gauges: Mutex<BTreeMap<&'static str, i64>>,
}

impl Metrics {
    /// Adds one to `name{labels}`.
    pub fn inc(&self, name: &'static str, labels: &[(&str, &str)]) {
        let labels = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(",");
        if let Ok(mut counters) = self.counters.lock() {
            *counters.entry((name, labels)).or_insert(0) += 1;
        }
    }

    /// Sets the unlabelled gauge `name` (e.g. `ruleop_leader`: 1 while this replica leads).
    pub fn set(&self, name: &'static str, value: i64) {
        if let Ok(mut gauges) = self.gauges.lock() {
            gauges.insert(name, value);
        }
    }

    /// The sum of `name` over the series whose labels contain every `(key, value)` in `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> u64 {
        let wanted: Vec<String> = filter.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        self.counters.lock().map_or(0, |counters| {
            counters
                .iter()
                .filter(|((n, labels), _)| *n == name && wanted.iter().all(|w| labels.split(',').any(|l| l == w)))
                .map(|(_, v)| *v)
                .sum()
        })
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let Ok(counters) = self.counters.lock() else {
            return String::new();
        };
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), value) in counters.iter() {
            if *name != last {
                out.push_str(&format!("# TYPE {name} counter\n"));
                last = name;
            }
            out.push_str(&format!("{name}{{{labels}}} {value}\n"));
        }
        if let Ok(gauges) = self.gauges.lock() {
            for (name, value) in gauges.iter() {
                out.push_str(&format!("# TYPE {name} gauge\n{name} {value}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_and_sum_by_label() {
        let m = Metrics::default();
        m.inc("ruleop_reconciles_total", &[("rule", "db"), ("result", "ok")]);
        m.inc("ruleop_reconciles_total", &[("rule", "db"), ("result", "ok")]);
        m.inc("ruleop_reconciles_total", &[("rule", "db"), ("result", "error")]);
        assert_eq!(m.sum("ruleop_reconciles_total", &[("rule", "db")]), 3);
        assert_eq!(m.sum("ruleop_reconciles_total", &[("result", "ok")]), 2);
        assert!(
            m.render()
                .contains("ruleop_reconciles_total{rule=\"db\",result=\"ok\"} 2\n")
        );
        m.set("ruleop_leader", 1);
        assert!(m.render().ends_with("# TYPE ruleop_leader gauge\nruleop_leader 1\n"));
    }
}
