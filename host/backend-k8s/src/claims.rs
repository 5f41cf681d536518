//! Claim readiness from one shared watch per namespace and run: a kube
//! reflector on the run's claims (by its label selector), resumed from its
//! last resourceVersion when the watch drops and relisted when the server
//! answers 410, feeding every waiting claim — not one watch per claim.
//!
//! A claim is ready when its `Ready` condition is True **and**
//! `status.sandbox.name` is set (a claim can be Ready for a moment with a
//! sandbox that is not, upstream #1513). Terminal reasons end the wait at
//! once, and so does the claim's deletion — including a deletion the watch
//! missed while it was relisting.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use sandfleet_core::ErrorKind;
use tokio::sync::watch;

use crate::resources::{SandboxClaim, condition};

/// What failure a claim's `Ready=False` reason is when the claim can never
/// become ready; `None` while it still may. Each of these is waited out by
/// nothing: the controller does not retry them, so the wait ends at once.
pub(crate) fn never_ready(reason: &str) -> Option<ErrorKind> {
    match reason {
        // Nothing to claim from: the run's template or pool is gone.
        "TemplateNotFound" | "WarmPoolNotFound" => Some(ErrorKind::NotFound),
        // The claim asks what its template refuses; a new claim would ask
        // the same.
        "InvalidMetadata" | "EnvVarsInjectionRejected" | "VolumeClaimTemplatesError" => {
            Some(ErrorKind::Invalid)
        }
        // Its sandbox has ended, and a failed pod is never recreated
        // (upstream #729): a new claim is the way on.
        "ClaimExpired" | "SandboxExpired" | "PodFailed" | "PodSucceeded" => {
            Some(ErrorKind::SandboxLost)
        }
        _ => None,
    }
}

/// What the watch has shown of one claim.
#[derive(Debug, Clone, Default)]
pub(crate) enum Seen {
    /// Nothing yet.
    #[default]
    Nothing,
    /// Its latest state.
    Present(Arc<SandboxClaim>),
    /// It was deleted.
    Deleted,
}

/// How a wait for a claim ended without a ready sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotReady {
    /// A reason it will never be ready: the failure it is, and the
    /// controller's `reason` and `message`.
    Terminal(ErrorKind, String, String),
    /// It was deleted.
    Deleted,
    /// The deadline passed; the last reason it gave, if any.
    Timeout(Option<String>),
}

type Waiters = Arc<Mutex<HashMap<String, watch::Sender<Seen>>>>;

/// The shared watch of one run's claims in one namespace.
pub(crate) struct ClaimWatch {
    waiters: Waiters,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ClaimWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClaimWatch {
    /// Starts watching the claims `api` lists with `selector`.
    pub(crate) fn start(api: Api<SandboxClaim>, selector: &str) -> Self {
        let (store, writer) = reflector::store();
        let waiters: Waiters = Arc::default();
        let config = watcher::Config::default().labels(selector);
        let events = reflector::reflector(writer, watcher(api, config)).default_backoff();
        let task = tokio::spawn(dispatch(events, waiters.clone(), store));
        ClaimWatch { waiters, task }
    }

    /// Starts following claim `name` (before it is created, so nothing is
    /// missed).
    pub(crate) fn follow(&self, name: &str) -> watch::Receiver<Seen> {
        let (sender, receiver) = watch::channel(Seen::Nothing);
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), sender);
        receiver
    }

    /// Stops following claim `name`.
    pub(crate) fn forget(&self, name: &str) {
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }
}

async fn dispatch(
    events: impl futures_util::Stream<Item = Result<watcher::Event<SandboxClaim>, watcher::Error>>,
    waiters: Waiters,
    store: Store<SandboxClaim>,
) {
    let mut events = pin!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                tracing::debug!(%error, "claim watch failed; resuming");
                continue;
            }
        };
        let waiters = waiters.lock().unwrap_or_else(|e| e.into_inner());
        let tell = |claim: &SandboxClaim, seen: Seen| {
            if let Some(name) = &claim.metadata.name
                && let Some(sender) = waiters.get(name)
            {
                sender.send_replace(seen);
            }
        };
        match event {
            watcher::Event::Apply(claim) | watcher::Event::InitApply(claim) => {
                tell(&claim, Seen::Present(Arc::new(claim.clone())));
            }
            watcher::Event::Delete(claim) => tell(&claim, Seen::Deleted),
            watcher::Event::Init => {}
            watcher::Event::InitDone => {
                // A relist after a 410: a claim seen before and absent now
                // was deleted while the watch was away.
                for (name, sender) in waiters.iter() {
                    let was_seen = matches!(*sender.borrow(), Seen::Present(_));
                    let listed = store
                        .state()
                        .iter()
                        .any(|c| c.metadata.name.as_deref() == Some(name.as_str()));
                    if was_seen && !listed {
                        sender.send_replace(Seen::Deleted);
                    }
                }
            }
        }
    }
}

