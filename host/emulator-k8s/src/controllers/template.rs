//! The SandboxTemplate controller (`extensions/controllers/sandboxtemplate_controller.go`):
//! the template-ref-hash label on the template and its NetworkPolicy
//! `<template>-network-policy` (secure by default), plus the blueprint every pool member
//! and cold sandbox is made from, with the secure pod defaults of
//! `extensions/controllers/utils.go`.

use serde_json::{Value, json};

use super::Requeue;
use super::names::{self, TEMPLATE_REF_HASH};
use crate::client::{self, Client, NETWORK_POLICIES, TEMPLATES};

/// When to try again after the template's policy could not be written.
const POLICY_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

fn default_policy(template: &str) -> Value {
    json!({
        "podSelector": {"matchLabels": {TEMPLATE_REF_HASH: names::name_hash(template)}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
            "podSelector": {"matchLabels": {"app": "sandbox-router"}},
        }]}],
        "egress": [{"to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
        ]}],
    })
}

/// The template's policy: its own `networkPolicy` rules when it has some — for
/// ingress and egress both, so a direction without rules (an empty or missing list,
/// omitted as upstream's `omitempty` omits it) denies all traffic that way — else the
/// default.
fn desired_policy(template: &Value, name: &str) -> Value {
    let custom = &template["spec"]["networkPolicy"];
    if !custom.is_object() {
        return default_policy(name);
    }
    let mut spec = json!({
        "podSelector": {"matchLabels": {TEMPLATE_REF_HASH: names::name_hash(name)}},
        "policyTypes": ["Ingress", "Egress"],
    });
    for direction in ["ingress", "egress"] {
        if let Some(rules) = custom[direction].as_array().filter(|r| !r.is_empty()) {
            spec[direction] = json!(rules);
        }
    }
    spec
}

fn managed(template: &Value) -> bool {
    template["spec"]["networkPolicyManagement"] != "Unmanaged"
}

/// Reconcile one SandboxTemplate.
pub(super) fn reconcile(c: &Client<'_>, ns: &str, name: &str) -> Requeue {
    let template = c.get(TEMPLATES, ns, name)?;
    if client::deleting(&template) {
        return None;
    }
    let hash = names::name_hash(name);
    if client::label(&template, TEMPLATE_REF_HASH) != Some(hash.as_str()) {
        let patch = json!({"metadata": {"labels": {TEMPLATE_REF_HASH: hash}}});
        if let Err(error) = c.merge_patch(TEMPLATES, ns, name, &patch, false) {
            tracing::debug!(%error, "labelling a template");
        }
    }
    if !c.serves(NETWORK_POLICIES) {
        return None;
    }
    let policy_name = format!("{name}-network-policy");
    let existing = c.get(NETWORK_POLICIES, ns, &policy_name);
    if !managed(&template) {
        if let Some(p) = existing
            && client::controlled_by(&p, &template)
        {
            let _ = c.delete(NETWORK_POLICIES, ns, &policy_name, "Background", None);
        }
        return None;
    }
    let spec = desired_policy(&template, name);
    match existing {
        Some(p) if p["spec"] == spec => {}
        Some(p) => {
            // Replaced whole, as upstream's Update does: a merge would keep the rules
            // of a direction the new spec leaves out, which must deny instead.
            let mut replaced = (*p).clone();
            replaced["spec"] = spec;
            if let Err(error) = c.update(NETWORK_POLICIES, replaced) {
                tracing::debug!(%error, "updating a template's network policy");
                return Some(POLICY_RETRY);
            }
        }
        None => {
            let policy = json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": policy_name, "ownerReferences": [client::controller_ref(&template)]},
                "spec": spec,
            });
            if let Err(error) = c.create(NETWORK_POLICIES, ns, policy) {
                tracing::debug!(%error, "creating a template's network policy");
            }
        }
    }
    None
}

/// The template's blueprint (`podTemplate`, `volumeClaimTemplates`, `service`) with the
/// secure pod defaults applied.
pub(super) fn blueprint(template: &Value) -> Value {
    let spec = &template["spec"];
    let mut pod_template = spec["podTemplate"].clone();
    if !pod_template.is_object() {
        pod_template = json!({});
    }
    if !pod_template["spec"].is_object() {
        pod_template["spec"] = json!({});
    }
    let pod_spec = &mut pod_template["spec"];
    if pod_spec.get("automountServiceAccountToken").is_none() {
        pod_spec["automountServiceAccountToken"] = json!(false);
    }
    if managed(template)
        && !spec["networkPolicy"].is_object()
        && pod_spec.get("dnsPolicy").is_none()
    {
        pod_spec["dnsPolicy"] = json!("None");
        pod_spec["dnsConfig"] = json!({"nameservers": ["8.8.8.8", "1.1.1.1"]});
    }
    let mut out = json!({"podTemplate": pod_template});
    if let Some(vcts) = spec.get("volumeClaimTemplates") {
        out["volumeClaimTemplates"] = vcts.clone();
    }
    if let Some(service) = spec.get("service") {
        out["service"] = service.clone();
    }
    out
}

/// The hash of a blueprint: what tells a pool member made from an older template.
pub(super) fn blueprint_hash(blueprint: &Value) -> String {
    names::name_hash(&blueprint.to_string())
}
