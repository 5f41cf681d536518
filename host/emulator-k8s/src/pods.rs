//! What the pod subresources served by the kubelet (`exec`, `log`) share: the pod, and
//! the container a request means, chosen and checked as the API server does before it
//! calls the kubelet.

use std::sync::Arc;

use serde_json::Value;

use crate::state::State;
use crate::status::{ApiError, ApiResult};

/// The pod `namespace/name`, or the API server's 404.
pub(crate) fn get(state: &State, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
    state
        .store
        .get("/pods", namespace, name)
        .ok_or_else(|| ApiError::not_found("pods", name).with_details(name, "", "pods"))
}

/// The container `asked` names (empty or absent: the pod's only one), as the API
/// server's `validateContainer` chooses it: a name of any of the pod's init, regular or
/// ephemeral containers, listed in that order when the choice is the client's to make.
pub(crate) fn container(pod: &Value, name: &str, asked: Option<&str>) -> ApiResult<String> {
    let names: Vec<&str> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|field| pod["spec"][field].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match pod["spec"]["containers"].as_array().map(Vec::as_slice) {
            Some([only]) => Ok(only["name"].as_str().unwrap_or_default().to_string()),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            ))),
        },
    }
}
