//! The SandboxTemplate controller (`extensions/controllers/sandboxtemplate_controller.go`):
//! the template-ref-hash label on the template and its NetworkPolicy
//! `<template>-network-policy` (secure by default), plus the blueprint every pool member
//! and cold sandbox is made from, with the secure pod defaults of
//! `extensions/controllers/utils.go`.

use serde_json::{Value, json};

use super::Requeue;
use super::names::{self, TEMPLATE_REF_HASH};
use crate::client::{self, Client, NETWORK_POLICIES, TEMPLATES};

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

fn desired_policy(template: &Value, name: &str) -> Value {
    let custom = &template["spec"]["networkPolicy"];
    if custom.is_object() {
        let mut spec = custom.clone();
        spec["podSelector"] = json!({"matchLabels": {TEMPLATE_REF_HASH: names::name_hash(name)}});
        if spec.get("policyTypes").is_none() {
            spec["policyTypes"] = json!(["Ingress", "Egress"]);
        }
        spec
    } else {
        default_policy(name)
    }
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
        Some(_) => {
            let _ = c.merge_patch(
                NETWORK_POLICIES,
                ns,
                &policy_name,
                &json!({"spec": spec}),
                false,
            );
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
