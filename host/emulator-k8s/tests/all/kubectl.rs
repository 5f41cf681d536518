//! End-to-end: the real `kubectl` (1.32, installed on these machines) against the
//! emulator started in-process on 127.0.0.1:0, with a fresh HOME so discovery is not
//! cached between tests.

use std::time::{Duration, Instant};

use crate::common::crd_dir;
use crate::common::kubectl::Cluster;
use sandfleet_emulator_k8s::Config;

const TEMPLATE: &str = r#"apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: python
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: python:3.12
"#;

async fn with_crds() -> Cluster {
    let cluster = Cluster::start(Config::default()).await;
    let out = cluster
        .ok(&["apply", "-f", crd_dir().to_str().unwrap()])
        .await;
    assert_eq!(out.matches("created").count(), 4, "{out}");
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_crds_then_a_template_and_get_it() {
    let cluster = with_crds().await;
    let crd = cluster
        .ok(&[
            "get",
            "crd",
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(
        crd.trim(),
        "customresourcedefinition.apiextensions.k8s.io/sandboxtemplates.extensions.agents.x-k8s.io"
    );
    // Unchanged on a second apply: kubectl's 3-way diff finds nothing to send.
    let again = cluster
        .ok(&["apply", "-f", crd_dir().to_str().unwrap()])
        .await;
    assert_eq!(again.matches("unchanged").count(), 4, "{again}");

    let file = cluster.file("t.yaml", TEMPLATE);
    let out = cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    assert!(
        out.contains("sandboxtemplate.extensions.agents.x-k8s.io/python created"),
        "{out}"
    );
    let image = cluster
        .ok(&[
            "get",
            "sandboxtemplate",
            "python",
            "-o",
            "jsonpath={.spec.podTemplate.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(image, "python:3.12");
    let changed = cluster.file("t2.yaml", &TEMPLATE.replace("python:3.12", "python:3.13"));
    let out = cluster
        .ok(&["apply", "-f", changed.to_str().unwrap()])
        .await;
    assert!(out.contains("configured"), "{out}");
    let generation = cluster
        .ok(&[
            "get",
            "sandboxtemplate",
            "python",
            "-o",
            "jsonpath={.metadata.generation}",
        ])
        .await;
    assert_eq!(generation, "2");
    let listed = cluster.ok(&["get", "sandboxtemplates"]).await;
    assert!(listed.contains("python"), "{listed}");
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_by_two_managers_conflicts_naming_the_field() {
    let cluster = with_crds().await;
    let file = cluster.file("t.yaml", TEMPLATE);
    let path = file.to_str().unwrap();
    let out = cluster
        .ok(&["apply", "--server-side", "--field-manager=a", "-f", path])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let other = cluster.file("t2.yaml", &TEMPLATE.replace("python:3.12", "python:3.13"));
    let err = cluster
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=b",
            "-f",
            other.to_str().unwrap(),
        ])
        .await;
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"a\""),
        "{err}"
    );
    assert!(err.contains(".spec.podTemplate.spec.containers"), "{err}");
    let forced = cluster
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=b",
            "--force-conflicts",
            "-f",
            other.to_str().unwrap(),
        ])
        .await;
    assert!(forced.contains("serverside-applied"), "{forced}");
    let image = cluster
        .ok(&[
            "get",
            "sandboxtemplate",
            "python",
            "-o",
            "jsonpath={.spec.podTemplate.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(image, "python:3.13");
    cluster.emulator.shutdown().await;
}

fn pod(name: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_with_equality_and_set_based_selectors() {
    let cluster = Cluster::start(Config::default()).await;
    let manifest = [
        pod("a", "app: foo, tier: web"),
        pod("b", "app: bar, tier: x"),
        pod("c", "app: baz"),
        pod("d", "app: bar"),
    ]
    .join("---\n");
    let file = cluster.file("pods.yaml", &manifest);
    cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let names = cluster
        .ok(&["get", "pods", "-l", "app=foo", "-o", "name"])
        .await;
    assert_eq!(names.trim(), "pod/a");
    let names = cluster
        .ok(&[
            "get",
            "pods",
            "-l",
            "app in (foo,bar),tier!=x",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(names.lines().collect::<Vec<_>>(), ["pod/a", "pod/d"]);
    let names = cluster
        .ok(&["get", "pods", "-l", "!tier", "-o", "name"])
        .await;
    assert_eq!(names.lines().collect::<Vec<_>>(), ["pod/c", "pod/d"]);
    let none = cluster.kubectl(&["get", "pods", "-l", "app=nothing"]).await;
    assert!(none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("No resources found in default namespace.")
    );
    cluster.emulator.shutdown().await;
}

async fn uid_of(cluster: &Cluster, what: &[&str]) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "jsonpath={.metadata.uid}"]);
    cluster.ok(&args).await
}

async fn wait_gone(cluster: &Cluster, what: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut args = vec!["get"];
        args.extend_from_slice(what);
        let out = cluster.kubectl(&args).await;
        if String::from_utf8_lossy(&out.stderr).contains("NotFound") {
            return;
        }
        assert!(Instant::now() < deadline, "{what:?} was not collected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn owned_configmap(name: &str, owner_kind: &str, owner: &str, uid: &str, block: bool) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  - apiVersion: v1\n    kind: {owner_kind}\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: {block}\ndata:\n  k: v\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_collects_dependents_in_background_and_foreground_and_orphans_on_request() {
    let cluster = Cluster::start(Config::default()).await;
    let file = cluster.file(
        "owners.yaml",
        &[
            pod("bg", "app: gc"),
            pod("fg", "app: gc"),
            pod("or", "app: gc"),
        ]
        .join("---\n"),
    );
    cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let mut deps = Vec::new();
    for owner in ["bg", "fg", "or"] {
        let uid = uid_of(&cluster, &["pod", owner]).await;
        deps.push(owned_configmap(
            &format!("dep-{owner}"),
            "Pod",
            owner,
            &uid,
            owner == "fg",
        ));
    }
    let file = cluster.file("deps.yaml", &deps.join("---\n"));
    cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;

    let out = cluster.ok(&["delete", "pod", "bg"]).await;
    assert!(out.contains("pod \"bg\" deleted"), "{out}");
    wait_gone(&cluster, &["configmap", "dep-bg"]).await;

    cluster
        .ok(&["delete", "pod", "fg", "--cascade=foreground"])
        .await;
    wait_gone(&cluster, &["configmap", "dep-fg"]).await;
    wait_gone(&cluster, &["pod", "fg"]).await;

    cluster
        .ok(&["delete", "pod", "or", "--cascade=orphan"])
        .await;
    wait_gone(&cluster, &["pod", "or"]).await;
    let refs = cluster
        .ok(&[
            "get",
            "configmap",
            "dep-or",
            "-o",
            "jsonpath={.metadata.ownerReferences}",
        ])
        .await;
    assert!(
        refs.is_empty() || refs == "[]",
        "orphan keeps no reference: {refs}"
    );
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_formats_and_validation_rules_refuse_what_the_api_server_refuses() {
    let cluster = with_crds().await;
    // A request that is no quantity: the CRD's `pattern` on resources.
    let cpu = cluster.file(
        "cpu.yaml",
        &TEMPLATE.replace(
            "        image: python:3.12\n",
            "        image: python:3.12\n        resources:\n          requests:\n            cpu: lots\n",
        ),
    );
    let err = cluster.fails(&["apply", "-f", cpu.to_str().unwrap()]).await;
    let field = "spec.podTemplate.spec.containers[0].resources.requests.cpu";
    assert!(
        err.contains(&format!(
            "{field}: Invalid value: \"lots\": {field} in body should match '^(\\+|-)?"
        )),
        "{err}"
    );
    // A time that is no RFC 3339 date-time: the CRD's `format`.
    let sandbox = |extra: &str| {
        format!(
            "apiVersion: agents.x-k8s.io/v1beta1\nkind: Sandbox\nmetadata:\n  name: s\nspec:\n{extra}  podTemplate:\n    spec:\n      containers:\n      - name: main\n        image: python:3.12\n"
        )
    };
    let tomorrow = cluster.file("tomorrow.yaml", &sandbox("  shutdownTime: tomorrow\n"));
    let err = cluster
        .fails(&["apply", "-f", tomorrow.to_str().unwrap()])
        .await;
    assert!(
        err.contains(
            "spec.shutdownTime: Invalid value: \"tomorrow\": spec.shutdownTime in body must be of type date-time: \"tomorrow\""
        ),
        "{err}"
    );
    // The Sandbox CRD's CEL transition rule: volumeClaimTemplates never change.
    let claims = "  volumeClaimTemplates:\n  - metadata:\n      name: work\n    spec:\n      accessModes: [ReadWriteOnce]\n      resources:\n        requests:\n          storage: 1Gi\n";
    let with_claims = cluster.file("claims.yaml", &sandbox(claims));
    cluster
        .ok(&["create", "-f", with_claims.to_str().unwrap()])
        .await;
    let err = cluster
        .fails(&[
            "patch",
            "sandbox",
            "s",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/volumeClaimTemplates/0/spec/resources/requests/storage","value":"2Gi"}]"#,
        ])
        .await;
    assert!(
        err.contains("The Sandbox \"s\" is invalid: spec: Invalid value: \"object\": volumeClaimTemplates is immutable"),
        "{err}"
    );
    // Another change to the spec keeps the rule and is taken.
    cluster
        .ok(&[
            "patch",
            "sandbox",
            "s",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"shutdownTime":"2030-01-01T00:00:00Z"}}"#,
        ])
        .await;
    let storage = cluster
        .ok(&[
            "get",
            "sandbox",
            "s",
            "-o",
            "jsonpath={.spec.volumeClaimTemplates[0].spec.resources.requests.storage} {.spec.shutdownTime}",
        ])
        .await;
    assert_eq!(storage, "1Gi 2030-01-01T00:00:00Z");
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_status_kubectl_prints_and_the_server_keeps_serving() {
    let cluster = with_crds().await;
    // Schema failure: a required field missing and a wrong type.
    let bad = cluster.file(
        "bad.yaml",
        "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata:\n  name: p\nspec:\n  replicas: many\n",
    );
    let err = cluster.fails(&["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(
        err.contains("The SandboxWarmPool \"p\" is invalid"),
        "{err}"
    );
    assert!(
        err.contains("spec.sandboxTemplateRef: Required value"),
        "{err}"
    );
    assert!(err.contains("spec.replicas"), "{err}");
    // An enum violation.
    let bad_enum = cluster.file(
        "enum.yaml",
        "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata:\n  name: p\nspec:\n  sandboxTemplateRef: {name: t}\n  updateStrategy: {type: Sometimes}\n",
    );
    let err = cluster
        .fails(&["apply", "-f", bad_enum.to_str().unwrap()])
        .await;
    assert!(err.contains("Unsupported value: \"Sometimes\""), "{err}");
    // An unknown field under kubectl's default strict validation.
    let unknown = cluster.file(
        "unknown.yaml",
        &TEMPLATE.replace("  podTemplate:", "  bogus: 1\n  podTemplate:"),
    );
    let err = cluster
        .fails(&["apply", "-f", unknown.to_str().unwrap()])
        .await;
    assert!(err.contains("unknown field \"spec.bogus\""), "{err}");
    // An unknown kind.
    let kind = cluster.file(
        "kind.yaml",
        "apiVersion: example.com/v1\nkind: Nope\nmetadata:\n  name: thing\n",
    );
    let err = cluster
        .fails(&["apply", "-f", kind.to_str().unwrap()])
        .await;
    assert!(err.contains("no matches for kind \"Nope\""), "{err}");
    // A strategic merge patch on a custom resource: 415.
    let file = cluster.file("t.yaml", TEMPLATE);
    cluster.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let err = cluster
        .fails(&[
            "patch",
            "sandboxtemplate",
            "python",
            "--type",
            "strategic",
            "-p",
            "{\"spec\":{}}",
        ])
        .await;
    assert!(
        err.contains("application/strategic-merge-patch+json is not supported"),
        "{err}"
    );
    assert!(
        err.contains("accepted media types include: application/json-patch+json"),
        "{err}"
    );
    // Malformed JSON patch text.
    let err = cluster
        .fails(&[
            "patch",
            "sandboxtemplate",
            "python",
            "--type",
            "merge",
            "-p",
            "{not json",
        ])
        .await;
    assert!(!err.is_empty());
    // Still serving.
    let ns = cluster.ok(&["get", "namespaces", "-o", "name"]).await;
    assert!(ns.contains("namespace/agent-sandbox-system"), "{ns}");
    let deploy = cluster
        .ok(&[
            "get",
            "deployment",
            "-n",
            "agent-sandbox-system",
            "agent-sandbox-controller",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ])
        .await;
    assert_eq!(deploy, "1");
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_condition_and_scale_subresource() {
    let cluster = with_crds().await;
    let pool = cluster.file(
        "pool.yaml",
        "apiVersion: extensions.agents.x-k8s.io/v1beta1\nkind: SandboxWarmPool\nmetadata:\n  name: p\nspec:\n  sandboxTemplateRef: {name: python}\n",
    );
    cluster.ok(&["apply", "-f", pool.to_str().unwrap()]).await;
    // The schema default fills replicas.
    let replicas = cluster
        .ok(&[
            "get",
            "sandboxwarmpool",
            "p",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(replicas, "1");
    let out = cluster
        .ok(&["scale", "sandboxwarmpool", "p", "--replicas=4"])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let replicas = cluster
        .ok(&[
            "get",
            "sandboxwarmpool",
            "p",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(replicas, "4");
    let err = cluster
        .fails(&[
            "wait",
            "--for=condition=Ready",
            "sandboxwarmpool/p",
            "--timeout=1s",
        ])
        .await;
    assert!(err.contains("timed out waiting for the condition"), "{err}");
    cluster.emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_built_in_kinds_as_protobuf_and_they_are_stored() {
    let cluster = Cluster::start(Config::default()).await;
    let created = cluster.ok(&["create", "namespace", "team-a"]).await;
    assert_eq!(created.trim(), "namespace/team-a created");
    let phase = cluster
        .ok(&[
            "get",
            "namespace",
            "team-a",
            "-o",
            "jsonpath={.status.phase}",
        ])
        .await;
    assert_eq!(phase, "Active");
    cluster
        .ok(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ])
        .await;
    let mode = cluster
        .ok(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode}",
        ])
        .await;
    assert_eq!(mode, "fast");
    cluster
        .ok(&[
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=key=v",
        ])
        .await;
    let secret = cluster
        .ok(&[
            "get",
            "secret",
            "token",
            "-o",
            "jsonpath={.data.key} {.type}",
        ])
        .await;
    assert_eq!(secret, "dg== Opaque");
    cluster.ok(&["create", "serviceaccount", "runner"]).await;
    let account = cluster
        .ok(&[
            "get",
            "serviceaccount",
            "runner",
            "-o",
            "jsonpath={.metadata.name}",
        ])
        .await;
    assert_eq!(account, "runner");
    cluster
        .ok(&["create", "service", "clusterip", "web", "--tcp=8080:80"])
        .await;
    let service = cluster
        .ok(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.type} {.spec.selector.app} {.spec.ports[0].name} {.spec.ports[0].port}->{.spec.ports[0].targetPort}",
        ])
        .await;
    assert_eq!(service, "ClusterIP web 8080-80 8080->80");
    // A Deployment in protobuf is stored as the same one in JSON is.
    let flags = ["--image=calc", "--port=80", "--replicas=2"];
    let created = cluster
        .ok(&[&["create", "deployment", "web"][..], &flags].concat())
        .await;
    assert_eq!(created.trim(), "deployment.apps/web created");
    let as_json = cluster
        .ok(&[
            &[
                "create",
                "deployment",
                "web",
                "--dry-run=client",
                "-o",
                "json",
            ][..],
            &flags,
        ]
        .concat())
        .await;
    let json_file = cluster.file(
        "web-json.json",
        &as_json.replace("\"name\": \"web\"", "\"name\": \"web-json\""),
    );
    cluster
        .ok(&["create", "-f", json_file.to_str().unwrap()])
        .await;
    let cluster = &cluster;
    let spec = |name: &'static str| async move {
        let text = cluster
            .ok(&["get", "deployment", name, "-o", "jsonpath={.spec}"])
            .await;
        serde_json::from_str::<serde_json::Value>(&text).unwrap()
    };
    let from_protobuf = spec("web").await;
    assert_eq!(from_protobuf, spec("web-json").await);
    assert_eq!(from_protobuf["replicas"], 2);
    assert_eq!(
        from_protobuf["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    assert_eq!(from_protobuf["selector"]["matchLabels"]["app"], "web");
}
