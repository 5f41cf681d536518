//! `calc`: a one-file repository whose `add` is broken, as a SWE-bench
//! image for the local backend — what the engine's and the daemon's grading
//! tests share.

use std::path::Path;

use sandfleet_backend_local::{ImageSource, IsolationMode, LimitOverrides, LocalConfig};

/// The image's name in [`local_config`].
pub const IMAGE: &str = "calc";

/// The test command of [`eval_script`]: prints the one test's result as
/// pytest's summary lines do.
pub const RUN_TEST: &str = "if bash tests/test_add.sh; then echo 'PASSED tests/test_add.sh::test_add'; \
                            else echo 'FAILED tests/test_add.sh::test_add'; fi";

/// The gold patch: makes `add` add.
pub const FIX: &str = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n\
                       @@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

/// Writes the repository (without `.git`; the backend makes one) to `dir`.
pub fn write_image(dir: &Path) {
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        dir.join("tests/test_add.sh"),
        "grep -q 'return a + b' calc.py\n",
    )
    .unwrap();
}

/// An eval script as SWE-bench writes them, whose test command is `test`:
/// the test file is checked out from the base commit before the test runs
/// and after.
pub fn eval_script(test: &str) -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\ngit checkout HEAD -- tests/test_add.sh\n\
         : '>>>>> Start Test Output'\n{test}\n: '>>>>> End Test Output'\n\
         git checkout HEAD -- tests/test_add.sh\n"
    )
}

/// A namespaced local backend under `dir` (state in `state/`) whose one
/// image, [`IMAGE`], is the repository written to `images/calc`, checked
/// out at `/testbed`.
pub fn local_config(dir: &Path) -> LocalConfig {
    let image = dir.join("images/calc");
    write_image(&image);
    LocalConfig {
        state_dir: Some(dir.join("state")),
        workdir: "/testbed".into(),
        isolation: IsolationMode::Namespaces,
        images: [(
            IMAGE.to_owned(),
            ImageSource {
                path: image,
                git: true,
                limits: LimitOverrides::default(),
            },
        )]
        .into_iter()
        .collect(),
        ..LocalConfig::default()
    }
}

/// A SWE-bench row of the [`IMAGE`] whose one failing test is checked by
/// running `test` in the official eval script's place.
pub fn row(instance_id: &str, test: &str) -> serde_json::Value {
    serde_json::json!({
        "instance_id": instance_id,
        "repo": "calc/calc",
        "version": "1.0",
        "FAIL_TO_PASS": ["tests/test_add.sh::test_add"],
        "PASS_TO_PASS": [],
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "image": IMAGE,
        "eval_script": eval_script(test),
    })
}
