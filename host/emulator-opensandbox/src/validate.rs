//! Checking a create request the way the real server does: pydantic's
//! checks become FastAPI 422s (`{"detail": [...]}`), the service's own
//! become `{code, message}` 400s (metadata labels, resource quantities).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::error::{ApiError, pydantic, value_error};
use crate::fleet::CreateSpec;

/// CPU and memory of a pooled sandbox created without `resourceLimits`.
const POOL_DEFAULT_CPU_MILLI: u32 = 1000;
const POOL_DEFAULT_MEMORY_MIB: u32 = 2048;

/// A map of strings at `field` (`null` or absent: empty); `nullable`
/// values (env) may be `null` and are then dropped.
fn string_map(
    body: &Map<String, Value>,
    field: &str,
    nullable: bool,
) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(value) = body.get(field).filter(|v| !v.is_null()) else {
        return Ok(BTreeMap::new());
    };
    let Some(object) = value.as_object() else {
        return Err(ApiError::validation(pydantic(
            "dict_type",
            &["body", field],
            "Input should be a valid dictionary",
            value.clone(),
            None,
        )));
    };
    let mut out = BTreeMap::new();
    for (key, v) in object {
        match v {
            Value::String(s) => {
                out.insert(key.clone(), s.clone());
            }
            Value::Null if nullable => {}
            other => {
                return Err(not_a_string(&["body", field, key], other));
            }
        }
    }
    Ok(out)
}

/// Kubernetes' label-name rule: 1-63 characters, alphanumeric at both
/// ends, `-`, `_` and `.` inside.
fn label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS subdomain (a label key's prefix): at most 253 characters of
/// dot-separated lowercase labels.
fn dns_subdomain(text: &str) -> bool {
    text.len() <= 253
        && text.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Checks one metadata entry against the Kubernetes label rules the server
/// applies.
pub(crate) fn metadata_label(key: &str, value: &str) -> Result<(), ApiError> {
    let invalid = |why: String| ApiError::bad_request("SANDBOX::INVALID_METADATA_LABEL", why);
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if !dns_subdomain(prefix) {
            return Err(invalid(format!(
                "Invalid metadata key '{key}': prefix '{prefix}' must be a DNS subdomain of at most 253 characters"
            )));
        }
        if prefix == "opensandbox.io" || prefix.ends_with(".opensandbox.io") {
            return Err(invalid(format!(
                "Invalid metadata key '{key}': the prefix 'opensandbox.io/' is reserved"
            )));
        }
    }
    if !label_name(name) {
        return Err(invalid(format!(
            "Invalid metadata key '{key}': name must be 1-63 characters, alphanumeric at both ends, \
             with '-', '_' or '.' inside"
        )));
    }
    if !value.is_empty() && !label_name(value) {
        return Err(invalid(format!(
            "Invalid metadata value '{value}' for key '{key}': must be empty or 1-63 characters, \
             alphanumeric at both ends, with '-', '_' or '.' inside"
        )));
    }
    Ok(())
}

/// A CPU quantity (`500m`, `1`, `0.5`) in millicores.
fn cpu_milli(text: &str) -> Option<u32> {
    let text = text.trim();
    if let Some(milli) = text.strip_suffix('m') {
        return milli.parse().ok().filter(|m| *m > 0);
    }
    let cores: f64 = text.parse().ok()?;
    (cores > 0.0 && cores < 1e6).then(|| (cores * 1000.0).ceil() as u32)
}

/// A memory quantity (`512Mi`, `2Gi`, `1G`, `1048576`) in MiB, rounded up.
fn memory_mib(text: &str) -> Option<u32> {
    let text = text.trim();
    let units: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0_f64.powi(4)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text, 1.0));
    let bytes = number.parse::<f64>().ok()? * scale;
    (bytes > 0.0 && bytes < 1e18).then(|| (bytes / (1024.0 * 1024.0)).ceil().max(1.0) as u32)
}

/// pydantic's `string_type` at `loc`.
fn not_a_string(loc: &[&str], input: &Value) -> ApiError {
    ApiError::validation(pydantic(
        "string_type",
        loc,
        "Input should be a valid string",
        input.clone(),
        None,
    ))
}

/// pydantic's `missing` at `loc`, in the object `input`.
fn missing(loc: &[&str], input: &Value) -> ApiError {
    ApiError::validation(pydantic(
        "missing",
        loc,
        "Field required",
        input.clone(),
        None,
    ))
}

