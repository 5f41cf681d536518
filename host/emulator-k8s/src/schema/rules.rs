//! A CRD schema's validation rules (`x-kubernetes-validations`): CEL
//! expressions over a value (`self`) and, in a transition rule, its stored
//! value (`oldSelf`), evaluated where the API server evaluates them
//! (apiextensions-apiserver, `pkg/apiserver/schema/cel/validation.go`):
//!
//! - only on non-null values;
//! - a rule that reads `oldSelf` only where the value has a stored
//!   counterpart (an update, through properties, map values and lists of
//!   `x-kubernetes-list-type: map`), never on a create;
//! - a failure is `field.Invalid(path, <schema type>, detail)`, its detail
//!   the rule's `messageExpression`, else its `message`, else `failed rule:
//!   RULE`; `reason` and `fieldPath` change the cause as they do upstream;
//! - a rule that cannot be evaluated is Invalid with `ERROR evaluating
//!   rule: RULE`, and one that cannot be compiled with `rule compile error`.
//!
//! Kubernetes' CEL libraries beyond the standard ones (quantity, url, ip, …)
//! are not here: a rule calling them fails to evaluate and says so.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use cel::{Context, Env, Program};
use serde_json::Value;

use crate::status::Cause;

/// A rule's program, or why it does not compile.
type Compiled = Result<Arc<Program>, String>;

/// Rules compiled once each: the same few rules run on every write of a kind.
static PROGRAMS: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Mutex::default);

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

fn compiled(rule: &str) -> Compiled {
    let mut programs = PROGRAMS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    programs
        .entry(rule.to_string())
        .or_insert_with(|| ENV.compile(rule).map(Arc::new).map_err(|e| e.to_string()))
        .clone()
}

/// Check `value` (at `path`, with its stored counterpart `old`) against the
/// rules `schema` declares.
pub(super) fn check(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Vec<Cause>,
) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    if value.is_null() {
        return;
    }
    // The value a failure shows is the schema's type, as upstream's
    // `field.Invalid(fldPath, sts.Type, …)` shows it.
    let shown = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for rule in rules {
        let source = rule["rule"].as_str().unwrap_or_default();
        if source.trim().is_empty() {
            continue;
        }
        let program = match compiled(source) {
            Ok(program) => program,
            Err(error) => {
                causes.push(invalid(
                    path,
                    shown,
                    &format!("rule compile error: {error}"),
                ));
                continue;
            }
        };
        let transition = program.references().has_variable("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let mut context = Context::with_env(Arc::clone(&ENV));
        context.add_variable_from_value("self", to_cel(value));
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", to_cel(old));
        }
        let error = match program.execute(&context) {
            Ok(cel::Value::Bool(true)) => continue,
            Ok(cel::Value::Bool(false)) => None,
            Ok(other) => Some(format!(
                "no such overload: the rule gave {other:?}, not a bool"
            )),
            Err(e) => Some(e.to_string()),
        };
        if let Some(error) = error {
            causes.push(invalid(
                path,
                shown,
                &format!("{error} evaluating rule: {}", rule_error_string(rule)),
            ));
            continue;
        }
        let detail = rule["messageExpression"]
            .as_str()
            .and_then(|expression| message_from(expression, &context))
            .unwrap_or_else(|| message_or_default(rule));
        let at = match rule["fieldPath"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{path}{sub}"),
            _ => path.to_string(),
        };
        causes.push(failure(rule["reason"].as_str(), &at, shown, &detail));
    }
}

/// A `messageExpression`'s string; upstream logs any other outcome and falls
/// back to the message.
fn message_from(expression: &str, context: &Context) -> Option<String> {
    match compiled(expression).ok()?.execute(context) {
        Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        _ => None,
    }
}

fn rule_error_string(rule: &Value) -> String {
    match rule["message"].as_str().map(str::trim) {
        Some(message) if !message.is_empty() => message.to_string(),
        _ => rule["rule"].as_str().unwrap_or_default().trim().to_string(),
    }
}

