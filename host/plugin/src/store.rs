//! The state behind each plugin instance's `Store`: a deny-by-default WASI
//! context, the memory limiter, and the plugin's identity for its log lines.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{
    Deterministic, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView,
};

use crate::bindings::host::{self, LogLevel};
use crate::deadline::CallClock;
use crate::error::PluginRef;
use crate::limits::CallLimiter;

pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    /// What the call under way may still use.
    pub(crate) clock: CallClock,
    plugin: PluginRef,
}

impl StoreState {
    /// A store for `plugin` that can see nothing of the host.
    ///
    /// The WASI context it builds:
    /// - no preopened directories, no environment variables, no arguments;
    /// - stdin closed; stdout and stderr become `tracing` events under the
    ///   plugin's name;
    /// - no sockets (every address denied, no name lookup);
    /// - clocks frozen at zero and randomness from a fixed sequence, so that
    ///   a plugin's answer depends on its arguments alone.
    pub(crate) fn new(plugin: PluginRef, memory_cap: u64) -> Self {
        let mut wasi = WasiCtx::builder();
        wasi.stdout(PluginOutput::new(plugin.clone(), Stream::Stdout))
            .stderr(PluginOutput::new(plugin.clone(), Stream::Stderr))
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(Deterministic::new(FIXED_ENTROPY.to_vec()))
            .insecure_random(Deterministic::new(FIXED_ENTROPY.to_vec()))
            .insecure_random_seed(0)
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false);
        StoreState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: CallLimiter::new(memory_cap),
            clock: CallClock::default(),
            plugin,
        }
    }
}

/// Not random at all, on purpose: plugins must be deterministic. Hash maps in
/// a guest still work; they are just seeded the same way every time.
const FIXED_ENTROPY: [u8; 16] = *b"sandfleet-plugin";

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl host::Host for StoreState {
    fn log(&mut self, level: LogLevel, message: String) {
        let (name, version) = (&*self.plugin.name, &*self.plugin.version);
        match level {
            LogLevel::Trace => tracing::trace!(plugin = name, version, "{message}"),
            LogLevel::Debug => tracing::debug!(plugin = name, version, "{message}"),
            LogLevel::Info => tracing::info!(plugin = name, version, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin = name, version, "{message}"),
            LogLevel::Error => tracing::error!(plugin = name, version, "{message}"),
        }
    }
}

/// A 0.1.0 component's `host` import: the same log.
impl crate::bindings::v0_1_0::host::Host for StoreState {
    fn log(&mut self, level: crate::bindings::v0_1_0::host::LogLevel, message: String) {
        host::Host::log(self, level.into(), message);
    }
}

struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// A plugin's stdout or stderr, written to `tracing` a line at a time.
#[derive(Clone)]
struct PluginOutput {
    plugin: PluginRef,
    stream: Stream,
    pending: Arc<Mutex<Vec<u8>>>,
}

/// Longest line kept before it is emitted in pieces.
const MAX_LINE: usize = 16 * 1024;

impl PluginOutput {
    fn new(plugin: PluginRef, stream: Stream) -> Self {
        PluginOutput {
            plugin,
            stream,
            pending: Arc::default(),
        }
    }

    fn write_bytes(&self, bytes: &[u8]) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if pending.len() > MAX_LINE {
            let line: Vec<u8> = std::mem::take(&mut *pending);
            self.emit(&line);
        }
    }

    fn flush_partial(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.is_empty() {
            let line: Vec<u8> = std::mem::take(&mut *pending);
            self.emit(&line);
        }
    }

    fn emit(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let (name, version) = (&*self.plugin.name, &*self.plugin.version);
        match self.stream {
            Stream::Stdout => tracing::info!(plugin = name, version, stream = "stdout", "{line}"),
            Stream::Stderr => tracing::warn!(plugin = name, version, stream = "stderr", "{line}"),
        }
    }
}

impl IsTerminal for PluginOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for PluginOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for PluginOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write_bytes(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.flush_partial();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl OutputStream for PluginOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.flush_partial();
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_LINE)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for PluginOutput {
    async fn ready(&mut self) {}
}
