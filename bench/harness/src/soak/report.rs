//! The soak's result: a Markdown table (faults by kind, duplicates, missing, time to converge
//! after the last fault, RSS slope per replica) and an SVG of parents converged, faults and RSS
//! over time.

use std::fmt::Write;
use std::time::Duration;

use crate::soak::checks::Verdict;
use crate::soak::inject::Injected;
use crate::soak::replicas::RssSample;
use crate::soak::schedule::KINDS;

/// Everything one run found.
pub struct Outcome {
    pub date: String,
    /// Header lines (machine, versions, settings, seed).
    pub header: Vec<String>,
    pub parents: usize,
    pub injected: Vec<Injected>,
    /// (seconds, parents converged, parents seen) while faults ran and after.
    pub converged: Vec<(f64, usize, usize)>,
    pub rss: Vec<RssSample>,
    pub incarnations: Vec<usize>,
    /// Continuous checks done, and the most duplicates and unexpected Jobs any of them saw.
    pub checks: usize,
    pub worst_duplicates: usize,
    pub worst_unexpected: usize,
    /// The check at the end.
    pub last: Verdict,
    /// The end of the last fault (seconds) and how long after it every parent had converged.
    pub last_fault: f64,
    pub converged_after: Option<Duration>,
    /// Parents (unconverged, or missing a backup) still waiting when the bound had passed.
    pub late: Vec<String>,
    /// The longest any parent was seen unconverged (seconds, parent), faults or not.
    pub longest: Option<(f64, String)>,
    pub bound: Duration,
    pub reloads: u64,
    /// Services carrying the last reload's value, of all Services.
    pub reloaded: (usize, usize),
    pub panics: Vec<String>,
    /// Whether every replica process was running (none exited by itself) at the end.
    pub running: bool,
    /// How long after the settle every replica answered `/readyz` ok (`None`: not within the
    /// convergence bound).
    pub ready: Option<Duration>,
    pub gone: u64,
    pub expired_lines: usize,
}

/// Least-squares slope of `points` (x seconds, y bytes), in MB per hour.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx * 3600.0 / 1e6)
}

/// One replica slot's memory: peak RSS, its longest-lived process (seconds, from its first
/// sample after 30 s of life), and that process's RSS slope over all of it and over its second
/// half (a process fills its caches and the allocator settles first: a slope over the whole life
/// says growth where the second half may be flat).
struct RssRow {
    peak: f64,
    life: f64,
    slope: Option<f64>,
    late_slope: Option<f64>,
}

