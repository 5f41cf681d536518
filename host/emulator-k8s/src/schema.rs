//! Structural schema validation of custom resources against a CRD version's
//! `openAPIV3Schema`: types, `required`, `enum`, bounds, `pattern`, `format`,
//! validation rules (`x-kubernetes-validations`, in [`rules`]), and unknown fields
//! (rejected under `fieldValidation=Strict`, pruned otherwise — custom resources never
//! keep fields their schema does not declare, unless
//! `x-kubernetes-preserve-unknown-fields`).

mod format;
mod rules;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use regex::Regex;
use serde_json::{Map, Value};

use crate::status::Cause;

/// What validation found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Schema violations: the object is Invalid (422).
    pub(crate) causes: Vec<Cause>,
    /// Paths of fields the schema does not declare (pruned from the object).
    pub(crate) unknown: Vec<String>,
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// Validate `object` (a whole custom resource) against `schema`, pruning unknown fields;
/// `old` is the stored object an update replaces, for transition rules.
pub(crate) fn validate(schema: &Value, object: &mut Value, old: Option<&Value>) -> Findings {
    let mut findings = Findings::default();
    let Some(map) = object.as_object_mut() else {
        findings.causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: must be an object".into(),
            field: String::new(),
        });
        return findings;
    };
    // apiVersion, kind and metadata are the server's; validate the rest.
    let props = schema.get("properties").and_then(Value::as_object);
    apply_defaults(props, map);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) && !matches!(r, "apiVersion" | "kind" | "metadata") {
                findings.causes.push(required_cause(r));
            }
        }
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                let value = map.get_mut(&key).expect("key listed above");
                node(
                    sub,
                    value,
                    old.and_then(|o| o.get(&key)),
                    &key,
                    &mut findings,
                );
            }
            None if flag(schema, "x-kubernetes-preserve-unknown-fields") => {}
            None => {
                findings.unknown.push(key.clone());
                map.remove(&key);
            }
        }
    }
    if schema.get("x-kubernetes-validations").is_some() {
        let old = old.map(root_for_rules);
        rules::check(
            schema,
            &root_for_rules(object),
            old.as_ref(),
            "",
            &mut findings.causes,
        );
    }
    findings
}

/// What a rule at a resource's root sees: the object, with only the name and
/// generateName of its metadata.
fn root_for_rules(object: &Value) -> Value {
    let mut seen = object.clone();
    if let Some(meta) = seen.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "generateName"));
    }
    seen
}

/// Structural defaulting: a missing property with a `default` gets it.
fn apply_defaults(props: Option<&Map<String, Value>>, map: &mut Map<String, Value>) {
    for (key, sub) in props.into_iter().flatten() {
        if let Some(default) = sub.get("default")
            && !map.contains_key(key)
        {
            map.insert(key.clone(), default.clone());
        }
    }
}

fn required_cause(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}

fn invalid(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message,
        field: field.into(),
    }
}

fn node(
    schema: &Value,
    value: &mut Value,
    old: Option<&Value>,
    path: &str,
    findings: &mut Findings,
) {
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() {
            // A null for a non-nullable field is dropped, as the API server does.
            *value = Value::Null;
        }
        return;
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    if int_or_string {
        if !matches!(type_name(value), "integer" | "string") {
            findings.causes.push(invalid(
                path,
                format!(
                    "Invalid value: {}: {path} in body must be of type integer-or-string: {}",
                    short(value),
                    short(&Value::String(type_name(value).into()))
                ),
            ));
        } else {
            bounds(schema, value, path, findings);
            rules::check(schema, value, old, path, &mut findings.causes);
        }
        return;
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == expected || (expected == "number" && actual == "integer");
        if !ok {
            findings.causes.push(invalid(
                path,
                format!(
                    "Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
                ),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(short).collect();
        findings.causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                short(value),
                list.join(", ")
            ),
            field: path.into(),
        });
    }
    bounds(schema, value, path, findings);
    rules::check(schema, value, old, path, &mut findings.causes);
    match value {
        Value::Object(map) => object(schema, map, old, path, findings),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    let old_item = old.and_then(|o| correlated_item(schema, o, item));
                    node(
                        item_schema,
                        item,
                        old_item,
                        &format!("{path}[{i}]"),
                        findings,
                    );
                }
            }
        }
        _ => {}
    }
}

/// The stored item a list item replaces, where the API server correlates
/// them: only in lists of `x-kubernetes-list-type: map`, by their keys.
fn correlated_item<'old>(schema: &Value, old: &'old Value, item: &Value) -> Option<&'old Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old.as_array()?
        .iter()
        .find(|candidate| keys.iter().all(|k| candidate.get(k) == item.get(k)))
}

