//! The shipped Tenant rule against the real control plane: a Namespace with a quota, limits and
//! one RoleBinding per member; members removed and reordered; deletion through the finalizer;
//! the looked-up platform defaults updating every Tenant's quota (latency measured); a Tenant
//! outside the platform namespace gets nothing, and a system: member is refused.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::metrics::percentile;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(90);

/// The tests count the API server's writes of these resources: one at a time.
static ALONE: Mutex<()> = Mutex::new(());

/// Namespaced child resources, counted at the API server. Namespaces are left out there: the
/// namespace controller writes them while earlier tests' namespaces terminate; ruleop's own
/// counter covers them.
const CHILD_RESOURCES: &[&str] = &["resourcequotas", "limitranges", "rolebindings"];

/// The shipped rules with the Tenant rule's platform namespace replaced by the test's own.
fn rules_for(ns: &Namespace) -> tempfile::TempDir {
    let pinned = format!("namespaces: [{}]", ns.0);
    let rules = rules_dir(|text| text.replace("namespaces: [platform]", &pinned));
    let tenant = std::fs::read_to_string(rules.path().join("tenant.yaml")).expect("tenant rule");
    assert!(
        tenant.contains(&pinned),
        "the shipped Tenant rule is pinned to platform"
    );
    rules
}

fn defaults(cpu: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-defaults\ndata:\n  cpu: \"{cpu}\"\n  memory: 8Gi\n  pods: \"20\"\n  defaultCpu: 250m\n  defaultMemory: 256Mi\n"
    )
}

fn tenant(name: &str, members: &[&str]) -> String {
    let members: String = members
        .iter()
        .map(|m| format!("    - {{name: {m}, role: edit}}\n"))
        .collect();
    format!("apiVersion: myorg.io/v1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  members:\n{members}")
}

/// A Tenant name unique to this test run (Namespaces are cluster-wide).
fn unique(ns: &Namespace, suffix: &str) -> String {
    let tail = ns.0.rsplit('-').next().unwrap_or("x");
    format!("{suffix}-{tail}")
}