/// Whether `claim` has a ready sandbox; `Err` when it never will.
pub(crate) fn judge(claim: &SandboxClaim) -> Result<bool, NotReady> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(NotReady::Deleted);
    }
    let Some(status) = &claim.status else {
        return Ok(false);
    };
    let ready = condition(&status.conditions, "Ready");
    if let Some(ready) = ready
        && ready.status == "False"
        && let Some(kind) = never_ready(&ready.reason)
    {
        return Err(NotReady::Terminal(
            kind,
            ready.reason.clone(),
            ready.message.clone(),
        ));
    }
    // Mirrored from the sandbox while its pod is terminal, whatever Ready
    // says meanwhile.
    if let Some(finished) = condition(&status.conditions, "Finished")
        && finished.status == "True"
    {
        return Err(NotReady::Terminal(
            ErrorKind::SandboxLost,
            format!("Finished ({})", finished.reason),
            finished.message.clone(),
        ));
    }
    let bound = status.sandbox.as_ref().is_some_and(|s| !s.name.is_empty());
    Ok(bound && ready.is_some_and(|r| r.status == "True"))
}

/// The last `Ready` reason `claim` gave.
fn reason(claim: &SandboxClaim) -> Option<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| condition(&s.conditions, "Ready"))
        .map(|c| format!("{}: {}", c.reason, c.message))
}

