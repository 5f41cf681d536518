//! What a cluster must have before a run creates anything on it, and what
//! it can hold: each failure is one line naming the object that is wrong.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use sandfleet_core::{Capacity, Preflight, RunId, TemplateSpec, template_name};

use crate::config::K8sConfig;
use crate::errors::{is_not_found, said};
use crate::objects;
use crate::resources::{
    CORE_GROUP, CRDS, EXTENSIONS_GROUP, SandboxTemplate, SandboxWarmPool, VERSION,
};

/// The field manager of everything the driver applies.
pub(crate) const MANAGER: &str = "sandfleet";

/// The verbs a run uses in its namespace, per resource: (API group,
/// resource, subresource, verbs). The preflight reviews each with a
/// `SelfSubjectAccessReview`; `deploy/rbac.yaml` grants them.
pub const PREFLIGHT_ACCESS: [(&str, &str, &str, &[&str]); 8] = [
    (
        EXTENSIONS_GROUP,
        "sandboxtemplates",
        "",
        &["get", "list", "patch", "delete"],
    ),
    (
        EXTENSIONS_GROUP,
        "sandboxwarmpools",
        "",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (
        EXTENSIONS_GROUP,
        "sandboxclaims",
        "",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    (CORE_GROUP, "sandboxes", "", &["get", "list"]),
    ("", "pods", "", &["get"]),
    ("", "pods", "exec", &["create"]),
    ("", "events", "", &["list"]),
    ("", "nodes", "", &["list"]),
];

/// The verbs a run with `[fleet] prepull` adds: a DaemonSet per image,
/// watched until every node has it, then deleted.
pub const PREPULL_ACCESS: (&str, &str, &str, &[&str]) = (
    "apps",
    "daemonsets",
    "",
    &["get", "list", "watch", "create", "delete"],
);

/// Which agent-sandbox releases the driver runs against, and why: v1beta1,
/// the only version it speaks, first shipped in v0.5.0; 1.0 serves nothing
/// else (its v1alpha1 and conversion webhook are gone).
const SUPPORTED: &str = "agent-sandbox v0.5.0 to 1.0.x (v1beta1, first served by v0.5.0)";

/// Runs every check of `config` on `client`, for the cluster's namespace;
/// `prepull` when the run pre-pulls its images.
pub(crate) async fn check(
    client: &kube::Client,
    config: &K8sConfig,
    server: &str,
    prepull: bool,
) -> Preflight {
    let mut found = Preflight::default();
    match client.apiserver_version().await {
        Ok(version) => found.notes.push(format!(
            "{server} answers: Kubernetes {}",
            version.git_version
        )),
        Err(error) => {
            found
                .failures
                .push(format!("{server} is not reachable: {}", said(&error)));
            return found;
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get(&config.namespace).await {
        Ok(_) => {}
        Err(error) if is_not_found(&error) => {
            found
                .failures
                .push(format!("namespace `{}` does not exist", config.namespace));
        }
        Err(error) => found.failures.push(format!(
            "namespace `{}`: {}",
            config.namespace,
            said(&error)
        )),
    }
    let crds_served = crds(client, &mut found).await;
    controller(client, config, &mut found).await;
    if let Some(class) = &config.runtime_class {
        let classes: Api<RuntimeClass> = Api::all(client.clone());
        if let Err(error) = classes.get(class).await {
            found
                .failures
                .push(missing("runtime_class", "RuntimeClass", class, &error));
        }
    }
    if let Some(secret) = &config.pull_secret {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
        if let Err(error) = secrets.get_metadata(secret).await {
            found
                .failures
                .push(missing("pull_secret", "Secret", secret, &error));
        }
    }
    access(client, config, prepull, &mut found).await;
    if crds_served && found.failures.is_empty() {
        dry_run(client, config, &mut found).await;
    }
    found
}

fn missing(key: &str, kind: &str, name: &str, error: &kube::Error) -> String {
    if is_not_found(error) {
        format!("{key}: {kind} `{name}` does not exist")
    } else {
        format!("{key}: {kind} `{name}`: {}", said(error))
    }
}

/// The four CRDs, each serving v1beta1; true when all are. What is wrong
/// is said in one line.
async fn crds(client: &kube::Client, found: &mut Preflight) -> bool {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut missing = Vec::new();
    let mut old = Vec::new();
    for name in CRDS {
        match api.get(name).await {
            Ok(crd) => {
                let served: Vec<&str> = crd
                    .spec
                    .versions
                    .iter()
                    .filter(|v| v.served)
                    .map(|v| v.name.as_str())
                    .collect();
                if !served.contains(&VERSION) {
                    old.push(format!(
                        "{name} (serves {})",
                        if served.is_empty() {
                            "nothing".to_string()
                        } else {
                            served.join(", ")
                        }
                    ));
                }
            }
            Err(error) if is_not_found(&error) => missing.push(name.to_string()),
            Err(error) => {
                found.failures.push(format!("CRD {name}: {}", said(&error)));
                return false;
            }
        }
    }
    let mut wrong = Vec::new();
    if !missing.is_empty() {
        wrong.push(format!("not installed: {}", missing.join(", ")));
    }
    if !old.is_empty() {
        wrong.push(format!("not serving {VERSION}: {}", old.join(", ")));
    }
    if wrong.is_empty() {
        return true;
    }
    found.failures.push(format!(
        "agent-sandbox CRDs {} (install {SUPPORTED}, with its extensions)",
        wrong.join("; ")
    ));
    false
}

async fn controller(client: &kube::Client, config: &K8sConfig, found: &mut Preflight) {
    let (namespace, name) = config
        .controller
        .split_once('/')
        .expect("checked when the configuration was read");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    match deployments.get(name).await {
        Ok(deployment) => {
            let extensions = deployment
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .is_some_and(|pod| {
                    pod.containers
                        .iter()
                        .any(|c| extensions_enabled(c.command.iter().flatten().chain(c.args.iter().flatten())))
                });
            if !extensions {
                found.failures.push(format!(
                    "the agent-sandbox controller {namespace}/{name} runs without --extensions: \
                     nothing would answer a SandboxClaim, SandboxWarmPool or SandboxTemplate, \
                     and every claim would wait out its bind timeout (apply the release's \
                     extensions.yaml, or helm --set controller.extensions=true)"
                ));
            }
            let available = deployment
                .status
                .and_then(|s| s.available_replicas)
                .unwrap_or(0);
            if available == 0 {
                found.failures.push(format!(
                    "the agent-sandbox controller {namespace}/{name} has no available replica"
                ));
            }
        }
        Err(error) if is_not_found(&error) => found.failures.push(format!(
            "the agent-sandbox controller Deployment {namespace}/{name} does not exist (set `controller` if it runs elsewhere)"
        )),
        // Reading another namespace may be forbidden to a run's account:
        // the dry run and the claims will tell.
        Err(error) => found.warnings.push(format!(
            "cannot read the controller Deployment {namespace}/{name}: {}",
            said(&error)
        )),
    }
}

/// Whether a controller started with `argv` runs the extensions'
/// controllers: its `--extensions` flag is a Go bool flag (`-extensions`
/// or `--extensions`, with `=VALUE` as `strconv.ParseBool` reads it), the
/// last one given winning, off when absent.
fn extensions_enabled<'a>(argv: impl Iterator<Item = &'a String>) -> bool {
    let mut enabled = false;
    for arg in argv {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        match flag.split_once('=') {
            None if flag == "extensions" => enabled = true,
            Some(("extensions", value)) => {
                enabled = matches!(value, "1" | "t" | "T" | "TRUE" | "true" | "True");
            }
            _ => {}
        }
    }
    enabled
}

/// One SelfSubjectAccessReview per verb the run needs.
async fn access(client: &kube::Client, config: &K8sConfig, prepull: bool, found: &mut Preflight) {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut asked = Vec::new();
    let prepull = prepull.then_some(PREPULL_ACCESS);
    for (group, resource, subresource, verbs) in PREFLIGHT_ACCESS.into_iter().chain(prepull) {
        for verb in verbs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(group.into()),
                        resource: Some(resource.into()),
                        subresource: (!subresource.is_empty()).then(|| subresource.into()),
                        verb: Some((*verb).into()),
                        namespace: (resource != "nodes").then(|| config.namespace.clone()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let reviews = reviews.clone();
            asked.push(async move {
                let answer = reviews.create(&PostParams::default(), &review).await;
                (group, resource, subresource, *verb, answer)
            });
        }
    }
    // Forbidden verbs, per resource, in the order asked.
    let mut forbidden: Vec<(String, Vec<&str>, String)> = Vec::new();
    for (group, resource, subresource, verb, answer) in futures_util::future::join_all(asked).await
    {
        let what = match (group, subresource) {
            ("", "") => resource.to_string(),
            ("", sub) => format!("{resource}/{sub}"),
            (group, _) => format!("{resource}.{group}"),
        };
        match answer {
            Ok(review) if review.status.as_ref().is_some_and(|s| s.allowed) => {}
            // Capacity is read from nodes; without them it is unknown.
            Ok(_) if resource == "nodes" => found
                .warnings
                .push("RBAC forbids listing nodes: capacity is unknown".into()),
            // Events only explain a claim that timed out.
            Ok(_) if resource == "events" => found.warnings.push(
                "RBAC forbids listing events: a claim that times out cannot say why its pod did not start"
                    .into(),
            ),
            Ok(review) => {
                let reason = review
                    .status
                    .and_then(|s| s.reason)
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                match forbidden.iter_mut().find(|(w, _, _)| *w == what) {
                    Some((_, verbs, _)) => verbs.push(verb),
                    None => forbidden.push((what, vec![verb], reason)),
                }
            }
            Err(error) => found.warnings.push(format!(
                "cannot review access to `{verb}` {what}: {}",
                said(&error)
            )),
        }
    }
    for (what, verbs, reason) in forbidden {
        found.failures.push(format!(
            "RBAC forbids {} on {what} in namespace `{}`{reason}",
            verbs.join(", "),
            config.namespace
        ));
    }
}

/// A server-side dry run of a template and a pool as the run will apply them.
async fn dry_run(client: &kube::Client, config: &K8sConfig, found: &mut Preflight) {
    let run = RunId::new("preflight").expect("a valid run id");
    let image = "sandfleet.invalid/preflight:dry-run";
    let spec = TemplateSpec {
        name: template_name(&run, image),
        image: image.into(),
        cpu_milli: 100,
        memory_mib: 64,
        disk_mib: 64,
        network: false,
        env: Default::default(),
        labels: run.labels(),
    };
    let template = match objects::template(&spec, config, &config.namespace) {
        Ok(template) => template,
        Err(error) => {
            found.failures.push(error);
            return;
        }
    };
    let params = PatchParams::apply(MANAGER).force().dry_run();
    let templates: Api<SandboxTemplate> = Api::namespaced(client.clone(), &config.namespace);
    let applied = {
        let patch = Patch::Apply(&template);
        retry_conflicts(|| templates.patch(&spec.name, &params, &patch)).await
    };
    if let Err(error) = applied {
        found.failures.push(format!(
            "a dry run of a SandboxTemplate was refused: {}",
            said(&error)
        ));
        return;
    }
    let pool = objects::pool(&spec.name, &config.namespace, 1, &spec.labels);
    let pools: Api<SandboxWarmPool> = Api::namespaced(client.clone(), &config.namespace);
    let patch = Patch::Apply(&pool);
    let applied = retry_conflicts(|| pools.patch(&spec.name, &params, &patch)).await;
    if let Err(error) = applied {
        found.failures.push(format!(
            "a dry run of a SandboxWarmPool was refused: {}",
            said(&error)
        ));
    }
}

/// Attempts of a dry run that conflicts (nothing is written, so making it
/// again is safe; a busy server answers 409 now and then).
const DRY_RUN_ATTEMPTS: usize = 5;

async fn retry_conflicts<T, F: Future<Output = Result<T, kube::Error>>>(
    mut attempt: impl FnMut() -> F,
) -> Result<T, kube::Error> {
    let mut tries = 1;
    loop {
        match attempt().await {
            Err(kube::Error::Api(status)) if status.code == 409 && tries < DRY_RUN_ATTEMPTS => {
                tries += 1
            }
            other => return other,
        }
    }
}

/// The schedulable nodes matching the node selector, and what they can hold.
pub(crate) async fn capacity(
    client: &kube::Client,
    config: &K8sConfig,
) -> Result<Capacity, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut params = ListParams::default();
    if !config.node_selector.is_empty() {
        params = params.labels(&config.node_selector_string());
    }
    let listed = nodes.list(&params).await?;
    let mut capacity = Capacity {
        nodes: Some(0),
        cpu_milli: Some(0),
        memory_mib: Some(0),
        disk_mib_per_node: None,
        sandbox_slots: Some(0),
        reserves_requests: true,
    };
    for node in listed.items {
        if node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
        {
            continue;
        }
        let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
        let read = |key: &str, parse: fn(&str) -> Option<u64>| {
            allocatable.get(key).and_then(|q| parse(&q.0))
        };
        let add = |total: &mut Option<u64>, value: Option<u64>| {
            *total = total.zip(value).map(|(t, v)| t + v);
        };
        capacity.nodes = capacity.nodes.map(|n| n + 1);
        add(&mut capacity.cpu_milli, read("cpu", crate::quantity::milli));
        add(
            &mut capacity.memory_mib,
            read("memory", crate::quantity::mebibytes),
        );
        let pods =
            read("pods", crate::quantity::count).map(|p| u32::try_from(p).unwrap_or(u32::MAX));
        capacity.sandbox_slots = capacity
            .sandbox_slots
            .zip(pods)
            .map(|(t, p)| t.saturating_add(p));
        // The smallest node's disk bounds what one sandbox may count on.
        if let Some(disk) = read("ephemeral-storage", crate::quantity::mebibytes) {
            capacity.disk_mib_per_node =
                Some(capacity.disk_mib_per_node.map_or(disk, |d| d.min(disk)));
        }
    }
    Ok(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extensions_flag_is_read_as_go_reads_a_bool_flag() {
        let enabled = |argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(ToString::to_string).collect();
            extensions_enabled(argv.iter())
        };
        assert!(enabled(&["--leader-elect=true", "--extensions"]));
        assert!(enabled(&["-extensions=true"]));
        assert!(enabled(&["--extensions=false", "--extensions=1"]));
        assert!(!enabled(&["--leader-elect=true"]));
        assert!(!enabled(&["--extensions", "--extensions=false"]));
        assert!(!enabled(&["--extensions-off", "extensions"]));
    }
}
