//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): the
//! columns `kubectl get` shows for the built-in kinds, a CRD version's
//! `additionalPrinterColumns` (with the JSONPath subset they use), and ages rendered as
//! the API server renders them (`HumanDuration`), since kubectl prints cells verbatim.
//! Lists and watch events use the same columns, so `get -w` prints one header.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::api::Target;

/// The content type of a Table answer.
pub(crate) const CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Whether the client asks for a Table (kubectl lists it first, with JSON after).
pub(crate) fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|accept| accept.split(',').next())
        .is_some_and(|first| {
            let params: Vec<&str> = first.split(';').map(str::trim).collect();
            params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
        })
}

/// `duration.HumanDuration`: `45s`, `3m20s`, `10m`, `5h2m`, `2d3h`, `3y4d`.
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h) = (s / 60, s / 3600);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s.is_multiple_of(60) {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m.is_multiple_of(60) {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        if h.is_multiple_of(24) {
            format!("{}d", h / 24)
        } else {
            format!("{}d{}h", h / 24, h % 24)
        }
    } else if h < 24 * 365 * 2 {
        format!("{}d", h / 24)
    } else if h < 24 * 365 * 8 {
        let days = h / 24 - 365 * (h / 24 / 365);
        if days == 0 {
            format!("{}y", h / 24 / 365)
        } else {
            format!("{}y{days}d", h / 24 / 365)
        }
    } else {
        format!("{}y", h / 24 / 365)
    }
}

fn age(value: &Value) -> Value {
    match value
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    {
        Some(at) => json!(human_duration(
            SystemTime::now().duration_since(at).unwrap_or_default()
        )),
        None => json!("<unknown>"),
    }
}

/// Evaluate the JSONPath subset printer columns use: `.a.b`, `.a[0]`, `.a[*].b` and
/// `.a[?(@.k=='v')].b`.
fn jsonpath(object: &Value, path: &str) -> Vec<Value> {
    let mut current = vec![object.clone()];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            current = current.iter().filter_map(|v| v.get(key).cloned()).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let inner = &after[..end];
            let items: Vec<Value> = current
                .iter()
                .filter_map(Value::as_array)
                .flatten()
                .cloned()
                .collect();
            current = if inner == "*" {
                items
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let Some((field, wanted)) = filter.split_once("==") else {
                    return Vec::new();
                };
                let wanted = wanted.trim().trim_matches(['\'', '"']);
                items
                    .into_iter()
                    .filter(|i| i.get(field.trim()).and_then(Value::as_str) == Some(wanted))
                    .collect()
            } else if let Ok(index) = inner.parse::<usize>() {
                items.get(index).cloned().into_iter().collect()
            } else {
                return Vec::new();
            };
            rest = &after[end + 1..];
        } else {
            return Vec::new();
        }
    }
    current
}

