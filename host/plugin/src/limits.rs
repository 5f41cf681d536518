//! Per-call limits: a memory cap, a deadline and optional fuel, set per
//! plugin kind.

use std::time::Duration;

use crate::contract::Kind;

/// Default memory cap of one plugin instance.
pub const DEFAULT_MEMORY_CAP: u64 = 64 * 1024 * 1024;
/// Default deadline of one call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(100);

/// The limits one call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of linear memory an instance may grow to.
    pub memory_cap: u64,
    /// Wall-clock time a call may take, enforced by epoch interruption to
    /// within one epoch tick.
    pub deadline: Duration,
    /// WebAssembly fuel per call; `None` runs without fuel metering. Takes
    /// effect only when the host was created with fuel enabled.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_cap: DEFAULT_MEMORY_CAP,
            deadline: DEFAULT_DEADLINE,
            fuel: None,
        }
    }
}

/// Limits for each plugin kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindLimits {
    /// Placement policies.
    pub placement: Limits,
    /// Sizing policies.
    pub sizing: Limits,
    /// Reset checks.
    pub reset: Limits,
    /// Task adapters (grading large logs may need a longer deadline).
    pub adapter: Limits,
}

impl KindLimits {
    /// The same limits for every kind.
    pub fn uniform(limits: Limits) -> Self {
        KindLimits {
            placement: limits,
            sizing: limits,
            reset: limits,
            adapter: limits,
        }
    }

    /// The limits of `kind`.
    pub fn of(&self, kind: Kind) -> Limits {
        match kind {
            Kind::Placement => self.placement,
            Kind::Sizing => self.sizing,
            Kind::Reset => self.reset,
            Kind::Adapter => self.adapter,
        }
    }

    /// Sets the limits of `kind`.
    pub fn set(&mut self, kind: Kind, limits: Limits) {
        match kind {
            Kind::Placement => self.placement = limits,
            Kind::Sizing => self.sizing = limits,
            Kind::Reset => self.reset = limits,
            Kind::Adapter => self.adapter = limits,
        }
    }

    /// The largest memory cap of any kind; the pooling allocator reserves this
    /// much per instance slot.
    pub(crate) fn max_memory_cap(&self) -> u64 {
        Kind::ALL
            .into_iter()
            .map(|kind| self.of(kind).memory_cap)
            .max()
            .unwrap_or(DEFAULT_MEMORY_CAP)
    }
}

/// Enforces the memory cap of one store, and remembers whether the cap was
/// hit so a following trap can be reported as a memory overrun.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    memory_cap: u64,
    pub(crate) cap_hit: bool,
}

impl CallLimiter {
    pub(crate) fn new(memory_cap: u64) -> Self {
        CallLimiter {
            memory_cap,
            cap_hit: false,
        }
    }
}

/// Tables hold function references; a plugin needing more is broken.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired as u64 <= self.memory_cap;
        self.cap_hit |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::ResourceLimiter;

    #[test]
    fn growing_past_the_cap_is_refused_and_remembered() {
        let mut limiter = CallLimiter::new(1024);
        assert!(limiter.memory_growing(0, 1024, None).unwrap());
        assert!(!limiter.cap_hit);
        assert!(!limiter.memory_growing(1024, 1025, None).unwrap());
        assert!(limiter.cap_hit);
    }

    #[test]
    fn per_kind_limits_are_independent() {
        let mut limits = KindLimits::default();
        let adapter = Limits {
            deadline: Duration::from_secs(5),
            ..Limits::default()
        };
        limits.set(Kind::Adapter, adapter);
        assert_eq!(limits.of(Kind::Adapter), adapter);
        assert_eq!(limits.of(Kind::Placement), Limits::default());
    }
}
