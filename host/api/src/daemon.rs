//! Starting and stopping the daemon.
//!
//! Start: load the fleet file, refuse a non-loopback address without a
//! token, load plugins (the session keeps their directory watched), build the clusters,
//! preflight them, release whatever a previous instance with the same state
//! directory left, then listen, and fill the shared pools in the background.
//! Stop: stop accepting, let running requests finish for the grace period,
//! release every lease and pool, cancel batch runs, release the shared
//! pools' sandboxes, delete the snapshots, and reap whatever the run id
//! still owns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};
use sandfleet_core::RunId;
use sandfleet_engine::{Cluster, Session, SessionSpec};
use sandfleet_fleet::{FleetConfig, setup};
use tokio_util::sync::CancellationToken;

use crate::domain::holder::Holder as _;
use crate::domain::leases::{self, LeaseTable, persisted};
use crate::domain::pools::SharedPools;
use crate::domain::runs::{Runs, runs_dir};
use crate::domain::snapshots::{self, SnapshotTable};
use crate::metrics::{BackendCalls, Metrics};
use crate::state::{AppState, Inner};

/// How to start the daemon.
#[derive(Debug, Clone)]
pub struct Options {
    /// The fleet file.
    pub config: PathBuf,
    /// Overrides `[api] listen`.
    pub listen: Option<SocketAddr>,
}

/// A running daemon.
pub struct Daemon {
    addr: SocketAddr,
    run_id: RunId,
    /// The variable holding the bearer token, if the daemon has one.
    token_env: Option<String>,
    stop: CancellationToken,
    serving: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The file holding the run id of the daemon using a state directory.
const DAEMON_FILE: &str = "daemon.json";

impl Daemon {
    /// Starts the daemon; returns once it is listening.
    ///
    /// # Errors
    ///
    /// A fleet file that cannot be used, a missing token variable, a
    /// non-loopback address without a token, plugins or clusters that fail
    /// to load or preflight, an address that cannot be bound.
    pub async fn start(options: Options) -> anyhow::Result<Daemon> {
        let Opened { state, addr, lock } = Opened::open(&options).await?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let addr = listener.local_addr()?;
        state.ready.store(true, Ordering::Release);
        let sweep_every = (state.config.api.idle_timeout / 4)
            .clamp(Duration::from_millis(50), Duration::from_secs(5));
        tokio::spawn(leases::expire_idle(state.clone(), sweep_every));
        // Filled in the background: the daemon serves while they fill.
        crate::pool_keeper::start(&state);
        let run_id = state.session.run_id().clone();
        let stop = state.stopping.clone();
        let grace = state.config.api.grace_period;
        let token_env = state.config.api.token_env.clone();
        let serving = tokio::spawn(serve(state, listener, grace, lock));
        let daemon = Daemon {
            addr,
            run_id,
            token_env,
            stop,
            serving,
        };
        tracing::info!(run_id = %daemon.run_id, "{}", daemon.ui_line());
        Ok(daemon)
    }

    /// The live page's address: `http://ADDR/ui`.
    pub fn ui_url(&self) -> String {
        format!("http://{}/ui", self.addr)
    }

    /// One line telling where the live page is and, when the daemon has a
    /// token, how to give it (by the variable's name, never its value):
    /// `live page: http://127.0.0.1:7878/ui?token=$SANDFLEET_TOKEN`.
    pub fn ui_line(&self) -> String {
        match &self.token_env {
            Some(variable) => format!(
                "live page: {}?token=${variable} (the token's value; the page drops it from the address bar)",
                self.ui_url()
            ),
            None => format!("live page: {}", self.ui_url()),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its run id: everything it creates carries it.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// Starts stopping (as SIGTERM does); [`Daemon::wait`] tells when done.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits until the daemon has stopped and released everything.
    ///
    /// # Errors
    ///
    /// When serving failed, or what the daemon owns could not all be removed.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.serving.await?
    }
}

/// The daemon's state over a fleet file, and what serving it takes, before
/// it listens.
pub(crate) struct Opened {
    pub(crate) state: AppState,
    /// Where to listen.
    pub(crate) addr: SocketAddr,
    /// The state directory's lock, held while the daemon runs.
    pub(crate) lock: std::fs::File,
}

impl Opened {
    /// Loads the fleet file, checks the token and the address, takes the
    /// state directory, loads plugins and clusters, starts the session and
    /// releases what a previous daemon left.
    pub(crate) async fn open(options: &Options) -> anyhow::Result<Opened> {
        Self::open_with(options, setup::clusters_with).await
    }

