//! Events expire, as kube-apiserver's `--event-ttl` makes them (one hour by
//! default): a cluster that runs many claim cycles keeps only the last
//! hour's events, not every event it ever recorded.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::client::{Client, EVENTS};
use crate::state::State;

/// Who deletes them, as the API server's storage does.
const EXPIRER: &str = "kube-apiserver";

/// Deletes every event whose last occurrence is older than `ttl`, looking
/// ten times per `ttl` (at least every minute).
pub(crate) async fn expire(state: Arc<State>, ttl: Duration) {
    let every = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let client = Client::new(&state, EXPIRER);
        let Some(oldest) = SystemTime::now().checked_sub(ttl) else {
            continue;
        };
        for event in client.list(EVENTS, None) {
            let last = event["lastTimestamp"]
                .as_str()
                .or_else(|| event["metadata"]["creationTimestamp"].as_str())
                .and_then(|at| humantime::parse_rfc3339_weak(at).ok());
            if last.is_some_and(|at| at < oldest) {
                let (namespace, name) = crate::client::names(&event);
                // Gone meanwhile is as good.
                let _ = client.delete(EVENTS, &namespace, &name, "Background", None);
            }
        }
    }
}