fn rss_rows(rss: &[RssSample], slots: usize) -> Vec<RssRow> {
    (0..slots)
        .map(|slot| {
            let mine: Vec<&RssSample> = rss.iter().filter(|s| s.slot == slot && s.bytes > 0).collect();
            let peak = mine.iter().map(|s| s.bytes).max().unwrap_or(0) as f64 / 1e6;
            let mut best = RssRow {
                peak,
                life: 0.0,
                slope: None,
                late_slope: None,
            };
            let incarnations: std::collections::BTreeSet<usize> = mine.iter().map(|s| s.incarnation).collect();
            for incarnation in incarnations {
                let life: Vec<&&RssSample> = mine.iter().filter(|s| s.incarnation == incarnation).collect();
                let first = life.first().map_or(0.0, |s| s.t);
                let steady: Vec<(f64, f64)> = life
                    .iter()
                    .filter(|s| s.t >= first + 30.0)
                    .map(|s| (s.t, s.bytes as f64))
                    .collect();
                let span = steady.last().map_or(0.0, |l| l.0) - steady.first().map_or(0.0, |f| f.0);
                if span > best.life {
                    let half = steady.first().map_or(0.0, |f| f.0) + span / 2.0;
                    let late: Vec<(f64, f64)> = steady.iter().copied().filter(|(t, _)| *t >= half).collect();
                    best = RssRow {
                        peak,
                        life: span,
                        slope: slope(&steady),
                        late_slope: slope(&late),
                    };
                }
            }
            best
        })
        .collect()
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The Markdown report.
pub fn markdown(o: &Outcome) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Chaos soak, {}\n", o.date);
    for line in &o.header {
        let _ = writeln!(md, "{line}");
    }
    let _ = writeln!(md, "\n## Faults injected\n\n| fault | injected |\n|---|---|");
    for kind in KINDS {
        let n = o.injected.iter().filter(|i| i.kind == kind).count();
        let _ = writeln!(md, "| {kind} | {n} |");
    }
    let v = &o.last;
    let after = o
        .converged_after
        .map_or_else(|| "not converged".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
    let _ = writeln!(md, "\n## Checks\n\n| check | result | target |\n|---|---|---|");
    let rows: Vec<(String, String, String)> = vec![
        (
            "duplicate backup Jobs (beyond one per parent and guard value), worst continuous check / end".into(),
            format!("{} / {}", o.worst_duplicates, v.duplicates),
            format!("0 ({})", verdict(o.worst_duplicates == 0 && v.duplicates == 0)),
        ),
        (
            "Jobs for no generation or request value the harness caused, worst / end".into(),
            format!("{} / {}", o.worst_unexpected, v.unexpected.len()),
            format!("0 ({})", verdict(o.worst_unexpected == 0 && v.unexpected.is_empty())),
        ),
        (
            "missing backup Jobs at the end (parents whose current generation or request has none)".into(),
            v.missing.len().to_string(),
            format!("0 ({})", verdict(v.missing.is_empty())),
        ),
        (
            "generations and request values superseded before a replica acted (no Job, by design)".into(),
            v.coalesced.to_string(),
            "reported".into(),
        ),
        (
            "parents lost (gone, or another UID)".into(),
            v.lost.len().to_string(),
            format!("0 ({})", verdict(v.lost.is_empty())),
        ),
        (
            "parents unconverged at the end".into(),
            (v.parents - v.converged).to_string(),
            format!("0 ({})", verdict(v.parents == v.converged && v.parents == o.parents)),
        ),
        (
            format!(
                "every parent converged, after the end of the last fault (at {:.0} s)",
                o.last_fault
            ),
            after,
            format!(
                "<= {} s ({})",
                o.bound.as_secs(),
                verdict(o.converged_after.is_some_and(|d| d <= o.bound))
            ),
        ),
        (
            "longest a parent was seen unconverged (between samples; storms and stalls make some wait by design)"
                .into(),
            o.longest
                .as_ref()
                .map_or_else(|| "-".to_owned(), |(secs, name)| format!("{secs:.0} s ({name})")),
            "reported".into(),
        ),
        (
            format!("Services carrying the last reload's value ({} reloads)", o.reloads),
            format!("{} of {}", o.reloaded.0, o.reloaded.1),
            if o.reloads == 0 {
                "-".into()
            } else {
                format!("all ({})", verdict(o.reloaded.0 == o.reloaded.1))
            },
        ),
        (
            "panics in any replica's log".into(),
            o.panics.len().to_string(),
            format!("0 ({})", verdict(o.panics.is_empty())),
        ),
        (
            "replicas running (none exited by itself) / all ready again after the settle".into(),
            format!(
                "{} / {}",
                o.running,
                o.ready.map_or("not within the bound".to_owned(), |d| format!(
                    "after {:.1} s",
                    d.as_secs_f64()
                ))
            ),
            format!(
                "true / within {} s ({})",
                o.bound.as_secs(),
                verdict(o.running && o.ready.is_some())
            ),
        ),
        (
            "410 responses the API server counted / replica log lines on expired watches".into(),
            format!("{} / {}", o.gone, o.expired_lines),
            "reported".into(),
        ),
        (
            "continuous checks during the run".into(),
            o.checks.to_string(),
            "".into(),
        ),
    ];
    for (check, result, target) in rows {
        let _ = writeln!(md, "| {check} | {result} | {target} |");
    }
    let _ = writeln!(
        md,
        "\n## Memory per replica\n\nRSS from /proc every sample. A SIGKILLed replica's successor starts from scratch, so the slope is \
         taken over the longest-lived process of each slot, from 30 s after its start (least squares).\n\n\
         | replica | processes | peak RSS | longest life (from 30 s) | RSS slope over it | over its second half |\n|---|---|---|---|---|---|"
    );
    let per_hour = |slope: Option<f64>| slope.map_or_else(|| "too short".to_owned(), |s| format!("{s:+.1} MB/h"));
    for (slot, row) in rss_rows(&o.rss, o.incarnations.len()).into_iter().enumerate() {
        let _ = writeln!(
            md,
            "| {slot}{} | {} | {:.1} MB | {:.0} s | {} | {} |",
            if slot == 0 { " (through the stall proxy)" } else { "" },
            o.incarnations[slot],
            row.peak,
            row.life,
            per_hour(row.slope),
            per_hour(row.late_slope),
        );
    }
    let _ = writeln!(md, "\n## Timeline\n\n| at | done | fault | what |\n|---|---|---|---|");
    for i in &o.injected {
        let _ = writeln!(md, "| {:.0} s | {:.0} s | {} | {} |", i.at, i.done, i.kind, i.detail);
    }
    for (what, list) in [
        ("Unexpected Jobs", &v.unexpected),
        ("Missing", &v.missing),
        ("Lost", &v.lost),
        ("Still waiting when the bound after the last fault had passed", &o.late),
        ("Panics", &o.panics),
    ] {
        if !list.is_empty() {
            let _ = writeln!(
                md,
                "\n{what} (first 20): {}",
                list.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    md
}

const W: f64 = 1000.0;
const H: f64 = 560.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 840.0;
/// Top and bottom of the two panels: parents converged, RSS.
const TOP: (f64, f64) = (50.0, 250.0);
const BOTTOM: (f64, f64) = (320.0, 510.0);
const FAULT_COLOURS: [&str; 7] = [
    "#d62728", "#1f77b4", "#ff7f0e", "#bcbd22", "#2ca02c", "#9467bd", "#8c564b",
];
const REPLICA_COLOURS: [&str; 3] = ["#d62728", "#1f77b4", "#2ca02c"];

/// The picture: parents converged over time with a mark per fault above, and RSS per replica.
pub fn svg(o: &Outcome) -> String {
    let t_max = o
        .converged
        .iter()
        .map(|c| c.0)
        .chain(o.rss.iter().map(|r| r.t))
        .fold(1.0f64, f64::max);
    let x = |t: f64| LEFT + (t.max(0.0) / t_max) * (RIGHT - LEFT);
    let y_in = |panel: (f64, f64), v: f64, max: f64| panel.1 - (v / max.max(1e-9)) * (panel.1 - panel.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12"><rect width="{W}" height="{H}" fill="white"/>"#
    );
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="15">Chaos soak {}: {} parents, 3 replicas; parents converged, faults, RSS</text>"#,
        o.date, o.parents
    );
    for (panel, label) in [(TOP, "parents converged"), (BOTTOM, "RSS (MB)")] {
        let _ = write!(
            s,
            r##"<rect x="{LEFT}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/><text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">{label}</text>"##,
            panel.0,
            RIGHT - LEFT,
            panel.1 - panel.0,
            (panel.0 + panel.1) / 2.0,
            (panel.0 + panel.1) / 2.0
        );
    }
    // Faults: a vertical line through the top panel per injection, by kind.
    for i in &o.injected {
        let k = KINDS.iter().position(|k| *k == i.kind).unwrap_or(0);
        let _ = write!(
            s,
            r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1}" y2="{2}" stroke="{3}" stroke-width="1.5" opacity="0.6"/>"#,
            x(i.at),
            TOP.0,
            TOP.1,
            FAULT_COLOURS[k]
        );
    }
    let n = o.parents as f64;
    let points: Vec<String> = o
        .converged
        .iter()
        .map(|(t, c, _)| format!("{:.1},{:.1}", x(*t), y_in(TOP, *c as f64, n)))
        .collect();
    let _ = write!(
        s,
        r#"<polyline points="{}" fill="none" stroke="black" stroke-width="2"/>"#,
        points.join(" ")
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        LEFT - 4.0,
        TOP.0 + 4.0,
        o.parents
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        LEFT - 4.0,
        TOP.1
    );
    let rss_max = o.rss.iter().map(|r| r.bytes as f64 / 1e6).fold(1.0f64, f64::max) * 1.1;
    for slot in 0..o.incarnations.len() {
        let incarnations: std::collections::BTreeSet<usize> =
            o.rss.iter().filter(|r| r.slot == slot).map(|r| r.incarnation).collect();
        for incarnation in incarnations {
            let points: Vec<String> = o
                .rss
                .iter()
                .filter(|r| r.slot == slot && r.incarnation == incarnation && r.bytes > 0)
                .map(|r| format!("{:.1},{:.1}", x(r.t), y_in(BOTTOM, r.bytes as f64 / 1e6, rss_max)))
                .collect();
            let _ = write!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.5"/>"#,
                points.join(" "),
                REPLICA_COLOURS[slot % 3]
            );
        }
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{rss_max:.0}</text>"#,
        LEFT - 4.0,
        BOTTOM.0 + 4.0
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">0</text>"#,
        LEFT - 4.0,
        BOTTOM.1
    );
    for (i, t) in [0.0, t_max / 2.0, t_max].into_iter().enumerate() {
        let anchor = ["start", "middle", "end"][i];
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="{anchor}">{t:.0} s</text>"#,
            x(t),
            BOTTOM.1 + 16.0
        );
    }
    // Legends.
    for (k, kind) in KINDS.iter().enumerate() {
        let y = TOP.0 + 14.0 * k as f64;
        let _ = write!(
            s,
            r#"<line x1="855" x2="875" y1="{0}" y2="{0}" stroke="{1}" stroke-width="3"/><text x="880" y="{2}">{kind}</text>"#,
            y,
            FAULT_COLOURS[k],
            y + 4.0
        );
    }
    for slot in 0..o.incarnations.len() {
        let y = BOTTOM.0 + 14.0 * slot as f64;
        let _ = write!(
            s,
            r#"<line x1="855" x2="875" y1="{0}" y2="{0}" stroke="{1}" stroke-width="3"/><text x="880" y="{2}">replica {slot}</text>"#,
            y,
            REPLICA_COLOURS[slot % 3],
            y + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
