//! Reading numbers: a counter summed from a `/metrics` text, a percentile of measurements.
//! Shared by the integration tests and the measurement tool (bench/harness), so each is defined
//! once.

use std::collections::HashMap;

/// The labels and the value of one Prometheus text line.
pub fn labels(line: &str) -> (HashMap<&str, &str>, Option<f64>) {
    let mut map = HashMap::new();
    let Some((head, value)) = line.rsplit_once(' ') else {
        return (map, None);
    };
    if let Some(inner) = head.split_once('{').and_then(|(_, rest)| rest.strip_suffix('}')) {
        let mut rest = inner;
        while let Some((key, after)) = rest.split_once("=\"") {
            let Some(end) = after.find('"') else { break };
            map.insert(key.trim_start_matches(','), &after[..end]);
            rest = &after[end + 1..];
        }
    }
    (map, value.parse().ok())
}

/// Sums a Prometheus counter `name` over the series whose labels include every `(key, value)`
/// of `filter` (an unlabelled series counts when `filter` is empty).
pub fn sum_metric(text: &str, name: &str, filter: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| {
            let (labels, value) = labels(l);
            filter.iter().all(|(k, v)| labels.get(k) == Some(v)).then_some(value?)
        })
        .sum::<f64>() as u64
}

/// The `p`th percentile (0 to 100) of sorted measurements by nearest rank: the smallest value
/// with at least `p`% of them at or below it. `None` when there are none.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}