/// pydantic's `model_type` at `loc`: `input` is not an object of model
/// `class`.
fn not_a_model(loc: &[&str], class: &str, input: &Value) -> ApiError {
    ApiError::validation(pydantic(
        "model_type",
        loc,
        &format!("Input should be a valid dictionary or instance of {class}"),
        input.clone(),
        Some(json!({"class_name": class})),
    ))
}

/// A refusal of something the request may ask for but the emulator cannot
/// give: FastAPI's 422 naming the field, so a client learns that its
/// request was not honoured instead of getting a sandbox without it.
fn not_honoured(field: &str, input: &Value, why: &str) -> ApiError {
    ApiError::validation(pydantic(
        "value_error",
        &["body", field],
        &format!("Value error, {field} is not supported by the sandfleet emulator: {why}"),
        input.clone(),
        Some(json!({"error": {}})),
    ))
}

/// `networkPolicy`, checked as the egress sidecar reads it (an empty or
/// missing `defaultAction` is `deny`, rules need an `allow` or `deny`
/// action and a target) and honoured when it denies all egress, which is
/// what the emulator's sandboxes are (they have no network); a policy that
/// lets anything out is refused. Returns the policy to keep.
fn network_policy(object: &Map<String, Value>, pooled: bool) -> Result<Option<Value>, ApiError> {
    const FIELD: &str = "networkPolicy";
    let Some(policy) = object.get(FIELD).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(fields) = policy.as_object() else {
        return Err(not_a_model(&["body", FIELD], "NetworkPolicy", policy));
    };
    let action = |value: Option<&Value>, loc: &[&str]| -> Result<String, ApiError> {
        match value {
            None | Some(Value::Null) => Ok("deny".into()),
            Some(Value::String(text)) => match text.trim().to_ascii_lowercase().as_str() {
                "" | "deny" => Ok("deny".into()),
                "allow" => Ok("allow".into()),
                _ => Err(ApiError::validation(pydantic(
                    "value_error",
                    loc,
                    &format!("Value error, unsupported action {text:?} (allow | deny)"),
                    Value::String(text.clone()),
                    Some(json!({"error": {}})),
                ))),
            },
            Some(other) => Err(not_a_string(loc, other)),
        }
    };
    let default = action(
        fields.get("defaultAction"),
        &["body", FIELD, "defaultAction"],
    )?;
    let rules = match fields.get("egress") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(rules)) => rules.clone(),
        Some(other) => {
            return Err(ApiError::validation(pydantic(
                "list_type",
                &["body", FIELD, "egress"],
                "Input should be a valid list",
                other.clone(),
                None,
            )));
        }
    };
    let mut allowed = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let index = i.to_string();
        let loc = |key: &'static str| -> Vec<&str> { vec!["body", FIELD, "egress", &index, key] };
        let Some(rule) = rule.as_object() else {
            return Err(not_a_model(
                &["body", FIELD, "egress", &index],
                "NetworkRule",
                rule,
            ));
        };
        for key in ["action", "target"] {
            if !rule.contains_key(key) {
                return Err(missing(&loc(key), &Value::Object(rule.clone())));
            }
        }
        let target = match &rule["target"] {
            Value::String(target) if !target.is_empty() => target.clone(),
            Value::String(_) => {
                return Err(ApiError::validation(pydantic(
                    "string_too_short",
                    &loc("target"),
                    "String should have at least 1 character",
                    rule["target"].clone(),
                    Some(json!({"min_length": 1})),
                )));
            }
            other => return Err(not_a_string(&loc("target"), other)),
        };
        if action(rule.get("action"), &loc("action"))? == "allow" {
            allowed.push(target);
        }
    }
    if pooled {
        // The server's own rule: a pool's pods exist before the request.
        return Err(ApiError::bad_request(
            "SANDBOX::INVALID_PARAMETER",
            "networkPolicy is not supported together with extensions.poolRef: pooled pods are \
             pre-created",
        ));
    }
    if default == "allow" {
        return Err(not_honoured(
            FIELD,
            policy,
            "its sandboxes have no network, so only a policy that denies all egress is honoured \
             (defaultAction \"allow\" lets traffic out)",
        ));
    }
    if !allowed.is_empty() {
        return Err(not_honoured(
            FIELD,
            policy,
            &format!(
                "its sandboxes have no network, so only a policy that denies all egress is \
                 honoured (an allow rule for {} lets traffic out)",
                allowed.join(", ")
            ),
        ));
    }
    Ok(Some(policy.clone()))
}

