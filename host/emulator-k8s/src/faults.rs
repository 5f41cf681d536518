//! Fault injection (`--faults a,b,…`): `latency=MS` on every call, `conflict=P` 409 on a
//! fraction of updates and patches, `watch-drop=S` to close every watch after S seconds,
//! `gone-burst` to answer 410 to the watch that follows a drop, `flaky=P` 503s, and
//! `throttle=QPS` 429s with `Retry-After` above that rate, and `evict=P` to have the
//! kubelet evict a fraction of pods as they start (phase `Failed`, reason `Evicted`, as
//! under node pressure: such a pod is never started again).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::status::ApiError;

/// The configured faults.
#[derive(Debug)]
pub(crate) struct Faults {
    /// Added to every call.
    pub(crate) latency: Option<Duration>,
    /// Fraction of updates and patches answered 409.
    pub(crate) conflict: f64,
    /// Every watch is closed after this long.
    pub(crate) watch_drop: Option<Duration>,
    /// After a drop, the next watch gets 410.
    pub(crate) gone_burst: bool,
    /// Fraction of calls answered 503.
    pub(crate) flaky: f64,
    /// Calls per second above which calls get 429.
    pub(crate) throttle: Option<f64>,
    /// Fraction of pods evicted as they start.
    pub(crate) evict: f64,
    rng: AtomicU64,
    pending_gone: AtomicBool,
    window: Mutex<(Instant, f64)>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            latency: None,
            conflict: 0.0,
            watch_drop: None,
            gone_burst: false,
            flaky: 0.0,
            throttle: None,
            evict: 0.0,
            rng: AtomicU64::new(1),
            pending_gone: AtomicBool::new(false),
            window: Mutex::new((Instant::now(), 0.0)),
        }
    }
}

fn fraction(key: &str, value: &str) -> anyhow::Result<f64> {
    let p: f64 = value
        .parse()
        .map_err(|_| anyhow::anyhow!("fault {key}={value}: expected a fraction between 0 and 1"))?;
    anyhow::ensure!(
        (0.0..=1.0).contains(&p),
        "fault {key}={value}: expected a fraction between 0 and 1"
    );
    Ok(p)
}

impl Faults {
    /// Parse `latency=20,conflict=0.1,watch-drop=5,gone-burst,flaky=0.01,throttle=100`.
    ///
    /// # Errors
    /// Names the fault that does not parse.
    pub(crate) fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut faults = Self {
            rng: AtomicU64::new(
                u64::from_le_bytes(
                    uuid::Uuid::new_v4().as_bytes()[..8]
                        .try_into()
                        .expect("16 bytes"),
                ) | 1,
            ),
            window: Mutex::new((Instant::now(), 0.0)),
            ..Self::default()
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let secs = |v: &str| -> anyhow::Result<f64> {
                v.parse::<f64>().ok().filter(|x| *x >= 0.0).ok_or_else(|| {
                    anyhow::anyhow!("fault {key}={v}: expected a non-negative number")
                })
            };
            match key {
                "latency" => faults.latency = Some(Duration::from_secs_f64(secs(value)? / 1000.0)),
                "conflict" => faults.conflict = fraction(key, value)?,
                "watch-drop" => faults.watch_drop = Some(Duration::from_secs_f64(secs(value)?)),
                "gone-burst" => faults.gone_burst = true,
                "flaky" => faults.flaky = fraction(key, value)?,
                "throttle" => faults.throttle = Some(secs(value)?),
                "evict" => faults.evict = fraction(key, value)?,
                other => anyhow::bail!(
                    "unknown fault {other:?} (known: latency, conflict, watch-drop, gone-burst, flaky, throttle, evict)"
                ),
            }
        }
        Ok(faults)
    }

    fn chance(&self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // xorshift64: good enough to pick a fraction of calls.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        (x >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// The fault, if any, this call meets before it is served.
    pub(crate) fn before_call(&self) -> Option<ApiError> {
        if let Some(qps) = self.throttle {
            let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
            if w.0.elapsed() >= Duration::from_secs(1) {
                *w = (Instant::now(), 0.0);
            }
            w.1 += 1.0;
            if w.1 > qps {
                let mut err = ApiError::new(
                    429,
                    "TooManyRequests",
                    "Too many requests, please try again later.",
                );
                err.retry_after = Some(1);
                return Some(err);
            }
        }
        if self.chance(self.flaky) {
            let mut err = ApiError::new(
                503,
                "ServiceUnavailable",
                "injected fault: the server is currently unable to handle the request",
            );
            err.retry_after = Some(1);
            return Some(err);
        }
        None
    }

    /// Whether this update or patch gets an injected 409.
    pub(crate) fn conflict_now(&self) -> bool {
        self.chance(self.conflict)
    }

    /// Whether the pod starting now is evicted instead.
    pub(crate) fn evict_now(&self) -> bool {
        self.chance(self.evict)
    }

    /// Record that a watch was dropped (so the next one may get 410).
    pub(crate) fn dropped(&self) {
        if self.gone_burst {
            self.pending_gone.store(true, Ordering::SeqCst);
        }
    }

    /// Whether this watch gets 410 because one was just dropped.
    pub(crate) fn take_gone(&self) -> bool {
        self.pending_gone.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault_and_names_a_bad_one() {
        let f = Faults::parse(
            "latency=20,conflict=0.5,watch-drop=3,gone-burst,flaky=0,throttle=10,evict=1",
        )
        .unwrap();
        assert!(f.evict_now());
        assert_eq!(f.latency, Some(Duration::from_millis(20)));
        assert_eq!(f.watch_drop, Some(Duration::from_secs(3)));
        assert!(f.gone_burst);
        let err = Faults::parse("conflict=2").unwrap_err().to_string();
        assert!(err.contains("conflict=2"), "{err}");
        assert!(
            Faults::parse("nope")
                .unwrap_err()
                .to_string()
                .contains("nope")
        );
    }

    #[test]
    fn throttle_answers_429_over_the_rate() {
        let f = Faults::parse("throttle=5").unwrap();
        let throttled = (0..20).filter(|_| f.before_call().is_some()).count();
        assert!(throttled >= 14, "{throttled}");
    }
}
