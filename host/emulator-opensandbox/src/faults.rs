//! The fault switches (`--faults a,b,…`): production failure modes the
//! emulator reproduces on demand. Each is off by default except the grace
//! tail, which real execd always has.

use std::str::FromStr;
use std::time::Duration;

/// How long real execd holds a command stream open after its terminal event
/// (`EXECD_API_GRACE_SHUTDOWN`, default 1 s).
pub const DEFAULT_GRACE_TAIL: Duration = Duration::from_secs(1);

/// The fault switches in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// `keepalive=5s`: idle keep-alive connections (no request in flight, no
    /// byte either way) are closed after this long, on the lifecycle server
    /// (and so the server proxy) and on every execd. `None`: never.
    pub keepalive: Option<Duration>,
    /// `execd-late=MS`: a sandbox's execd starts listening only this long
    /// after its create returned; until then a direct connect is refused and
    /// the server proxy answers 502 `BACKEND_CONNECTION_FAILED`.
    pub execd_late: Option<Duration>,
    /// `grace-tail[=MS]` (default on, 1 s): how long a command stream stays
    /// open after its terminal event. `cut-tail` sets it to `None`.
    pub grace_tail: Option<Duration>,
    /// `cut-tail`: the connection is dropped right after the terminal event
    /// (no end of the chunked body), as a proxy or a dying pod would.
    pub cut_tail: bool,
    /// `pool-max=N`: creates with `extensions.poolRef` answer 429
    /// `KUBERNETES::POOL_CAPACITY_EXHAUSTED` (`Retry-After: 30`) while N
    /// pooled sandboxes exist.
    pub pool_max: Option<u32>,
    /// `flaky=P`: a fraction P of lifecycle calls answer 503 before doing
    /// anything (the request has no effect), drawn from `seed`.
    pub flaky: Option<f64>,
    /// `seed=N`: the seed of the `flaky` draws (default 1).
    pub seed: u64,
    /// `port-500`: the first create fails with 500, its port "already
    /// allocated", and leaves nothing behind.
    pub port_500: bool,
    /// `quota=N`: creates answer 403 `KUBERNETES::QUOTA_EXCEEDED` while N
    /// sandboxes exist or are being made, as under a namespace's
    /// ResourceQuota.
    pub quota: Option<u32>,
    /// `snapshot-late=DUR`: a snapshot stays `Creating` this long after its
    /// capture, as a Kubernetes snapshot does while its image is pushed.
    pub snapshot_late: Option<Duration>,
    /// `throttle-deletes`: every `DELETE /sandboxes/{id}` answers 429
    /// (`Retry-After: 1`) and deletes nothing, as an API server under a
    /// rate limit would.
    pub throttle_deletes: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            keepalive: None,
            execd_late: None,
            grace_tail: Some(DEFAULT_GRACE_TAIL),
            cut_tail: false,
            pool_max: None,
            flaky: None,
            seed: 1,
            port_500: false,
            quota: None,
            snapshot_late: None,
            throttle_deletes: false,
        }
    }
}

/// A duration written as plain milliseconds (`500`) or with a unit (`5s`,
/// `500ms`).
fn duration(switch: &str, text: &str) -> Result<Duration, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(Duration::from_millis(ms));
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("fault `{switch}={text}`: not a duration ({e}); write 500, 500ms or 5s")
    })
}

/// A count of sandboxes.
fn count(switch: &str, text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("fault `{switch}={text}`: not a count of sandboxes"))
}

fn needs_value<'a>(name: &str, value: Option<&'a str>) -> Result<&'a str, String> {
    value.ok_or_else(|| format!("fault `{name}` needs a value (`{name}=…`)"))
}

impl FromStr for Faults {
    type Err = String;

    /// Parses `keepalive=5s,execd-late=500,cut-tail,flaky=0.05,…`; an empty
    /// string is no faults.
    fn from_str(text: &str) -> Result<Self, String> {
        let mut faults = Faults::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim())),
                None => (item, None),
            };
            let need = |value| needs_value(name, value);
            match name {
                "keepalive" => faults.keepalive = Some(duration(name, need(value)?)?),
                "execd-late" => faults.execd_late = Some(duration(name, need(value)?)?),
                "grace-tail" => {
                    faults.grace_tail = Some(match value {
                        Some(v) => duration(name, v)?,
                        None => DEFAULT_GRACE_TAIL,
                    });
                    faults.cut_tail = false;
                }
                "cut-tail" => {
                    faults.cut_tail = true;
                    faults.grace_tail = None;
                }
                "pool-max" => faults.pool_max = Some(count(name, need(value)?)?),
                "quota" => faults.quota = Some(count(name, need(value)?)?),
                "snapshot-late" => faults.snapshot_late = Some(duration(name, need(value)?)?),
                "flaky" => {
                    let v = need(value)?;
                    let p: f64 = v
                        .parse()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| format!("fault `flaky={v}`: not a fraction in [0, 1]"))?;
                    faults.flaky = Some(p);
                }
                "seed" => {
                    let v = need(value)?;
                    faults.seed = v
                        .parse()
                        .map_err(|_| format!("fault `seed={v}`: not an unsigned integer"))?;
                }
                "port-500" => faults.port_500 = true,
                "throttle-deletes" => faults.throttle_deletes = true,
                other => {
                    return Err(format!(
                        "unknown fault `{other}` (known: keepalive=DUR, execd-late=MS, grace-tail[=MS], \
                         cut-tail, pool-max=N, flaky=P, seed=N, port-500, quota=N, snapshot-late=DUR, \
                         throttle-deletes)"
                    ));
                }
            }
        }
        Ok(faults)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses() {
        let faults: Faults = "keepalive=5s,execd-late=500,cut-tail,flaky=0.05"
            .parse()
            .unwrap();
        assert_eq!(faults.keepalive, Some(Duration::from_secs(5)));
        assert_eq!(faults.execd_late, Some(Duration::from_millis(500)));
        assert!(faults.cut_tail);
        assert_eq!(faults.grace_tail, None);
        assert_eq!(faults.flaky, Some(0.05));
        assert!(!faults.port_500);
    }

    #[test]
    fn defaults_have_only_the_grace_tail() {
        let faults: Faults = "".parse().unwrap();
        assert_eq!(faults, Faults::default());
        assert_eq!(faults.grace_tail, Some(DEFAULT_GRACE_TAIL));
        let faults: Faults = "grace-tail=250ms,pool-max=3,port-500,seed=9,quota=4,snapshot-late=2s"
            .parse()
            .unwrap();
        assert_eq!(faults.snapshot_late, Some(Duration::from_secs(2)));
        assert_eq!(faults.grace_tail, Some(Duration::from_millis(250)));
        assert_eq!(
            (faults.pool_max, faults.port_500, faults.seed, faults.quota),
            (Some(3), true, 9, Some(4))
        );
    }

    #[test]
    fn bad_switches_are_named() {
        for (text, needle) in [
            ("nope", "unknown fault `nope`"),
            ("flaky=2", "flaky=2"),
            ("keepalive", "needs a value"),
            ("execd-late=soon", "execd-late=soon"),
            ("pool-max=-1", "pool-max=-1"),
            ("quota=many", "quota=many"),
        ] {
            let error = text.parse::<Faults>().unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