/// `name -> uid` of the RoleBindings in a namespace.
fn role_bindings(ns: &str) -> BTreeMap<String, String> {
    kubectl_ok(&[
        "get",
        "rolebindings",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .map(|(n, u)| (n.to_owned(), u.to_owned()))
    .collect()
}

fn child_writes(operator: &Operator) -> u64 {
    ["Namespace", "ResourceQuota", "LimitRange", "RoleBinding"]
        .iter()
        .map(|kind| operator.metric("ruleop_api_writes_total", &[("kind", kind)]))
        .sum()
}

#[test]
fn a_tenant_gets_its_namespace_quota_and_members_and_takes_them_along_when_deleted() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("tn-life");
    apply_yaml(&ns.0, &defaults("4"));
    let rules = rules_for(&ns);
    let operator = Operator::start(rules.path(), &templates(), &ns.0);
    let name = unique(&ns, "life");
    let home = format!("tenant-{name}");
    apply_yaml(&ns.0, &tenant(&name, &["alice", "bob", "carol"]));
    wait_until(WAIT, "the Namespace, quota, limits and three RoleBindings", || {
        role_bindings(&home).len() == 3
            && get(&home, "resourcequota/tenant-quota", "{.spec.hard.requests\\.cpu}") == "4"
            && exists(&home, "limitrange/tenant-limits")
    });
    assert_eq!(get(&ns.0, &format!("namespace/{home}"), "{.status.phase}"), "Active");
    wait_until(WAIT, "Ready", || {
        get(
            &ns.0,
            &format!("tenant/{name}"),
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        ) == "True"
    });
    assert!(has_cleanup_finalizer(&ns.0, &format!("tenant/{name}")));
    let before = role_bindings(&home);

    apply_yaml(&ns.0, &tenant(&name, &["alice", "carol"]));
    wait_until(WAIT, "bob's RoleBinding to be pruned", || {
        role_bindings(&home).len() == 2
    });
    let after = role_bindings(&home);
    assert_eq!(
        after,
        before
            .iter()
            .filter(|(n, _)| *n != "member-bob")
            .map(|(n, u)| (n.clone(), u.clone()))
            .collect(),
        "exactly bob's RoleBinding went; the others are the same objects"
    );

    // Reorder: wait until the reconcile of the new generation has run, then count writes.
    let seen = get(&ns.0, &format!("tenant/{name}"), "{.metadata.generation}");
    let (mark, ours_before) = (audit::AuditMark::now(), child_writes(&operator));
    apply_yaml(&ns.0, &tenant(&name, &["carol", "alice"]));
    wait_until(WAIT, "the reordered Tenant to be observed", || {
        let generation = get(&ns.0, &format!("tenant/{name}"), "{.metadata.generation}");
        generation != seen && get(&ns.0, &format!("tenant/{name}"), "{.status.observedGeneration}") == generation
    });
    let api = mark.ruleop_writes(&home, CHILD_RESOURCES).len();
    let ours = child_writes(&operator) - ours_before;
    eprintln!("reorder: {api} child writes seen by the API server, {ours} sent by ruleop");
    assert_eq!((api, ours), (0, 0), "reordering members writes no child");
    assert_eq!(role_bindings(&home), after);

    let deletion = audit::AuditMark::now();
    kubectl_ok(&["delete", "-n", &ns.0, &format!("tenant/{name}"), "--wait=false"]);
    let gone = wait_until(WAIT, "the Tenant to be gone", || {
        !exists(&ns.0, &format!("tenant/{name}"))
    });
    let empty = wait_until(WAIT, "its Namespace and everything in it to be gone", || {
        !exists(&ns.0, &format!("namespace/{home}"))
    });
    eprintln!("Tenant gone after {gone:?}, its Namespace after {empty:?} more");
    // Reverse dependsOn order: the members (which depend on the Namespace) are deleted by
    // ruleop first, the Namespace after them.
    let deletes: Vec<audit::AuditedWrite> = deletion
        .ruleop_requests()
        .into_iter()
        .filter(|w| w.verb == "delete" && !w.dry_run)
        .filter(|w| w.object == home || w.object.starts_with(&format!("{home}/")))
        .collect();
    let namespace_at = deletes.iter().position(|w| w.resource == "namespaces");
    let members: Vec<usize> = (0..deletes.len())
        .filter(|i| deletes[*i].resource == "rolebindings")
        .collect();
    assert!(
        namespace_at.is_some() && !members.is_empty() && members.iter().all(|m| Some(*m) < namespace_at),
        "members deleted before their Namespace:\n{}",
        audit::listing(&deletes)
    );
}

#[test]
fn editing_the_platform_defaults_updates_every_tenants_quota() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("tn-defaults");
    apply_yaml(&ns.0, &defaults("4"));
    let rules = rules_for(&ns);
    let operator = Operator::start(rules.path(), &templates(), &ns.0);
    const TENANTS: usize = 50;
    let names: Vec<String> = (0..TENANTS).map(|i| unique(&ns, &format!("d{i:02}"))).collect();
    let manifests: String = names
        .iter()
        .map(|n| format!("---\n{}", tenant(n, &["alice"])))
        .collect();
    apply_yaml(&ns.0, &manifests);
    let quotas = || -> BTreeMap<String, String> {
        kubectl_ok(&[
            "get",
            "resourcequotas",
            "-A",
            "-l",
            "ruleop.io/rule=tenant",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace} {.spec.hard.requests\\.cpu}{\"\\n\"}{end}",
        ])
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(n, _)| {
            names
                .iter()
                .any(|name| n.strip_prefix("tenant-") == Some(name.as_str()))
        })
        .map(|(n, c)| (n.to_owned(), c.to_owned()))
        .collect()
    };
    let start = Instant::now();
    wait_until(Duration::from_secs(180), "every Tenant's quota", || {
        let q = quotas();
        q.len() == TENANTS && q.values().all(|c| c == "4")
    });
    eprintln!("{TENANTS} Tenants converged in {:?}", start.elapsed());

    let mut per_tenant = Vec::new();
    let mut all_updated = Vec::new();
    for cpu in ["5", "6", "7", "8", "9"] {
        let edited = Instant::now();
        apply_yaml(&ns.0, &defaults(cpu));
        let mut updated: BTreeMap<String, Duration> = BTreeMap::new();
        while updated.len() < TENANTS {
            assert!(
                edited.elapsed() < WAIT,
                "quotas not updated after {WAIT:?}: {updated:?}"
            );
            for (tenant_ns, value) in quotas() {
                if value == cpu {
                    updated.entry(tenant_ns).or_insert_with(|| edited.elapsed());
                }
            }
        }
        all_updated.push(edited.elapsed());
        per_tenant.extend(updated.into_values());
    }
    per_tenant.sort();
    all_updated.sort();
    eprintln!(
        "defaults edit -> quota updated, {TENANTS} Tenants x {} edits (kubectl polling, ~0.1 s resolution): \
         per Tenant p50 {:?} p95 {:?}; all {TENANTS} updated p50 {:?} p95 {:?} max {:?}",
        all_updated.len(),
        percentile(&per_tenant, 50.0).unwrap_or_default(),
        percentile(&per_tenant, 95.0).unwrap_or_default(),
        percentile(&all_updated, 50.0).unwrap_or_default(),
        percentile(&all_updated, 95.0).unwrap_or_default(),
        all_updated[all_updated.len() - 1],
    );
    assert!(
        operator.metric("ruleop_api_writes_total", &[("kind", "RoleBinding")]) <= TENANTS as u64,
        "an edit of the defaults rewrites quotas, not RoleBindings"
    );

    kubectl_ok(&["delete", "tenants", "--all", "-n", &ns.0, "--wait=false"]);
    wait_until(Duration::from_secs(180), "every Tenant to be gone", || {
        get(&ns.0, "tenants", "{.items[*].metadata.name}").is_empty()
    });
}

