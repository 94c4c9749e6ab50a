//! The filters and functions rules may call beyond minijinja's built-ins: `dig`, `fail`,
//! encodings and digests, `fromjson`, quantity and semver comparison, `product` (a `forEach`
//! over several dimensions), and a string derived from the parent's UID. Each is a pure function of its arguments (and the parent's UID), bounded by
//! its input, and fails with a message rather than guess.

use std::cmp::Ordering;
use std::hash::Hasher;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use sha2::{Digest, Sha256};

/// Most combinations `product` makes (a `forEach` then applies its own `maxItems`).
const MAX_PRODUCT: usize = 10_000;
/// Longest string `uid_string` makes.
const MAX_UID_STRING: usize = 64;
/// The characters of a `uid_string`: DNS-label safe.
const UID_STRING_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// Adds every filter and function of this module to `env`.
pub(crate) fn register(env: &mut Environment<'static>) {
    env.add_filter("dig", dig);
    env.add_function("fail", fail);
    env.add_filter("b64encode", b64encode);
    env.add_filter("b64decode", b64decode);
    env.add_filter("sha256", sha256);
    env.add_filter("fnv64a", fnv64a);
    env.add_filter("fromjson", fromjson);
    env.add_filter("quantity_compare", quantity_compare);
    env.add_filter("semver_compare", semver_compare);
    env.add_function("uid_string", uid_string);
    env.add_function("product", product);
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// `fail("why")`: ends rendering with this message (located at the template's line), for a
/// template that refuses a value rather than render it, e.g. a `system:` user name.
fn fail(message: String) -> Result<Value, Error> {
    Err(invalid(message))
}

/// `value | dig("a.b.0.c", default)`: a nested lookup that yields `default` (or none) where
/// strict mode would fail on a missing key, e.g. `children | dig("db.status.readyReplicas", 0)`.
/// A list path takes each key as it is, for keys with dots such as annotation names:
/// `metadata | dig(["annotations", "kro.run/reconcile"], "")`.
fn dig(value: Value, path: Value, default: Option<Value>) -> Result<Value, Error> {
    let segments: Vec<Value> = match path.kind() {
        ValueKind::String => path.as_str().unwrap_or_default().split('.').map(Value::from).collect(),
        ValueKind::Seq => path.try_iter()?.collect(),
        _ => return Err(invalid("dig takes a dotted path or a list of keys")),
    };
    let mut current = value;
    for segment in segments {
        let index = match segment.as_str() {
            Some(text) => text.parse::<usize>().ok(),
            None => segment.as_usize(),
        };
        let next = match index {
            Some(index) if current.kind() == ValueKind::Seq => current.get_item_by_index(index),
            _ => current.get_item(&segment),
        };
        match next {
            Ok(found) if !found.is_undefined() && !found.is_none() => current = found,
            _ => return Ok(default.unwrap_or_else(|| Value::from(()))),
        }
    }
    Ok(current)
}

/// `text | b64encode`: standard base64 with padding, as Secret `data` wants.
fn b64encode(text: &str) -> String {
    STANDARD.encode(text)
}

/// `text | b64decode`: the UTF-8 text that standard base64 `text` encodes.
fn b64decode(text: &str) -> Result<String, Error> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|e| invalid(format!("b64decode: not base64: {e}")))?;
    String::from_utf8(bytes).map_err(|_| invalid("b64decode: the decoded bytes are not UTF-8 text"))
}

/// `text | sha256`: the SHA-256 digest of the text, 64 lowercase hex digits.
fn sha256(text: &str) -> String {
    crate::engine::base::digest::sha256_hex(text.as_bytes())
}

/// `text | fnv64a`: the 64-bit FNV-1a hash of the text, 16 lowercase hex digits (short,
/// stable names: `{{ metadata.name }}-{{ spec.config | tojson | fnv64a }}`).
fn fnv64a(text: &str) -> String {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(text.as_bytes());
    format!("{:016x}", hasher.finish())
}

/// `text | fromjson`: the value a JSON document holds.
fn fromjson(text: &str) -> Result<Value, Error> {
    let parsed: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("fromjson: not JSON: {e}")))?;
    Ok(crate::engine::template::to_value(&parsed))
}

