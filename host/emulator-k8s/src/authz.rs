//! Authorization: the token's user may do everything but what `--deny` rules forbid
//! (RBAC that withholds a verb on a resource), enforced on every request with the real
//! API server's 403, and answered by `SelfSubjectAccessReview`s so preflights can ask.

use serde_json::{Value, json};

use crate::status::ApiError;

/// The user the bearer token authenticates.
pub const USER: &str = "sandfleet-devcluster";

/// One forbidden `verb` on `resource` (`plural`, `plural.group`, `plural/subresource`;
/// `*` matches any verb or resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyRule {
    verb: String,
    resource: String,
    subresource: Option<String>,
    group: Option<String>,
}

impl std::str::FromStr for DenyRule {
    type Err = String;

    /// `create:sandboxclaims.extensions.agents.x-k8s.io`, `create:pods/exec`, `*:secrets`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (verb, resource) = text
            .split_once(':')
            .filter(|(v, r)| !v.is_empty() && !r.is_empty())
            .ok_or_else(|| {
                format!("--deny {text}: expected VERB:RESOURCE[.GROUP][/SUBRESOURCE]")
            })?;
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        let (resource, group) = match resource.split_once('.') {
            Some((r, g)) => (r, Some(g.to_string())),
            None => (resource, None),
        };
        Ok(Self {
            verb: verb.into(),
            resource: resource.into(),
            subresource,
            group,
        })
    }
}

impl DenyRule {
    fn matches(&self, verb: &str, group: &str, resource: &str, subresource: &str) -> bool {
        (self.verb == "*" || self.verb == verb)
            && (self.resource == "*" || self.resource == resource)
            && self.group.as_deref().is_none_or(|g| g == group)
            && self.subresource.as_deref().unwrap_or_default() == subresource
    }
}

/// What the token's user may not do.
#[derive(Debug, Clone, Default)]
pub(crate) struct Authorizer {
    rules: Vec<DenyRule>,
}

impl Authorizer {
    /// An authorizer forbidding what `rules` name.
    pub(crate) fn new(rules: Vec<DenyRule>) -> Self {
        Self { rules }
    }

    fn allowed(&self, verb: &str, group: &str, resource: &str, subresource: &str) -> bool {
        !self
            .rules
            .iter()
            .any(|r| r.matches(verb, group, resource, subresource))
    }

    /// The 403 a forbidden request gets, as the RBAC authorizer words it.
    pub(crate) fn check(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<(), ApiError> {
        if self.allowed(verb, group, resource, subresource) {
            return Ok(());
        }
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let shown = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        let target = name.map(|n| format!(" \"{n}\"")).unwrap_or_default();
        let scope = namespace.map_or_else(
            || " at the cluster scope".to_string(),
            |ns| format!(" in the namespace \"{ns}\""),
        );
        Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "{qualified}{target} is forbidden: User \"{USER}\" cannot {verb} resource \"{shown}\" in API group \"{group}\"{scope}"
            ),
        )
        .with_details(name.unwrap_or_default(), group, resource))
    }

    /// Answer a `SelfSubjectAccessReview`: the object with its status filled in.
    pub(crate) fn review(&self, mut review: Value) -> Value {
        let attrs = &review["spec"]["resourceAttributes"];
        let allowed = if attrs.is_object() {
            let get = |k: &str| attrs[k].as_str().unwrap_or_default().to_string();
            self.allowed(
                &get("verb"),
                &get("group"),
                &get("resource"),
                &get("subresource"),
            )
        } else {
            // Non-resource URLs (`/healthz`, `/version`) are open to every user.
            true
        };
        review["apiVersion"] = json!("authorization.k8s.io/v1");
        review["kind"] = json!("SelfSubjectAccessReview");
        if !review["metadata"].is_object() {
            review["metadata"] = json!({});
        }
        review["metadata"]["creationTimestamp"] = Value::Null;
        review["status"] = if allowed {
            json!({"allowed": true, "reason": format!("RBAC: allowed by ClusterRoleBinding \"sandfleet-devcluster\" of ClusterRole \"cluster-admin\" to User \"{USER}\"")})
        } else {
            json!({"allowed": false, "denied": true, "reason": format!("RBAC: a --deny rule forbids User \"{USER}\" this access")})
        };
        review
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_rules_match_verb_resource_group_and_subresource() {
        let rule: DenyRule = "create:sandboxclaims.extensions.agents.x-k8s.io"
            .parse()
            .unwrap();
        let authz = Authorizer::new(vec![rule, "*:pods/exec".parse().unwrap()]);
        assert!(!authz.allowed("create", "extensions.agents.x-k8s.io", "sandboxclaims", ""));
        assert!(authz.allowed("get", "extensions.agents.x-k8s.io", "sandboxclaims", ""));
        assert!(authz.allowed("create", "other.io", "sandboxclaims", ""));
        assert!(!authz.allowed("get", "", "pods", "exec"));
        assert!(authz.allowed("get", "", "pods", ""));
        let err = authz
            .check(
                "create",
                "extensions.agents.x-k8s.io",
                "sandboxclaims",
                "",
                Some("default"),
                None,
            )
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            err.message
                .contains("cannot create resource \"sandboxclaims\""),
            "{}",
            err.message
        );
        assert!("nocolon".parse::<DenyRule>().is_err());
    }
}