#[test]
fn sigkill_in_the_middle_of_tenant_cleanup_leaks_no_namespace_and_leaves_no_tenant_stuck() {
    let mut timings =
        RandomTimings::new("sigkill_in_the_middle_of_tenant_cleanup_leaks_no_namespace_and_leaves_no_tenant_stuck");
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    let ns = Namespace::new("tn-kill");
    apply_yaml(&ns.0, &defaults("4"));
    let rules = rules_for(&ns);
    let mut kills = 0;
    for round in 0..3 {
        let names: Vec<String> = (0..5).map(|i| unique(&ns, &format!("k{round}{i}"))).collect();
        let manifests: String = names
            .iter()
            .map(|n| format!("---\n{}", tenant(n, &["alice", "bob"])))
            .collect();
        apply_yaml(&ns.0, &manifests);
        let operator = Operator::start(rules.path(), &templates(), &ns.0);
        wait_until(WAIT, "every Tenant's RoleBindings", || {
            names.iter().all(|n| role_bindings(&format!("tenant-{n}")).len() == 2)
        });
        // Delete while ruleop is down (the finalizer holds them), then kill the restarted one
        // in the middle of the cleanup.
        operator.kill();
        let mut args = vec!["delete", "-n", ns.0.as_str(), "--wait=false"];
        let targets: Vec<String> = names.iter().map(|n| format!("tenant/{n}")).collect();
        args.extend(targets.iter().map(String::as_str));
        kubectl_ok(&args);
        let operator = Operator::start(rules.path(), &templates(), &ns.0);
        std::thread::sleep(Duration::from_millis(timings.below(1500)));
        operator.kill();
        kills += 2;
        let left = names.iter().filter(|n| exists(&ns.0, &format!("tenant/{n}"))).count();
        let _operator = Operator::start(rules.path(), &templates(), &ns.0);
        wait_until(WAIT, "every Tenant to be gone", || {
            names.iter().all(|n| !exists(&ns.0, &format!("tenant/{n}")))
        });
        for name in &names {
            let home = format!("tenant-{name}");
            let leaked: Vec<_> = namespaces_named(&home)
                .into_iter()
                .filter(|(n, ts)| *n == home && ts.is_empty())
                .collect();
            assert!(leaked.is_empty(), "leaked: {leaked:?}");
        }
        eprintln!("round {round}: {left}/5 Tenants left when ruleop was killed; none stuck, no Namespace leaked");
    }
    eprintln!("{kills} SIGKILLs");
}

#[test]
fn a_tenant_outside_the_platform_namespace_gets_no_namespace_and_no_role_bindings() {
    let _alone = ALONE.lock().unwrap_or_else(|p| p.into_inner());
    install_crds();
    // The shipped rules as they are: Tenants are reconciled in `platform` only.
    let ns = Namespace::new("tn-elsewhere");
    apply_yaml(&ns.0, &defaults("4"));
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    let name = unique(&ns, "rogue");
    apply_yaml(&ns.0, &tenant(&name, &["mallory"]));
    // A Database created after it is reconciled: the Tenant had its chance.
    apply_yaml(&ns.0, &database("sentinel", 0, ""));
    wait_until(WAIT, "the sentinel Database's Service", || {
        exists(&ns.0, "service/sentinel-svc")
    });
    operator.idle_reconciles("database");
    assert!(
        !exists(&ns.0, &format!("namespace/tenant-{name}")),
        "a Tenant outside platform got a Namespace"
    );
}

#[test]
fn a_system_member_is_refused_by_the_tenant_crd() {
    install_crds();
    let ns = Namespace::new("tn-system");
    let out = kubectl_with_stdin(
        &["apply", "-n", &ns.0, "-f", "-"],
        Some(&tenant("sneaky", &["\"system:masters\""])),
    );
    assert!(!out.status.success(), "a Tenant with a system: member was accepted");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.members[0].name"), "{stderr}");
}
