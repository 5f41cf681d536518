//! GET of one object and LIST of a collection.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::selector::{FieldSelector, LabelSelector};
use crate::state::State;
use crate::status::{ApiError, ApiResult, Cause};

use super::scale::scale_of;
use super::{Query, Target, present};

/// GET of one object (or its status).
///
/// # Errors
/// 404 when it does not exist.
pub(crate) fn get(state: &State, target: &Target) -> ApiResult<Value> {
    let name = target.name();
    let object = state
        .store
        .get(&target.resource.key(), target.ns(), name)
        .ok_or_else(|| target.not_found(name))?;
    if target.subresource.as_deref() == Some("scale") {
        return scale_of(target, &object);
    }
    Ok(present(target, &object))
}

/// The selectors, limit and continue token of a list or watch.
pub(crate) struct ListOptions {
    /// `labelSelector`.
    pub(crate) labels: LabelSelector,
    /// `fieldSelector`.
    pub(crate) fields: FieldSelector,
}

impl ListOptions {
    /// Parse from the query.
    ///
    /// # Errors
    /// 400 for malformed selectors.
    pub(crate) fn read(query: &Query, kind: &str) -> ApiResult<Self> {
        Ok(Self {
            labels: LabelSelector::parse(query.get("labelSelector").unwrap_or_default())?,
            fields: FieldSelector::parse(query.get("fieldSelector").unwrap_or_default(), kind)?,
        })
    }

    /// Whether an object is selected.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }
}

fn encode_continue(rv: u64, start: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "start": start}).to_string())
}

fn decode_continue(token: &str) -> ApiResult<(u64, String)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().ok_or_else(bad)?,
        v["start"].as_str().ok_or_else(bad)?.to_string(),
    ))
}

fn sort_key(object: &Value) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// LIST with selectors, `limit`/`continue` and `resourceVersion`/`resourceVersionMatch`.
///
/// # Errors
/// 400 for bad parameters, 410 for an expired continue token or an RV no longer kept.
pub(crate) fn list(state: &State, target: &Target, query: &Query) -> ApiResult<Value> {
    let options = ListOptions::read(query, &target.resource.kind)?;
    let rv_param = query.get("resourceVersion").filter(|s| !s.is_empty());
    let rv_match = query.get("resourceVersionMatch").filter(|s| !s.is_empty());
    let asked_rv = match rv_param {
        None => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion: {s}")))?,
        ),
    };
    if rv_match.is_some() && asked_rv.is_none() {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
                field: "resourceVersionMatch".into(),
            }],
        ));
    }
    let limit: usize = match query.get("limit") {
        None | Some("") => 0,
        Some(s) => s
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {s}")))?,
    };
    let ns = if target.resource.namespaced {
        target.namespace.as_deref()
    } else {
        None
    };
    let (items, current_rv) = state.store.list(&target.resource.key(), ns);
    if let Some(rv) = asked_rv {
        match rv_match {
            Some("Exact") if rv != current_rv => {
                return Err(ApiError::gone(rv, state.store.oldest_rv()));
            }
            Some("Exact" | "NotOlderThan") | None => {
                if rv > current_rv {
                    return Err(ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {rv}, current: {current_rv}"),
                    ));
                }
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch \"{other}\" is invalid: supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
        }
    }
    let mut list_rv = current_rv;
    let mut start = String::new();
    if let Some(token) = query.get("continue").filter(|s| !s.is_empty()) {
        let (rv, key) = decode_continue(token)?;
        if rv < state.store.oldest_rv() {
            return Err(ApiError::new(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            ));
        }
        list_rv = rv;
        start = key;
    }
    let selected: Vec<&Arc<Value>> = items
        .iter()
        .filter(|o| start.is_empty() || sort_key(o) > start)
        .filter(|o| options.matches(o))
        .collect();
    let total = selected.len();
    let take = if limit == 0 { total } else { limit.min(total) };
    let page: Vec<Value> = selected[..take]
        .iter()
        .map(|o| present(target, o))
        .collect();
    state.listed.add(&target.resource, page.len());
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if take < total {
        let last = sort_key(&page[take - 1]);
        metadata["continue"] = json!(encode_continue(list_rv, &last));
        metadata["remainingItemCount"] = json!(total - take);
    }
    Ok(json!({
        "kind": target.resource.list_kind,
        "apiVersion": target.api_version(),
        "metadata": metadata,
        "items": page,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(42, "default/x");
        assert_eq!(
            decode_continue(&token).unwrap(),
            (42, "default/x".to_string())
        );
        assert_eq!(decode_continue("%%%").unwrap_err().code, 400);
    }
}
