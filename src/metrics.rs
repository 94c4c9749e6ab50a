//! Counters exported at `/metrics` in the Prometheus text format.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// A set of labelled counters.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(&'static str, String), u64>>,
    gauges: Mutex<BTreeMap<(&'static str, String), u64>>,
}

impl Metrics {
    /// Adds one to `name{labels}`.
    pub fn inc(&self, name: &'static str, labels: &[(&str, &str)]) {
        let labels = label_text(labels);
        if let Ok(mut counters) = self.counters.lock() {
            *counters.entry((name, labels)).or_insert(0) += 1;
        }
    }

    /// Sets the gauge `name{labels}` to `value`.
    pub fn set(&self, name: &'static str, labels: &[(&str, &str)], value: u64) {
        let labels = label_text(labels);
        if let Ok(mut gauges) = self.gauges.lock() {
            gauges.insert((name, labels), value);
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

    /// The Prometheus text exposition of every counter and gauge.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (series, type_) in [(&self.counters, "counter"), (&self.gauges, "gauge")] {
            let Ok(series) = series.lock() else {
                continue;
            };
            let mut last = "";
            for ((name, labels), value) in series.iter() {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} {type_}\n"));
                    last = name;
                }
                out.push_str(&format!("{name}{{{labels}}} {value}\n"));
            }
        }
        out
    }
}

fn label_text(labels: &[(&str, &str)]) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect::<Vec<_>>()
        .join(",")
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
    }
}
