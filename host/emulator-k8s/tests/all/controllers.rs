//! agent-sandbox's controller behaviour (SEMANTICS.md §1–4) over the wire, with pods
//! running as local sandboxes (`plain` here: the controllers are under test, not the
//! isolation; the kubectl tests use isolated sandboxes).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::{Api, EXT, PODS, SB, claim, condition, image, is_true, pool, template};
use reqwest::Method;
use sandfleet_emulator_k8s::{Config, Emulator, PodRuntime, Tuning};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

async fn cluster(tuning: Tuning) -> (Emulator, Api, tempfile::TempDir) {
    let (dir, images) = image("python:3.12");
    let emulator = Emulator::start(Config {
        with_agent_sandbox: true,
        images,
        runtime: PodRuntime::Plain,
        tuning,
        ..Config::default()
    })
    .await
    .expect("emulator starts");
    let api = Api::new(&emulator);
    (emulator, api, dir)
}

fn fast() -> Tuning {
    Tuning {
        warm_ready_timeout: Duration::from_secs(300),
        cold_start_after: Duration::from_secs(2),
    }
}

fn sandbox(name: &str, image: &str, command: Option<&[&str]>) -> Value {
    let mut t = template(name, image, command);
    t["apiVersion"] = json!("agents.x-k8s.io/v1beta1");
    t["kind"] = json!("Sandbox");
    t["spec"]["service"] = json!(true);
    t["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "work"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]);
    t
}

fn name_hash(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_gets_its_pod_service_and_pvc_with_upstream_names_labels_and_owner() {
    let (emulator, api, _dir) = cluster(fast()).await;
    let made = api.create(SB, sandbox("box", "python:3.12", None)).await;
    let ready = api
        .wait(&format!("{SB}/box"), LIMIT, |o| is_true(o, "Ready"))
        .await
        .unwrap();
    let hash = name_hash("box");
    let pod = api
        .get(&format!("{PODS}/box"))
        .await
        .expect("pod named like the sandbox");
    assert_eq!(
        pod["metadata"]["labels"]["agents.x-k8s.io/sandbox-name-hash"],
        hash
    );
    assert_eq!(pod["metadata"]["labels"]["app"], "agent");
    assert_eq!(
        pod["metadata"]["annotations"]["agents.x-k8s.io/propagated-labels"],
        "app"
    );
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], made["metadata"]["uid"]);
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["controller"].as_bool(),
            owner["blockOwnerDeletion"].as_bool()
        ),
        (Some("Sandbox"), Some(true), Some(true))
    );
    assert_eq!(pod["status"]["phase"], "Running");
    let ip = pod["status"]["podIP"].as_str().unwrap();
    assert!(ip.starts_with("127.42."), "{ip}");
    assert_eq!(ready["status"]["podIPs"], json!([ip]));
    assert_eq!(
        ready["status"]["selector"],
        format!("agents.x-k8s.io/sandbox-name-hash={hash}")
    );
    assert_eq!(
        ready["status"]["serviceFQDN"],
        "box.default.svc.cluster.local"
    );
    assert_eq!(
        ready["metadata"]["annotations"]["agents.x-k8s.io/pod-name"],
        "box"
    );
    let r = condition(&ready, "Ready").unwrap();
    assert_eq!(
        (r["reason"].as_str(), r["message"].as_str()),
        (
            Some("DependenciesReady"),
            Some("Pod is Ready; Service Exists")
        )
    );
    assert_eq!(
        condition(&ready, "Suspended").unwrap()["reason"],
        "NotSuspended"
    );
    let svc = api
        .get("/api/v1/namespaces/default/services/box")
        .await
        .expect("headless service");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(
        svc["spec"]["selector"]["agents.x-k8s.io/sandbox-name-hash"],
        hash
    );
    let pvc = api
        .get("/api/v1/namespaces/default/persistentvolumeclaims/work-box")
        .await
        .expect("pvc from the template");
    assert_eq!(
        pvc["metadata"]["labels"]["agents.x-k8s.io/sandbox-name-hash"],
        hash
    );
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "work-box"
    );
    assert_eq!(emulator.running_pods(), 1);

    // Deleting the sandbox removes pod, service and PVC by garbage collection.
    let (code, _) = api.delete(&format!("{SB}/box")).await;
    assert_eq!(code, 200);
    for path in [
        format!("{PODS}/box"),
        "/api/v1/namespaces/default/services/box".into(),
        "/api/v1/namespaces/default/persistentvolumeclaims/work-box".into(),
    ] {
        api.wait(&path, LIMIT, |o| o.is_none()).await;
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pod_is_not_recreated() {
    let (emulator, api, _dir) = cluster(fast()).await;
    api.create(
        SB,
        sandbox("dies", "python:3.12", Some(&["sh", "-c", "exit 3"])),
    )
    .await;
    let failed = api
        .wait(&format!("{SB}/dies"), LIMIT, |o| is_true(o, "Finished"))
        .await
        .unwrap();
    assert_eq!(condition(&failed, "Ready").unwrap()["reason"], "PodFailed");
    assert_eq!(
        condition(&failed, "Finished").unwrap()["reason"],
        "PodFailed"
    );
    let pod = api.get(&format!("{PODS}/dies")).await.unwrap();
    assert_eq!(pod["status"]["phase"], "Failed");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );
    // Touch the sandbox: a reconcile runs, and the failed pod is still the same one.
    api.merge(
        &format!("{SB}/dies"),
        json!({"metadata": {"labels": {"poke": "1"}}}),
    )
    .await;
    api.wait(&format!("{PODS}/dies"), LIMIT, |o| {
        o.is_some_and(|p| p["metadata"]["labels"]["poke"].is_null())
    })
    .await;
    let after = api.get(&format!("{PODS}/dies")).await.unwrap();
    assert_eq!(after["metadata"]["uid"], pod["metadata"]["uid"]);
    assert_eq!(after["status"]["phase"], "Failed");
    emulator.shutdown().await;
}

