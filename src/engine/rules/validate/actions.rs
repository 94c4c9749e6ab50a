//! The actions: unique ids, `on` and its guard (one of generation, condition, annotation,
//! schedule; none for `on: delete`), `create` or `http` (inline templates, headers from
//! Secrets, timeout, `allowedHosts`), `when`, `waitFor` and `timeout`.

use std::collections::BTreeMap;

use super::RuleChecker;
use crate::engine::base::k8s_names;
use crate::engine::base::schedule::Schedule;
use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::model::{ActionSpec, ActionTrigger, HeaderValue, RuleSpec, SecretKeyRef};
use crate::engine::{duration, egress};

impl RuleChecker<'_> {
    /// Every action, in order.
    pub(super) fn check_actions(&mut self, name: &str, spec: &RuleSpec) {
        let mut action_ids = BTreeMap::new();
        for action in &spec.actions {
            self.check_id(&action.id, "action", &mut action_ids);
            self.check_action(name, action);
        }
    }

    fn check_action(&mut self, rule: &str, action: &ActionSpec) {
        let at = self.at(&action.id);
        let id = &action.id.value;
        let guards = usize::from(action.guard.generation)
            + usize::from(action.guard.condition.is_some())
            + usize::from(action.guard.annotation.is_some())
            + usize::from(action.guard.schedule.is_some());
        match action.on {
            ActionTrigger::Reconcile => {
                if guards != 1 {
                    self.report(
                        at.clone(),
                        format!(
                            "action {id:?}: guard must set exactly one of generation, condition, annotation, schedule (found {guards})"
                        ),
                        Some("e.g. guard: {generation: true}"),
                    );
                }
                self.check_schedule(rule, action);
                for (field, set) in [
                    ("waitFor", action.wait_for.is_some()),
                    ("timeout", action.timeout.is_some()),
                ] {
                    if set {
                        self.report(
                            at.clone(),
                            format!("action {id:?}: {field} applies only to `on: delete` actions"),
                            Some("add `on: delete`, or remove the field"),
                        );
                    }
                }
            }
            ActionTrigger::Delete => self.check_delete_action(action, guards),
        }
        match (&action.create, &action.http) {
            (Some(create), None) => self.check_template_exists(&create.template),
            (None, Some(http)) => {
                self.compile_inline(
                    rule,
                    &format!("actions.{id}.http.url"),
                    &http.url.value,
                    self.at(&http.url),
                );
                if let Some(body) = &http.body {
                    self.compile_inline(rule, &format!("actions.{id}.http.body"), &body.value, self.at(body));
                }
                for (header, value) in &http.headers {
                    match value {
                        HeaderValue::Template(template) => {
                            self.compile_inline(
                                rule,
                                &format!("actions.{id}.http.headers.{header}"),
                                template,
                                at.clone(),
                            );
                        }
                        HeaderValue::FromSecret(from) => {
                            self.check_secret_header(&at, id, header, &from.value_from.secret_key_ref)
                        }
                    }
                }
                if let Some(timeout) = &http.timeout {
                    match duration::parse_at_least(timeout, std::time::Duration::from_millis(1)) {
                        Err(e) => self.report(at.clone(), format!("action {id:?}: http.timeout: {e}"), None),
                        Ok(t) if t > egress::MAX_TIMEOUT => self.report(
                            at.clone(),
                            format!("action {id:?}: http.timeout {timeout} is longer than the 30s maximum"),
                            None,
                        ),
                        Ok(_) => {}
                    }
                }
                if http.allowed_hosts.is_empty() {
                    self.report(
                        self.at(&http.url),
                        format!("action {id:?}: http needs allowedHosts: the hosts its url may reach"),
                        Some("e.g. allowedHosts: [hooks.example.com] (https on 443), or \"http://127.0.0.1:8080\" verbatim"),
                    );
                }
                for entry in &http.allowed_hosts {
                    if let Err(e) = egress::AllowedHost::parse(&entry.value) {
                        self.report(
                            self.at(entry),
                            format!("action {id:?}: http.allowedHosts entry {:?}: {e}", entry.value),
                            Some("an entry is [http://]host[:port], *.domain, an IP address or localhost"),
                        );
                    }
                }
            }
            _ => self.report(
                at.clone(),
                format!("action {id:?}: set exactly one of create, http"),
                None,
            ),
        }
        if let Some(when) = &action.when {
            self.check_expression(when, &format!("actions.{id}.when"));
        }
    }

    /// `guard.schedule`, `timeZone` and `startingDeadline`: a valid expression and zone, and
    /// the other two only beside a schedule.
    fn check_schedule(&mut self, rule: &str, action: &ActionSpec) {
        let (at, id, guard) = (self.at(&action.id), &action.id.value, &action.guard);
        let Some(expression) = &guard.schedule else {
            for (field, set) in [
                ("timeZone", guard.time_zone.is_some()),
                ("startingDeadline", guard.starting_deadline.is_some()),
            ] {
                if set {
                    self.report(
                        at.clone(),
                        format!("action {id:?}: guard.{field} applies only to guard.schedule"),
                        Some("add guard.schedule, or remove the field"),
                    );
                }
            }
            return;
        };
        if crate::engine::template::is_template(expression) {
            // Rendered per parent (`"{{ spec.backup.schedule }}"`), checked when rendered.
            self.compile_inline(rule, &format!("actions.{id}.guard.schedule"), expression, at.clone());
        } else if let Err(message) = Schedule::parse(expression, guard.time_zone.as_deref()) {
            self.report(
                at.clone(),
                format!("action {id:?}: guard: {message}"),
                Some("minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\" (03:00 daily)"),
            );
        }
        if let Some(deadline) = &guard.starting_deadline
            && let Err(e) = duration::parse(deadline)
        {
            self.report(
                at,
                format!("action {id:?}: guard.startingDeadline {deadline:?}: {e}"),
                Some("e.g. startingDeadline: 1h"),
            );
        }
    }

    /// A header read from a Secret names it with constants the API server would accept: the
    /// parent's author must not choose which Secret is read.
    fn check_secret_header(&mut self, at: &SourceLocation, id: &str, header: &str, reference: &SecretKeyRef) {
        let secret = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": reference.name}, "data": {&reference.key: ""},
        });
        let namespace = reference
            .namespace
            .as_ref()
            .map(|ns| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        let problems = [
            k8s_names::check_name(&secret).err(),
            k8s_names::check_keys(&secret, true).err(),
            namespace.and_then(|ns| k8s_names::check_name(&ns).err()),
        ];
        for problem in problems.into_iter().flatten() {
            self.report(
                at.clone(),
                format!("action {id:?}: http.headers.{header}.valueFrom.secretKeyRef: {problem}"),
                Some("name, key and namespace are constants (not templates), e.g. {name: hook-token, key: token, namespace: platform}"),
            );
        }
    }

    /// An `on: delete` action runs once per deletion: no guard; `waitFor` reads the created
    /// object, so it needs `create`.
    fn check_delete_action(&mut self, action: &ActionSpec, guards: usize) {
        let at = self.at(&action.id);
        let id = &action.id.value;
        if guards != 0 {
            self.report(
                at.clone(),
                format!("action {id:?}: an `on: delete` action takes no guard (it runs once per deletion)"),
                Some("remove `guard`"),
            );
        }
        if let Some(wait_for) = &action.wait_for {
            if action.create.is_none() {
                self.report(
                    self.at(wait_for),
                    format!("action {id:?}: waitFor reads the created `object`, so it needs `create`"),
                    None,
                );
            }
            self.check_expression(wait_for, &format!("actions.{id}.waitFor"));
        }
        // `timeout` bounds the whole run, `waitFor` or not: a run that keeps failing holds the
        // deletion no longer than it either.
        if let Some(timeout) = &action.timeout
            && let Err(e) = duration::parse(&timeout.value)
        {
            self.report(self.at(timeout), format!("action {id:?}: timeout: {e}"), None);
        }
    }
}
