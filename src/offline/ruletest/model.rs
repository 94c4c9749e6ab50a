//! The test file format: serde types for `kind: RuleTest` documents, with a JSON Schema derived
//! from them (committed as `schema/ruletest.schema.json`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::rules::model::Located;

/// The kind of test documents (their apiVersion is the rules' `ruleop.io/v1alpha1`).
pub(crate) const RULE_TEST_KIND: &str = "RuleTest";

/// A set of test cases for the rules, each planning one parent offline and checking the plan.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "ruleop RuleTest")]
pub(crate) struct RuleTestDocument {
    /// Must be `ruleop.io/v1alpha1`.
    #[schemars(with = "String")]
    pub api_version: Located<String>,
    /// Must be `RuleTest`.
    #[schemars(with = "String")]
    pub kind: Located<String>,
    /// Names the test set (shown in JUnit output as the suite name).
    pub metadata: TestMetadata,
    /// The cases.
    pub spec: TestSpec,
}

/// Identifies a test set.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestMetadata {
    /// Any name.
    pub name: String,
}

/// The cases of a test set.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestSpec {
    /// The cases, run in order; each is independent of the others.
    pub cases: Vec<TestCase>,
}

/// One parent, what the cluster holds around it, and what the plan must say.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TestCase {
    /// A sentence saying what the case shows; printed with PASS or FAIL.
    #[schemars(with = "String")]
    pub name: Located<String>,
    /// The parent object, inline. A missing uid, namespace or generation gets a placeholder
    /// (as in `ruleop render`). Exactly one of `parent` and `parentFile`.
    #[serde(default)]
    pub parent: Option<Value>,
    /// The parent object from a YAML file, relative to this test file.
    #[serde(default)]
    pub parent_file: Option<String>,
    /// Merged into the parent (JSON merge patch) before planning: a variation of `parentFile`
    /// without a second file (say `{spec: {replicas: 0}}`).
    #[serde(default)]
    pub parent_patch: Option<Value>,
    /// Live children of the parent. Objects without ruleop labels are matched to the rule's
    /// first child id of their kind (as in `ruleop render --observed`).
    #[serde(default)]
    pub observed: Vec<Value>,
    /// Objects the rule's lookups may read (matched by apiVersion, kind, name and, when set,
    /// namespace); a lookup with no object here reads none.
    #[serde(default)]
    pub lookups: Vec<Value>,
    /// Time stamped on changed conditions and action records (RFC 3339; default
    /// `2026-01-01T00:00:00Z`, so results do not depend on the clock).
    #[serde(default)]
    pub now: Option<String>,
    /// Whether the parent is first checked against its kind's CRD and defaulted, as the API
    /// server does (default `true`, when the CRD is known: `--crds`). `false` plans it as if the
    /// kind had no CRD: for cases that show the engine's own guards, which hold whatever the
    /// CRD allows.
    #[serde(default = "yes")]
    pub crd_admission: bool,
    /// What the plan must say.
    pub expect: Expectations,
}

fn yes() -> bool {
    true
}

/// What the plan must say. Every part is optional; an empty `expect` only checks that the
/// parent plans without an error.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Expectations {
    /// Children that must be desired, each matched as a subset (see `ChildExpectation`).
    #[serde(default)]
    pub children: Vec<ChildExpectation>,
    /// Children that must not be desired (a `when` that is false, a waiting child).
    #[serde(default)]
    pub absent: Vec<ObjectSelector>,
    /// The number of desired children of each kind, e.g. `{Service: 1, StatefulSet: 0}`.
    #[serde(default)]
    pub counts: BTreeMap<String, usize>,
    /// Observed children that must be pruned (exactly these, when given).
    #[serde(default)]
    pub prune: Option<Vec<ObjectSelector>>,
    /// Child ids held back by `dependsOn` (exactly these, when given).
    #[serde(default)]
    pub waiting: Option<Vec<String>>,
    /// Action decisions by action id.
    #[serde(default)]
    pub actions: BTreeMap<String, ActionExpectation>,
    /// A subset of the parent's status after the plan's status patch (conditions are matched
    /// by `type`), e.g. `{endpoint: ..., conditions: [{type: Ready, status: "False"}]}`.
    #[serde(default)]
    pub status: Option<Value>,
    /// What happens to the parent's `ruleop.io/cleanup` finalizer: `add`, `remove` or
    /// `unchanged`.
    #[serde(default)]
    pub finalizer: Option<FinalizerExpectation>,
    /// For a parent being deleted: texts that must each appear in what holds the deletion
    /// (`[]`: nothing holds it).
    #[serde(default)]
    pub deletion_waiting: Option<Vec<String>>,
    /// The plan must fail with this error (the parent would get `Ready=False`).
    #[serde(default)]
    pub error: Option<ErrorExpectation>,
}

/// Picks a desired or observed object.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ObjectSelector {
    /// Kind, e.g. `Service`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace, when same-named objects live in several (default: any).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// A child that must be desired.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ChildExpectation {
    /// Kind, e.g. `Service`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace, to tell apart same-named children in different namespaces (default: any;
    /// `""` for a cluster-scoped child).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The child's id in the rule, when it matters.
    #[serde(default)]
    pub id: Option<String>,
    /// A subset of the rendered object: every field given must be there with this value;
    /// lists are matched by their Kubernetes merge key (containers and env by `name`, Service
    /// ports by `port`, conditions by `type`, ...), other lists item by item; `null` means the
    /// field must be absent.
    #[serde(default)]
    pub fields: Option<Value>,
}

/// An action's decision.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ActionExpectation {
    /// Whether the action runs in this reconcile.
    pub run: bool,
    /// Text the decision's reason must contain (for a skip: why).
    #[serde(default)]
    pub reason: Option<String>,
    /// A subset of what a run would do (the object created, or the HTTP request with `url`,
    /// `method`, `headers`, `body`).
    #[serde(default)]
    pub effect: Option<Value>,
}

/// An error the plan must fail with.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ErrorExpectation {
    /// Text the error message must contain.
    pub contains: String,
    /// Where it must be reported: the start of the error's location, e.g.
    /// `database/service.yaml.j2:4` (template and line) or `rules/app.yaml:12` (a `forEach`).
    #[serde(default)]
    pub at: Option<String>,
    /// The `Ready=False` reason, e.g. `RenderFailed`, `InvalidChild`, `InvalidForEach`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a reconcile does with the parent's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FinalizerExpectation {
    /// Added before any child is applied.
    Add,
    /// Removed: the deletion completes.
    Remove,
    /// Left as it is.
    Unchanged,
}
