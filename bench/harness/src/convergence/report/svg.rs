//! One picture per N, as a small hand-written SVG (no plotting dependency): parents converged over
//! time, one line per contender, and writes per parent during convergence as stacked bars.

use std::fmt::Write;

use super::json::thin;
use crate::convergence::phases::RunResult;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 500.0;
/// The line chart's plot area: left, top, right, bottom.
const LINES: (f64, f64, f64, f64) = (70.0, 60.0, 600.0, 380.0);
/// The bar chart's plot area.
const BARS: (f64, f64, f64, f64) = (690.0, 60.0, 980.0, 380.0);

/// Write categories of the bars: (name, colour).
const CATEGORIES: [(&str, &str); 5] = [
    ("children (Service, StatefulSet)", "#4c78a8"),
    ("parent + status", "#f58518"),
    ("Jobs", "#54a24b"),
    ("Events", "#e45756"),
    ("other", "#b279a2"),
];

fn colour(contender: &str, i: usize) -> &'static str {
    match contender {
        "floor" => "#7f7f7f",
        "floor-equal" => "#bcbd22",
        "ruleop" => "#d62728",
        "kopf" => "#1f77b4",
        "ruleop-children" => "#ff7f0e",
        "kro" => "#2ca02c",
        _ => ["#9467bd", "#8c564b", "#e377c2", "#17becf"][i % 4],
    }
}

