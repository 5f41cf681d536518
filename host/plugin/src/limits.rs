//! Per-call limits: a memory cap, a deadline and optional fuel, set per
//! plugin kind.

use std::time::Duration;

use crate::contract::Kind;

/// Default memory cap of one plugin instance.
pub const DEFAULT_MEMORY_CAP: u64 = 64 * 1024 * 1024;
/// Default deadline of one call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(100);

/// The most linear memory a 32-bit WebAssembly instance can have (4 GiB), the
/// ceiling of every scaled memory cap.
pub const WASM32_MEMORY_MAX: u64 = 1 << 32;

/// Memory a call whose input scales ([`Limits::scaled_for_input`]) may use
/// per byte of input, on top of the kind's cap: the input's own copy in the
/// instance, and room for a few more of its size (a parser's table, a
/// copy with newlines translated, the answer being built).
pub const MEMORY_PER_INPUT_BYTE: u64 = 6;

/// Input a call whose input scales must get through per second of its
/// deadline, on top of the kind's deadline; far below what the adapters
/// reach (a 100 MB log grades in a few seconds).
pub const INPUT_BYTES_PER_SECOND: u64 = 8 * 1024 * 1024;

/// The limits one call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of linear memory an instance may grow to.
    pub memory_cap: u64,
    /// CPU time a call may use (its thread's, so a busy host does not
    /// spend it), checked every time the epoch passes it; a call also ends
    /// at [`crate::WALL_CEILING_FACTOR`] times this of wall time.
    pub deadline: Duration,
    /// WebAssembly fuel per call; `None` runs without fuel metering. Takes
    /// effect only when the host was created with fuel enabled.
    pub fuel: Option<u64>,
}

impl Limits {
    /// These limits, raised for a call that takes `input_bytes` of input
    /// (an adapter grading a test log): the memory cap grows by
    /// [`MEMORY_PER_INPUT_BYTE`] per byte up to [`WASM32_MEMORY_MAX`], and
    /// the deadline by one second per [`INPUT_BYTES_PER_SECOND`]. A small
    /// input keeps the limits as they are.
    pub fn scaled_for_input(self, input_bytes: usize) -> Limits {
        let input = input_bytes as u64;
        Limits {
            memory_cap: self
                .memory_cap
                .saturating_add(input.saturating_mul(MEMORY_PER_INPUT_BYTE))
                .min(WASM32_MEMORY_MAX)
                .max(self.memory_cap),
            deadline: self.deadline
                + Duration::from_secs_f64(input as f64 / INPUT_BYTES_PER_SECOND as f64),
            fuel: self.fuel,
        }
    }
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

    /// The largest memory cap of any call: a kind's cap, or the ceiling of
    /// a scaled one. The pooling allocator lets memories grow this far; its
    /// slots reserve the engine's memory reservation (4 GiB on 64-bit
    /// hosts) of address space whatever this is, so the ceiling costs no
    /// more address space than the default cap did.
    pub(crate) fn max_memory_cap(&self) -> u64 {
        Kind::ALL
            .into_iter()
            .map(|kind| self.of(kind).memory_cap)
            .chain([WASM32_MEMORY_MAX])
            .max()
            .unwrap_or(WASM32_MEMORY_MAX)
    }
}

/// Enforces the memory cap of one store, and remembers whether the cap was
/// hit so a following trap can be reported as a memory overrun.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    pub(crate) memory_cap: u64,
    pub(crate) cap_hit: bool,
    /// The largest memory size granted so far.
    pub(crate) memory_size: u64,
}

impl CallLimiter {
    pub(crate) fn new(memory_cap: u64) -> Self {
        CallLimiter {
            memory_cap,
            cap_hit: false,
            memory_size: 0,
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
        if allowed {
            self.memory_size = self.memory_size.max(desired as u64);
        }
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
        assert_eq!(limiter.memory_size, 1024);
        assert!(!limiter.memory_growing(1024, 1025, None).unwrap());
        assert!(limiter.cap_hit);
    }

    #[test]
    fn scaled_limits_grow_with_the_input_up_to_the_wasm32_ceiling() {
        let base = Limits::default();
        assert_eq!(base.scaled_for_input(0), base);
        let hundred_mb = base.scaled_for_input(100_000_000);
        assert_eq!(
            hundred_mb.memory_cap,
            DEFAULT_MEMORY_CAP + 100_000_000 * MEMORY_PER_INPUT_BYTE
        );
        assert!(hundred_mb.deadline > base.deadline + Duration::from_secs(11));
        assert_eq!(
            base.scaled_for_input(2_000_000_000).memory_cap,
            WASM32_MEMORY_MAX
        );
        let roomy = Limits {
            memory_cap: WASM32_MEMORY_MAX,
            ..base
        };
        assert_eq!(roomy.scaled_for_input(10).memory_cap, WASM32_MEMORY_MAX);
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
