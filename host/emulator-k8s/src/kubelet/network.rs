//! NetworkPolicy on a pod's egress, as a network plugin enforces it, for the
//! one network the emulator's pods can reach: this host's.
//!
//! With `--pod-network host`, a pod whose policies let it reach the host
//! (127.0.0.1, the address a test server listens on) shares the host's
//! network namespace; any other pod gets a namespace of its own with only a
//! loopback device, so nothing it sends leaves it. With `--pod-network
//! offline`, the default, every pod gets its own: a hostile task on a
//! laptop reaches nothing.
//!
//! What counts, as Kubernetes defines it: a pod is isolated for egress by
//! each policy of its namespace whose `podSelector` selects it and whose
//! `policyTypes` name `Egress` (or, unnamed, that has `egress` rules). An
//! isolated pod may reach what one of those policies' rules allows: a rule
//! without `to` allows every destination, and an `ipBlock` peer the
//! addresses of its CIDR but its `except`s. Stricter than a plugin, so
//! never more open: a rule limited to `ports` counts as allowing nothing
//! (one namespace cannot open some ports only), pod and namespace peers are
//! pods (not the host), and the policies are read when the pod starts. A
//! pod of an agent-sandbox template that no policy selects yet stays
//! offline: the template's policy may only not have been written yet.

use std::net::Ipv4Addr;
use std::sync::Arc;

use serde_json::Value;

use crate::controllers::names::TEMPLATE_REF_HASH;
use crate::selector::LabelSelector;

/// The host, as the pod would address it.
const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Whether `pod` may reach the host under `policies` (those of its
/// namespace).
pub(crate) fn egress_to_host(pod: &Value, policies: &[Arc<Value>]) -> bool {
    let selecting: Vec<&Value> = policies
        .iter()
        .map(|p| &p["spec"])
        .filter(|spec| LabelSelector::from_object(&spec["podSelector"]).matches(pod))
        .collect();
    if selecting.is_empty() && pod["metadata"]["labels"].get(TEMPLATE_REF_HASH).is_some() {
        return false;
    }
    let isolating: Vec<&&Value> = selecting
        .iter()
        .filter(|spec| isolates_egress(spec))
        .collect();
    isolating.is_empty()
        || isolating.iter().any(|spec| {
            spec["egress"]
                .as_array()
                .into_iter()
                .flatten()
                .any(allows_host)
        })
}

fn isolates_egress(spec: &Value) -> bool {
    match spec["policyTypes"].as_array() {
        Some(types) => types.iter().any(|t| t == "Egress"),
        None => spec.get("egress").is_some(),
    }
}

fn allows_host(rule: &Value) -> bool {
    if rule["ports"]
        .as_array()
        .is_some_and(|ports| !ports.is_empty())
    {
        return false;
    }
    match rule["to"].as_array() {
        None => true,
        Some(peers) if peers.is_empty() => true,
        Some(peers) => peers.iter().any(|peer| {
            let block = &peer["ipBlock"];
            block["cidr"]
                .as_str()
                .is_some_and(|cidr| contains(cidr, HOST))
                && !block["except"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .any(|except| contains(except, HOST))
        }),
    }
}

/// Whether IPv4 CIDR `cidr` holds `address` (an IPv6 or malformed one holds
/// nothing).
fn contains(cidr: &str, address: Ipv4Addr) -> bool {
    let Some((network, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(network), Ok(bits)) = (network.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    if bits > 32 {
        return false;
    }
    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
    u32::from(network) & mask == u32::from(address) & mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels}})
    }

    fn policy(spec: Value) -> Arc<Value> {
        Arc::new(json!({"spec": spec}))
    }

    #[test]
    fn a_pod_no_policy_isolates_reaches_the_host() {
        let open = pod(json!({"app": "x"}));
        assert!(egress_to_host(&open, &[]));
        // Ingress only, or another pod's: no egress isolation.
        let ingress = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
        let others = policy(
            json!({"podSelector": {"matchLabels": {"app": "y"}}, "policyTypes": ["Egress"]}),
        );
        assert!(egress_to_host(&open, &[ingress, others]));
    }

    #[test]
    fn egress_isolation_denies_all_but_what_a_rule_allows() {
        let p = pod(json!({"app": "x"}));
        let deny = policy(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}));
        assert!(!egress_to_host(&p, std::slice::from_ref(&deny)));
        // Unnamed types: egress rules make it an egress policy.
        let implied = policy(json!({"podSelector": {}, "egress": []}));
        assert!(!egress_to_host(&p, &[implied]));
        // agent-sandbox's default: public addresses, private ranges excepted.
        let default = policy(
            json!({"podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12"]}}]}]}),
        );
        assert!(egress_to_host(&p, &[deny.clone(), default]));
        let excepted = policy(
            json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["127.0.0.0/8"]}}]}]}),
        );
        assert!(!egress_to_host(&p, &[excepted]));
        let everywhere = policy(json!({"podSelector": {}, "egress": [{}]}));
        assert!(egress_to_host(&p, &[deny, everywhere]));
        // Never more open than a plugin: ports, pods, IPv6 and elsewhere
        // allow nothing here.
        for rule in [
            json!({"ports": [{"port": 53, "protocol": "UDP"}]}),
            json!({"to": [{"podSelector": {}}]}),
            json!({"to": [{"ipBlock": {"cidr": "::/0"}}]}),
            json!({"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}),
        ] {
            let narrow =
                policy(json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [rule]}));
            assert!(!egress_to_host(&p, &[narrow]), "{rule}");
        }
    }

    #[test]
    fn a_template_pod_waits_offline_for_its_policy() {
        let p = pod(json!({TEMPLATE_REF_HASH: "abc"}));
        assert!(!egress_to_host(&p, &[]));
        let everywhere = policy(
            json!({"podSelector": {"matchLabels": {TEMPLATE_REF_HASH: "abc"}}, "egress": [{}]}),
        );
        assert!(egress_to_host(&p, &[everywhere]));
    }

    #[test]
    fn cidrs_hold_their_addresses() {
        assert!(contains("0.0.0.0/0", HOST));
        assert!(contains("127.0.0.0/8", HOST));
        assert!(contains("127.0.0.1/32", HOST));
        assert!(!contains("10.0.0.0/8", HOST));
        assert!(!contains("127.0.0.2/32", HOST));
        assert!(!contains("127.0.0.1/33", HOST));
        assert!(!contains("not-a-cidr", HOST));
    }
}
