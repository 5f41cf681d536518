//! Label selectors (equality- and set-based, as `kubectl -l` writes them) and the field
//! selectors every resource supports (`metadata.name`, `metadata.namespace`).

use serde_json::Value;

use crate::status::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// Split on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_set(key: &str, rest: &str, selector: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '(' for key {key} in label selector \"{selector}\""
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`), as pod
    /// affinity terms and workloads write them; an unknown operator matches nothing.
    pub(crate) fn from_object(selector: &Value) -> Self {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let mut reqs: Vec<Requirement> = selector["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or_default().into()))
            .collect();
        for e in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or_default().to_string();
            reqs.push(match e["operator"].as_str() {
                Some("In") => Requirement::In(key, strings(&e["values"])),
                Some("NotIn") => Requirement::NotIn(key, strings(&e["values"])),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::NotExists(key),
                _ => Requirement::In(key, Vec::new()),
            });
        }
        Self(reqs)
    }

    /// Parse `app=foo,tier!=x,env in (a,b),!legacy,has`.
    ///
    /// # Errors
    /// A 400 naming the selector when it does not parse.
    pub(crate) fn parse(selector: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in split_top_level(selector) {
            let part = part.trim();
            if part.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: empty requirement in label selector \"{selector}\""
                )));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), parse_set(k, rest, selector)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), parse_set(k, rest, selector)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: \"{part}\" in label selector \"{selector}\""
                )));
            } else {
                Requirement::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = object["metadata"]["labels"].as_object();
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A field selector: `metadata.name=x`, `metadata.namespace!=y`, and a few per-kind
/// fields (`spec.nodeName`, `status.phase`, `involvedObject.name`) read by JSON path.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
    "spec.schedulerName",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.kind",
    "involvedObject.uid",
    "type",
    "reason",
];

impl FieldSelector {
    /// Parse `metadata.name=x,metadata.namespace!=y`.
    ///
    /// # Errors
    /// A 400 naming an unsupported field.
    pub(crate) fn parse(selector: &str, kind: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for part in selector.split(',') {
            let (field, negate, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, false, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !FIELDS.contains(&field) {
                return Err(
                    ApiError::bad_request(format!("field label not supported: {field}"))
                        .with_details("", "", kind),
                );
            }
            reqs.push((field.to_string(), negate, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    /// Whether the object satisfies every requirement.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, negate, value)| {
            let mut cur = object;
            for seg in field.split('.') {
                cur = &cur[seg];
            }
            let actual = cur.as_str().unwrap_or_default();
            (actual == value) != *negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "default", "labels": labels}})
    }

    #[test]
    fn set_based_and_equality_requirements_combine() {
        let sel = LabelSelector::parse("app in (foo,bar),tier!=x,!legacy").unwrap();
        assert!(sel.matches(&obj(json!({"app": "foo", "tier": "y"}))));
        assert!(!sel.matches(&obj(json!({"app": "baz"}))));
        assert!(!sel.matches(&obj(json!({"app": "bar", "tier": "x"}))));
        assert!(!sel.matches(&obj(json!({"app": "bar", "legacy": "1"}))));
        let notin = LabelSelector::parse("app notin (foo),has").unwrap();
        assert!(notin.matches(&obj(json!({"app": "q", "has": ""}))));
        assert!(!notin.matches(&obj(json!({"app": "foo", "has": ""}))));
    }

    #[test]
    fn malformed_label_selector_is_a_bad_request() {
        let err = LabelSelector::parse("app in foo").unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.message.contains("app in foo"), "{}", err.message);
    }

    #[test]
    fn field_selector_reads_metadata_and_rejects_unknown_fields() {
        let sel =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=kube-system", "Pod").unwrap();
        assert!(sel.matches(&obj(json!({}))));
        assert!(
            !FieldSelector::parse("metadata.name=b", "Pod")
                .unwrap()
                .matches(&obj(json!({})))
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=b", "Pod").unwrap_err().code,
            400
        );
    }
}