/// The host's platform in the API's words (`linux`, `amd64`/`arm64`).
fn host_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    (std::env::consts::OS, arch)
}

/// `platform`: honoured when it names the host's (the only platform the
/// emulator's sandboxes run on), refused otherwise, as the API asks ("If
/// specified, runtime must satisfy this platform or fail explicitly").
fn platform(object: &Map<String, Value>) -> Result<(), ApiError> {
    const FIELD: &str = "platform";
    let Some(platform) = object.get(FIELD).filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(fields) = platform.as_object() else {
        return Err(not_a_model(&["body", FIELD], "PlatformSpec", platform));
    };
    let mut named = Vec::new();
    for key in ["os", "arch"] {
        match fields.get(key) {
            Some(Value::String(text)) => named.push(text.trim().to_ascii_lowercase()),
            Some(other) => return Err(not_a_string(&["body", FIELD, key], other)),
            None => return Err(missing(&["body", FIELD, key], platform)),
        }
    }
    let (os, arch) = host_platform();
    if named != [os, arch] {
        return Err(not_honoured(
            FIELD,
            platform,
            &format!(
                "its sandboxes run on {os}/{arch} only, not {}/{}",
                named[0], named[1]
            ),
        ));
    }
    Ok(())
}

/// Fields the emulator cannot honour at all: `volumes` (host, PVC and
/// OSSFS mounts) and `lifecycle` (hooks execd would run). Empty values ask
/// for nothing and pass.
fn unsupported(object: &Map<String, Value>) -> Result<(), ApiError> {
    let asks = |value: &Value| match value {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        Value::Object(fields) => fields.values().any(|v| !v.is_null()),
        _ => true,
    };
    if let Some(volumes) = object.get("volumes").filter(|v| asks(v)) {
        return Err(not_honoured(
            "volumes",
            volumes,
            "its sandboxes mount no host, PVC or OSSFS storage; leave volumes out",
        ));
    }
    if let Some(lifecycle) = object.get("lifecycle").filter(|v| asks(v)) {
        return Err(not_honoured(
            "lifecycle",
            lifecycle,
            "its execd runs no preStart or periodic hooks; leave lifecycle out",
        ));
    }
    Ok(())
}

