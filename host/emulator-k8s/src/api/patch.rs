//! PATCH by content type: JSON merge, JSON patch, strategic merge for
//! built-in kinds, and server-side apply.

use serde_json::{Value, json};

use crate::state::State;
use crate::status::{ApiError, ApiResult};
use crate::store::rv_of;

use super::apply::apply;
use super::scale::{scale_of, set_scale};
use super::write::write;
use super::{Query, Target, Written, body_rv, current, decode_body, manager, present};

/// Strategic merge for built-in kinds: a JSON merge patch, except that lists of maps
/// with a `name` merge item by item (containers, env, ports, volumes), and the
/// `$setElementOrder`/`$patch`/`$retainKeys` directives are honoured or dropped.
fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        if let Some(m) = replaced.as_object_mut() {
            m.remove("$patch");
        }
        *target = replaced;
        return;
    }
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in patch_map {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let named_list = |l: &Value| {
            l.as_array()
                .is_some_and(|a| !a.is_empty() && a.iter().all(|i| i.get("name").is_some()))
        };
        match t.get_mut(k) {
            Some(existing) if existing.is_object() && v.is_object() => strategic_merge(existing, v),
            Some(existing) if named_list(existing) && named_list(v) => {
                let items = existing.as_array_mut().expect("checked a list");
                for item in v.as_array().expect("checked a list") {
                    let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                    match items.iter().position(|i| i["name"] == item["name"]) {
                        Some(pos) if delete => {
                            items.remove(pos);
                        }
                        Some(pos) => strategic_merge(&mut items[pos], item),
                        None if delete => {}
                        None => items.push(item.clone()),
                    }
                }
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

/// PATCH of an object (or its status or scale), by content type.
///
/// # Errors
/// 415 for an unsupported patch type (strategic merge on a custom resource), 404, 409,
/// 400/422 for bad patches or results.
pub(crate) fn patch(
    state: &State,
    target: &Target,
    query: &Query,
    user_agent: &str,
    content_type: &str,
    body: &[u8],
) -> ApiResult<Written> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let r = &target.resource;
    let mut supported = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    if !r.custom {
        supported.push("application/strategic-merge-patch+json");
    }
    if !supported.contains(&media) {
        return Err(ApiError::unsupported_media_type(media, &supported));
    }
    if media == "application/apply-patch+yaml" {
        return apply(state, target, query, body);
    }
    let patch_value = decode_body(media, body)?;
    let json_ops: Option<json_patch::Patch> = if media == "application/json-patch+json" {
        Some(serde_json::from_value(patch_value.clone()).map_err(|e| {
            ApiError::bad_request(format!("the JSON patch could not be decoded: {e}"))
        })?)
    } else {
        None
    };
    // Patches apply to the latest object: retry when another writer got in between,
    // unless the patch itself names a resourceVersion (then that is a precondition).
    let mut attempts = 0;
    loop {
        attempts += 1;
        let old = current(state, target)?;
        let base = if target.subresource.as_deref() == Some("scale") {
            scale_of(target, &old)?
        } else {
            present(target, &old)
        };
        let mut patched = base;
        match (&json_ops, media) {
            (Some(ops), _) => json_patch::patch(&mut patched, ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch could not be applied: {e}"),
                )
            })?,
            (None, "application/merge-patch+json") => json_patch::merge(&mut patched, &patch_value),
            (None, _) => strategic_merge(&mut patched, &patch_value),
        }
        let named = body_rv(&patched)?.filter(|rv| *rv != rv_of(&old));
        let expected = named.or(Some(rv_of(&old)));
        let result = if target.subresource.as_deref() == Some("scale") {
            let replicas = patched["spec"]["replicas"].clone();
            set_scale(state, target, query, user_agent, &old, replicas, expected)
        } else {
            let m = manager(query, user_agent);
            write(state, target, query, &old, patched, Some(&m), expected)
        };
        match result {
            Err(e)
                if e.code == 409 && e.reason == "Conflict" && named.is_none() && attempts < 8 => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategic_merge_merges_named_lists() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        strategic_merge(
            &mut pod,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "a", "image": "z"}, {"name": "b", "$patch": "delete"}]}}),
        );
        assert_eq!(
            pod,
            json!({"spec": {"containers": [{"name": "a", "image": "z"}]}})
        );
    }
}
