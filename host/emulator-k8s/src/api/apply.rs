//! Server-side apply.

use serde_json::json;

use crate::fields;
use crate::state::State;
use crate::status::{ApiError, ApiResult, Cause};

use super::admission;
use super::defaults::defaults;
use super::validate::{check_identity, validate};
use super::write::{ensure_namespace, store_new, write};
use super::{Query, Target, Written, decode_body, present, store_error};

/// Server-side apply: upsert with managed fields and field-manager conflicts.
pub(super) fn apply(
    state: &State,
    target: &Target,
    query: &Query,
    body: &[u8],
) -> ApiResult<Written> {
    let manager = query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::bad_request("fieldManager is required for apply requests"))?
        .to_string();
    let force = query.flag("force");
    let applied = decode_body("application/apply-patch+yaml", body)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply patch is not an object"));
    }
    let av = applied["apiVersion"].as_str().unwrap_or_default();
    let kind = applied["kind"].as_str().unwrap_or_default();
    if av.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request(
            "apiVersion and kind must be set in an apply patch",
        ));
    }
    check_identity(target, &applied)?;
    let name = target.name().to_string();
    if let Some(n) = applied["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    let sub = target.subresource.clone().unwrap_or_default();
    let old = state.store.get(&target.resource.key(), target.ns(), &name);
    let merged = fields::apply(
        old.as_deref(),
        &applied,
        &manager,
        &target.api_version(),
        &sub,
        force,
    )
    .map_err(|conflicts| {
        let causes = conflicts
            .iter()
            .map(|c| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with \"{}\" using {}", c.manager, c.api_version),
                field: fields::display(&c.path),
            })
            .collect();
        ApiError {
            causes,
            ..ApiError::new(409, "Conflict", fields::conflict_message(&conflicts)).with_details(
                &name,
                &target.resource.group,
                &target.resource.plural,
            )
        }
    })?;
    match old {
        None => {
            let mut object = merged;
            object["metadata"]["name"] = json!(name);
            let managed = object["metadata"]["managedFields"].clone();
            let dry_run = query.dry_run()?;
            let validation = query.field_validation()?;
            ensure_namespace(state, target)?;
            let warnings = validate(target, &mut object, validation, None)?;
            admission::admit(state, target, &mut object)?;
            object["apiVersion"] = json!(target.api_version());
            object["kind"] = json!(target.resource.kind);
            defaults(state, target, &mut object);
            object["metadata"]["managedFields"] = managed;
            store_new(state, target, &name, object, dry_run, warnings)
        }
        Some(old) => {
            let managed = merged["metadata"]["managedFields"].clone();
            let mut new = merged;
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            let mut written = write(state, target, query, &old, new, None, None);
            // `write` kept the old managed fields; apply recorded new ones.
            if let Ok(w) = &mut written
                && !query.dry_run()?
            {
                let mut fixed = (*state
                    .store
                    .get(&target.resource.key(), target.ns(), &name)
                    .ok_or_else(|| target.not_found(&name))?)
                .clone();
                if fixed["metadata"]["managedFields"] != managed {
                    fixed["metadata"]["managedFields"] = managed;
                    let stored = state
                        .store
                        .update(
                            &target.resource.key(),
                            target.ns(),
                            &name,
                            fixed,
                            None,
                            false,
                        )
                        .map_err(|e| store_error(target, &name, e))?;
                    w.object = present(target, &stored);
                }
            }
            written
        }
    }
}