fn category(resource: &str) -> usize {
    let base = resource.split([' ', '/']).next().unwrap_or("");
    match base {
        "services" | "statefulsets" => 0,
        "databases" => 1,
        "jobs" => 2,
        "events" => 3,
        _ => 4,
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A round step for about `parts` ticks up to `max`.
fn tick_step(max: f64, parts: f64) -> f64 {
    let raw = (max / parts).max(f64::MIN_POSITIVE);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// 0, step, 2 step, ... up to `max` (multiplied, not summed: no drift).
fn ticks(max: f64, step: f64) -> impl Iterator<Item = f64> {
    let count = (max / step).round() as usize;
    (0..=count).map(move |k| k as f64 * step)
}

/// A tick label with as many decimals as the step needs.
fn label(value: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{value:.decimals$}")
}

fn text(svg: &mut String, x: f64, y: f64, anchor: &str, size: u32, content: &str) {
    let _ = writeln!(
        svg,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{size}">{}</text>"#,
        escape(content)
    );
}

/// The SVG for one N over the successful runs at that N (in the report's contender order).
pub fn chart(n: usize, date: &str, runs: &[&RunResult]) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    text(
        &mut svg,
        WIDTH / 2.0,
        24.0,
        "middle",
        16,
        &format!("ruleop convergence benchmark, N = {n} ({date})"),
    );
    lines(&mut svg, n, runs);
    bars(&mut svg, runs);
    svg.push_str("</svg>\n");
    svg
}

fn lines(svg: &mut String, n: usize, runs: &[&RunResult]) {
    let (l, t, r, b) = LINES;
    let t_max = runs
        .iter()
        .map(|x| x.converge.as_secs_f64())
        .fold(0.0, f64::max)
        .max(0.001);
    let x_step = tick_step(t_max, 6.0);
    let x_max = (t_max / x_step).ceil() * x_step;
    let y_step = tick_step(n as f64, 5.0);
    let y_max = ((n as f64 / y_step).ceil() * y_step).max(1.0);
    let px = |s: f64| l + s / x_max * (r - l);
    let py = |k: f64| b - k / y_max * (b - t);
    text(
        svg,
        (l + r) / 2.0,
        t - 12.0,
        "middle",
        13,
        "parents converged over time",
    );
    for tick in ticks(x_max, x_step) {
        let x = px(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{t}" x2="{x:.1}" y2="{b}" stroke="#eee"/>"##
        );
        text(svg, x, b + 16.0, "middle", 11, &label(tick, x_step));
    }
    for tick in ticks(y_max, y_step) {
        let y = py(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{l}" y1="{y:.1}" x2="{r}" y2="{y:.1}" stroke="#eee"/>"##
        );
        text(svg, l - 6.0, y + 4.0, "end", 11, &label(tick, y_step));
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
        r - l,
        b - t
    );
    text(
        svg,
        (l + r) / 2.0,
        b + 34.0,
        "middle",
        12,
        "seconds since the first create",
    );
    let _ = writeln!(
        svg,
        r#"<text x="18" y="{:.1}" text-anchor="middle" font-size="12" transform="rotate(-90 18 {:.1})">parents converged</text>"#,
        (t + b) / 2.0,
        (t + b) / 2.0
    );
    for (i, x) in runs.iter().enumerate() {
        let mut points = format!("{:.1},{:.1}", px(0.0), py(0.0));
        for (k, s) in thin(&x.curve, 400) {
            let _ = write!(points, " {:.1},{:.1}", px(s), py(k as f64));
        }
        let _ = writeln!(
            svg,
            r#"<polyline points="{points}" fill="none" stroke="{}" stroke-width="2"/>"#,
            colour(x.contender, i)
        );
        let y = t + 16.0 + i as f64 * 16.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="14" height="4" fill="{}"/>"#,
            l + 10.0,
            y - 5.0,
            colour(x.contender, i)
        );
        text(
            svg,
            l + 30.0,
            y,
            "start",
            11,
            &format!("{} ({:.2} s)", x.contender, x.converge.as_secs_f64()),
        );
    }
}

fn bars(svg: &mut String, runs: &[&RunResult]) {
    let (l, t, r, b) = BARS;
    let stacks: Vec<[f64; 5]> = runs
        .iter()
        .map(|x| {
            let mut stack = [0.0; 5];
            for ((_, resource), count) in &x.writes_converge {
                stack[category(resource)] += *count as f64 / x.n as f64;
            }
            stack
        })
        .collect();
    let top = stacks
        .iter()
        .map(|s| s.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1.0);
    let y_step = tick_step(top, 5.0);
    let y_max = (top / y_step).ceil() * y_step;
    let py = |v: f64| b - v / y_max * (b - t);
    text(
        svg,
        (l + r) / 2.0,
        t - 12.0,
        "middle",
        13,
        "API writes per parent (convergence)",
    );
    for tick in ticks(y_max, y_step) {
        let y = py(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{l}" y1="{y:.1}" x2="{r}" y2="{y:.1}" stroke="#eee"/>"##
        );
        text(svg, l - 6.0, y + 4.0, "end", 11, &label(tick, y_step));
    }
    let slot = (r - l) / runs.len().max(1) as f64;
    let width = (slot * 0.6).min(40.0);
    for (i, (x, stack)) in runs.iter().zip(&stacks).enumerate() {
        let cx = l + slot * (i as f64 + 0.5);
        let mut base = 0.0;
        for (value, (_, fill)) in stack.iter().zip(CATEGORIES) {
            if *value > 0.0 {
                let (y0, y1) = (py(base), py(base + value));
                let _ = writeln!(
                    svg,
                    r#"<rect x="{:.1}" y="{y1:.1}" width="{width:.1}" height="{:.1}" fill="{fill}"/>"#,
                    cx - width / 2.0,
                    y0 - y1
                );
                base += value;
            }
        }
        text(svg, cx, py(base) - 4.0, "middle", 11, &format!("{base:.1}"));
        let _ = writeln!(
            svg,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="end" font-size="11" fill="{}" transform="rotate(-35 {cx:.1} {:.1})">{}</text>"#,
            b + 14.0,
            colour(x.contender, i),
            b + 14.0,
            escape(x.contender)
        );
    }
    let _ = writeln!(svg, r##"<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/>"##);
    for (i, (name, fill)) in CATEGORIES.iter().enumerate() {
        let (x, y) = (l + (i % 2) as f64 * 150.0, HEIGHT - 38.0 + (i / 2) as f64 * 13.0);
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{fill}"/>"#,
            y - 9.0
        );
        text(svg, x + 14.0, y, "start", 10, name);
    }
}