/// The create request `body` (already JSON), checked.
pub(crate) fn create_request(body: &Value) -> Result<CreateSpec, ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::validation(pydantic(
            "model_attributes_type",
            &["body"],
            "Input should be a valid dictionary or object to extract fields from",
            body.clone(),
            None,
        )));
    };
    let timeout = match object.get("timeout") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let Some(seconds) = value.as_i64().or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f as i64)
            }) else {
                return Err(ApiError::validation(pydantic(
                    "int_type",
                    &["body", "timeout"],
                    "Input should be a valid integer",
                    value.clone(),
                    None,
                )));
            };
            if seconds < 60 {
                return Err(ApiError::validation(pydantic(
                    "greater_than_equal",
                    &["body", "timeout"],
                    "Input should be greater than or equal to 60",
                    value.clone(),
                    Some(json!({"ge": 60})),
                )));
            }
            Some(seconds as u64)
        }
    };
    let image = match object.get("image") {
        None | Some(Value::Null) => None,
        Some(Value::Object(image)) => match image.get("uri") {
            Some(Value::String(uri)) => Some(uri.clone()),
            Some(other) => return Err(not_a_string(&["body", "image", "uri"], other)),
            None => {
                return Err(missing(
                    &["body", "image", "uri"],
                    &Value::Object(image.clone()),
                ));
            }
        },
        Some(other) => return Err(not_a_model(&["body", "image"], "ImageSpec", other)),
    };
    let entrypoint = match object.get("entrypoint") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(ApiError::validation(pydantic(
                    "too_short",
                    &["body", "entrypoint"],
                    "List should have at least 1 item after validation, not 0",
                    json!([]),
                    Some(json!({"field_type": "List", "min_length": 1, "actual_length": 0})),
                )));
            }
            let mut words = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(word) => words.push(word.to_string()),
                    None => {
                        let index = i.to_string();
                        return Err(not_a_string(&["body", "entrypoint", &index], item));
                    }
                }
            }
            Some(words)
        }
        Some(other) => {
            return Err(ApiError::validation(pydantic(
                "list_type",
                &["body", "entrypoint"],
                "Input should be a valid list",
                other.clone(),
                None,
            )));
        }
    };
    let limits = object
        .get("resourceLimits")
        .filter(|v| !v.is_null())
        .map(|_| string_map(object, "resourceLimits", false))
        .transpose()?;
    let requests = string_map(object, "resourceRequests", false)?;
    let env = string_map(object, "env", true)?;
    let metadata = string_map(object, "metadata", false)?;
    let extensions = string_map(object, "extensions", false)?;
    let snapshot = object
        .get("snapshotId")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty());
    let template = object
        .get("templateId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let has_image = image.as_deref().is_some_and(|uri| !uri.trim().is_empty());
    if template.is_none() && has_image == snapshot.is_some() {
        return Err(value_error(
            "Exactly one of image or snapshotId must be provided.",
            body.clone(),
        ));
    }
    if has_image && entrypoint.is_none() {
        return Err(value_error(
            "Entrypoint is required when image is provided.",
            body.clone(),
        ));
    }
    let pooled = extensions.get("poolRef").is_some_and(|p| !p.is_empty());
    if limits.is_none() && !pooled {
        return Err(value_error(
            "resourceLimits is required when poolRef is not provided.",
            body.clone(),
        ));
    }
    if let Some(template) = template {
        return Err(ApiError::runtime(
            axum::http::StatusCode::NOT_FOUND,
            "TEMPLATE_NOT_FOUND",
            format!(
                "Template {template} not found (the emulator makes sandboxes of mapped images only)"
            ),
        ));
    }
    for (key, value) in &metadata {
        metadata_label(key, value)?;
    }
    let network_policy = network_policy(object, pooled)?;
    platform(object)?;
    unsupported(object)?;
    let limits = limits.unwrap_or_default();
    let quantity =
        |field: &str, map: &BTreeMap<String, String>, key: &str| -> Result<Option<u32>, ApiError> {
            let Some(text) = map.get(key) else {
                return Ok(None);
            };
            let parsed = if key == "cpu" {
                cpu_milli(text)
            } else {
                memory_mib(text)
            };
            parsed.map(Some).ok_or_else(|| {
                ApiError::bad_request(
                    "SANDBOX::INVALID_PARAMETER",
                    format!("{field}.{key} `{text}` is not a valid quantity"),
                )
            })
        };
    for (field, map) in [("resourceLimits", &limits), ("resourceRequests", &requests)] {
        for key in ["cpu", "memory", "ephemeral-storage"] {
            quantity(field, map, key)?;
        }
    }
    let cpu = quantity("resourceLimits", &limits, "cpu")?;
    let memory = quantity("resourceLimits", &limits, "memory")?;
    // Requests default to the limits (Guaranteed QoS) unless given apart.
    let requests = if requests.is_empty() {
        limits.clone()
    } else {
        requests
    };
    // A snapshot's sandbox without an entrypoint idles, as the server's
    // restore defaults it.
    let entrypoint = match (entrypoint, snapshot) {
        (Some(words), _) => words,
        (None, Some(_)) => ["tail", "-f", "/dev/null"].map(String::from).to_vec(),
        // Only a pooled create has none.
        (None, None) => Vec::new(),
    };
    Ok(CreateSpec {
        image: image.unwrap_or_default(),
        snapshot: snapshot.map(|id| id.trim().to_string()),
        entrypoint,
        env: env.into_iter().collect(),
        metadata,
        extensions,
        timeout,
        cpu_milli: cpu.unwrap_or(POOL_DEFAULT_CPU_MILLI),
        memory_mib: memory.unwrap_or(POOL_DEFAULT_MEMORY_MIB),
        limits,
        requests,
        pooled,
        network_policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Value {
        json!({
            "image": {"uri": "calc"},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
            "timeout": 600,
        })
    }

    #[test]
    fn a_valid_request_defaults_requests_to_limits() {
        let spec = create_request(&valid()).unwrap();
        assert_eq!(
            (spec.cpu_milli, spec.memory_mib, spec.timeout),
            (500, 512, Some(600))
        );
        assert_eq!(spec.requests, spec.limits);
        let mut split = valid();
        split["resourceRequests"] = json!({"cpu": "250m", "memory": "256Mi"});
        let spec = create_request(&split).unwrap();
        assert_eq!(spec.requests["memory"], "256Mi");
        assert_eq!(spec.limits["memory"], "512Mi");
    }

    #[test]
    fn an_ephemeral_storage_quantity_is_checked_like_memory() {
        let mut disk = valid();
        disk["resourceLimits"]["ephemeral-storage"] = json!("2Gi");
        disk["resourceRequests"] =
            json!({"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "1Gi"});
        let spec = create_request(&disk).unwrap();
        assert_eq!(spec.limits["ephemeral-storage"], "2Gi");
        assert_eq!(spec.requests["ephemeral-storage"], "1Gi");
        disk["resourceRequests"]["ephemeral-storage"] = json!("plenty");
        let error = create_request(&disk).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(
            error.body()["message"],
            "resourceRequests.ephemeral-storage `plenty` is not a valid quantity"
        );
    }

    #[test]
    fn quantities_parse_like_kubernetes() {
        assert_eq!(cpu_milli("1"), Some(1000));
        assert_eq!(cpu_milli("0.25"), Some(250));
        assert_eq!(cpu_milli("100m"), Some(100));
        assert_eq!(cpu_milli("lots"), None);
        assert_eq!(memory_mib("2Gi"), Some(2048));
        assert_eq!(memory_mib("1G"), Some(954));
        assert_eq!(memory_mib("1048576"), Some(1));
        assert_eq!(memory_mib("-1Mi"), None);
    }

    #[test]
    fn labels_follow_the_kubernetes_rules() {
        assert!(metadata_label("sandfleet.io/run-id", "quickstart-1-abc").is_ok());
        assert!(metadata_label("team", "").is_ok());
        for (key, value) in [
            ("opensandbox.io/x", "y"),
            ("-bad", "y"),
            ("ok", "has space"),
            ("Upper.Case/x", "y"),
            (&"k".repeat(64) as &str, "y"),
        ] {
            let error = metadata_label(key, value).unwrap_err();
            assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST, "{key}");
        }
    }

    fn with(field: &str, value: Value) -> Value {
        let mut body = valid();
        body[field] = value;
        body
    }

    /// The 422's single entry: where it points and what it says.
    fn refusal(body: &Value) -> (Vec<String>, String) {
        let error = create_request(body).unwrap_err();
        assert_eq!(
            error.status(),
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "{body}"
        );
        let detail = &error.body()["detail"][0];
        let loc = detail["loc"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        (loc, detail["msg"].as_str().unwrap().to_string())
    }

    #[test]
    fn a_policy_that_denies_all_egress_is_honoured_and_one_that_lets_anything_out_is_refused() {
        for policy in [
            json!({"defaultAction": "deny", "egress": []}),
            json!({"defaultAction": " DENY "}),
            // The sidecar's defaults: an empty policy and a missing
            // default are deny.
            json!({}),
            json!({"egress": [{"action": "deny", "target": "pypi.org"}]}),
        ] {
            let spec = create_request(&with("networkPolicy", policy.clone())).unwrap();
            assert_eq!(spec.network_policy, Some(policy));
        }
        assert_eq!(
            create_request(&with("networkPolicy", Value::Null))
                .unwrap()
                .network_policy,
            None
        );
        let (loc, msg) = refusal(&with("networkPolicy", json!({"defaultAction": "allow"})));
        assert_eq!(loc, ["body", "networkPolicy"]);
        assert!(msg.contains("networkPolicy is not supported"), "{msg}");
        assert!(msg.contains("defaultAction \"allow\""), "{msg}");
        let (loc, msg) = refusal(&with(
            "networkPolicy",
            json!({"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}),
        ));
        assert_eq!(loc, ["body", "networkPolicy"]);
        assert!(msg.contains("allow rule for pypi.org"), "{msg}");
    }

    #[test]
    fn a_malformed_policy_is_refused_where_it_is_wrong() {
        let cases = [
            (json!("deny"), vec!["body", "networkPolicy"]),
            (
                json!({"defaultAction": "maybe"}),
                vec!["body", "networkPolicy", "defaultAction"],
            ),
            (
                json!({"egress": {}}),
                vec!["body", "networkPolicy", "egress"],
            ),
            (
                json!({"egress": [{"target": "x.org"}]}),
                vec!["body", "networkPolicy", "egress", "0", "action"],
            ),
            (
                json!({"egress": [{"action": "deny", "target": ""}]}),
                vec!["body", "networkPolicy", "egress", "0", "target"],
            ),
            (
                json!({"egress": [{"action": "deny", "target": "a.org"}, {"action": "block", "target": "b.org"}]}),
                vec!["body", "networkPolicy", "egress", "1", "action"],
            ),
        ];
        for (policy, at) in cases {
            let (loc, _) = refusal(&with("networkPolicy", policy.clone()));
            assert_eq!(loc, at, "{policy}");
        }
    }

    #[test]
    fn a_policy_with_a_pool_is_refused_as_the_server_refuses_it() {
        let mut pooled = json!({"image": {"uri": "calc"}, "entrypoint": ["x"],
            "extensions": {"poolRef": "p"}, "networkPolicy": {"defaultAction": "deny"}});
        let error = create_request(&pooled).unwrap_err();
        assert_eq!(error.status(), axum::http::StatusCode::BAD_REQUEST);
        assert!(
            error.body()["message"]
                .as_str()
                .unwrap()
                .contains("extensions.poolRef"),
            "{:?}",
            error.body()
        );
        pooled["networkPolicy"] = Value::Null;
        assert!(create_request(&pooled).unwrap().pooled);
    }

    #[test]
    fn the_hosts_platform_is_honoured_and_any_other_is_refused() {
        let (os, arch) = host_platform();
        assert!(create_request(&with("platform", json!({"os": os, "arch": arch}))).is_ok());
        assert!(create_request(&with("platform", Value::Null)).is_ok());
        let (loc, msg) = refusal(&with("platform", json!({"os": "linux", "arch": "s390x"})));
        assert_eq!(loc, ["body", "platform"]);
        assert!(
            msg.contains(&format!("run on {os}/{arch} only, not linux/s390x")),
            "{msg}"
        );
        let (loc, _) = refusal(&with("platform", json!({"os": "linux"})));
        assert_eq!(loc, ["body", "platform", "arch"]);
    }

    #[test]
    fn volumes_and_lifecycle_hooks_are_refused_unless_they_ask_for_nothing() {
        let volume = json!([{"name": "data", "mountPath": "/data", "host": {"path": "/srv"}}]);
        let (loc, msg) = refusal(&with("volumes", volume));
        assert_eq!(loc, ["body", "volumes"]);
        assert!(msg.contains("volumes is not supported"), "{msg}");
        let hooks = json!({"preStart": {"command": ["touch", "/ready"]}});
        let (loc, msg) = refusal(&with("lifecycle", hooks));
        assert_eq!(loc, ["body", "lifecycle"]);
        assert!(msg.contains("lifecycle is not supported"), "{msg}");
        for (field, nothing) in [
            ("volumes", json!([])),
            ("volumes", Value::Null),
            ("lifecycle", json!({})),
            ("lifecycle", json!({"preStart": null, "periodic": null})),
        ] {
            assert!(
                create_request(&with(field, nothing.clone())).is_ok(),
                "{field}: {nothing}"
            );
        }
    }

    #[test]
    fn pydantic_failures_are_422() {
        let cases = [
            json!({"image": {"uri": "calc"}, "entrypoint": ["x"], "resourceLimits": {}, "timeout": 30}),
            json!({"image": {"uri": "calc"}, "resourceLimits": {"cpu": "1"}}),
            json!({"image": {"uri": "calc"}, "entrypoint": ["x"]}),
            json!({"entrypoint": ["x"], "resourceLimits": {}}),
            json!([1, 2]),
        ];
        for case in cases {
            let error = create_request(&case).unwrap_err();
            assert_eq!(
                error.status(),
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "{case}"
            );
        }
        let mut pooled =
            json!({"image": {"uri": "calc"}, "entrypoint": ["x"], "extensions": {"poolRef": "p"}});
        assert!(create_request(&pooled).unwrap().pooled);
        pooled["metadata"] = json!({"opensandbox.io/owner": "me"});
        assert_eq!(
            create_request(&pooled).unwrap_err().status(),
            axum::http::StatusCode::BAD_REQUEST
        );
    }
}
