//! Headless Chromium, for tests of pages whose content is drawn by their own
//! scripts (a run's report, the API's `/ui`): open a URL, let its timers
//! and fetches run, then read the DOM or a screenshot.
//!
//! The browser is Debian's `chromium` (`/usr/bin/chromium`, installed by
//! `.ci/run`); `SANDFLEET_CHROMIUM` names another binary. Each call starts
//! its own browser with its own profile directory, so parallel tests share
//! nothing, and a browser that has not exited after [`TIMEOUT`] is killed
//! with every process it started.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How long one browser may run before it is killed (a cold start on a
/// loaded 2-core CI machine takes a few seconds; a hung one, forever).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// Virtual milliseconds the page gets before its DOM is read or it is
/// captured. Virtual time runs timers as fast as the CPU allows (a 4 s
/// `setTimeout` fires within the browser's ~1 s start) and stands still
/// while a fetch is pending, so a page whose fetch never completes (an
/// event stream, a long poll) is read only when its server ends the
/// response, or is killed at [`TIMEOUT`].
pub const VIRTUAL_TIME_BUDGET_MS: u32 = 5_000;

/// The DOM of `url` after its scripts ran (and timers up to
/// [`VIRTUAL_TIME_BUDGET_MS`] fired), serialized as HTML.
///
/// # Panics
///
/// If Chromium is missing, fails, prints nothing or outlives [`TIMEOUT`];
/// the message names the URL and carries Chromium's stderr.
pub fn dump_dom(url: &str) -> String {
    let output = run(url, &["--dump-dom".to_owned()]);
    let dom = String::from_utf8_lossy(&output.stdout).into_owned();
    if dom.trim().is_empty() {
        panic!(
            "chromium printed no DOM for {url}; its stderr:\n{}",
            tail(&output.stderr)
        );
    }
    dom
}

/// Writes a PNG of `url` as a `size.0` × `size.1` window shows it, after
/// its scripts ran, to `path`.
///
/// # Panics
///
/// As [`dump_dom`], and if no file appears at `path`.
pub fn screenshot(url: &str, path: &Path, size: (u32, u32)) {
    // Chromium reports a failed write on stderr but still exits 0, so a
    // stale file from an earlier run must not pass for this one's.
    let _ = std::fs::remove_file(path);
    let output = run(
        url,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={},{}", size.0, size.1),
            "--hide-scrollbars".to_owned(),
        ],
    );
    if !path.is_file() {
        panic!(
            "chromium wrote no screenshot of {url} to {}; its stderr:\n{}",
            path.display(),
            tail(&output.stderr)
        );
    }
}

fn run(url: &str, extra: &[String]) -> Output {
    let binary = std::env::var_os("SANDFLEET_CHROMIUM").unwrap_or_else(|| "chromium".into());
    launch(&binary, url, extra)
}

fn launch(binary: &OsStr, url: &str, extra: &[String]) -> Output {
    let profile = TempDir::new("chromium-profile");
    let mut command = Command::new(binary);
    command
        .arg("--headless")
        // Tests run as root (CI containers, the dev VM), and Chromium
        // refuses to start its sandbox as root; the pages are our own
        // fixtures, not untrusted web content.
        .arg("--no-sandbox")
        .arg("--disable-gpu")
        // Containers often have a 64 MB /dev/shm, too small for a renderer.
        .arg("--disable-dev-shm-usage")
        .arg("--no-first-run")
        .arg("--no-default-browser-check")
        .arg("--disable-extensions")
        .arg("--disable-background-networking")
        .arg("--mute-audio")
        .arg(format!("--user-data-dir={}", profile.path.display()))
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}"))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group, so a timeout kills the renderer, GPU and
    // zygote processes too, not only the launcher.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) if error.kind() == ErrorKind::NotFound => panic!(
            "cannot open {url}: {} is not installed (apt-get install chromium, \
             or set SANDFLEET_CHROMIUM to a Chromium binary)",
            binary.to_string_lossy()
        ),
        Err(error) => panic!(
            "cannot open {url}: starting {} failed: {error}",
            binary.to_string_lossy()
        ),
    };
    let group = child.id();
    // std has no wait with a deadline: a thread waits (and drains both
    // pipes, so a chatty browser cannot block on a full pipe) while this
    // one waits on the channel with one.
    let (done, outcome) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match outcome.recv_timeout(TIMEOUT) {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => panic!("cannot open {url}: waiting for chromium failed: {error}"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            let stderr = match outcome.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(output)) => tail(&output.stderr),
                _ => "(not collected: the browser's pipes stayed open)".to_owned(),
            };
            panic!(
                "chromium did not finish {url} within {} s and was killed; its stderr:\n{stderr}",
                TIMEOUT.as_secs()
            );
        }
    };
    if !output.status.success() {
        panic!(
            "chromium failed on {url} ({}); its stderr:\n{}",
            output.status,
            tail(&output.stderr)
        );
    }
    output
}

