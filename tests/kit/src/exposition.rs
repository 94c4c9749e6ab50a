//! Checks a `/metrics` scrape with a Prometheus text-format parser (prometheus-parse), plus what
//! that parser does not check: every family has `# HELP` and `# TYPE`, and histogram buckets are
//! cumulative.

use std::collections::{BTreeMap, BTreeSet};

use prometheus_parse::{Scrape, Value};

/// A parsed and checked scrape.
pub struct Exposition {
    /// The parsed samples (histograms grouped with their buckets).
    pub scrape: Scrape,
    /// Family name to its `# TYPE`.
    pub types: BTreeMap<String, String>,
}

/// Suffixes a sample name may add to its family's name (OpenMetrics and Prometheus text).
const SUFFIXES: [&str; 6] = ["_total", "_bucket", "_sum", "_count", "_created", "_info"];

impl Exposition {
    /// Parses `text`, panicking with the reason when it breaks a rule above.
    pub fn parse(text: &str) -> Self {
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the scrape parses");
        let types: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
            .collect();
        let exposition = Exposition { scrape, types };
        assert!(text.ends_with("# EOF\n"), "an OpenMetrics exposition ends with # EOF");
        for family in exposition.types.keys() {
            assert!(exposition.scrape.docs.contains_key(family), "{family} has no # HELP");
        }
        for doc in exposition.scrape.docs.keys() {
            assert!(exposition.types.contains_key(doc), "{doc} has # HELP but no # TYPE");
        }
        for sample in &exposition.scrape.samples {
            assert!(
                exposition.family_of(&sample.metric).is_some(),
                "sample {} belongs to no family with # HELP and # TYPE",
                sample.metric
            );
            if let Value::Histogram(buckets) = &sample.value {
                let mut sorted = buckets.clone();
                sorted.sort_by(|a, b| a.less_than.total_cmp(&b.less_than));
                assert!(
                    sorted.windows(2).all(|w| w[0].count <= w[1].count),
                    "{} buckets are not cumulative: {sorted:?}",
                    sample.metric
                );
                let last = sorted.last().expect("a histogram has buckets");
                assert!(last.less_than.is_infinite(), "{} has no +Inf bucket", sample.metric);
                let count = exposition
                    .value(&format!("{}_count", sample.metric), &sample.labels)
                    .expect("a histogram has _count");
                assert_eq!(last.count, count, "{} +Inf bucket != _count", sample.metric);
            }
        }
        exposition
    }

    /// The family a sample name belongs to.
    pub fn family_of(&self, sample: &str) -> Option<&str> {
        std::iter::once(sample)
            .chain(SUFFIXES.iter().filter_map(|s| sample.strip_suffix(s)))
            .find_map(|name| self.types.get_key_value(name).map(|(k, _)| k.as_str()))
    }

    /// Every family and sample name (what a PromQL expression may name).
    pub fn names(&self) -> BTreeSet<String> {
        self.types
            .keys()
            .cloned()
            .chain(self.scrape.samples.iter().map(|s| s.metric.clone()))
            .chain(self.types.iter().flat_map(|(name, kind)| {
                let suffixes: &[&str] = match kind.as_str() {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    _ => &[],
                };
                suffixes.iter().map(move |s| format!("{name}{s}"))
            }))
            .collect()
    }

    /// The value of the untyped/counter/gauge sample `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &prometheus_parse::Labels) -> Option<f64> {
        self.scrape
            .samples
            .iter()
            .find(|s| s.metric == name && *s.labels == **labels)
            .and_then(|s| match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
                _ => None,
            })
    }
}
