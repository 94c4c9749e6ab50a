//! The metrics' exposition, family by family.

use std::time::Duration;

use super::*;

#[test]
fn a_reconcile_moves_the_controller_runtime_and_ruleop_families() {
    let m = Metrics::default();
    m.reconciled("db", Outcome::Ok, Duration::from_millis(30));
    m.reconciled("db", Outcome::Ok, Duration::from_millis(30));
    m.reconciled("db", Outcome::Error("TemplateFailed"), Duration::from_secs(2));
    let text = m.render();
    for line in [
        "# TYPE controller_runtime_reconcile counter\n",
        "controller_runtime_reconcile_total{controller=\"db\",result=\"success\"} 2\n",
        "controller_runtime_reconcile_errors_total{controller=\"db\"} 1\n",
        "controller_runtime_reconcile_time_seconds_count{controller=\"db\"} 3\n",
        "controller_runtime_reconcile_time_seconds_bucket{le=\"0.05\",controller=\"db\"} 2\n",
        "ruleop_reconciles_total{rule=\"db\",result=\"ok\"} 2\n",
        "ruleop_reconcile_errors_total{rule=\"db\",reason=\"TemplateFailed\"} 1\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
}

#[test]
fn a_fresh_scrape_has_the_reload_and_controller_series_the_alerts_name_at_zero() {
    let m = Metrics::default();
    m.rule_started("db");
    let text = m.render();
    for line in [
        "ruleop_rule_reloads_total{result=\"ok\"} 0\n",
        "ruleop_rule_reloads_total{result=\"invalid\"} 0\n",
        "ruleop_rule_reloads_total{result=\"retrying\"} 0\n",
        "controller_runtime_reconcile_errors_total{controller=\"db\"} 0\n",
        "controller_runtime_reconcile_total{controller=\"db\",result=\"error\"} 0\n",
        "ruleop_reconciles_total{rule=\"db\",result=\"error\"} 0\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
}

#[test]
fn the_exposition_for_the_reference_has_every_registered_family() {
    // Every `registry.register(` call of mod.rs (where each family is registered) is one family.
    let source = include_str!("mod.rs");
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    let registered = code.matches("registry.register(").count();
    let text = exposition_of_every_family();
    let shown = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    assert_eq!(
        shown, registered,
        "a family has no series in exposition_of_every_family:\n{text}"
    );
}

struct Fixed(usize);

impl Sampled for Fixed {
    fn queue_depth(&self) -> usize {
        self.0
    }

    fn cached_objects(&self) -> BTreeMap<String, usize> {
        BTreeMap::from([("Database".to_owned(), 10), ("Service".to_owned(), 20)])
    }
}

#[test]
fn a_running_controller_is_sampled_at_each_scrape_and_its_series_go_when_it_stops() {
    let m = Metrics::default();
    let old: std::sync::Arc<dyn Sampled> = std::sync::Arc::new(Fixed(3));
    m.sample("db", std::sync::Arc::downgrade(&old));
    let text = m.render();
    for line in [
        "# TYPE workqueue_depth gauge\n",
        "workqueue_depth{controller=\"db\",name=\"db\"} 3\n",
        "ruleop_cached_objects{rule=\"db\",kind=\"Service\"} 20\n",
    ] {
        assert!(text.contains(line), "{line:?} not in\n{text}");
    }
    // The rule restarts (a reload that changed its kinds): the new controller's series stay.
    let new: std::sync::Arc<dyn Sampled> = std::sync::Arc::new(Fixed(1));
    m.sample("db", std::sync::Arc::downgrade(&new));
    drop(old);
    assert!(
        m.render()
            .contains("workqueue_depth{controller=\"db\",name=\"db\"} 1\n")
    );
    drop(new);
    let text = m.render();
    assert!(
        !text.contains("workqueue_depth{") && !text.contains("ruleop_cached_objects{"),
        "{text}"
    );
}

#[test]
fn the_in_flight_gauge_falls_when_the_reconcile_ends() {
    let m = Metrics::default();
    let guard = m.reconcile_started("db");
    assert!(
        m.render()
            .contains("controller_runtime_active_workers{controller=\"db\"} 1\n")
    );
    drop(guard);
    assert!(
        m.render()
            .contains("controller_runtime_active_workers{controller=\"db\"} 0\n")
    );
}
