//! agent-sandbox's label and annotation keys, and `NameHash` (FNV-1a 32-bit as eight
//! hex digits), used as label values (`api/v1beta1/sandbox_types.go`,
//! `controllers/sandbox_controller.go`).

/// The pod's and PVCs' tracking label: `NameHash(sandbox)`.
pub(crate) const SANDBOX_NAME_HASH: &str = "agents.x-k8s.io/sandbox-name-hash";
/// Marks a warm pool's member: `NameHash(pool)`.
pub(crate) const WARM_POOL_SANDBOX: &str = "agents.x-k8s.io/warm-pool-sandbox";
/// `NameHash(template)` on templates, members, adopted and cold sandboxes, and pods.
pub(crate) const TEMPLATE_REF_HASH: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
/// The blueprint hash of a pool member.
pub(crate) const TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-template-hash";
/// The deprecated blueprint hash label.
pub(crate) const POD_TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-pod-template-hash";
/// `warm` or `cold`.
pub(crate) const LAUNCH_TYPE: &str = "agents.x-k8s.io/launch-type";
/// Who created the object (`go-client`, `python-client`, `controller`, …).
pub(crate) const CREATED_BY: &str = "agents.x-k8s.io/created-by";
/// The claim's uid, on the sandbox and its pod template.
pub(crate) const CLAIM_UID: &str = "agents.x-k8s.io/claim-uid";
/// The sandbox's pod name.
pub(crate) const POD_NAME: &str = "agents.x-k8s.io/pod-name";
/// The template a pool member was made from.
pub(crate) const TEMPLATE_REF: &str = "agents.x-k8s.io/sandbox-template-ref";
/// Keys of template labels copied to the pod.
pub(crate) const PROPAGATED_LABELS: &str = "agents.x-k8s.io/propagated-labels";
/// Keys of template annotations copied to the pod.
pub(crate) const PROPAGATED_ANNOTATIONS: &str = "agents.x-k8s.io/propagated-annotations";
/// The sandbox a claim adopted or made.
pub(crate) const CLAIM_SANDBOX_NAME: &str = "agents.x-k8s.io/sandbox-name";
/// When the claim controller first saw a claim.
pub(crate) const FIRST_OBSERVED: &str = "agents.x-k8s.io/controller-first-observed-at";
/// The cluster autoscaler's eviction hint pool members carry.
pub(crate) const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// The system prefixes a template may not set on pods.
const SYSTEM_PREFIXES: [&str; 2] = ["agents.x-k8s.io/", "extensions.agents.x-k8s.io/"];

/// Whether a label or annotation key is the sandbox system's.
pub(crate) fn is_system_key(key: &str) -> bool {
    SYSTEM_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// FNV-1a 32-bit of `name`, as eight lowercase hex digits.
pub(crate) fn name_hash(name: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("{hash:08x}")
}

/// The `created-by` value a pod gets: one of the known clients, else `unknown`.
pub(crate) fn normalize_created_by(value: &str) -> &'static str {
    match value {
        "go-client" => "go-client",
        "python-client" => "python-client",
        "controller" => "controller",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_hash_is_fnv1a_32_in_eight_hex_digits() {
        // FNV-1a("") is the offset basis; "a" is the published test vector.
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("foobar"), "bf9cf968");
    }
}