fn ordering(order: Ordering) -> i64 {
    match order {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

/// `a | quantity_compare(b)`: -1, 0 or 1 as Kubernetes quantity `a` is less than, equal to or
/// more than `b`: `spec.storage.size | quantity_compare("10Gi") > 0`. Numbers are quantities too.
fn quantity_compare(a: Value, b: Value) -> Result<i64, Error> {
    let parse = |v: &Value| {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
        kube_quantity::ParsedQuantity::try_from(text.as_str())
            .map_err(|e| invalid(format!("quantity_compare: {text:?} is not a quantity: {e}")))
    };
    Ok(ordering(parse(&a)?.cmp(&parse(&b)?)))
}

/// `a | semver_compare(b)`: -1, 0 or 1 by semantic-version precedence; a leading `v` is allowed
/// (`"v1.10.0" | semver_compare("1.9.3")` is 1).
fn semver_compare(a: &str, b: &str) -> Result<i64, Error> {
    let parse = |text: &str| {
        semver::Version::parse(text.trim().trim_start_matches('v'))
            .map_err(|e| invalid(format!("semver_compare: {text:?} is not a semantic version: {e}")))
    };
    Ok(ordering(parse(a)?.cmp_precedence(&parse(b)?)))
}

/// `product(region=spec.regions, tier=spec.tiers)`: every combination of the lists, one mapping
/// each (`{"region": "eu", "tier": "db"}`), the first dimension varying slowest: a `forEach`
/// over several dimensions, keyed with `key: "{{ item.region }}-{{ item.tier }}"`. At most
/// 10,000 combinations.
fn product(dimensions: Kwargs) -> Result<Value, Error> {
    let mut names = Vec::new();
    let mut lists: Vec<Vec<Value>> = Vec::new();
    for name in dimensions.args() {
        let list: Value = dimensions.get(name)?;
        if !matches!(list.kind(), ValueKind::Seq | ValueKind::Iterable) {
            return Err(invalid(format!("product: {name} is not a list")));
        }
        names.push(name.to_owned());
        lists.push(list.try_iter()?.collect());
    }
    if names.is_empty() {
        return Err(invalid(
            "product: name the dimensions, e.g. product(region=spec.regions, tier=spec.tiers)",
        ));
    }
    let count = lists
        .iter()
        .try_fold(1usize, |total, list| total.checked_mul(list.len()))
        .filter(|count| *count <= MAX_PRODUCT)
        .ok_or_else(|| invalid(format!("product: more than {MAX_PRODUCT} combinations")))?;
    let mut combinations = Vec::with_capacity(count);
    for mut index in 0..count {
        let mut picked = vec![Value::UNDEFINED; lists.len()];
        for (slot, list) in lists.iter().enumerate().rev() {
            picked[slot] = list[index % list.len()].clone();
            index /= list.len();
        }
        let combination: std::collections::BTreeMap<String, Value> = names.iter().cloned().zip(picked).collect();
        combinations.push(Value::from(combination));
    }
    Ok(Value::from(combinations))
}

/// `uid_string(length, salt="")`: `length` (at most 64) lowercase letters and digits derived
/// from the parent's UID and `salt`, the same on every reconcile of that parent and different
/// for every other. Anyone who can read the parent can compute it: a stable suffix, never a
/// secret.
fn uid_string(state: &State, length: usize, salt: Option<&str>) -> Result<String, Error> {
    if length == 0 || length > MAX_UID_STRING {
        return Err(invalid(format!("uid_string: length must be 1 to {MAX_UID_STRING}")));
    }
    let uid = state
        .lookup("metadata")
        .and_then(|m| m.get_attr("uid").ok())
        .and_then(|uid| uid.as_str().map(str::to_owned))
        .filter(|uid| !uid.is_empty())
        .ok_or_else(|| invalid("uid_string: the parent has no metadata.uid"))?;
    let mut out = String::with_capacity(length);
    let mut counter = 0u32;
    while out.len() < length {
        let block = Sha256::new()
            .chain_update(uid.as_bytes())
            .chain_update([0])
            .chain_update(salt.unwrap_or_default().as_bytes())
            .chain_update(counter.to_be_bytes())
            .finalize();
        out.extend(
            block
                .iter()
                .map(|b| char::from(UID_STRING_ALPHABET[usize::from(*b) % UID_STRING_ALPHABET.len()]))
                .take(length - out.len()),
        );
        counter += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::engine::template::{Renderer, to_value};

    fn eval(expression: &str, context: serde_json::Value) -> Result<String, String> {
        Renderer::default()
            .eval("test", expression, &to_value(&context))
            .map(|v| v.to_string())
            .map_err(|e| e.message)
    }

    fn ok(expression: &str) -> String {
        eval(expression, serde_json::json!({"metadata": {"uid": "3f0c"}})).expect("evaluates")
    }

    #[test]
    fn dig_reaches_nested_values_and_falls_back() {
        let ctx = serde_json::json!({"c": {"db": {"status": {"n": 3}, "list": [{"x": 1}]}}});
        assert_eq!(eval("c | dig('db.status.n', 0)", ctx.clone()).unwrap(), "3");
        assert_eq!(eval("c | dig('db.list.0.x')", ctx.clone()).unwrap(), "1");
        assert_eq!(eval("c | dig('db.missing.n', 0)", ctx.clone()).unwrap(), "0");
        assert_eq!(eval("c | dig('nope') is none", ctx).unwrap(), "True");
    }

    #[test]
    fn dig_with_a_list_path_keeps_keys_with_dots_and_slashes_whole() {
        let ctx = serde_json::json!({"metadata": {"annotations": {"kro.run/reconcile": "off"}, "list": [5, 6]}});
        let dotted = "metadata | dig('annotations.kro.run/reconcile', 'default')";
        assert_eq!(
            eval(dotted, ctx.clone()).unwrap(),
            "default",
            "a dotted path splits the key"
        );
        let listed = "metadata | dig(['annotations', 'kro.run/reconcile'], 'default')";
        assert_eq!(eval(listed, ctx.clone()).unwrap(), "off");
        assert_eq!(eval("metadata | dig(['list', 1])", ctx.clone()).unwrap(), "6");
        assert!(
            eval("metadata | dig(3)", ctx)
                .unwrap_err()
                .contains("dotted path or a list")
        );
    }

    #[test]
    fn encodings_and_digests_match_their_reference_values() {
        assert_eq!(ok("'hello' | b64encode"), "aGVsbG8=");
        assert_eq!(ok("'aGVsbG8=' | b64decode"), "hello");
        assert_eq!(
            ok("'' | sha256"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // FNV-1a 64 of "a" (the reference test vector).
        assert_eq!(ok("'a' | fnv64a"), "af63dc4c8601ec8c");
        let bad = eval("'%%%' | b64decode", serde_json::json!({})).unwrap_err();
        assert!(bad.contains("not base64"), "{bad}");
        let binary = eval("'/w==' | b64decode", serde_json::json!({})).unwrap_err();
        assert!(binary.contains("not UTF-8"), "{binary}");
    }

    #[test]
    fn fromjson_gives_structure_and_refuses_what_is_not_json() {
        assert_eq!(ok("('{\"a\": [1, 2]}' | fromjson).a[1]"), "2");
        assert!(
            eval("'{' | fromjson", serde_json::json!({}))
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn quantities_and_versions_compare_by_meaning_not_by_text() {
        assert_eq!(ok("'1Gi' | quantity_compare('1000Mi')"), "1");
        assert_eq!(ok("'500m' | quantity_compare('0.5')"), "0");
        assert_eq!(ok("'2' | quantity_compare(3)"), "-1");
        assert_eq!(ok("'v1.10.0' | semver_compare('1.9.3')"), "1");
        assert_eq!(ok("'1.0.0-rc.1' | semver_compare('1.0.0')"), "-1");
        let bad = eval("'lots' | quantity_compare('1Gi')", serde_json::json!({})).unwrap_err();
        assert!(bad.contains("not a quantity"), "{bad}");
        let bad = eval("'1.x' | semver_compare('1.0.0')", serde_json::json!({})).unwrap_err();
        assert!(bad.contains("not a semantic version"), "{bad}");
    }

    #[test]
    fn product_gives_every_combination_first_dimension_slowest_and_is_bounded() {
        let ctx = serde_json::json!({"spec": {"regions": ["eu", "us"], "tiers": ["db", "web", "cache"]}});
        let keys = "product(region=spec.regions, tier=spec.tiers) | map(attribute='region') | join(',')";
        assert_eq!(eval(keys, ctx.clone()).unwrap(), "eu,eu,eu,us,us,us");
        let tiers = "product(region=spec.regions, tier=spec.tiers) | map(attribute='tier') | join(',')";
        assert_eq!(eval(tiers, ctx.clone()).unwrap(), "db,web,cache,db,web,cache");
        assert_eq!(
            eval("product(r=spec.regions, empty=[]) | length", ctx.clone()).unwrap(),
            "0"
        );
        assert!(
            eval("product(r=spec.regions, t='db')", ctx.clone())
                .unwrap_err()
                .contains("not a list")
        );
        let huge = "product(a=range(200), b=range(200))";
        assert!(eval(huge, ctx).unwrap_err().contains("more than 10000"));
    }

    #[test]
    fn uid_string_is_stable_per_parent_and_salt_and_differs_otherwise() {
        let first = ok("uid_string(12)");
        assert_eq!(first.len(), 12);
        assert!(
            first.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
            "{first}"
        );
        assert_eq!(ok("uid_string(12)"), first, "stable across renders");
        assert_ne!(ok("uid_string(12, 'db')"), first, "the salt changes it");
        let other = eval("uid_string(12)", serde_json::json!({"metadata": {"uid": "77aa"}})).unwrap();
        assert_ne!(other, first, "another parent gets another string");
        assert_eq!(ok("uid_string(64)").len(), 64);
        assert!(eval("uid_string(65)", serde_json::json!({"metadata": {"uid": "u"}})).is_err());
        assert!(
            eval("uid_string(8)", serde_json::json!({}))
                .unwrap_err()
                .contains("no metadata.uid")
        );
    }
}
