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
use tokio::sync::watch;

use crate::resources::{SandboxClaim, condition};

/// Ready=False reasons after which a claim never becomes ready.
const TERMINAL: [&str; 4] = [
    "TemplateNotFound",
    "WarmPoolNotFound",
    "ClaimExpired",
    "SandboxExpired",
];

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
    /// A reason it will never be ready (`reason`: `message`).
    Terminal(String, String),
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
        && TERMINAL.contains(&ready.reason.as_str())
    {
        return Err(NotReady::Terminal(
            ready.reason.clone(),
            ready.message.clone(),
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
        for reason in TERMINAL {
            assert!(matches!(
                judge(&claim(Some(("False", reason)), None)),
                Err(NotReady::Terminal(r, _)) if r == reason
            ));
        }
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
}