    /// [`Opened::open`] with the clusters `clusters` builds from the fleet
    /// file and the connections (tests give backends of their own).
    pub(crate) async fn open_with(
        options: &Options,
        clusters: impl FnOnce(&FleetConfig, &setup::Connections) -> anyhow::Result<Vec<Cluster>>
        + Send
        + 'static,
    ) -> anyhow::Result<Opened> {
        let config = FleetConfig::load(&options.config)?;
        let addr = options.listen.unwrap_or(config.api.listen);
        let token = match &config.api.token_env {
            Some(variable) => match std::env::var(variable) {
                Ok(token) if !token.trim().is_empty() => Some(token.trim().to_string()),
                _ => bail!(
                    "{}: [api] token_env = \"{variable}\", but ${variable} is not set (or empty)",
                    config.path.display()
                ),
            },
            None => None,
        };
        if token.is_none() && !addr.ip().is_loopback() {
            bail!(
                "refusing to listen on {addr} without a token: anyone who can reach it could run commands; set [api] token_env in {} and that variable, or listen on a loopback address",
                config.path.display()
            );
        }
        let state_dir = config
            .api
            .state_dir()
            .context("no state directory: set [api] state_dir (or $XDG_STATE_HOME / $HOME)")?;
        std::fs::create_dir_all(&state_dir).with_context(|| {
            format!("{}: cannot create the state directory", state_dir.display())
        })?;
        let lock = lock_state_dir(&state_dir).await?;

        let loading = config.clone();
        let backend_calls = Arc::new(BackendCalls::new());
        let observer = backend_calls.clone();
        let (plugins, clusters, connections) = tokio::task::spawn_blocking(move || {
            let plugins = setup::plugins(&loading)?;
            let connections =
                setup::Connections::new(loading.fleet.create_rate)?.observed_by(observer);
            let clusters = clusters(&loading, &connections)?;
            anyhow::Ok((plugins, clusters, connections))
        })
        .await??;
        let adapter_settings = setup::adapter_settings(&config);
        setup::check_settings(
            &plugins.adapter,
            &adapter_settings,
            &format!("{}: [adapter] settings", config.path.display()),
        )?;

        let run_id = RunId::generate(&format!("{}-serve", config.run.name));
        let session = Session::start(SessionSpec {
            run_id: run_id.clone(),
            settings: config.fleet.clone(),
            clusters,
            plugins,
            logs: state_dir.join("logs"),
        })
        .await?;
        for pool in &config.shared_pools {
            session.check_image(&pool.image).with_context(|| {
                format!("{}: shared pool `{}`", config.path.display(), pool.name)
            })?;
        }
        let shared: u32 = config.shared_pools.iter().map(|pool| pool.size).sum();
        if let Some(warning) = session.unschedulable(config.api.max_leases.saturating_add(shared)) {
            tracing::warn!(
                "{}: [api] max_leases and the shared pools: {warning} (lower max_leases, or the \
                 sandboxes' size in [fleet])",
                config.path.display()
            );
        }
        clean_up_previous(&session, &state_dir).await;
        std::fs::write(
            state_dir.join(DAEMON_FILE),
            serde_json::json!({"run_id": run_id.as_str(), "pid": std::process::id()}).to_string(),
        )?;

        let leases = LeaseTable::new(
            state_dir.join("leases"),
            config.api.idle_timeout,
            config.api.max_leases as usize,
        )?;
        let state = AppState::new(Inner {
            session,
            leases,
            snapshots: SnapshotTable::new(config.api.idle_timeout),
            adapter_settings,
            metrics: Metrics::new(&backend_calls),
            runs: Runs::default(),
            shared: SharedPools::new(&config.shared_pools),
            errors: Default::default(),
            connections,
            config,
            token,
            state_dir,
            ready: Default::default(),
            stopping: CancellationToken::new(),
        });
        Ok(Opened { state, addr, lock })
    }
}

async fn serve(
    state: AppState,
    listener: tokio::net::TcpListener,
    grace: Duration,
    lock: std::fs::File,
) -> anyhow::Result<()> {
    let stop = state.stopping.clone();
    let app = crate::http::app(state.clone());
    let server = axum::serve(listener, app).with_graceful_shutdown(stop.clone().cancelled_owned());
    let grace_over = async {
        stop.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        served = server => served?,
        () = grace_over => tracing::warn!("the grace period ended with requests still running"),
    }
    let released = release_everything(&state).await;
    // Only now may another daemon take the state directory over.
    drop(lock);
    released
}

/// The lock file a daemon holds (`flock`, exclusive) on its state
/// directory for as long as it runs.
const LOCK_FILE: &str = "daemon.lock";

/// How long a starting daemon waits for the lock before it refuses. A
/// child the process forks holds the lock's open file from its fork until
/// it executes its program, and the backends start helper processes all
/// the time, so a daemon that has just stopped in this process may hold
/// the lock a moment longer than its own handle.
const LOCK_PATIENCE: Duration = Duration::from_secs(3);

/// How often the lock is tried again meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(25);

/// Takes the state directory for this daemon. A second daemon on the same
/// directory would take the first one's leases for a dead daemon's and
/// release them, so it is refused instead. The kernel drops the lock when
/// its holder dies, however it dies, so a restart after `kill -9` gets it.
async fn lock_state_dir(state_dir: &Path) -> anyhow::Result<std::fs::File> {
    let path = state_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("{}: cannot open the daemon's lock", path.display()))?;
    let give_up = tokio::time::Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if tokio::time::Instant::now() < give_up => {
                tokio::time::sleep(LOCK_RETRY).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(state_dir.join(DAEMON_FILE))
                    .ok()
                    .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                    .and_then(|daemon| daemon["pid"].as_u64())
                    .map_or(String::new(), |pid| format!(" (pid {pid})"));
                bail!(
                    "{}: another `sandfleet serve`{holder} is using this state directory; give each daemon its own [api] state_dir",
                    state_dir.display()
                )
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(error).with_context(|| format!("{}: cannot lock", path.display()));
            }
        }
    }
}

