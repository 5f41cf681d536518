//! Admission of new objects, as the API server's default admission plugins
//! do it for the kinds the emulator runs. RuntimeClass
//! (`plugin/pkg/admission/runtimeclass`): a pod naming a RuntimeClass that
//! does not exist is refused with 403, and one naming a class with
//! `overhead.podFixed` gets it as `spec.overhead`.

use serde_json::Value;

use crate::client::RUNTIME_CLASSES;
use crate::state::State;
use crate::status::{ApiError, ApiResult};

use super::Target;

/// Admit `object`, about to be created at `target`.
///
/// # Errors
/// 403 for a pod whose RuntimeClass does not exist.
pub(super) fn admit(state: &State, target: &Target, object: &mut Value) -> ApiResult<()> {
    let r = &target.resource;
    if !(r.group.is_empty() && r.plural == "pods") {
        return Ok(());
    }
    let Some(class_name) = object["spec"]["runtimeClassName"].as_str() else {
        return Ok(());
    };
    let Some(class) = state.store.get(&RUNTIME_CLASSES.key(), "", class_name) else {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} is forbidden: pod rejected: RuntimeClass \"{class_name}\" not found",
                which_pod(object)
            ),
        )
        .with_details(name_of(object), "", "pods"));
    };
    let fixed = &class["overhead"]["podFixed"];
    match object["spec"]["overhead"].clone() {
        Value::Null if fixed.is_object() => object["spec"]["overhead"] = fixed.clone(),
        Value::Null => {}
        asked if asked != *fixed => {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
                    which_pod(object)
                ),
            )
            .with_details(name_of(object), "", "pods"));
        }
        _ => {}
    }
    Ok(())
}

fn name_of(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().unwrap_or_default()
}

/// The pod as a refusal names it: the plugin admits before a generated name
/// is given, so a pod asked for by generateName is named by its kind alone.
fn which_pod(pod: &Value) -> String {
    match name_of(pod) {
        "" => "pods".to_string(),
        name => format!("pods \"{name}\""),
    }
}