fn message_or_default(rule: &Value) -> String {
    match rule["message"].as_str().map(str::trim) {
        Some(message) if !message.is_empty() => message.to_string(),
        _ => format!("failed rule: {}", rule_error_string(rule)),
    }
}

fn invalid(path: &str, shown: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"{shown}\": {detail}"),
        field: path.into(),
    }
}

/// The cause a failed rule's `reason` asks for (upstream's
/// `fieldErrorForReason`).
fn failure(reason: Option<&str>, path: &str, shown: &str, detail: &str) -> Cause {
    let (reason, message) = match reason {
        Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {detail}")),
        Some("FieldValueRequired") => ("FieldValueRequired", format!("Required value: {detail}")),
        Some("FieldValueDuplicate") => (
            "FieldValueDuplicate",
            format!("Duplicate value: \"{shown}\""),
        ),
        _ => return invalid(path, shown, detail),
    };
    Cause {
        reason: reason.into(),
        message,
        field: path.into(),
    }
}

/// A JSON value as CEL sees it: integers are `int`, objects are maps.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            (None, None) => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), to_cel(v)))
            .collect::<HashMap<String, cel::Value>>()
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn immutable_templates() -> Value {
        // The rule agent-sandbox's Sandbox CRD puts on `spec`.
        json!({
            "type": "object",
            "x-kubernetes-validations": [{
                "message": "volumeClaimTemplates is immutable",
                "rule": "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)"
            }]
        })
    }

    fn causes(schema: &Value, value: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        check(schema, value, old, "spec", &mut causes);
        causes
    }

    #[test]
    fn a_transition_rule_runs_on_updates_only() {
        let schema = immutable_templates();
        let with = json!({"volumeClaimTemplates": [{"spec": {"x": 1}}]});
        let changed = json!({"volumeClaimTemplates": [{"spec": {"x": 2}}]});
        assert!(
            causes(&schema, &with, None).is_empty(),
            "a create has no oldSelf"
        );
        assert!(causes(&schema, &with, Some(&with)).is_empty());
        let failed = causes(&schema, &changed, Some(&with));
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert_eq!(failed[0].field, "spec");
        assert_eq!(failed[0].reason, "FieldValueInvalid");
        assert_eq!(
            failed[0].message,
            "Invalid value: \"object\": volumeClaimTemplates is immutable"
        );
        assert_eq!(causes(&schema, &json!({}), Some(&with)).len(), 1, "removed");
    }

    #[test]
    fn messages_reasons_and_field_paths_are_the_api_servers() {
        let schema = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.min <= self.max"},
            {"rule": "self.min >= 0", "messageExpression": "'min is ' + string(self.min)",
             "reason": "FieldValueForbidden", "fieldPath": ".min"},
            {"rule": "self.missing == 1", "message": "needs missing"},
        ]});
        let failed = causes(&schema, &json!({"min": -3, "max": -5}), None);
        assert_eq!(failed.len(), 3, "{failed:?}");
        assert_eq!(
            failed[0].message,
            "Invalid value: \"object\": failed rule: self.min <= self.max"
        );
        assert_eq!(
            (failed[1].reason.as_str(), failed[1].field.as_str()),
            ("FieldValueForbidden", "spec.min")
        );
        assert_eq!(failed[1].message, "Forbidden: min is -3");
        assert!(
            failed[2].message.starts_with("Invalid value: \"object\": ")
                && failed[2]
                    .message
                    .ends_with(" evaluating rule: needs missing"),
            "{}",
            failed[2].message
        );
        assert!(causes(&schema, &json!({"min": 1, "max": 2, "missing": 1}), None).is_empty());
    }

    #[test]
    fn a_rule_that_does_not_compile_says_so_and_null_values_are_not_checked() {
        let schema = json!({"type": "string", "x-kubernetes-validations": [{"rule": "self ==="}]});
        let failed = causes(&schema, &json!("x"), None);
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0]
                .message
                .starts_with("Invalid value: \"string\": rule compile error: "),
            "{}",
            failed[0].message
        );
        assert!(causes(&schema, &Value::Null, None).is_empty());
    }
}