async fn setup_pool(api: &Api, image_name: &str, replicas: u64) {
    api.create(
        &format!("{EXT}/sandboxtemplates"),
        template("tpl", image_name, None),
    )
    .await;
    api.create(
        &format!("{EXT}/sandboxwarmpools"),
        pool("pool", "tpl", replicas),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_gets_its_ref_hash_label_and_a_secure_network_policy() {
    let (emulator, api, _dir) = cluster(fast()).await;
    api.create(
        &format!("{EXT}/sandboxtemplates"),
        template("tpl", "python:3.12", None),
    )
    .await;
    let labelled = api
        .wait(&format!("{EXT}/sandboxtemplates/tpl"), LIMIT, |o| {
            o.is_some_and(|t| {
                t["metadata"]["labels"]
                    .get("agents.x-k8s.io/sandbox-template-ref-hash")
                    .is_some()
            })
        })
        .await
        .unwrap();
    assert_eq!(
        labelled["metadata"]["labels"]["agents.x-k8s.io/sandbox-template-ref-hash"],
        name_hash("tpl")
    );
    let policy = api
        .wait(
            "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/tpl-network-policy",
            LIMIT,
            |o| o.is_some(),
        )
        .await
        .unwrap();
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["agents.x-k8s.io/sandbox-template-ref-hash"],
        name_hash("tpl")
    );
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app"],
        "sandbox-router"
    );
    assert_eq!(
        policy["metadata"]["ownerReferences"][0]["kind"],
        "SandboxTemplate"
    );
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_with_no_egress_rules_gets_a_policy_denying_all_egress() {
    let (emulator, api, _dir) = cluster(fast()).await;
    let router = json!([{"from": [{"podSelector": {"matchLabels": {"app": "sandbox-router"}}}]}]);
    let mut closed = template("closed", "python:3.12", None);
    closed["spec"]["networkPolicy"] = json!({"ingress": router, "egress": []});
    api.create(&format!("{EXT}/sandboxtemplates"), closed).await;
    let path =
        "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/closed-network-policy";
    let policy = api.wait(path, LIMIT, |o| o.is_some()).await.unwrap();
    assert_eq!(
        policy["spec"],
        json!({
            "podSelector": {"matchLabels": {"agents.x-k8s.io/sandbox-template-ref-hash": name_hash("closed")}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": router,
        })
    );
    // Its sandboxes keep the pod's DNS settings: the secure DNS default is for
    // templates without a policy of their own.
    api.create(
        &format!("{EXT}/sandboxwarmpools"),
        pool("closed", "closed", 1),
    )
    .await;
    let members = api
        .wait(SB, LIMIT, |o| {
            o.is_some_and(|list| list["items"].as_array().is_some_and(|i| !i.is_empty()))
        })
        .await
        .unwrap();
    let pod_spec = &members["items"][0]["spec"]["podTemplate"]["spec"];
    assert!(pod_spec.get("dnsPolicy").is_none(), "{pod_spec}");
    // Without its own policy again, the template gets the default one back.
    api.merge(
        &format!("{EXT}/sandboxtemplates/closed"),
        json!({"spec": {"networkPolicy": null}}),
    )
    .await;
    let reopened = api
        .wait(path, LIMIT, |o| {
            o.is_some_and(|p| p["spec"]["egress"].is_array())
        })
        .await
        .unwrap();
    assert_eq!(
        reopened["spec"]["egress"][0]["to"][0]["ipBlock"]["cidr"],
        "0.0.0.0/0"
    );
    // And closed again: the default's egress rules do not linger.
    api.merge(
        &format!("{EXT}/sandboxtemplates/closed"),
        json!({"spec": {"networkPolicy": {"ingress": router}}}),
    )
    .await;
    let closed = api
        .wait(path, LIMIT, |o| {
            o.is_some_and(|p| {
                p["spec"]["ingress"][0]["from"][0]
                    .get("namespaceSelector")
                    .is_none()
            })
        })
        .await
        .unwrap();
    assert!(closed["spec"].get("egress").is_none(), "{closed}");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_fills_to_replicas_and_adoption_keeps_the_pools_generated_name() {
    let (emulator, api, _dir) = cluster(fast()).await;
    setup_pool(&api, "python:3.12", 3).await;
    let filled = api
        .wait(&format!("{EXT}/sandboxwarmpools/pool"), LIMIT, |o| {
            o.is_some_and(|p| p["status"]["readyReplicas"] == 3)
        })
        .await
        .unwrap();
    assert_eq!(filled["status"]["replicas"], 3);
    assert_eq!(
        filled["status"]["selector"],
        format!("agents.x-k8s.io/warm-pool-sandbox={}", name_hash("pool"))
    );
    let members = api.list(SB).await;
    assert_eq!(members.len(), 3);
    for m in &members {
        let labels = &m["metadata"]["labels"];
        assert!(
            m["metadata"]["name"].as_str().unwrap().starts_with("pool-"),
            "{m}"
        );
        assert_eq!(labels["agents.x-k8s.io/launch-type"], "warm");
        assert_eq!(labels["agents.x-k8s.io/created-by"], "controller");
        assert_eq!(
            m["metadata"]["annotations"]["agents.x-k8s.io/sandbox-template-ref"],
            "tpl"
        );
        assert_eq!(
            m["spec"]["podTemplate"]["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"],
            "true"
        );
        assert_eq!(
            m["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"],
            false
        );
    }

    let made = api
        .create(&format!("{EXT}/sandboxclaims"), claim("c1", "pool"))
        .await;
    let bound = api
        .wait(&format!("{EXT}/sandboxclaims/c1"), LIMIT, |o| {
            is_true(o, "Ready")
        })
        .await
        .unwrap();
    let name = bound["status"]["sandbox"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(name.starts_with("pool-"), "adopted, not made cold: {name}");
    assert_eq!(
        bound["metadata"]["annotations"]["agents.x-k8s.io/sandbox-name"],
        name
    );
    assert!(
        bound["status"]["sandbox"]["podIPs"][0]
            .as_str()
            .unwrap()
            .starts_with("127.42.")
    );
    let adopted = api.get(&format!("{SB}/{name}")).await.unwrap();
    let labels = &adopted["metadata"]["labels"];
    assert!(
        labels.get("agents.x-k8s.io/warm-pool-sandbox").is_none(),
        "{labels}"
    );
    assert!(
        labels
            .get("agents.x-k8s.io/sandbox-template-hash")
            .is_none(),
        "{labels}"
    );
    assert_eq!(labels["agents.x-k8s.io/claim-uid"], made["metadata"]["uid"]);
    assert_eq!(labels["agents.x-k8s.io/launch-type"], "warm");
    assert_eq!(
        adopted["metadata"]["ownerReferences"],
        json!([{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "name": "c1", "uid": made["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        adopted["spec"]["podTemplate"]["metadata"]["labels"]["agents.x-k8s.io/claim-uid"],
        made["metadata"]["uid"]
    );
    assert!(
        adopted["spec"]["podTemplate"]["metadata"]["annotations"]
            .get("cluster-autoscaler.kubernetes.io/safe-to-evict")
            .is_none()
    );
    // The pod follows: no longer a pool member.
    api.wait(&format!("{PODS}/{name}"), LIMIT, |o| {
        o.is_some_and(|p| {
            p["metadata"]["labels"]
                .get("agents.x-k8s.io/warm-pool-sandbox")
                .is_none()
        })
    })
    .await;
    // The pool replenishes: three Ready members besides the adopted one.
    let deadline = Instant::now() + LIMIT;
    loop {
        let all = api.list(SB).await;
        let ready = all.iter().filter(|s| is_true(Some(s), "Ready")).count();
        if all.len() == 4 && ready == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} sandboxes, {ready} Ready",
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    api.wait(&format!("{EXT}/sandboxwarmpools/pool"), LIMIT, |o| {
        o.is_some_and(|p| p["status"]["readyReplicas"] == 3)
    })
    .await;

    // Deleting the claim removes its sandbox and pod by GC; the pool keeps its three.
    let (code, _) = api.delete(&format!("{EXT}/sandboxclaims/c1")).await;
    assert_eq!(code, 200);
    api.wait(&format!("{SB}/{name}"), LIMIT, |o| o.is_none())
        .await;
    api.wait(&format!("{PODS}/{name}"), LIMIT, |o| o.is_none())
        .await;
    assert_eq!(api.list(SB).await.len(), 3);
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_no_warm_candidate_goes_cold_after_2s() {
    let (emulator, api, _dir) = cluster(fast()).await;
    setup_pool(&api, "python:3.12", 0).await;
    let started = Instant::now();
    let made = api
        .create(&format!("{EXT}/sandboxclaims"), claim("cold", "pool"))
        .await;
    let sb = api
        .wait(&format!("{SB}/cold"), LIMIT, |o| o.is_some())
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "went cold after {:?}",
        started.elapsed()
    );
    let labels = &sb["metadata"]["labels"];
    assert_eq!(labels["agents.x-k8s.io/launch-type"], "cold");
    assert_eq!(labels["agents.x-k8s.io/claim-uid"], made["metadata"]["uid"]);
    assert_eq!(
        labels["agents.x-k8s.io/sandbox-template-ref-hash"],
        name_hash("tpl")
    );
    assert_eq!(
        sb["metadata"]["ownerReferences"][0]["uid"],
        made["metadata"]["uid"]
    );
    assert!(
        sb["spec"].get("shutdownTime").is_none(),
        "claim lifecycle is not copied"
    );
    let ready = api
        .wait(&format!("{EXT}/sandboxclaims/cold"), LIMIT, |o| {
            is_true(o, "Ready")
        })
        .await
        .unwrap();
    assert_eq!(ready["status"]["sandbox"]["name"], "cold");
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_name_a_missing_pool_or_template_in_their_ready_condition() {
    let (emulator, api, _dir) = cluster(Tuning {
        cold_start_after: Duration::from_millis(100),
        ..fast()
    })
    .await;
    api.create(&format!("{EXT}/sandboxclaims"), claim("orphan", "nopool"))
        .await;
    let c = api
        .wait(&format!("{EXT}/sandboxclaims/orphan"), LIMIT, |o| {
            o.and_then(|c| condition(c, "Ready")).is_some()
        })
        .await
        .unwrap();
    let r = condition(&c, "Ready").unwrap();
    assert_eq!(
        (r["reason"].as_str(), r["message"].as_str()),
        (
            Some("WarmPoolNotFound"),
            Some("SandboxWarmPool \"nopool\" not found")
        )
    );
    api.create(&format!("{EXT}/sandboxwarmpools"), pool("p2", "notpl", 1))
        .await;
    api.create(&format!("{EXT}/sandboxclaims"), claim("notpl", "p2"))
        .await;
    let c = api
        .wait(&format!("{EXT}/sandboxclaims/notpl"), LIMIT, |o| {
            o.and_then(|c| condition(c, "Ready")).is_some()
        })
        .await
        .unwrap();
    assert_eq!(
        condition(&c, "Ready").unwrap()["reason"],
        "TemplateNotFound"
    );
    // A missing template makes no members.
    assert!(api.list(SB).await.is_empty());
    // Once the pool exists the first claim recovers (pool events requeue its claims).
    api.create(
        &format!("{EXT}/sandboxtemplates"),
        template("tpl", "python:3.12", None),
    )
    .await;
    api.create(&format!("{EXT}/sandboxwarmpools"), pool("nopool", "tpl", 1))
        .await;
    api.wait(&format!("{EXT}/sandboxclaims/orphan"), LIMIT, |o| {
        is_true(o, "Ready")
    })
    .await;
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_population_stays_within_replicas_while_members_fail() {
    // Members whose image does not exist never get Ready; each is replaced after the
    // (shortened) readiness timeout. The upstream over-creation bug made up to ~5x.
    let (emulator, api, _dir) = cluster(Tuning {
        warm_ready_timeout: Duration::from_millis(300),
        ..fast()
    })
    .await;
    let replicas = 3;
    // Members made at different times fail at different times, so replacements of
    // some overlap with members that still count.
    setup_pool(&api, "missing:latest", 1).await;
    let mut watch = api
        .watch(&format!("{SB}?watch=true&timeoutSeconds=4"))
        .await;
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut most = 0;
    let mut created = 0;
    let mut deleted = 0;
    let mut scaled = false;
    while let Some(event) = watch.next().await {
        if !scaled {
            scaled = true;
            api.merge(
                &format!("{EXT}/sandboxwarmpools/pool"),
                json!({"spec": {"replicas": replicas}}),
            )
            .await;
        }
        let name = event["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        match event["type"].as_str().unwrap() {
            "ADDED" => {
                live.insert(name);
                created += 1;
            }
            "DELETED" => {
                live.remove(&name);
                deleted += 1;
            }
            _ => {}
        }
        most = most.max(live.len());
        assert!(
            live.len() as u64 <= replicas,
            "population {} > replicas {replicas}: {live:?}",
            live.len()
        );
    }
    assert!(
        deleted >= replicas as usize,
        "failing members were replaced: {created} made, {deleted} deleted"
    );
    assert_eq!(most, replicas as usize);
    // Their pods report why: the image cannot be pulled (once the kubelet
    // tried; the newest replacements may not have been tried yet).
    let deadline = Instant::now() + LIMIT;
    loop {
        let pods = api.list(PODS).await;
        if pods.iter().any(|p| {
            matches!(
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str(),
                Some("ErrImagePull" | "ImagePullBackOff")
            )
        }) {
            break;
        }
        assert!(Instant::now() < deadline, "{pods:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    emulator.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_expiry_follows_the_shutdown_policy_and_deleted_is_terminal() {
    let (emulator, api, _dir) = cluster(fast()).await;
    setup_pool(&api, "python:3.12", 2).await;
    api.wait(&format!("{EXT}/sandboxwarmpools/pool"), LIMIT, |o| {
        o.is_some_and(|p| p["status"]["readyReplicas"] == 2)
    })
    .await;
    let soon =
        humantime::format_rfc3339_seconds(std::time::SystemTime::now() + Duration::from_secs(2))
            .to_string();
    let mut retain = claim("keep", "pool");
    retain["spec"]["lifecycle"] = json!({"shutdownTime": soon, "shutdownPolicy": "Retain"});
    let mut delete = claim("gone", "pool");
    delete["spec"]["lifecycle"] = json!({"shutdownTime": soon, "shutdownPolicy": "Delete"});
    api.create(&format!("{EXT}/sandboxclaims"), retain).await;
    let made = api.create(&format!("{EXT}/sandboxclaims"), delete).await;
    let mut watch = api
        .watch(&format!("{EXT}/sandboxclaims?watch=true&fieldSelector=metadata.name%3Dgone&resourceVersion={}&timeoutSeconds=8", crate::common::rv(&made)))
        .await;
    let mut types = Vec::new();
    while let Some(event) = watch.next().await {
        types.push(event["type"].as_str().unwrap().to_string());
    }
    assert_eq!(
        types.last().map(String::as_str),
        Some("DELETED"),
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "DELETED").count(),
        1,
        "nothing follows DELETED: {types:?}"
    );
    let kept = api
        .wait(&format!("{EXT}/sandboxclaims/keep"), LIMIT, |o| {
            o.and_then(|c| condition(c, "Ready"))
                .is_some_and(|r| r["reason"] == "ClaimExpired")
        })
        .await
        .unwrap();
    let sb = kept["status"]["sandbox"]["name"]
        .as_str()
        .map(str::to_string);
    if let Some(sb) = sb {
        api.wait(&format!("{SB}/{sb}"), LIMIT, |o| o.is_none())
            .await;
    }
    assert!(
        api.get(&format!("{EXT}/sandboxclaims/keep"))
            .await
            .is_some(),
        "Retain keeps the claim"
    );
    let (code, _) = api
        .send(Method::GET, &format!("{EXT}/sandboxclaims/gone"), None)
        .await;
    assert_eq!(code, 404);
    emulator.shutdown().await;
}
