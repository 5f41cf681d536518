//! Creates and updates, and the common end of every write.

use serde_json::{Value, json};

use crate::fields;
use crate::registry::resource_from_crd;
use crate::state::State;
use crate::status::{ApiError, ApiResult};

use super::admission;
use super::defaults::{crd_status, defaults};
use super::scale::set_scale;
use super::validate::{check_identity, validate};
use super::{Query, Target, Written, body_rv, current, manager, present, store_error};

/// Keep what the endpoint may not change: the main resource of a kind with a status
/// subresource keeps its status; the status subresource changes only status.
fn restrict_to_endpoint(target: &Target, old: &Value, new: Value) -> Value {
    match target.subresource.as_deref() {
        Some("status") => {
            let mut out = old.clone();
            match new.get("status") {
                Some(status) => out["status"] = status.clone(),
                None => {
                    if let Some(map) = out.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            out["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
            out
        }
        _ if target.has_status() => {
            let mut out = new;
            match old.get("status") {
                Some(status) => out["status"] = status.clone(),
                None => {
                    if let Some(map) = out.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            out
        }
        _ => new,
    }
}

/// Side effects of a CRD write: serve (or stop serving) its resource.
fn after_crd_write(state: &State, target: &Target, object: &Value) {
    if target.resource.group == "apiextensions.k8s.io"
        && let Ok(resource) = resource_from_crd(object)
    {
        state.registry.register(resource);
    }
}

/// POST to a collection.
///
/// # Errors
/// 400 for bad bodies, 404 for a missing namespace, 409 when the name is taken, 422 for
/// invalid objects.
pub(crate) fn create(
    state: &State,
    target: &Target,
    query: &Query,
    user_agent: &str,
    mut object: Value,
) -> ApiResult<Written> {
    let dry_run = query.dry_run()?;
    let validation = query.field_validation()?;
    check_identity(target, &object)?;
    ensure_namespace(state, target)?;
    let warnings = validate(target, &mut object, validation, None)?;
    admission::admit(state, target, &mut object)?;
    object["apiVersion"] = json!(target.api_version());
    object["kind"] = json!(target.resource.kind);
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("managedFields");
        meta.remove("resourceVersion");
    }
    defaults(state, target, &mut object);
    fields::record_update(
        None,
        &mut object,
        &manager(query, user_agent),
        &target.api_version(),
        "",
    );
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    store_new(state, target, &name, object, dry_run, warnings)
}

/// Stores a new object and answers 201 with it.
pub(super) fn store_new(
    state: &State,
    target: &Target,
    name: &str,
    object: Value,
    dry_run: bool,
    warnings: Vec<String>,
) -> ApiResult<Written> {
    let made = state
        .store
        .create(&target.resource.key(), target.ns(), object, dry_run)
        .map_err(|e| store_error(target, name, e))?;
    if !dry_run {
        after_crd_write(state, target, &made);
    }
    Ok(Written {
        code: 201,
        object: present(target, &made),
        warnings,
    })
}

pub(super) fn ensure_namespace(state: &State, target: &Target) -> ApiResult<()> {
    if !target.resource.namespaced {
        return Ok(());
    }
    let ns = target.ns();
    match state.store.get("/namespaces", "", ns) {
        Some(n) if n["metadata"].get("deletionTimestamp").is_some() => Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                target.resource.qualified(),
                target.name()
            ),
        )),
        Some(_) => Ok(()),
        None => Err(ApiError::not_found("namespaces", ns).with_details(ns, "", "namespaces")),
    }
}

/// Write `new` over the stored `old` (the common end of PUT and every PATCH).
pub(super) fn write(
    state: &State,
    target: &Target,
    query: &Query,
    old: &Value,
    mut new: Value,
    manager_name: Option<&str>,
    expected_rv: Option<u64>,
) -> ApiResult<Written> {
    let dry_run = query.dry_run()?;
    let validation = query.field_validation()?;
    let name = target.name().to_string();
    check_identity(target, &new)?;
    let warnings = validate(target, &mut new, validation, Some(old))?;
    if let Some(meta_name) = new["metadata"]["name"].as_str()
        && meta_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({meta_name}) does not match the name on the URL ({name})"
        )));
    }
    new["apiVersion"] = json!(target.api_version());
    new["kind"] = json!(target.resource.kind);
    let mut new = restrict_to_endpoint(target, old, new);
    if target.resource.group == "apiextensions.k8s.io" {
        crd_status(&mut new);
    }
    if let Some(m) = manager_name {
        let sub = target.subresource.clone().unwrap_or_default();
        fields::record_update(Some(old), &mut new, m, &target.api_version(), &sub);
    } else if let Some(mf) = old["metadata"].get("managedFields") {
        new["metadata"]["managedFields"] = mf.clone();
    }
    let written = state
        .store
        .update(
            &target.resource.key(),
            target.ns(),
            &name,
            new,
            expected_rv,
            dry_run,
        )
        .map_err(|e| store_error(target, &name, e))?;
    if !dry_run {
        after_crd_write(state, target, &written);
    }
    Ok(Written {
        code: 200,
        object: present(target, &written),
        warnings,
    })
}

/// PUT of an object (or its status or scale).
///
/// # Errors
/// 404, 409 on a stale resourceVersion, 400/422 for bad bodies.
pub(crate) fn update(
    state: &State,
    target: &Target,
    query: &Query,
    user_agent: &str,
    object: Value,
) -> ApiResult<Written> {
    let old = current(state, target)?;
    if target.subresource.as_deref() == Some("scale") {
        let replicas = object["spec"]["replicas"].clone();
        return set_scale(
            state,
            target,
            query,
            user_agent,
            &old,
            replicas,
            body_rv(&object)?,
        );
    }
    let expected = body_rv(&object)?;
    let m = manager(query, user_agent);
    write(state, target, query, &old, object, Some(&m), expected)
}
