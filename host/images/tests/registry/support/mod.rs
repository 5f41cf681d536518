//! What the registry tests share: a real registry and images built and
//! pushed in Rust (`sandfleet-registry-testing`, shared with the local
//! backend's tests), a counting proxy, a token service, and helpers to
//! look at a store.

pub(crate) mod proxy;
pub(crate) mod token;

pub(crate) use sandfleet_registry_testing::{image, registry};

use std::path::Path;
use std::time::Duration;

use sandfleet_images::{
    CredentialSource, Error, Ownership, ProgressEvent, PullOptions, Reference, RetryPolicy, Store,
};

/// Shifted owners when the tests run as root (CI does), the caller's
/// otherwise.
pub(crate) fn ownership() -> Ownership {
    if rustix::process::geteuid().is_root() {
        Ownership::Shift {
            uid_base: 100_000,
            gid_base: 100_000,
            count: 65536,
        }
    } else {
        Ownership::Caller
    }
}

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

pub(crate) fn store(dir: &Path) -> Store {
    Store::open(dir, ownership()).unwrap()
}

/// Anonymous pulls with quick retries.
pub(crate) fn options() -> PullOptions {
    PullOptions {
        credentials: CredentialSource::Anonymous,
        retry: RetryPolicy {
            retries: 2,
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        },
        ..PullOptions::default()
    }
}

pub(crate) fn reference(host: &str, name: &str) -> Reference {
    Reference::parse(&format!("{host}/{name}")).unwrap()
}

/// A progress callback that ignores everything.
pub(crate) fn quiet(_: ProgressEvent) {}

/// The error of a pull that must fail: one line that names the reference
/// and says each of `says`; and nothing of it in the store counts as
/// complete.
pub(crate) async fn pull_fails(
    store: &Store,
    reference: &Reference,
    options: &PullOptions,
    says: &[&str],
) -> Error {
    let error = store
        .pull(reference, options, &quiet)
        .await
        .expect_err("the pull should fail");
    let line = error.to_string();
    assert!(!line.contains('\n'), "more than one line: {line}");
    assert!(
        line.contains(&reference.to_string()),
        "the reference is not named: {line}"
    );
    for word in says {
        assert!(line.contains(word), "{word:?} is not said: {line}");
    }
    assert!(matches!(
        store.image(reference),
        Err(Error::NotPulled { .. })
    ));
    assert_no_temporaries(store);
    error
}

/// Nothing is left under the store's tmp/.
pub(crate) fn assert_no_temporaries(store: &Store) {
    let left: Vec<_> = std::fs::read_dir(store.root().join("tmp"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// How many layers the store has unpacked (for its ownership).
pub(crate) fn layer_count(store: &Store) -> usize {
    let dir = store.root().join("layers").join(ownership_key());
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter(|e| e.as_ref().unwrap().path().is_dir())
            .count(),
        Err(_) => 0,
    }
}

fn ownership_key() -> String {
    match ownership() {
        Ownership::Shift {
            uid_base,
            gid_base,
            count,
        } => format!("shift-{uid_base}-{gid_base}-{count}"),
        Ownership::Caller => format!(
            "caller-{}-{}",
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw()
        ),
    }
}