/// Patterns compiled once each: a kind's few patterns run on every write.
static PATTERNS: LazyLock<Mutex<HashMap<String, Option<Regex>>>> = LazyLock::new(Mutex::default);

/// Whether `text` matches `pattern` (RE2 syntax, which `regex` shares); a
/// pattern that does not compile matches nothing, as the CRD would have been
/// refused upstream.
fn matches(pattern: &str, text: &str) -> bool {
    let mut patterns = PATTERNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    patterns
        .entry(pattern.to_string())
        .or_insert_with(|| Regex::new(pattern).ok())
        .as_ref()
        .is_some_and(|re| re.is_match(text))
}

fn bounds(schema: &Value, value: &Value, path: &str, findings: &mut Findings) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(x) = value.as_f64() {
        if let Some(min) = num("minimum")
            && x < min
        {
            findings.causes.push(invalid(
                path,
                format!("Invalid value: {value}: {path} in body should be greater than or equal to {min}"),
            ));
        }
        if let Some(max) = num("maximum")
            && x > max
        {
            findings.causes.push(invalid(
                path,
                format!(
                    "Invalid value: {value}: {path} in body should be less than or equal to {max}"
                ),
            ));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as f64;
        if let Some(min) = num("minLength")
            && len < min
        {
            findings.causes.push(invalid(
                path,
                format!(
                    "Invalid value: \"{s}\": {path} in body should be at least {min} chars long"
                ),
            ));
        }
        if let Some(max) = num("maxLength")
            && len > max
        {
            findings.causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: format!("Too long: may not be more than {max} bytes"),
                field: path.into(),
            });
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            && !matches(pattern, s)
        {
            findings.causes.push(invalid(
                path,
                format!("Invalid value: \"{s}\": {path} in body should match '{pattern}'"),
            ));
        }
        if let Some(name) = schema.get("format").and_then(Value::as_str)
            && format::conforms(name, s) == Some(false)
        {
            findings.causes.push(invalid(
                path,
                format!("Invalid value: \"{s}\": {path} in body must be of type {name}: \"{s}\""),
            ));
        }
    }
}

fn object(
    schema: &Value,
    map: &mut Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    findings: &mut Findings,
) {
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if map.get(r).is_none_or(Value::is_null) {
                findings.causes.push(required_cause(&join(path, r)));
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    apply_defaults(props, map);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let field = join(path, &key);
        let old_value = old.and_then(|o| o.get(&key));
        let declared = props
            .and_then(|p| p.get(&key))
            .or_else(|| additional.filter(|a| a.is_object()));
        if let Some(sub) = declared {
            node(
                sub,
                map.get_mut(&key).expect("listed"),
                old_value,
                &field,
                findings,
            );
        } else if additional == Some(&Value::Bool(true))
            || preserve
            || (embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
        {
        } else {
            findings.unknown.push(field);
            map.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string"},
                        "replicas": {"type": "integer", "minimum": 0},
                        "policy": {"type": "string", "enum": ["Retain", "Delete"]},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
                    }
                },
                "status": {"type": "object"}
            }
        })
    }

    #[test]
    fn required_type_and_enum_failures_name_the_field() {
        let mut obj = json!({"spec": {"replicas": "two", "policy": "Keep"}});
        let f = validate(&schema(), &mut obj, None);
        // In the order of the object's or the schema's keys, whichever
        // serde_json keeps: compare as a set.
        let mut fields: Vec<_> = f.causes.iter().map(|c| c.field.as_str()).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["spec.image", "spec.policy", "spec.replicas"]);
        let policy = f.causes.iter().find(|c| c.field == "spec.policy").unwrap();
        assert!(
            policy
                .message
                .contains("supported values: \"Retain\", \"Delete\"")
        );
        let replicas = f
            .causes
            .iter()
            .find(|c| c.field == "spec.replicas")
            .unwrap();
        assert!(replicas.message.contains("must be of type integer"));
    }

    #[test]
    fn unknown_fields_are_reported_and_pruned_but_preserved_where_declared() {
        let mut obj = json!({"spec": {"image": "x", "bogus": 1, "extra": {"any": 1}, "ports": [{"port": 1, "nope": 2}]}});
        let f = validate(&schema(), &mut obj, None);
        assert!(f.causes.is_empty(), "{:?}", f.causes);
        assert_eq!(f.unknown, ["spec.bogus", "spec.ports[0].nope"]);
        assert_eq!(
            obj,
            json!({"spec": {"image": "x", "extra": {"any": 1}, "ports": [{"port": 1}]}})
        );
    }

    #[test]
    fn defaults_fill_missing_properties() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1}}}}});
        let mut obj = json!({"spec": {}});
        assert!(validate(&schema, &mut obj, None).causes.is_empty());
        assert_eq!(obj, json!({"spec": {"replicas": 1}}));
    }
}
