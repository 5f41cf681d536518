//! Keeping each slot of each shared pool filled: one task per slot claims
//! its sandbox in the background (the daemon serves meanwhile), probes it
//! every `probe_interval`, evicts it after [`EVICT_AFTER`] failures in a
//! row and heals the slot with a new sandbox. Every claim goes through the
//! session's create path, paced by `[fleet] create_rate` (and, for HTTP
//! backends, the host-wide pacer of the connections), so K slots healing
//! at once are spaced like any other creates rather than storming them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sandfleet_core::ExecRequest;
use sandfleet_engine::{DEFAULT_WORKDIR, Purpose};

use crate::domain::pools::{EVICT_AFTER, Pinned, Pool};
use crate::model::HealView;
use crate::state::AppState;

/// Output a probe keeps: it is judged by its exit status alone.
const PROBE_OUTPUT: u64 = 4096;

/// How long past its own timeout a probe may go unanswered (a backend
/// that hangs) before it counts as failed.
const PROBE_GRACE: Duration = Duration::from_secs(1);

/// Starts the keepers of every slot and the sweep of idle sessions.
pub(crate) fn start(state: &AppState) {
    let keepers = &state.shared.keepers;
    for pool in state.shared.all() {
        for slot in 0..pool.config.size as usize {
            keepers.spawn(keep(state.clone(), pool.clone(), slot));
        }
    }
    if let Some(shortest) = state
        .shared
        .all()
        .iter()
        .map(|p| p.config.idle_timeout)
        .min()
    {
        let every = (shortest / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        keepers.spawn(sweep(state.clone(), every));
    }
    keepers.close();
}

/// Waits for the keepers to stop (the daemon is stopping), then releases
/// every pool's sandboxes.
pub(crate) async fn release_all(state: &AppState) {
    state.shared.keepers.wait().await;
    for pool in state.shared.all() {
        for pinned in pool.take_all() {
            if let Some(lease) = pinned.lease.release().await {
                state.session.release(lease);
            }
        }
    }
}

/// Keeps `slot` of `pool` filled until the daemon stops.
async fn keep(state: AppState, pool: Arc<Pool>, slot: usize) {
    let mut evicted: Option<(String, SystemTime)> = None;
    loop {
        let Some(pinned) = fill(&state, &pool, slot).await else {
            return;
        };
        if let Some((old, requested)) = evicted.take() {
            tracing::info!(pool = %pool.config.name, slot, evicted = %old, sandbox = %pinned.id, "healed");
            pool.healed(HealView {
                slot: slot as u32,
                evicted: old,
                sandbox: pinned.id.clone(),
                requested_at_ms: unix_ms(requested),
                healed_at_ms: unix_ms(SystemTime::now()),
            });
        }
        if !watch(&state, &pool, &pinned).await {
            return;
        }
        tracing::warn!(pool = %pool.config.name, slot, sandbox = %pinned.id, "evicted after {EVICT_AFTER} failed probes; healing its slot");
        evicted = Some((pinned.id.clone(), SystemTime::now()));
        // Released once the commands still holding it end; the heal does
        // not wait for them.
        let releasing = state.clone();
        tokio::spawn(async move {
            if let Some(lease) = pinned.lease.release().await {
                releasing.session.release(lease);
            }
        });
    }
}

/// Claims a sandbox for `slot`, retrying every probe interval; `None` when
/// the daemon stops first.
async fn fill(state: &AppState, pool: &Pool, slot: usize) -> Option<Arc<Pinned>> {
    let purpose = Purpose::Image {
        image: pool.config.image.clone(),
        workdir: pool
            .config
            .workdir
            .clone()
            .unwrap_or_else(|| DEFAULT_WORKDIR.to_string()),
    };
    let name = format!("shared-{}-{slot}", pool.config.name);
    loop {
        if state.stopping.is_cancelled() {
            return None;
        }
        match state.session.acquire(&name, purpose.clone()).await {
            Ok(lease) if state.stopping.is_cancelled() => {
                state.session.release(lease);
                return None;
            }
            Ok(lease) => return Some(pool.install(slot, lease)),
            Err(error) => {
                let error = error.to_string();
                tracing::warn!(pool = %pool.config.name, slot, "filling a shared sandbox: {error}");
                pool.fill_failed(slot, error);
                tokio::select! {
                    () = tokio::time::sleep(pool.config.probe_interval) => {}
                    () = state.stopping.cancelled() => return None,
                }
            }
        }
    }
}

/// Probes `pinned` every probe interval; true once it is evicted, false
/// when the daemon stops first.
async fn watch(state: &AppState, pool: &Pool, pinned: &Arc<Pinned>) -> bool {
    let every = pool.config.probe_interval;
    let probe = ExecRequest {
        argv: pool.config.probe.clone(),
        workdir: pool.config.workdir.clone(),
        timeout: every,
        max_output: Some(PROBE_OUTPUT),
        ..ExecRequest::default()
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = state.stopping.cancelled() => return false,
        }
        let passed = probe_once(state, pinned, &probe).await;
        if pool.probed(pinned, passed) {
            return true;
        }
    }
}

/// One probe: exit 0 within the interval. A backend that does not answer
/// in time fails it as a command that overran does.
async fn probe_once(state: &AppState, pinned: &Pinned, probe: &ExecRequest) -> bool {
    let Some(lease) = pinned.lease.read().await else {
        return false;
    };
    let answered = tokio::time::timeout(
        probe.timeout + PROBE_GRACE,
        state.session.exec(&lease, probe, None),
    )
    .await;
    matches!(answered, Ok(Ok(result)) if result.exit_code == 0 && !result.timed_out)
}

/// Drops idle sessions until the daemon stops.
async fn sweep(state: AppState, every: Duration) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = state.stopping.cancelled() => return,
        }
        state.shared.expire_idle();
    }
}

/// Unix milliseconds of `at`.
fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}