/// Waits on `seen` until the claim is ready (its latest state), or fails.
pub(crate) async fn wait_ready(
    seen: &mut watch::Receiver<Seen>,
    deadline: tokio::time::Instant,
) -> Result<Arc<SandboxClaim>, NotReady> {
    let mut last_reason = None;
    loop {
        let current = seen.borrow_and_update().clone();
        match current {
            Seen::Nothing => {}
            Seen::Deleted => return Err(NotReady::Deleted),
            Seen::Present(claim) => {
                if judge(&claim)? {
                    return Ok(claim);
                }
                last_reason = reason(&claim).or(last_reason);
            }
        }
        match tokio::time::timeout_at(deadline, seen.changed()).await {
            Ok(Ok(())) => {}
            // The watch is gone (the backend is shutting down): no more news.
            Ok(Err(_)) | Err(_) => return Err(NotReady::Timeout(last_reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{ClaimedSandbox, SandboxClaimSpec, SandboxClaimStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn claim(ready: Option<(&str, &str)>, sandbox: Option<&str>) -> SandboxClaim {
        let mut claim = SandboxClaim::new("c", SandboxClaimSpec::default());
        claim.status = Some(SandboxClaimStatus {
            conditions: ready
                .map(|(status, reason)| Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: "m".into(),
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .into_iter()
                .collect(),
            sandbox: sandbox.map(|name| ClaimedSandbox {
                name: name.into(),
                pod_ips: vec![],
            }),
        });
        claim
    }

    #[test]
    fn ready_needs_the_condition_and_a_sandbox_name() {
        assert_eq!(
            judge(&claim(Some(("True", "DependenciesReady")), Some("sb"))),
            Ok(true)
        );
        // Ready without a sandbox name (or a name without Ready) is not.
        assert_eq!(
            judge(&claim(Some(("True", "DependenciesReady")), None)),
            Ok(false)
        );
        assert_eq!(
            judge(&claim(Some(("True", "DependenciesReady")), Some(""))),
            Ok(false)
        );
        assert_eq!(
            judge(&claim(Some(("False", "SandboxNotReady")), Some("sb"))),
            Ok(false)
        );
        assert_eq!(judge(&claim(None, None)), Ok(false));
    }

    #[test]
    fn terminal_reasons_and_deletion_end_the_wait() {
        let never = [
            ("TemplateNotFound", ErrorKind::NotFound),
            ("WarmPoolNotFound", ErrorKind::NotFound),
            ("InvalidMetadata", ErrorKind::Invalid),
            ("EnvVarsInjectionRejected", ErrorKind::Invalid),
            ("VolumeClaimTemplatesError", ErrorKind::Invalid),
            ("ClaimExpired", ErrorKind::SandboxLost),
            ("SandboxExpired", ErrorKind::SandboxLost),
            ("PodFailed", ErrorKind::SandboxLost),
            ("PodSucceeded", ErrorKind::SandboxLost),
        ];
        for (reason, kind) in never {
            assert_eq!(
                judge(&claim(Some(("False", reason)), None)),
                Err(NotReady::Terminal(kind, reason.into(), "m".into())),
                "{reason}"
            );
        }
        // A pod terminal while Ready still says otherwise.
        let mut finished = claim(Some(("True", "DependenciesReady")), Some("sb"));
        finished
            .status
            .as_mut()
            .unwrap()
            .conditions
            .push(Condition {
                type_: "Finished".into(),
                status: "True".into(),
                reason: "PodFailed".into(),
                message: "Pod failed".into(),
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                observed_generation: None,
            });
        assert!(matches!(
            judge(&finished),
            Err(NotReady::Terminal(ErrorKind::SandboxLost, reason, _)) if reason.contains("PodFailed")
        ));
        let mut deleting = claim(Some(("True", "DependenciesReady")), Some("sb"));
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(judge(&deleting), Err(NotReady::Deleted));
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_the_first_ready_state_and_times_out_with_the_last_reason() {
        let (sender, mut receiver) = watch::channel(Seen::Nothing);
        let waiting = tokio::spawn(async move {
            wait_ready(
                &mut receiver,
                tokio::time::Instant::now() + std::time::Duration::from_secs(30),
            )
            .await
        });
        sender.send_replace(Seen::Present(Arc::new(claim(
            Some(("False", "SandboxNotReady")),
            None,
        ))));
        sender.send_replace(Seen::Present(Arc::new(claim(
            Some(("True", "DependenciesReady")),
            Some("sb"),
        ))));
        let ready = waiting.await.unwrap().unwrap();
        assert_eq!(
            ready
                .status
                .as_ref()
                .unwrap()
                .sandbox
                .as_ref()
                .unwrap()
                .name,
            "sb"
        );

        let (sender, mut receiver) = watch::channel(Seen::Nothing);
        sender.send_replace(Seen::Present(Arc::new(claim(
            Some(("False", "SandboxCreatePending")),
            None,
        ))));
        let outcome = wait_ready(&mut receiver, tokio::time::Instant::now()).await;
        assert!(
            matches!(outcome, Err(NotReady::Timeout(Some(r))) if r.starts_with("SandboxCreatePending"))
        );
        drop(sender);
    }

    /// The reasons a claim's own request gives the controller, as the
    /// emulator's controller writes them: the run's watch ends each wait
    /// on its reason, not on its deadline.
    #[tokio::test]
    async fn claims_the_template_refuses_end_their_wait_on_the_controllers_reason() {
        use kube::api::{Api, DynamicObject, PostParams};
        use kube::core::{ApiResource, GroupVersionKind};
        use sandfleet_emulator_k8s::{Config as Emulated, Emulator};

        let _ = rustls::crypto::ring::default_provider().install_default();
        let emulator = Emulator::start(Emulated {
            with_agent_sandbox: true,
            ..Emulated::default()
        })
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        emulator.write_kubeconfig(&kubeconfig).unwrap();
        let (clients, _) = crate::client::connect(&crate::client::Source::Kubeconfig {
            path: Some(kubeconfig),
            context: None,
        })
        .await
        .unwrap();
        let client = clients.retrying;
        let api = |kind: &str, plural: &str| {
            let gvk = GroupVersionKind::gvk("extensions.agents.x-k8s.io", "v1beta1", kind);
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                "default",
                &ApiResource::from_gvk_with_plural(&gvk, plural),
            )
        };
        let create = |api: Api<DynamicObject>, body: serde_json::Value| async move {
            api.create(
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
            .unwrap()
        };
        let selector = "sandfleet.test/run=refused";
        let labels = serde_json::json!({"sandfleet.test/run": "refused"});
        create(
            api("SandboxTemplate", "sandboxtemplates"),
            serde_json::json!({
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
                "metadata": {"name": "t"},
                "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "calc"}]}}},
            }),
        )
        .await;
        create(
            api("SandboxWarmPool", "sandboxwarmpools"),
            serde_json::json!({
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                "metadata": {"name": "t"},
                "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "t"}},
            }),
        )
        .await;
        let claims = api("SandboxClaim", "sandboxclaims");
        let watch = ClaimWatch::start(Api::namespaced(client.clone(), "default"), selector);
        let asks = [
            (
                "InvalidMetadata",
                serde_json::json!({"additionalPodMetadata": {"labels": {"agents.x-k8s.io/pod-name": "x"}}}),
            ),
            (
                "EnvVarsInjectionRejected",
                serde_json::json!({"env": [{"name": "TASK", "value": "1"}]}),
            ),
            (
                "VolumeClaimTemplatesError",
                serde_json::json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
            ),
        ];
        for (reason, ask) in asks {
            let name = format!("refused-{}", reason.to_lowercase());
            let mut seen = watch.follow(&name);
            let mut spec = serde_json::json!({"warmPoolRef": {"name": "t"}});
            spec.as_object_mut()
                .unwrap()
                .extend(ask.as_object().unwrap().clone());
            create(
                claims.clone(),
                serde_json::json!({
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                    "metadata": {"name": name, "labels": labels},
                    "spec": spec,
                }),
            )
            .await;
            // A deadline no test reaches: a timeout would mean the reason
            // was waited out.
            let outcome = wait_ready(
                &mut seen,
                tokio::time::Instant::now() + std::time::Duration::from_secs(300),
            )
            .await;
            assert!(
                matches!(&outcome, Err(NotReady::Terminal(ErrorKind::Invalid, r, _)) if r == reason),
                "{reason}: {outcome:?}"
            );
        }
        emulator.shutdown().await;
    }
}
