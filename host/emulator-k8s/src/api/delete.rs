//! DELETE of one object or of a collection.

use serde_json::{Value, json};

use crate::registry::resource_from_crd;
use crate::state::State;
use crate::status::{ApiError, ApiResult};
use crate::store::Deleted;

use super::read::ListOptions;
use super::{Query, Target, current, present, store_error};

/// The delete options a request carries (body or query).
#[derive(Debug, Default)]
pub(crate) struct DeleteOptions {
    /// Background, Foreground or Orphan.
    pub(crate) propagation: String,
    /// `preconditions.uid`.
    pub(crate) uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub(crate) rv: Option<u64>,
    /// `dryRun: ["All"]`.
    pub(crate) dry_run: bool,
}

impl DeleteOptions {
    /// Read options from the body (DeleteOptions JSON) and the query.
    ///
    /// # Errors
    /// 400 for an unknown propagation policy or a malformed body.
    pub(crate) fn read(query: &Query, body: &[u8]) -> ApiResult<Self> {
        let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the DeleteOptions body could not be decoded: {e}"))
            })?
        };
        let mut propagation = body["propagationPolicy"]
            .as_str()
            .or(query.get("propagationPolicy"))
            .unwrap_or("Background")
            .to_string();
        if body["orphanDependents"] == json!(true) || query.flag("orphanDependents") {
            propagation = "Orphan".into();
        }
        if !matches!(propagation.as_str(), "Background" | "Foreground" | "Orphan") {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy \"{propagation}\" is invalid: supported values: \"Orphan\", \"Background\", \"Foreground\""
            )));
        }
        let dry_run = query.dry_run()? || body["dryRun"] == json!(["All"]);
        Ok(Self {
            propagation,
            uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            rv: body["preconditions"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok()),
            dry_run,
        })
    }
}

/// DELETE of one object. Foreground and Orphan add the finalizer the garbage collector
/// acts on; Background removes the object now and its dependents after.
///
/// # Errors
/// 404, 409 when a precondition fails, 403 for the built-in namespaces.
pub(crate) fn delete(state: &State, target: &Target, options: &DeleteOptions) -> ApiResult<Value> {
    let name = target.name().to_string();
    let key = target.resource.key();
    let old = current(state, target)?;
    let r = &target.resource;
    if r.group.is_empty()
        && r.plural == "namespaces"
        && crate::seed::PROTECTED_NAMESPACES.contains(&name.as_str())
    {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
        ));
    }
    let finalizer = match options.propagation.as_str() {
        "Foreground" => Some("foregroundDeletion"),
        "Orphan" => Some("orphan"),
        _ => None,
    };
    if let Some(f) = finalizer
        && old["metadata"].get("deletionTimestamp").is_none()
        && !options.dry_run
    {
        let mut marked = (*old).clone();
        let list = marked["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !list.iter().any(|x| x == f) {
            let mut list = list;
            list.push(json!(f));
            marked["metadata"]["finalizers"] = Value::Array(list);
            state
                .store
                .update(&key, target.ns(), &name, marked, options.rv, false)
                .map_err(|e| store_error(target, &name, e))?;
        }
    }
    if r.group.is_empty() && r.plural == "namespaces" && !options.dry_run {
        crate::gc::empty_namespace(state, &name);
    }
    if r.group == "apiextensions.k8s.io"
        && !options.dry_run
        && let Ok(custom) = resource_from_crd(&old)
    {
        let ckey = custom.key();
        let (items, _) = state.store.list(&ckey, None);
        for item in items {
            let ns = item["metadata"]["namespace"].as_str().unwrap_or_default();
            let n = item["metadata"]["name"].as_str().unwrap_or_default();
            let _ = state.store.delete(&ckey, ns, n, (None, None), false);
        }
        state.registry.unregister(&custom.group, &custom.plural);
    }
    let result = state
        .store
        .delete(
            &key,
            target.ns(),
            &name,
            (options.uid.as_deref(), options.rv),
            options.dry_run,
        )
        .map_err(|e| store_error(target, &name, e))?;
    let object = match result {
        Deleted::Removed(o) | Deleted::Pending(o) => o,
    };
    Ok(present(target, &object))
}

/// DELETE of a collection: every selected object, one by one.
///
/// # Errors
/// 400 for bad selectors or options.
pub(crate) fn delete_collection(
    state: &State,
    target: &Target,
    query: &Query,
    body: &[u8],
) -> ApiResult<Value> {
    let options = ListOptions::read(query, &target.resource.kind)?;
    let delete_options = DeleteOptions::read(query, body)?;
    let ns = if target.resource.namespaced {
        target.namespace.as_deref()
    } else {
        None
    };
    let (items, _) = state.store.list(&target.resource.key(), ns);
    let mut deleted = Vec::new();
    for item in items.iter().filter(|o| options.matches(o)) {
        let one = Target {
            namespace: item["metadata"]["namespace"].as_str().map(str::to_string),
            name: item["metadata"]["name"].as_str().map(str::to_string),
            ..target.clone()
        };
        match delete(state, &one, &delete_options) {
            Ok(o) => deleted.push(o),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json!({
        "kind": target.resource.list_kind,
        "apiVersion": target.api_version(),
        "metadata": {"resourceVersion": state.store.current_rv().to_string()},
        "items": deleted,
    }))
}
