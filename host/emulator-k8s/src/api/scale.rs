//! The scale subresource: replicas and selector read from, and written to,
//! the paths a resource declares.

use serde_json::{Value, json};

use crate::fields;
use crate::state::State;
use crate::status::{ApiError, ApiResult, Cause};

use super::write::write;
use super::{Query, Target, Written, manager, present};

fn path_segments(path: &str) -> Vec<String> {
    path.trim_start_matches('.')
        .split('.')
        .map(str::to_string)
        .collect()
}

fn scale_paths(target: &Target) -> ApiResult<crate::registry::ScalePaths> {
    target
        .resource
        .version(&target.version)
        .and_then(|v| v.scale.clone())
        .ok_or_else(|| ApiError::no_route(&format!("{}/scale", target.resource.plural)))
}

pub(super) fn scale_of(target: &Target, object: &Value) -> ApiResult<Value> {
    let paths = scale_paths(target)?;
    let read = |p: &str| fields::get(object, &path_segments(p)).cloned();
    let mut status = json!({"replicas": read(&paths.status_replicas).unwrap_or(json!(0))});
    if let Some(sel) = paths.label_selector.as_deref().and_then(read) {
        status["selector"] = sel;
    }
    let meta = &object["metadata"];
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": read(&paths.spec_replicas).unwrap_or(json!(0))},
        "status": status,
    }))
}

pub(super) fn set_scale(
    state: &State,
    target: &Target,
    query: &Query,
    user_agent: &str,
    old: &Value,
    replicas: Value,
    expected_rv: Option<u64>,
) -> ApiResult<Written> {
    let paths = scale_paths(target)?;
    if !replicas.is_u64() {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            target.name(),
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                field: "spec.replicas".into(),
            }],
        ));
    }
    let mut new = present(target, old);
    let segs = path_segments(&paths.spec_replicas);
    let mut cur = &mut new;
    for s in &segs[..segs.len() - 1] {
        if !cur[s.as_str()].is_object() {
            cur[s.as_str()] = json!({});
        }
        cur = &mut cur[s.as_str()];
    }
    cur[segs[segs.len() - 1].as_str()] = replicas;
    let main = Target {
        subresource: None,
        ..target.clone()
    };
    let m = manager(query, user_agent);
    let written = write(state, &main, query, old, new, Some(&m), expected_rv)?;
    let object = scale_of(target, &written.object)?;
    Ok(Written { object, ..written })
}
