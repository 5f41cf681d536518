//! The resource verbs: create, get, list, update, patch (JSON merge, JSON, strategic
//! merge for built-ins, server-side apply), delete, deletecollection, and the status and
//! scale subresources, with `dryRun`, `fieldValidation`, `fieldManager` and preconditions.
//! Watches live in [`crate::watch`].
//!
//! One module per job: `validate` checks an object about to be written,
//! `defaults` fills in what the API server does on create, `write` creates and
//! updates, `patch` runs the patch engines, `apply` is server-side apply,
//! `scale` the scale subresource, `delete` single and collection deletes, and
//! `read` get and list.

mod admission;
mod apply;
mod defaults;
mod delete;
mod patch;
mod protobuf;
mod read;
mod scale;
mod validate;
mod write;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::registry::Resource;
use crate::state::State;
use crate::status::{ApiError, ApiResult};
use crate::store::StoreError;

pub(crate) use delete::{DeleteOptions, delete, delete_collection};
pub(crate) use patch::patch;
pub(crate) use read::{ListOptions, get, list};
pub(crate) use write::{create, update};

/// The largest request body the server reads (as the real API server: 3 MiB).
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// What a request addresses.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The resource.
    pub(crate) resource: Arc<Resource>,
    /// The version in the URL.
    pub(crate) version: String,
    /// The namespace in the URL (None: cluster-scoped or all namespaces).
    pub(crate) namespace: Option<String>,
    /// The object name, for item requests.
    pub(crate) name: Option<String>,
    /// `status`, `scale`, `exec`, …
    pub(crate) subresource: Option<String>,
}

impl Target {
    fn ns(&self) -> &str {
        if self.resource.namespaced {
            self.namespace.as_deref().unwrap_or_default()
        } else {
            ""
        }
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    fn api_version(&self) -> String {
        self.resource.api_version(&self.version)
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(&self.resource.qualified(), name).with_details(
            name,
            &self.resource.group,
            &self.resource.plural,
        )
    }

    fn has_status(&self) -> bool {
        self.resource
            .version(&self.version)
            .is_some_and(|v| v.status)
    }
}

/// The query parameters a request carries (decoded, `+` as a space).
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(pub(crate) Vec<(String, String)>);

impl Query {
    /// Parse a raw query string.
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// The first value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A boolean parameter as the API server decodes one: absent, `0` or
    /// `false` in any case is false, anything else true — Python clients
    /// send `watch=True`, and `?watch` alone is a watch.
    pub(crate) fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|value| value != "0" && !value.eq_ignore_ascii_case("false"))
    }

    /// `dryRun=All`.
    ///
    /// # Errors
    /// A 400 for any other value.
    pub(crate) fn dry_run(&self) -> ApiResult<bool> {
        match self.all("dryRun").as_slice() {
            [] => Ok(false),
            ["All"] => Ok(true),
            other => Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other:?}, supported values: [\"All\"]"
            ))),
        }
    }

    /// `fieldValidation`: Strict, Warn (the default) or Ignore.
    ///
    /// # Errors
    /// A 400 for any other value.
    pub(crate) fn field_validation(&self) -> ApiResult<&str> {
        match self.get("fieldValidation").unwrap_or("Warn") {
            v @ ("Strict" | "Warn" | "Ignore") => Ok(v),
            "" => Ok("Warn"),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation \"{other}\" is invalid, valid values are: Ignore, Warn, Strict"
            ))),
        }
    }
}

/// What a write answers: the object, its HTTP code, and any `Warning` headers.
pub(crate) struct Written {
    /// 200 or 201.
    pub(crate) code: u16,
    /// The object as stored (or as it would be, under dry run).
    pub(crate) object: Value,
    /// Warnings for unknown fields under `fieldValidation=Warn`.
    pub(crate) warnings: Vec<String>,
}

/// Decode a request body as JSON, YAML or (for the built-in kinds kubectl's
/// typed clients send so) protobuf, by content type.
///
/// # Errors
/// A 400 naming the decode error, or a 415 for an unknown type.
pub(crate) fn decode_body(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let value: Value = match media {
        "application/json"
        | ""
        | "application/merge-patch+json"
        | "application/strategic-merge-patch+json"
        | "application/json-patch+json" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request could not be decoded as JSON: {e}"
            ))
        })?,
        "application/yaml" | "application/apply-patch+yaml" => serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
        protobuf::PROTOBUF => protobuf::decode(body)?,
        other => {
            return Err(ApiError::unsupported_media_type(
                other,
                &["application/json", "application/yaml"],
            ));
        }
    };
    Ok(value)
}

fn store_error(target: &Target, name: &str, err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => target.not_found(name),
        StoreError::AlreadyExists => ApiError::already_exists(&target.resource.qualified(), name)
            .with_details(name, &target.resource.group, &target.resource.plural),
        StoreError::Conflict => ApiError::stale(&target.resource.qualified(), name).with_details(
            name,
            &target.resource.group,
            &target.resource.plural,
        ),
        StoreError::Gone { asked, oldest } => ApiError::gone(asked, oldest),
    }
}

/// The object as served at the request's version.
pub(crate) fn present(target: &Target, object: &Value) -> Value {
    let mut out = object.clone();
    out["apiVersion"] = json!(target.api_version());
    out["kind"] = json!(target.resource.kind);
    out
}

fn default_manager(user_agent: &str) -> String {
    let head = user_agent.split('/').next().unwrap_or_default().trim();
    if head.is_empty() {
        "unknown".into()
    } else {
        head.into()
    }
}

fn manager(query: &Query, user_agent: &str) -> String {
    query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .map_or_else(|| default_manager(user_agent), str::to_string)
}

fn current(state: &State, target: &Target) -> ApiResult<Arc<Value>> {
    let name = target.name();
    state
        .store
        .get(&target.resource.key(), target.ns(), name)
        .ok_or_else(|| target.not_found(name))
}

fn body_rv(object: &Value) -> ApiResult<Option<u64>> {
    match object["metadata"]["resourceVersion"].as_str() {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!("invalid resourceVersion \"{s}\" in metadata"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::Query;

    #[test]
    fn flags_decode_as_the_api_server_decodes_them() {
        let query = Query::parse(Some("a=True&b=1&c=&d=FALSE&e=0&f=false&g=yes"));
        let set: Vec<bool> = ["a", "b", "c", "d", "e", "f", "g", "absent"]
            .iter()
            .map(|key| query.flag(key))
            .collect();
        assert_eq!(set, [true, true, true, false, false, false, true, false]);
    }
}
