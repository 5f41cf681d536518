//! `deploy/`: the manifests that run `sandfleet serve` in a cluster, as
//! `kubectl` renders them (`kubectl kustomize deploy/`), applied with a
//! server-side dry run to `sandfleet devcluster k8s`; the RBAC they grant
//! covers every verb the Kubernetes driver's preflight reviews; the fleet
//! file they mount is one the daemon reads.

use std::path::Path;

use sandfleet_backend_k8s::{PREFLIGHT_ACCESS, PREPULL_ACCESS};
use serde_json::Value;

use crate::k8s::{Devcluster, kubectl};
use crate::repo;

/// `kubectl` without a cluster: renders and converts files only.
fn kubectl_offline(args: &[&str]) -> String {
    kubectl(Path::new("/nonexistent"), args)
}

/// Every object of `deploy/`, as JSON.
fn rendered(scratch: &Path) -> Vec<Value> {
    let deploy = repo().join("deploy");
    let yaml = kubectl_offline(&["kustomize", deploy.to_str().unwrap()]);
    let file = scratch.join("rendered.yaml");
    std::fs::write(&file, yaml).unwrap();
    // `label --local` reads the objects without a server and prints JSON.
    let json = kubectl_offline(&[
        "label",
        "--local",
        "-o",
        "json",
        "-f",
        file.to_str().unwrap(),
        "app.kubernetes.io/part-of=sandfleet",
    ]);
    // One JSON document per object.
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Whether `rules` grant `verb` on `resource` (`/subresource`) of `group`.
fn granted(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &Value, item: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == item || v == "*"))
    };
    rules.iter().any(|rule| {
        has(&rule["apiGroups"], group)
            && has(&rule["resources"], resource)
            && has(&rule["verbs"], verb)
    })
}

#[test]
fn the_manifests_apply_to_a_devcluster_and_grant_what_the_driver_needs() {
    let scratch = tempfile::tempdir().unwrap();
    let objects = rendered(scratch.path());

    // RBAC: every verb the preflight reviews, granted in the namespace the
    // fleet file's cluster uses (the Role) or everywhere (the ClusterRole,
    // for cluster-scoped nodes), bound to the Deployment's service account.
    let role = of_kind(&objects, "Role");
    assert_eq!(role.len(), 1);
    let cluster_role = of_kind(&objects, "ClusterRole");
    assert_eq!(cluster_role.len(), 1);
    let rules: Vec<Value> = [role[0], cluster_role[0]]
        .iter()
        .flat_map(|r| r["rules"].as_array().unwrap().clone())
        .collect();
    for (group, resource, subresource, verbs) in
        PREFLIGHT_ACCESS.into_iter().chain([PREPULL_ACCESS])
    {
        let resource = if subresource.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}/{subresource}")
        };
        for verb in verbs {
            assert!(
                granted(&rules, group, &resource, verb),
                "deploy/rbac.yaml does not grant `{verb}` on {resource} ({group})"
            );
        }
    }
    let deployment = of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"].as_str().unwrap();
    for binding in of_kind(&objects, "RoleBinding")
        .into_iter()
        .chain(of_kind(&objects, "ClusterRoleBinding"))
    {
        assert_eq!(binding["subjects"][0]["name"], account, "{binding}");
    }
    assert_eq!(role[0]["metadata"]["namespace"], "sandfleet");

    // The daemon's fleet file, as the ConfigMap mounts it, is one it reads:
    // the driver in the cluster, the namespace the Role is in, the plugin
    // directory the plugins ConfigMap is mounted at, the token variable
    // the Secret fills.
    let fleet = of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "sandfleet-fleet")
        .unwrap();
    let text = fleet["data"]["fleet.toml"].as_str().unwrap();
    let config =
        sandfleet_fleet::FleetConfig::parse(text, Path::new("/etc/sandfleet/fleet/fleet.toml"))
            .unwrap();
    let sandfleet_fleet::BackendConfig::K8s { k8s } = &config.clusters[0].backend else {
        panic!("the deployed cluster is a Kubernetes cluster");
    };
    assert!(k8s.in_cluster);
    assert_eq!(k8s.namespace, "sandfleet");
    assert_eq!(
        config.plugins.fallback,
        sandfleet_fleet::PluginFallback::Builtin
    );
    let container = &pod["containers"][0];
    let mounts = container["volumeMounts"].as_array().unwrap();
    let mounted = |volume: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == volume)
            .map(|m| m["mountPath"].as_str().unwrap().to_string())
    };
    assert_eq!(
        config.plugins.dir.as_deref(),
        mounted("plugins").as_deref().map(Path::new)
    );
    // A subPath mount never sees a ConfigMap's updates.
    assert!(mounts.iter().all(|m| m.get("subPath").is_none()));
    let token = config.api.token_env.as_deref().unwrap();
    let env = container["env"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == token && e["valueFrom"]["secretKeyRef"]["name"].is_string()),
        "{env:?}"
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let port = config.api.listen.port();
    assert_eq!(container["ports"][0]["containerPort"], port);
    assert_eq!(annotations["prometheus.io/port"], port.to_string());

    // The devcluster takes every object it serves: the namespace first
    // (namespaced objects are checked against it), then the rest with a
    // server-side dry run. It serves no rbac.authorization.k8s.io.
    let cluster = Devcluster::start(scratch.path(), "deploy", &[]);
    let served = cluster.kubectl(&["api-resources", "-o", "name"]);
    let (rbac, rest): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .filter(|o| o["kind"] != "Namespace")
        .partition(|o| {
            o["apiVersion"]
                .as_str()
                .unwrap()
                .starts_with("rbac.authorization.k8s.io/")
        });
    assert_eq!(rbac.len(), 4);
    let write = |name: &str, objects: Vec<&Value>| {
        let path = scratch.path().join(name);
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        std::fs::write(&path, list.to_string()).unwrap();
        path
    };
    let namespace = write("namespace.json", of_kind(&objects, "Namespace"));
    cluster.kubectl(&["apply", "-f", namespace.to_str().unwrap()]);
    let rest = write("rest.json", rest);
    let applied = cluster.kubectl(&["apply", "--dry-run=server", "-f", rest.to_str().unwrap()]);
    let mut applied: Vec<&str> = applied
        .lines()
        .map(|line| {
            line.strip_suffix(" created (server dry run)")
                .unwrap_or(line)
        })
        .collect();
    applied.sort_unstable();
    assert_eq!(
        applied,
        [
            "configmap/sandfleet-fleet",
            "configmap/sandfleet-plugins",
            "deployment.apps/sandfleet",
            "service/sandfleet",
            "serviceaccount/sandfleet",
        ]
    );
    if served.contains("roles.rbac.authorization.k8s.io") {
        let rbac = write("rbac.json", rbac);
        cluster.kubectl(&["apply", "--dry-run=server", "-f", rbac.to_str().unwrap()]);
    }
}
