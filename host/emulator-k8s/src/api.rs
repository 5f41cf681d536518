//! The resource verbs: create, get, list, update, patch (JSON merge, JSON, strategic
//! merge for built-ins, server-side apply), delete, deletecollection, and the status and
//! scale subresources, with `dryRun`, `fieldValidation`, `fieldManager` and preconditions.
//! Watches live in [`crate::watch`].

use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use crate::fields;
use crate::registry::{Resource, resource_from_crd};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::State;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{Deleted, StoreError, rv_of};

/// The largest request body the server reads (as the real API server: 3 MiB).
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;
/// The most a single object's annotations may hold.
const MAX_ANNOTATIONS: usize = 256 * 1024;

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

    /// A boolean parameter (`true`/`1`).
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
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

/// Decode a request body as JSON or YAML (by content type).
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
        other => {
            return Err(ApiError::unsupported_media_type(
                other,
                &["application/json", "application/yaml"],
            ));
        }
    };
    Ok(value)
}

fn check_identity(target: &Target, object: &Value) -> ApiResult<()> {
    let expected = target.api_version();
    let r = &target.resource;
    let av = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    if !av.is_empty() && av != expected {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({expected})"
        )));
    }
    if !kind.is_empty() && kind != r.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({}) for {}",
            r.kind,
            r.qualified()
        )));
    }
    if let Some(ns) = object["metadata"]["namespace"].as_str()
        && r.namespaced
        && !ns.is_empty()
        && Some(ns) != target.namespace.as_deref()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Validate an object about to be written; prunes unknown fields of custom resources.
/// Returns the warnings to send.
fn validate(
    target: &Target,
    object: &mut Value,
    validation: &str,
    creating: bool,
) -> ApiResult<Vec<String>> {
    let r = &target.resource;
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the body of the request is not a {} object",
            r.kind
        )));
    }
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let display = if name.is_empty() {
        object["metadata"]["generateName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        name.clone()
    };
    let mut causes = Vec::new();
    if creating
        && name.is_empty()
        && object["metadata"]["generateName"]
            .as_str()
            .is_none_or(str::is_empty)
    {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: name or generateName is required".into(),
            field: "metadata.name".into(),
        });
    } else if !name.is_empty() && !is_dns_subdomain(&name) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
            field: "metadata.name".into(),
        });
    }
    if let Some(annotations) = object["metadata"]["annotations"].as_object() {
        let size: usize = annotations
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > MAX_ANNOTATIONS {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: format!("Too long: may not be more than {MAX_ANNOTATIONS} bytes"),
                field: "metadata.annotations".into(),
            });
        }
    }
    let mut warnings = Vec::new();
    if let Some(schema) = r.version(&target.version).and_then(|v| v.schema.as_ref()) {
        let findings = schema::validate(schema, object);
        causes.extend(findings.causes);
        if !findings.unknown.is_empty() {
            match validation {
                "Strict" => {
                    let list: Vec<String> = findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        r.kind,
                        target.version,
                        r.kind,
                        list.join(", ")
                    )));
                }
                "Warn" => warnings.extend(
                    findings
                        .unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\"")),
                ),
                _ => {}
            }
        }
    }
    if r.group.is_empty() && r.plural == "pods" {
        let containers = object["spec"]["containers"].as_array();
        if containers.is_none_or(Vec::is_empty) {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.containers".into(),
            });
        }
        for (i, c) in containers.into_iter().flatten().enumerate() {
            for field in ["name", "image"] {
                if c[field].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: format!("spec.containers[{i}].{field}"),
                    });
                }
            }
        }
    }
    if r.group == "apiextensions.k8s.io" {
        resource_from_crd(object)?;
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(&r.kind, &r.group, &display, causes));
    }
    Ok(warnings)
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

/// Built-in defaults the API server fills in on create. A container's
/// `imagePullPolicy` is Kubernetes' default (`Always` for `:latest` or no tag, else
/// `IfNotPresent`), except for an image mapped to a directory, which is only ever on
/// the nodes (as an image loaded into a kind cluster is): `IfNotPresent`.
fn defaults(state: &State, target: &Target, object: &mut Value) {
    let r = &target.resource;
    match (r.group.as_str(), r.plural.as_str()) {
        ("", "pods") => {
            let spec = &mut object["spec"];
            for (k, v) in [
                ("restartPolicy", json!("Always")),
                ("dnsPolicy", json!("ClusterFirst")),
                ("schedulerName", json!("default-scheduler")),
                ("terminationGracePeriodSeconds", json!(30)),
                ("serviceAccountName", json!("default")),
            ] {
                if spec.get(k).is_none() {
                    spec[k] = v;
                }
            }
            for field in ["initContainers", "containers"] {
                for c in spec[field].as_array_mut().into_iter().flatten() {
                    if c.get("imagePullPolicy").is_none() {
                        let image = c["image"].as_str().unwrap_or_default();
                        let policy = if state.runtime.is_directory(image) {
                            "IfNotPresent".to_string()
                        } else {
                            crate::kubelet::default_pull_policy(image)
                        };
                        c["imagePullPolicy"] = json!(policy);
                    }
                    if c.get("terminationMessagePath").is_none() {
                        c["terminationMessagePath"] = json!("/dev/termination-log");
                    }
                }
            }
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("", "namespaces") => {
            object["spec"] = json!({"finalizers": ["kubernetes"]});
            object["status"] = json!({"phase": "Active"});
            let name = object["metadata"]["name"].clone();
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
        }
        ("", "services") => {
            if object["spec"].get("type").is_none() {
                object["spec"]["type"] = json!("ClusterIP");
            }
            if object["spec"].get("clusterIP").is_none() {
                // Loopback only: nothing may ever send traffic to another range.
                let n = uuid::Uuid::new_v4().as_bytes()[0..2].to_vec();
                let ip = format!("127.43.{}.{}", n[0], n[1].max(1));
                object["spec"]["clusterIP"] = json!(ip);
                object["spec"]["clusterIPs"] = json!([ip]);
            }
            object["status"] = json!({"loadBalancer": {}});
        }
        ("", "persistentvolumeclaims") => {
            object["status"] = json!({"phase": "Pending"});
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_status(object),
        _ => {
            if target.has_status()
                && let Some(map) = object.as_object_mut()
            {
                map.remove("status");
            }
        }
    }
}

fn crd_status(object: &mut Value) {
    let now = crate::store::now_rfc3339();
    let names = object["spec"]["names"].clone();
    let mut accepted = names;
    if accepted.get("singular").is_none()
        && let Some(kind) = accepted["kind"].as_str()
    {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(kind) = accepted["kind"].as_str()
    {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let stored: Vec<Value> = object["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == json!(true))
        .map(|v| v["name"].clone())
        .collect();
    object["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    });
}

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
    let warnings = validate(target, &mut object, validation, true)?;
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
fn store_new(
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

fn ensure_namespace(state: &State, target: &Target) -> ApiResult<()> {
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
fn write(
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
    let warnings = validate(target, &mut new, validation, false)?;
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

/// Server-side apply: upsert with managed fields and field-manager conflicts.
fn apply(state: &State, target: &Target, query: &Query, body: &[u8]) -> ApiResult<Written> {
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
            let warnings = validate(target, &mut object, validation, true)?;
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

fn scale_of(target: &Target, object: &Value) -> ApiResult<Value> {
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

fn set_scale(
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