/// The end of a browser's stderr: the cause of a failure comes last, after
/// pages of D-Bus and GPU warnings.
fn tail(stderr: &[u8]) -> String {
    const KEEP: usize = 4_000;
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim_end();
    if text.len() <= KEEP {
        return text.to_owned();
    }
    let mut start = text.len() - KEEP;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// A fresh directory under the system's temporary directory, removed on
/// drop (std has no such type, and this crate keeps to std here).
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(purpose: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.subsec_nanos())
                .unwrap_or(0);
            let path = std::env::temp_dir().join(format!(
                "sandfleet-{purpose}-{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            // create_dir, not create_dir_all: it fails on an existing
            // directory, so two callers never get the same one.
            match std::fs::create_dir(&path) {
                Ok(()) => return Self { path },
                Err(error) if error.kind() == ErrorKind::AlreadyExists => continue,
                Err(error) => panic!("cannot create {}: {error}", path.display()),
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page whose only content is written by a script after a timer, so
    /// it is in the DOM only if scripts and timers ran.
    fn page(dir: &TempDir, name: &str) -> String {
        let path = dir.path.join(format!("{name}.html"));
        std::fs::write(
            &path,
            format!(
                "<!doctype html><html><body><script>\
                 setTimeout(() => {{ const p = document.createElement('p'); \
                 p.id = 'written-by-{name}'; p.textContent = 'late'; \
                 document.body.append(p); }}, 1000);\
                 </script></body></html>"
            ),
        )
        .unwrap();
        format!("file://{}", path.display())
    }

    #[test]
    fn the_dom_has_what_the_pages_script_wrote_after_a_timer() {
        let dir = TempDir::new("chromium-test");
        let dom = dump_dom(&page(&dir, "timer"));
        assert!(
            dom.contains(r#"<p id="written-by-timer">late</p>"#),
            "{dom}"
        );
    }

    #[test]
    fn parallel_browsers_do_not_share_a_profile() {
        let dir = TempDir::new("chromium-test");
        let urls = [page(&dir, "first"), page(&dir, "second")];
        std::thread::scope(|scope| {
            let browsers: Vec<_> = urls
                .iter()
                .map(|url| scope.spawn(move || dump_dom(url)))
                .collect();
            for (browser, name) in browsers.into_iter().zip(["first", "second"]) {
                let dom = browser.join().unwrap();
                assert!(dom.contains(&format!("written-by-{name}")), "{dom}");
            }
        });
    }

    #[test]
    fn a_screenshot_is_a_png_of_the_window_size() {
        let dir = TempDir::new("chromium-test");
        let png = dir.path.join("shot.png");
        screenshot(&page(&dir, "shot"), &png, (640, 360));
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // The IHDR chunk comes first: width, then height, big-endian.
        let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!((width, height), (640, 360));
    }

    #[test]
    #[should_panic(expected = "/nonexistent/chromium is not installed")]
    fn a_missing_browser_is_named() {
        launch(OsStr::new("/nonexistent/chromium"), "about:blank", &[]);
    }
}