fn column(name: &str, kind: &str, priority: u8) -> Value {
    let mut c =
        json!({"name": name, "type": kind, "format": "", "description": "", "priority": priority});
    if name == "Name" {
        c["format"] = json!("name");
        c["description"] = json!("Name must be unique within a namespace.");
    }
    c
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn pod_status(pod: &Value) -> String {
    let statuses = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for s in statuses.iter().rev() {
        if let Some(r) = s["state"]["waiting"]["reason"].as_str() {
            return r.to_string();
        }
        if let Some(r) = s["state"]["terminated"]["reason"].as_str() {
            return r.to_string();
        }
    }
    if pod["metadata"].get("deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let phase = text(&pod["status"]["phase"]);
    if phase == "Pending" && pod["spec"]["nodeName"].is_string() {
        return "ContainerCreating".into();
    }
    phase
}

fn builtin(group: &str, plural: &str, o: &Value) -> Option<(Vec<Value>, Vec<Value>)> {
    let created = age(&o["metadata"]["creationTimestamp"]);
    let name = o["metadata"]["name"].clone();
    Some(match (group, plural) {
        ("", "pods") => {
            let statuses = o["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            let restarts: u64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_u64())
                .sum();
            (
                vec![
                    column("Name", "string", 0),
                    column("Ready", "string", 0),
                    column("Status", "string", 0),
                    column("Restarts", "string", 0),
                    column("Age", "string", 0),
                    column("IP", "string", 1),
                    column("Node", "string", 1),
                    column("Nominated Node", "string", 1),
                    column("Readiness Gates", "string", 1),
                ],
                vec![
                    name,
                    json!(format!("{ready}/{total}")),
                    json!(pod_status(o)),
                    json!(restarts.to_string()),
                    created,
                    json!(o["status"]["podIP"].as_str().unwrap_or("<none>")),
                    json!(o["spec"]["nodeName"].as_str().unwrap_or("<none>")),
                    json!("<none>"),
                    json!("<none>"),
                ],
            )
        }
        ("", "nodes") => {
            let ready = o["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (
                vec![
                    column("Name", "string", 0),
                    column("Status", "string", 0),
                    column("Roles", "string", 0),
                    column("Age", "string", 0),
                    column("Version", "string", 0),
                ],
                vec![
                    name,
                    json!(if ready { "Ready" } else { "NotReady" }),
                    json!("<none>"),
                    created,
                    o["status"]["nodeInfo"]["kubeletVersion"].clone(),
                ],
            )
        }
        ("", "namespaces") => (
            vec![
                column("Name", "string", 0),
                column("Status", "string", 0),
                column("Age", "string", 0),
            ],
            vec![name, o["status"]["phase"].clone(), created],
        ),
        ("", "services") => {
            let ports: Vec<String> = o["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                .collect();
            (
                vec![
                    column("Name", "string", 0),
                    column("Type", "string", 0),
                    column("Cluster-IP", "string", 0),
                    column("External-IP", "string", 0),
                    column("Port(s)", "string", 0),
                    column("Age", "string", 0),
                ],
                vec![
                    name,
                    o["spec"]["type"].clone(),
                    o["spec"]["clusterIP"].clone(),
                    json!("<none>"),
                    json!(if ports.is_empty() {
                        "<none>".to_string()
                    } else {
                        ports.join(",")
                    }),
                    created,
                ],
            )
        }
        ("apps", "deployments") => (
            vec![
                column("Name", "string", 0),
                column("Ready", "string", 0),
                column("Up-to-date", "integer", 0),
                column("Available", "integer", 0),
                column("Age", "string", 0),
            ],
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    o["status"]["readyReplicas"].as_u64().unwrap_or(0),
                    o["spec"]["replicas"].as_u64().unwrap_or(0)
                )),
                json!(o["status"]["updatedReplicas"].as_u64().unwrap_or(0)),
                json!(o["status"]["availableReplicas"].as_u64().unwrap_or(0)),
                created,
            ],
        ),
        ("apps", "daemonsets") => {
            let n = |k: &str| json!(o["status"][k].as_u64().unwrap_or(0));
            (
                vec![
                    column("Name", "string", 0),
                    column("Desired", "integer", 0),
                    column("Current", "integer", 0),
                    column("Ready", "integer", 0),
                    column("Up-to-date", "integer", 0),
                    column("Available", "integer", 0),
                    column("Age", "string", 0),
                ],
                vec![
                    name,
                    n("desiredNumberScheduled"),
                    n("currentNumberScheduled"),
                    n("numberReady"),
                    n("updatedNumberScheduled"),
                    n("numberAvailable"),
                    created,
                ],
            )
        }
        ("", "events") => (
            vec![
                column("Last Seen", "string", 0),
                column("Type", "string", 0),
                column("Reason", "string", 0),
                column("Object", "string", 0),
                column("Message", "string", 0),
            ],
            vec![
                age(&o["lastTimestamp"]),
                o["type"].clone(),
                o["reason"].clone(),
                json!(format!(
                    "{}/{}",
                    text(&o["involvedObject"]["kind"]).to_lowercase(),
                    text(&o["involvedObject"]["name"])
                )),
                o["message"].clone(),
            ],
        ),
        _ => return None,
    })
}

/// The column definitions and one row's cells for `object`.
fn row(target: &Target, object: &Value) -> (Vec<Value>, Vec<Value>) {
    let r = &target.resource;
    if let Some(out) = builtin(&r.group, &r.plural, object) {
        return out;
    }
    let printer = r
        .version(&target.version)
        .map(|v| v.columns.clone())
        .unwrap_or_default();
    let mut columns = vec![column("Name", "string", 0)];
    let mut cells = vec![object["metadata"]["name"].clone()];
    if printer.is_empty() {
        columns.push(column("Age", "date", 0));
        cells.push(age(&object["metadata"]["creationTimestamp"]));
    }
    for p in &printer {
        let kind = p["type"].as_str().unwrap_or("string");
        let mut def = column(
            p["name"].as_str().unwrap_or_default(),
            kind,
            p["priority"].as_u64().unwrap_or(0) as u8,
        );
        def["description"] = p["description"].clone();
        columns.push(def);
        let found = jsonpath(object, p["jsonPath"].as_str().unwrap_or_default());
        cells.push(match (kind, found.first()) {
            (_, None) => Value::Null,
            ("date", Some(v)) => age(v),
            (_, Some(v)) => v.clone(),
        });
    }
    (columns, cells)
}

fn partial(target: &Target, object: &Value) -> Value {
    let mut metadata = object["metadata"].clone();
    if let Some(m) = metadata.as_object_mut() {
        m.remove("managedFields");
    }
    let _ = target;
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
}

/// A Table of `items` (a list answer's `metadata` carried over).
pub(crate) fn table(target: &Target, items: &[Value], metadata: &Value) -> Value {
    let mut columns = None;
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let (cols, cells) = row(target, o);
            columns.get_or_insert(cols);
            json!({"cells": cells, "object": partial(target, o)})
        })
        .collect();
    let columns = columns.unwrap_or_else(|| row(target, &json!({"metadata": {}})).0);
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_render_like_human_duration() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (600, "10m"),
            (3 * 3600 + 120, "3h2m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 3600, "3d1h"),
            (20 * 86_400, "20d"),
        ];
        for (secs, text) in cases {
            assert_eq!(human_duration(Duration::from_secs(secs)), text, "{secs}");
        }
    }

    #[test]
    fn printer_column_paths_filter_conditions() {
        let o = json!({"status": {"readyReplicas": 2, "conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}});
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type=='Ready')].reason"),
            vec![json!("DependenciesReady")]
        );
        assert_eq!(jsonpath(&o, ".status.readyReplicas"), vec![json!(2)]);
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            vec![json!("Other")]
        );
        assert!(jsonpath(&o, ".status.missing").is_empty());
    }
}
