//! Managed fields and server-side apply: who owns which field (`metadata.managedFields`,
//! `FieldsV1`), conflicts between field managers, and the merge that apply performs.
//!
//! Lists are atomic (owned and replaced whole), as they are for CRD schemas that do not
//! declare `x-kubernetes-list-type: map`; maps merge key by key.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A field path: one segment per map key.
pub(crate) type Path = Vec<String>;

/// Metadata fields the server owns, never a manager.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// Field manager name.
    pub(crate) manager: String,
    /// `Apply` or `Update`.
    pub(crate) operation: String,
    /// The apiVersion the manager used.
    pub(crate) api_version: String,
    /// `status` for the status subresource, else empty.
    pub(crate) subresource: String,
    /// The owned leaves.
    pub(crate) fields: BTreeSet<Path>,
}

/// `.spec.x` as conflict messages print a path.
pub(crate) fn display(path: &Path) -> String {
    path.iter().map(|s| format!(".{s}")).collect()
}

/// The leaves of an object that managers can own: scalars, lists and empty maps; under
/// `metadata` only labels, annotations, ownerReferences, finalizers and the like.
pub(crate) fn leaves(object: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    if let Some(map) = object.as_object() {
        for (k, v) in map {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    if let Some(meta) = v.as_object() {
                        for (mk, mv) in meta {
                            if !SERVER_METADATA.contains(&mk.as_str()) {
                                walk(mv, vec!["metadata".into(), mk.clone()], &mut out);
                            }
                        }
                    }
                }
                _ => walk(v, vec![k.clone()], &mut out),
            }
        }
    }
    out
}

fn walk(value: &Value, path: Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let mut p = path.clone();
                p.push(k.clone());
                walk(v, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// The value at `path`, if any.
pub(crate) fn get<'a>(object: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut cur = object;
    for seg in path {
        cur = cur.as_object()?.get(seg)?;
    }
    Some(cur)
}

/// Remove the value at `path`, then any maps left empty above it.
fn remove(object: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        map.remove(first);
        return;
    }
    if let Some(child) = map.get_mut(first) {
        remove(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            map.remove(first);
        }
    }
}

/// Merge `patch` into `target`: maps key by key, everything else replaced.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn to_fields_v1(fields: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut cur = &mut root;
        for seg in path {
            cur = cur
                .entry(format!("f:{seg}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("only maps are inserted");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(value: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(map) = value.as_object() else {
        return;
    };
    let children: Vec<_> = map
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("f:").map(|name| (name, v)))
        .collect();
    let opaque = map
        .keys()
        .any(|k| k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:"));
    if (children.is_empty() || opaque) && !path.is_empty() {
        out.insert(path.clone());
        return;
    }
    for (name, v) in children {
        path.push(name.to_string());
        from_fields_v1(v, path, out);
        path.pop();
    }
}

/// The entries recorded in an object's `metadata.managedFields`.
pub(crate) fn entries(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut fields = BTreeSet::new();
            from_fields_v1(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or_default().into(),
                operation: e["operation"].as_str().unwrap_or("Update").into(),
                api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
                subresource: e["subresource"].as_str().unwrap_or_default().into(),
                fields,
            }
        })
        .collect()
}

/// Write entries back into `metadata.managedFields` (entries owning nothing are dropped).
pub(crate) fn store_entries(object: &mut Value, entries: &[Entry]) {
    let now = crate::store::now_rfc3339();
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if list.is_empty() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
    } else {
        object["metadata"]["managedFields"] = Value::Array(list);
    }
}

fn related(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Record a non-apply write (create, update, patch): the manager takes the leaves that
/// changed from `old` to `new`, and other managers lose them.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
) {
    let mut list = old.map(entries).unwrap_or_default();
    let new_leaves = leaves(new);
    let old_leaves = old.map(leaves).unwrap_or_default();
    let changed: BTreeSet<Path> = new_leaves
        .iter()
        .filter(|p| old.and_then(|o| get(o, p)) != get(new, p))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = old_leaves.difference(&new_leaves).cloned().collect();
    for e in &mut list {
        e.fields
            .retain(|p| !changed.iter().chain(removed.iter()).any(|c| related(c, p)));
    }
    if !changed.is_empty() {
        match list.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.api_version = api_version.into();
            }
            None => list.push(Entry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                subresource: subresource.into(),
                fields: changed,
            }),
        }
    }
    store_entries(new, &list);
}

/// A field-manager conflict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    /// The other manager.
    pub(crate) manager: String,
    /// The apiVersion it used.
    pub(crate) api_version: String,
    /// The contested field.
    pub(crate) path: Path,
}