/// Releases every lease and batch run, deletes every snapshot, then reaps
/// everything the run id still owns.
async fn release_everything(state: &AppState) -> anyhow::Result<()> {
    let slots = state.leases.all();
    for slot in &slots {
        state.leases.remove(&slot.id);
        // A command still running holds its lease; the reap below ends it.
        if let Some(lease) = slot.lease().try_release() {
            state.session.release(lease);
        }
    }
    state.runs.cancel_all().await;
    crate::pool_keeper::release_all(state).await;
    snapshots::delete_all(state).await;
    let reaped = state.session.close().await;
    for slot in &slots {
        let _ = std::fs::remove_file(
            state
                .state_dir
                .join("leases")
                .join(format!("{}.json", slot.id)),
        );
    }
    let reaped = reaped?;
    tracing::info!(
        leases = slots.len(),
        sandboxes = reaped.sandboxes,
        "stopped; everything released"
    );
    let _ = std::fs::remove_file(state.state_dir.join(DAEMON_FILE));
    Ok(())
}

/// Releases what a previous daemon with this state directory left: the
/// sandboxes of its persisted lease handles, then everything its run id and
/// its unfinished batch runs still own.
async fn clean_up_previous(session: &Session, state_dir: &Path) {
    let leases = state_dir.join("leases");
    for (path, handle) in persisted(&leases) {
        match session.release_handle(&handle).await {
            Ok(()) => {
                tracing::info!(sandbox = %handle.id, "released a sandbox a previous daemon held")
            }
            Err(error) => {
                tracing::warn!(sandbox = %handle.id, "a previous daemon's sandbox: {error}")
            }
        }
        let _ = std::fs::remove_file(path);
    }
    let mut previous: Vec<RunId> = Vec::new();
    if let Ok(text) = std::fs::read_to_string(state_dir.join(DAEMON_FILE))
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(id) = value["run_id"].as_str().and_then(|id| RunId::new(id).ok())
    {
        previous.push(id);
    }
    if let Ok(entries) = std::fs::read_dir(runs_dir(state_dir)) {
        for entry in entries.flatten() {
            let unfinished = !entry.path().join(sandfleet_engine::REPORT_FILE).exists();
            if let (true, Ok(id)) = (
                unfinished,
                RunId::new(entry.file_name().to_string_lossy().into_owned()),
            ) {
                previous.push(id);
            }
        }
    }
    for run_id in previous {
        match sandfleet_engine::reap(session.clusters(), &run_id).await {
            Ok(reaped) => tracing::info!(
                run_id = %run_id,
                sandboxes = reaped.sandboxes,
                "reaped what a previous daemon's run left"
            ),
            Err(error) => tracing::warn!(run_id = %run_id, "reaping a previous run: {error}"),
        }
    }
}
