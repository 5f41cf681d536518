//! Finding 10: the reap took sandbox ids from any process named
//! `sandfleet-sandbox:<run>:<id>`, which a task names as it likes (`exec
//! -a`), and removed `sandboxes/<id>`: an absolute id or one with `..`
//! deleted host directories. Reaps now take sandboxes from the run's own
//! directory and records alone, and remove nothing outside it.

use sandfleet_core::Backend;
use std::fs;
use std::path::Path;

use sandfleet_backend_local::{list_run, reap_run};

use super::{Setup, setups, unique};
use crate::common::{self, init_of, pid_namespace_members};

/// Starts, in the sandbox, a process named as a sandbox of its own run
/// whose id is `id` (`exec -a`, a bash builtin), and leaves it running.
async fn forge(setup: &Setup, sandbox: &sandfleet_core::SandboxHandle, id: &str) {
    let script = r#"run=$(tr '\0' '\n' < /proc/1/cmdline | head -n1 | cut -d: -f2)
(exec -a "sandfleet-sandbox:$run:$1" sleep 300) </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do
  grep -qsF "sandfleet-sandbox:$run:$1" /proc/[0-9]*/cmdline && exit 0
  sleep 0.05
done
exit 1"#;
    let request = common::request(["bash", "-c", script, "forge", id]);
    let result = setup.backend.exec(sandbox, &request, None).await.unwrap();
    assert_eq!(
        result.exit_code,
        0,
        "{}: {}",
        setup.label,
        String::from_utf8_lossy(&result.stderr)
    );
}

/// A directory with a file in it, to be left alone.
fn victim(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("keep"), "host data").unwrap();
}

#[tokio::test]
async fn finding_10_a_forged_process_name_makes_no_reap_remove_a_host_directory() {
    for setup in setups().await {
        let host = tempfile::tempdir().unwrap();
        let absolute = host.path().join("absolute");
        victim(&absolute);
        // `<state>/runs/<run>/sandboxes/../../../<name>` is `<state>/<name>`.
        let relative_name = unique(&setup);
        let relative = setup.state_dir.join(&relative_name);
        victim(&relative);
        let sandbox = setup.claim().await;
        let init = init_of(&setup.run_id, &sandbox.id);
        forge(&setup, &sandbox, &absolute.display().to_string()).await;
        forge(&setup, &sandbox, &format!("../../../{relative_name}")).await;
        assert!(pid_namespace_members(init).len() >= 3, "{}", setup.label);

        // Listing trusts the run's directory alone.
        let owned = list_run(&setup.state_dir, &setup.run_id).await.unwrap();
        assert_eq!(
            owned.sandboxes,
            std::slice::from_ref(&sandbox.id),
            "{}",
            setup.label
        );

        // The owner dies without cleaning up; a reap follows (as
        // `sandfleet reap --run-id` does after a kill -9).
        let reaped = reap_run(&setup.state_dir, &setup.run_id).await.unwrap();
        assert_eq!(reaped.sandboxes, 1, "{}: {reaped:?}", setup.label);
        assert!(pid_namespace_members(init).is_empty(), "{}", setup.label);
        for dir in [&absolute, &relative] {
            assert_eq!(
                fs::read_to_string(dir.join("keep")).unwrap(),
                "host data",
                "{}: {} was removed",
                setup.label,
                dir.display()
            );
        }
        // And through the backend, as a run's teardown reaps.
        let sandbox = setup.claim().await;
        forge(&setup, &sandbox, &absolute.display().to_string()).await;
        setup.backend.reap(&setup.run_id).await.unwrap();
        assert!(absolute.join("keep").exists(), "{}", setup.label);
        fs::remove_dir_all(&relative).unwrap();
    }
}