/// The message the API server gives for apply conflicts.
pub(crate) fn conflict_message(conflicts: &[Conflict]) -> String {
    let n = conflicts.len();
    if n == 1 {
        let c = &conflicts[0];
        return format!(
            "Apply failed with 1 conflict: conflict with \"{}\" using {}: {}",
            c.manager,
            c.api_version,
            display(&c.path)
        );
    }
    let mut out = format!("Apply failed with {n} conflicts: ");
    let mut managers: Vec<(&str, &str)> = Vec::new();
    for c in conflicts {
        if !managers.contains(&(c.manager.as_str(), c.api_version.as_str())) {
            managers.push((&c.manager, &c.api_version));
        }
    }
    let groups: Vec<String> = managers
        .iter()
        .map(|(m, v)| {
            let paths: Vec<String> = conflicts
                .iter()
                .filter(|c| c.manager == *m && c.api_version == *v)
                .map(|c| format!("- {}", display(&c.path)))
                .collect();
            format!("conflicts with \"{m}\" using {v}:\n{}", paths.join("\n"))
        })
        .collect();
    out.push_str(&groups.join("\n"));
    out
}

/// Server-side apply of `applied` (an object or partial object) onto `current` by
/// `manager`. Fields this manager applied before and applies no more are removed unless
/// someone else owns them. Without `force`, a field another manager owns with a
/// different value is a conflict.
///
/// # Errors
/// The conflicts, when there are any and `force` is false.
pub(crate) fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut list = current.map(entries).unwrap_or_default();
    let applied_fields = leaves(applied);
    let mut conflicts = Vec::new();
    let base = current.cloned().unwrap_or_else(|| json!({}));
    for e in &mut list {
        if e.manager == manager && e.operation == "Apply" {
            continue;
        }
        let mut lost = Vec::new();
        for p in &applied_fields {
            let owned: Vec<Path> = e.fields.iter().filter(|q| related(p, q)).cloned().collect();
            if owned.is_empty() {
                continue;
            }
            if get(&base, p) != get(applied, p) {
                if force {
                    lost.extend(owned);
                } else {
                    conflicts.push(Conflict {
                        manager: e.manager.clone(),
                        api_version: e.api_version.clone(),
                        path: p.clone(),
                    });
                }
            }
        }
        e.fields.retain(|q| !lost.contains(q));
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut result = base;
    let previous: BTreeSet<Path> = list
        .iter()
        .filter(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    for p in previous.difference(&applied_fields) {
        let shared = list
            .iter()
            .filter(|e| !(e.manager == manager && e.operation == "Apply"))
            .any(|e| e.fields.iter().any(|q| related(p, q)));
        if !shared {
            remove(&mut result, p);
        }
    }
    let mut body = applied.clone();
    if let Some(meta) = body["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    merge(&mut result, &body);
    list.retain(|e| {
        !(e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
    });
    list.push(Entry {
        manager: manager.into(),
        operation: "Apply".into(),
        api_version: api_version.into(),
        subresource: subresource.into(),
        fields: applied_fields,
    });
    store_entries(&mut result, &list);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "g/v1", "kind": "T", "metadata": {"name": "t"}, "spec": spec})
    }

    #[test]
    fn second_manager_changing_a_field_conflicts_unless_forced() {
        let first = apply(None, &obj(json!({"x": 1, "y": 2})), "a", "g/v1", "", false).unwrap();
        let err = apply(Some(&first), &obj(json!({"x": 5})), "b", "g/v1", "", false).unwrap_err();
        assert_eq!(
            conflict_message(&err),
            "Apply failed with 1 conflict: conflict with \"a\" using g/v1: .spec.x"
        );
        let forced = apply(Some(&first), &obj(json!({"x": 5})), "b", "g/v1", "", true).unwrap();
        assert_eq!(forced["spec"], json!({"x": 5, "y": 2}));
        let owners = entries(&forced);
        let a = owners.iter().find(|e| e.manager == "a").unwrap();
        assert!(
            !a.fields
                .contains(&vec!["spec".to_string(), "x".to_string()])
        );
    }

    #[test]
    fn same_value_is_shared_and_dropped_fields_are_removed() {
        let first = apply(None, &obj(json!({"x": 1, "y": 2})), "a", "g/v1", "", false).unwrap();
        let shared = apply(Some(&first), &obj(json!({"x": 1})), "b", "g/v1", "", false).unwrap();
        // a stops applying both x and y: y goes (nobody else owns it), x stays (b owns it).
        let after = apply(
            Some(&shared),
            &json!({"metadata": {"name": "t"}}),
            "a",
            "g/v1",
            "",
            false,
        )
        .unwrap();
        assert_eq!(after["spec"], json!({"x": 1}));
    }

    #[test]
    fn fields_v1_round_trips() {
        let applied = obj(json!({"x": {"y": [1, 2]}, "z": "s"}));
        let done = apply(None, &applied, "m", "g/v1", "", false).unwrap();
        assert_eq!(
            done["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:x": {"f:y": {}}, "f:z": {}}})
        );
        assert_eq!(entries(&done)[0].fields, leaves(&applied));
    }
}
