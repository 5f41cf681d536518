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
                return Err(ApiError::validation(pydantic(
                    "string_type",
                    &["body", field, key],
                    "Input should be a valid string",
                    other.clone(),
                    None,
                )));
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
            Some(other) => {
                return Err(ApiError::validation(pydantic(
                    "string_type",
                    &["body", "image", "uri"],
                    "Input should be a valid string",
                    other.clone(),
                    None,
                )));
            }
            None => {
                return Err(ApiError::validation(pydantic(
                    "missing",
                    &["body", "image", "uri"],
                    "Field required",
                    Value::Object(image.clone()),
                    None,
                )));
            }
        },
        Some(other) => {
            return Err(ApiError::validation(pydantic(
                "model_type",
                &["body", "image"],
                "Input should be a valid dictionary or instance of ImageSpec",
                other.clone(),
                Some(json!({"class_name": "ImageSpec"})),
            )));
        }
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
                        return Err(ApiError::validation(pydantic(
                            "string_type",
                            &["body", "entrypoint", &index],
                            "Input should be a valid string",
                            item.clone(),
                            None,
                        )));
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
    let cpu = quantity("resourceLimits", &limits, "cpu")?;
    let memory = quantity("resourceLimits", &limits, "memory")?;
    quantity("resourceRequests", &requests, "cpu")?;
    quantity("resourceRequests", &requests, "memory")?;
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
