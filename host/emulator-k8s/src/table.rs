//! Server-side printing (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): the
//! columns `kubectl get` shows for the built-in kinds, a CRD version's
//! `additionalPrinterColumns` (with the JSONPath subset they use), and ages rendered as
//! the API server renders them (`HumanDuration`), since kubectl prints cells verbatim.
//! Lists and watch events use the same columns, so `get -w` prints one header.
//!
//! A built-in kind's columns are one entry of `BUILTIN`: each column's name, type,
//! priority and where its cell comes from (a JSONPath, or a function where the API
//! server's printer combines fields), so showing another kind is one more entry.

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
fn jsonpath<'a>(object: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![object];
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            current = current.iter().filter_map(|v| v.get(key)).collect();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return Vec::new();
            };
            let inner = &after[..end];
            let items: Vec<&Value> = current
                .iter()
                .filter_map(|v| v.as_array())
                .flatten()
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
                items.get(index).copied().into_iter().collect()
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

/// The first value at `path`, or null.
fn first(object: &Value, path: &str) -> Value {
    jsonpath(object, path)
        .first()
        .map_or(Value::Null, |v| (*v).clone())
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

/// How a built-in column's cell is read from an object.
enum Cell {
    /// The value at a JSONPath, or null.
    Path(&'static str),
    /// The string at a JSONPath, or `<none>`.
    TextOrNone(&'static str),
    /// The number at a JSONPath, or 0.
    Count(&'static str),
    /// The age of the timestamp at a JSONPath.
    Age(&'static str),
    /// Always `<none>`: what the emulator has no notion of (roles, nominated nodes).
    Absent,
    /// What the API server's printer works out from several fields.
    Derived(fn(&Value) -> Value),
}

impl Cell {
    fn read(&self, object: &Value) -> Value {
        match self {
            Cell::Path(path) => first(object, path),
            Cell::TextOrNone(path) => json!(first(object, path).as_str().unwrap_or("<none>")),
            Cell::Count(path) => json!(first(object, path).as_u64().unwrap_or(0)),
            Cell::Age(path) => age(&first(object, path)),
            Cell::Absent => json!("<none>"),
            Cell::Derived(cell) => cell(object),
        }
    }
}

/// One column `kubectl get` shows for a built-in kind.
struct Column {
    name: &'static str,
    kind: &'static str,
    /// 1: only with `-o wide`.
    priority: u8,
    cell: Cell,
}

const fn string(name: &'static str, cell: Cell) -> Column {
    Column {
        name,
        kind: "string",
        priority: 0,
        cell,
    }
}

const fn wide(name: &'static str, cell: Cell) -> Column {
    Column {
        name,
        kind: "string",
        priority: 1,
        cell,
    }
}

const fn integer(name: &'static str, path: &'static str) -> Column {
    Column {
        name,
        kind: "integer",
        priority: 0,
        cell: Cell::Count(path),
    }
}

const NAME: Column = string("Name", Cell::Path(".metadata.name"));
const AGE: Column = string("Age", Cell::Age(".metadata.creationTimestamp"));

/// The built-in kinds' columns by group and plural, as the API server's printers
/// define them; a kind not listed here prints as a custom resource would.
const BUILTIN: &[(&str, &str, &[Column])] = &[
    (
        "",
        "pods",
        &[
            NAME,
            string("Ready", Cell::Derived(pod_ready)),
            string("Status", Cell::Derived(pod_status)),
            string("Restarts", Cell::Derived(pod_restarts)),
            AGE,
            wide("IP", Cell::TextOrNone(".status.podIP")),
            wide("Node", Cell::TextOrNone(".spec.nodeName")),
            wide("Nominated Node", Cell::Absent),
            wide("Readiness Gates", Cell::Absent),
        ],
    ),
    (
        "",
        "nodes",
        &[
            NAME,
            string("Status", Cell::Derived(node_status)),
            string("Roles", Cell::Absent),
            AGE,
            string("Version", Cell::Path(".status.nodeInfo.kubeletVersion")),
        ],
    ),
    (
        "",
        "namespaces",
        &[NAME, string("Status", Cell::Path(".status.phase")), AGE],
    ),
    (
        "",
        "services",
        &[
            NAME,
            string("Type", Cell::Path(".spec.type")),
            string("Cluster-IP", Cell::Path(".spec.clusterIP")),
            string("External-IP", Cell::Absent),
            string("Port(s)", Cell::Derived(service_ports)),
            AGE,
        ],
    ),
    (
        "apps",
        "deployments",
        &[
            NAME,
            string("Ready", Cell::Derived(deployment_ready)),
            integer("Up-to-date", ".status.updatedReplicas"),
            integer("Available", ".status.availableReplicas"),
            AGE,
        ],
    ),
    (
        "apps",
        "daemonsets",
        &[
            NAME,
            integer("Desired", ".status.desiredNumberScheduled"),
            integer("Current", ".status.currentNumberScheduled"),
            integer("Ready", ".status.numberReady"),
            integer("Up-to-date", ".status.updatedNumberScheduled"),
            integer("Available", ".status.numberAvailable"),
            AGE,
        ],
    ),
    (
        "",
        "events",
        &[
            string("Last Seen", Cell::Age(".lastTimestamp")),
            string("Type", Cell::Path(".type")),
            string("Reason", Cell::Path(".reason")),
            string("Object", Cell::Derived(event_object)),
            string("Message", Cell::Path(".message")),
        ],
    ),
];

fn container_statuses(pod: &Value) -> &[Value] {
    pod["status"]["containerStatuses"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

fn pod_ready(pod: &Value) -> Value {
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = container_statuses(pod)
        .iter()
        .filter(|s| s["ready"] == true)
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_status(pod: &Value) -> Value {
    for s in container_statuses(pod).iter().rev() {
        if let Some(r) = s["state"]["waiting"]["reason"].as_str() {
            return json!(r);
        }
        if let Some(r) = s["state"]["terminated"]["reason"].as_str() {
            return json!(r);
        }
    }
    if pod["metadata"].get("deletionTimestamp").is_some() {
        return json!("Terminating");
    }
    let phase = text(&pod["status"]["phase"]);
    if phase == "Pending" && pod["spec"]["nodeName"].is_string() {
        return json!("ContainerCreating");
    }
    json!(phase)
}

fn pod_restarts(pod: &Value) -> Value {
    let restarts: u64 = container_statuses(pod)
        .iter()
        .filter_map(|s| s["restartCount"].as_u64())
        .sum();
    json!(restarts.to_string())
}

fn node_status(node: &Value) -> Value {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    json!(if ready { "Ready" } else { "NotReady" })
}

fn service_ports(service: &Value) -> Value {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
        .collect();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

fn deployment_ready(deployment: &Value) -> Value {
    json!(format!(
        "{}/{}",
        deployment["status"]["readyReplicas"].as_u64().unwrap_or(0),
        deployment["spec"]["replicas"].as_u64().unwrap_or(0)
    ))
}

fn event_object(event: &Value) -> Value {
    json!(format!(
        "{}/{}",
        text(&event["involvedObject"]["kind"]).to_lowercase(),
        text(&event["involvedObject"]["name"])
    ))
}

/// The column definitions and one row's cells for `object`.
fn row(target: &Target, object: &Value) -> (Vec<Value>, Vec<Value>) {
    let r = &target.resource;
    if let Some((_, _, columns)) = BUILTIN
        .iter()
        .find(|(group, plural, _)| *group == r.group && *plural == r.plural)
    {
        return columns
            .iter()
            .map(|c| (column(c.name, c.kind, c.priority), c.cell.read(object)))
            .unzip();
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
            (_, Some(v)) => (*v).clone(),
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
            vec![&json!("DependenciesReady")]
        );
        assert_eq!(jsonpath(&o, ".status.readyReplicas"), vec![&json!(2)]);
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            vec![&json!("Other")]
        );
        assert!(jsonpath(&o, ".status.missing").is_empty());
    }

    #[test]
    fn built_in_rows_read_their_cells_as_the_api_servers_printers_do() {
        let registry = crate::registry::Registry::default();
        let target = |group: &str, plural: &str| Target {
            resource: registry.find(group, "v1", plural).unwrap(),
            version: "v1".into(),
            namespace: None,
            name: None,
            subresource: None,
        };
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{}, {}], "nodeName": "n"}, "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "ErrImagePull"}}}]}});
        let (columns, cells) = row(&target("", "pods"), &pod);
        let wide: Vec<_> = columns
            .iter()
            .map(|c| (&c["name"], &c["priority"]))
            .collect();
        assert_eq!(
            wide[4..6],
            [(&json!("Age"), &json!(0)), (&json!("IP"), &json!(1))]
        );
        assert_eq!(columns[0]["format"], "name");
        assert_eq!(
            cells,
            json!([
                "p",
                "1/2",
                "ErrImagePull",
                "3",
                "<unknown>",
                "<none>",
                "n",
                "<none>",
                "<none>"
            ])
            .as_array()
            .unwrap()[..]
        );
        let service = json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        assert_eq!(row(&target("", "services"), &service).1[4], "80/TCP,53/UDP");
        let daemonset = json!({"status": {"numberReady": 2}});
        let (columns, cells) = row(&target("apps", "daemonsets"), &daemonset);
        assert_eq!(columns[3]["type"], "integer");
        assert_eq!(cells[1..4], [json!(0), json!(0), json!(2)]);
        let event = json!({"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Pulled"});
        let (columns, cells) = row(&target("", "events"), &event);
        assert_eq!(columns[0]["name"], "Last Seen");
        assert_eq!(
            cells,
            [
                json!("<unknown>"),
                Value::Null,
                json!("Pulled"),
                json!("pod/p"),
                Value::Null
            ]
        );
    }
}
