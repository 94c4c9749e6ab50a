//! The tree text of a [`Trace`]: symbols and ANSI colours for a terminal, plain words when the
//! output is piped. Messages are printed whole (they were bounded when the model was built),
//! a multi-line message indented under its line.

use std::fmt::Write as _;

use super::model::{ActionTrace, ChildTrace, ObjectShown, ObjectTrace, Trace};

/// How a line is marked.
#[derive(Debug, Clone, Copy)]
enum Mark {
    Good,
    Bad,
    Waiting,
    Off,
}

struct Style {
    colour: bool,
}

impl Style {
    fn mark(&self, mark: Mark) -> String {
        let (symbol, word, code) = match mark {
            Mark::Good => ("✓", "[ok]", "32"),
            Mark::Bad => ("✗", "[!!]", "31"),
            Mark::Waiting => ("⧗", "[..]", "33"),
            Mark::Off => ("·", "[--]", "90"),
        };
        if self.colour {
            format!("\x1b[{code}m{symbol}\x1b[0m")
        } else {
            word.to_owned()
        }
    }

    fn bold(&self, text: &str) -> String {
        if self.colour {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// The tree text; `colour` for a terminal.
pub(crate) fn tree(trace: &Trace, colour: bool) -> String {
    let style = Style { colour };
    let mut out = String::new();
    let p = &trace.parent;
    let ready = if trace.ready {
        format!("{} Ready", style.mark(Mark::Good))
    } else {
        format!("{} not Ready", style.mark(Mark::Bad))
    };
    let _ = writeln!(
        out,
        "{} {}  {ready}",
        style.bold(&format!(
            "{} {}",
            p.identity.kind,
            place(&p.identity.namespace, &p.identity.name)
        )),
        p.identity.api_version
    );
    let _ = writeln!(
        out,
        "  rule {} (watches {}), digest of the local rule files {}",
        trace.rule.name, trace.rule.watches, trace.rule.digest
    );
    let observed = p
        .observed_generation
        .map_or_else(|| "not written".to_owned(), |g| g.to_string());
    let lag = match p.observed_generation {
        Some(g) if g == p.identity.generation => "",
        _ => "  (not reconciled since the last spec change)",
    };
    let _ = writeln!(
        out,
        "  generation {}, observedGeneration {observed}{lag}",
        p.identity.generation
    );
    let _ = writeln!(
        out,
        "  finalizer {}: {}",
        crate::engine::plan::deletion::FINALIZER,
        if p.cleanup_finalizer { "present" } else { "absent" }
    );
    if p.paused {
        let _ = writeln!(
            out,
            "  {} paused (ruleop.io/paused): nothing is written",
            style.mark(Mark::Waiting)
        );
    }
    if let Some(ts) = &p.deletion_timestamp {
        let _ = writeln!(out, "  {} being deleted since {ts}", style.mark(Mark::Waiting));
    }
    if let Some(deletion) = &p.deletion {
        for why in &deletion.waiting {
            line(&mut out, 4, &format!("held by: {why}"));
        }
        for id in &deletion.timed_out {
            line(&mut out, 4, &format!("timed out: {id}"));
        }
        if let Some(why) = &deletion.finalize_timed_out {
            line(&mut out, 4, &format!("finalize timed out: {why}"));
        }
    }
    if p.conditions.is_empty() {
        let _ = writeln!(out, "  conditions: none");
    } else {
        let _ = writeln!(out, "  conditions:");
        for c in &p.conditions {
            let mark = match c.status.as_str() {
                "True" => Mark::Good,
                "False" => Mark::Bad,
                _ => Mark::Waiting,
            };
            let since = c
                .last_transition_time
                .as_deref()
                .map(|t| format!(" (since {t})"))
                .unwrap_or_default();
            line(
                &mut out,
                4,
                &format!(
                    "{} {} {} {}{since}: {}",
                    style.mark(mark),
                    c.type_,
                    c.status,
                    c.reason,
                    c.message
                ),
            );
        }
    }
    if let Some(error) = &trace.plan_error {
        line(
            &mut out,
            2,
            &format!(
                "{} the plan fails, nothing would be applied: {error}",
                style.mark(Mark::Bad)
            ),
        );
    }
    for problem in &trace.status_problems {
        line(&mut out, 2, &format!("{} status: {problem}", style.mark(Mark::Bad)));
    }
    let _ = writeln!(out, "children:");
    for child in &trace.children {
        child_lines(&mut out, &style, child, p.deletion_timestamp.is_some());
    }
    if !trace.prune.is_empty() {
        let _ = writeln!(out, "prune (no longer desired, the next reconcile deletes):");
        for target in &trace.prune {
            let _ = writeln!(out, "  - {}", object(target));
        }
    }
    if !trace.actions.is_empty() {
        let _ = writeln!(out, "actions:");
        for action in &trace.actions {
            action_lines(&mut out, &style, action);
        }
    }
    if !trace.lookups.is_empty() {
        let _ = writeln!(out, "lookups:");
        for lookup in &trace.lookups {
            let what = lookup
                .target
                .as_ref()
                .map_or_else(|| "nothing (its name rendered empty)".to_owned(), |key| key.to_string());
            let found = match (lookup.found, lookup.count) {
                (_, Some(n)) => format!("{n} found"),
                (true, None) => "found".to_owned(),
                (false, None) => "not found".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {}: {} — {found}",
                crate::inspect::tenant_text::clean(&lookup.id),
                crate::inspect::tenant_text::clean(&what)
            );
        }
    }
    if trace.events.is_empty() {
        let _ = writeln!(out, "events: none");
    } else {
        let _ = writeln!(out, "events (newest last):");
        for e in &trace.events {
            let mark = if e.type_ == "Warning" { Mark::Bad } else { Mark::Off };
            let count = if e.count > 1 {
                format!(" (x{})", e.count)
            } else {
                String::new()
            };
            line(
                &mut out,
                2,
                &format!(
                    "{} {} {} {}{count}: {}",
                    style.mark(mark),
                    e.last_seen,
                    e.type_,
                    e.reason,
                    e.note
                ),
            );
        }
    }
    out
}

fn child_lines(out: &mut String, style: &Style, child: &ChildTrace, deleting: bool) {
    let (mark, state) = if let Some(wait) = &child.waiting {
        (
            Mark::Waiting,
            format!("waiting for {:?} (dependsOn): {}", wait.on, wait.reason),
        )
    } else if !child.desired && deleting {
        (Mark::Waiting, "the parent is being deleted".to_owned())
    } else if !child.desired {
        (Mark::Off, "not desired (`when` is false, or no plan)".to_owned())
    } else if child.ready {
        (Mark::Good, "ready".to_owned())
    } else {
        (
            Mark::Bad,
            format!("not ready: {}", child.not_ready.as_deref().unwrap_or("unknown")),
        )
    };
    let mut traits = Vec::new();
    if child.for_each {
        traits.push("forEach".to_owned());
    }
    if let Some(s) = &child.update_strategy {
        traits.push(format!("updateStrategy {s}"));
    }
    if let Some(s) = &child.scaling {
        traits.push(format!("scaling {s}"));
    }
    let traits = if traits.is_empty() {
        String::new()
    } else {
        format!(" [{}]", traits.join(", "))
    };
    line(
        out,
        2,
        &format!(
            "{} {} ({} {}){traits}: {state}",
            style.mark(mark),
            child.id,
            child.api_version,
            child.kind
        ),
    );
    if let Some(expr) = &child.ready_when {
        line(out, 6, &format!("readyWhen: {expr}"));
    }
    if !child.depends_on.is_empty() {
        line(out, 6, &format!("dependsOn: {}", child.depends_on.join(", ")));
    }
    for o in &child.objects {
        object_lines(out, style, o);
    }
    if let Some(f) = &child.folded {
        line(
            out,
            4,
            &format!(
                "… and {} more items ({} missing, {} drifting, {} held)",
                f.count, f.missing, f.drifted, f.held
            ),
        );
    }
}

fn object_lines(out: &mut String, style: &Style, o: &ObjectTrace) {
    let mut facts = Vec::new();
    let mark = if !o.exists {
        facts.push("does not exist".to_owned());
        Mark::Bad
    } else {
        facts.push("exists".to_owned());
        match o.drift {
            Some(true) => {
                facts.push("DRIFT: its managed fields differ from the rendering".to_owned());
                Mark::Bad
            }
            Some(false) => {
                facts.push("no drift".to_owned());
                Mark::Good
            }
            None => Mark::Off,
        }
    };
    if let Some(owner) = &o.owned_by {
        facts.push(format!("owned by {owner}"));
    }
    if !o.desired {
        facts.push("no longer desired".to_owned());
    }
    let key = o.item_key.as_ref().map(|k| format!("[{k}] ")).unwrap_or_default();
    line(
        out,
        4,
        &format!("{} {key}{}: {}", style.mark(mark), object(&o.object), facts.join(", ")),
    );
    if let Some(held) = &o.held {
        line(out, 8, &format!("{} held: {held}", style.mark(Mark::Waiting)));
    }
    if let Some(e) = &o.drift_error {
        line(out, 8, &format!("drift not checked: {e}"));
    }
    if let Some(keys) = &o.secret_keys {
        line(out, 8, &format!("keys: {}", keys.join(", ")));
    }
    if let Some(diff) = &o.drift_diff {
        for l in diff.lines() {
            let _ = writeln!(out, "        {l}");
        }
    }
}

fn action_lines(out: &mut String, style: &Style, a: &ActionTrace) {
    let mark = match a.phase.as_deref() {
        Some("Done") => Mark::Good,
        Some("Failed") => Mark::Bad,
        Some(_) => Mark::Waiting,
        None => Mark::Off,
    };
    let phase = a.phase.as_deref().unwrap_or("never ran");
    let mut facts = vec![format!("{phase}, {} run(s)", a.runs)];
    if a.attempts > 1 {
        facts.push(format!("{} attempts", a.attempts));
    }
    if let Some(g) = &a.guard_value {
        facts.push(format!("last for {g}"));
    }
    if let Some(created) = &a.created {
        facts.push(format!("created {}", object(created)));
    }
    line(out, 2, &format!("{} {}: {}", style.mark(mark), a.id, facts.join(", ")));
    let next = if a.would_run {
        "runs on the next reconcile"
    } else {
        "does not run now"
    };
    line(out, 6, &format!("{next}: {}", a.reason));
    if let Some(e) = &a.last_error {
        let at = a.failed_at.as_deref().map(|t| format!(" at {t}")).unwrap_or_default();
        line(out, 6, &format!("last error{at}: {e}"));
    }
}

fn object(o: &ObjectShown) -> String {
    format!("{} {}", o.kind, place(&o.namespace, &o.name))
}

fn place(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// `text` at `indent`, its further lines two deeper.
fn line(out: &mut String, indent: usize, text: &str) {
    let mut lines = text.lines();
    let _ = writeln!(out, "{:indent$}{}", "", lines.next().unwrap_or_default());
    for more in lines {
        let _ = writeln!(out, "{:width$}{more}", "", width = indent + 2);
    }
}

#[cfg(test)]
mod tests;
