//! The kinds every cluster serves before any CRD is applied, described as a real API
//! server describes them to discovery.

use super::{Resource, ScalePaths, Subresource, Version};

fn builtin(
    group: &str,
    version: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    short_names: &[&str],
    status: bool,
) -> Resource {
    Resource {
        group: group.into(),
        versions: vec![Version {
            name: version.into(),
            schema: None,
            status,
            scale: None,
            columns: Vec::new(),
        }],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        short_names: short_names.iter().map(|s| (*s).to_string()).collect(),
        categories: Vec::new(),
        namespaced,
        custom: false,
        extra_subresources: Vec::new(),
    }
}

pub(super) fn builtins() -> Vec<Resource> {
    let mut pods = builtin("", "v1", "pods", "Pod", true, &["po"], true);
    // As a real API server describes them: exec is a GET or a POST; log only a GET.
    pods.extra_subresources = vec![
        Subresource {
            name: "exec",
            kind: "PodExecOptions",
            verbs: &["create", "get"],
        },
        Subresource {
            name: "log",
            kind: "Pod",
            verbs: &["get"],
        },
        Subresource {
            name: "binding",
            kind: "Binding",
            verbs: &["create"],
        },
    ];
    pods.categories = vec!["all".into()];
    let mut services = builtin("", "v1", "services", "Service", true, &["svc"], true);
    services.categories = vec!["all".into()];
    let scale = Some(ScalePaths {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    });
    let mut deployments = builtin(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
    );
    deployments.versions[0].scale = scale.clone();
    deployments.categories = vec!["all".into()];
    let mut replicasets = builtin(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
    );
    replicasets.versions[0].scale = scale;
    let mut daemonsets = builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true);
    daemonsets.categories = vec!["all".into()];
    vec![
        builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true),
        pods,
        services,
        builtin("", "v1", "nodes", "Node", false, &["no"], true),
        builtin("", "v1", "events", "Event", true, &["ev"], false),
        builtin(
            "",
            "v1",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
            true,
        ),
        builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
        builtin("", "v1", "secrets", "Secret", true, &[], false),
        builtin(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            &["sa"],
            false,
        ),
        deployments,
        replicasets,
        daemonsets,
        builtin(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
            false,
        ),
        builtin(
            "node.k8s.io",
            "v1",
            "runtimeclasses",
            "RuntimeClass",
            false,
            &[],
            false,
        ),
        builtin(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
            true,
        ),
    ]
}
