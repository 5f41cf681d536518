//! Commands handed back running (`LocalBackend::spawn`): stdin written as
//! input comes, output read as it is written, nothing in the sandbox but
//! the command, confined like an exec'd one, killed on demand, on drop, and
//! at the sandbox's disk limit.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use sandfleet_backend_local::{SpawnRequest, Spawned};
use sandfleet_core::{Backend, ErrorKind, SandboxHandle};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

use crate::common::{self, TestBackend, claim, init_of, pid_namespace_members, template};

fn spawn_request(argv: &[&str], stdin: bool) -> SpawnRequest {
    SpawnRequest {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        stdin,
        ..SpawnRequest::default()
    }
}

async fn spawn(backend: &TestBackend, sandbox: &SandboxHandle, request: &SpawnRequest) -> Spawned {
    backend.spawn(sandbox, request).await.unwrap()
}

/// The next line `reader` gives, within the test's patience.
async fn line(reader: &mut BufReader<impl AsyncRead + Unpin>) -> String {
    let mut line = String::new();
    tokio::time::timeout(common::PATIENCE, reader.read_line(&mut line))
        .await
        .expect("a line in time")
        .unwrap();
    line
}

/// Waits until only the init is left in the sandbox whose init is `init`.
async fn wait_alone(init: i32) {
    let deadline = Instant::now() + common::PATIENCE;
    while pid_namespace_members(init) != [init] {
        assert!(
            Instant::now() < deadline,
            "left in the sandbox: {:?}",
            common::describe(&pid_namespace_members(init))
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_spawned_shell_reads_each_line_as_it_is_written_and_is_alone_in_the_sandbox() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let init = init_of(&fixture.run_id, &sandbox.id);
    let mut shell = spawn(&backend, &sandbox, &spawn_request(&["sh"], true)).await;
    let mut stdin = shell.stdin.take().unwrap();
    let mut stdout = BufReader::new(shell.stdout);
    let mut stderr = BufReader::new(shell.stderr.take().unwrap());

    // Each answer is read before the next line is written: input given up
    // front could not do this.
    stdin.write_all(b"echo one; pwd\n").await.unwrap();
    assert_eq!(line(&mut stdout).await, "one\n");
    assert_eq!(line(&mut stdout).await, "/workspace\n");
    stdin.write_all(b"echo two >&2\n").await.unwrap();
    assert_eq!(line(&mut stderr).await, "two\n");
    // Nothing runs in the sandbox but its init, the shell, and what the
    // shell started: no helper feeding stdin.
    stdin
        .write_all(b"for d in /proc/[0-9]*; do echo \"${d#/proc/} $(tr '\\0' ' ' < $d/cmdline)\"; done; echo end\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let next = line(&mut stdout).await;
        if next == "end\n" {
            break;
        }
        seen.push(next.trim().to_string());
    }
    let commands: Vec<&str> = seen
        .iter()
        .filter_map(|entry| entry.split_once(' ').map(|(_, command)| command))
        .collect();
    assert!(
        commands.iter().all(|c| c.starts_with("sandfleet-sandbox:")
            || c.starts_with("sh")
            || c.starts_with("tr ")),
        "{seen:?}"
    );
    assert_eq!(
        commands.iter().filter(|c| c.starts_with("sh")).count(),
        1,
        "{seen:?}"
    );
    // End of input ends the shell, with the status of its last command.
    stdin.write_all(b"false\n").await.unwrap();
    drop(stdin);
    let status = shell.exit.wait().await.unwrap();
    assert_eq!(status.code(), Some(1));
    assert_eq!(shell.exit.wait().await.unwrap().code(), Some(1));
    wait_alone(init).await;
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn a_spawned_command_is_confined_like_an_executed_one() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let script = "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '; hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; echo err >&2";
    let request = SpawnRequest {
        merge_stderr: true,
        ..spawn_request(&["sh", "-c", script], false)
    };
    let mut spawned = spawn(&backend, &sandbox, &request).await;
    assert!(spawned.stdin.is_none() && spawned.stderr.is_none());
    let mut output = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut spawned.stdout, &mut output)
        .await
        .unwrap();
    assert!(spawned.exit.wait().await.unwrap().success());
    // What an exec of the same command sees.
    let executed = backend
        .exec(
            &sandbox,
            &sandfleet_core::ExecRequest {
                merge_stderr: true,
                ..common::request(["sh", "-c", script])
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(output, String::from_utf8_lossy(&executed.stdout));
    let lines: Vec<&str> = output.lines().collect();
    let capabilities = lines[0].strip_prefix("CapEff: ").unwrap();
    let capabilities = u64::from_str_radix(capabilities, 16).unwrap();
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    assert_eq!(capabilities & CAP_SYS_ADMIN, 0, "{output}");
    assert_eq!(lines[1..3], ["NoNewPrivs: 1", "Seccomp: 2"], "{output}");
    assert_eq!(lines[3], sandbox.id, "{output}");
    assert!(
        lines[4].starts_with(&format!("sandfleet-sandbox:{}:", sandbox.run_id)),
        "{output}"
    );
    assert_eq!(lines[5], "err", "{output}");
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn a_killed_or_abandoned_spawn_leaves_nothing_in_the_sandbox() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let init = init_of(&fixture.run_id, &sandbox.id);
    let script = "sleep 300 & echo $!; sleep 300";
    let mut killed = spawn(
        &backend,
        &sandbox,
        &spawn_request(&["sh", "-c", script], false),
    )
    .await;
    let mut stdout = BufReader::new(killed.stdout);
    assert!(line(&mut stdout).await.trim().parse::<u32>().is_ok());
    killed.exit.kill();
    let status = killed.exit.wait().await.unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
    wait_alone(init).await;

    // Dropping the end kills as well.
    let dropped = spawn(
        &backend,
        &sandbox,
        &spawn_request(&["sh", "-c", script], false),
    )
    .await;
    let mut stdout = BufReader::new(dropped.stdout);
    assert!(line(&mut stdout).await.trim().parse::<u32>().is_ok());
    drop(dropped.exit);
    wait_alone(init).await;
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn a_spawned_command_writing_past_the_disk_limit_is_stopped() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let spec = sandfleet_core::TemplateSpec {
        disk_mib: 16,
        ..common::spec(&backend.run_id, "small")
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    let sandbox = claim(&backend, &template).await;
    // Files under RLIMIT_FSIZE each, over the disk together, then a wait
    // only the limit's watch ends.
    let script = "for i in $(seq 40); do head -c 1M /dev/zero > /tmp/f$i; done; exec sleep 300";
    let mut spawned = spawn(
        &backend,
        &sandbox,
        &spawn_request(&["sh", "-c", script], false),
    )
    .await;
    let error = tokio::time::timeout(common::PATIENCE, spawned.exit.wait())
        .await
        .expect("stopped in time")
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Failed, "{error}");
    assert!(error.to_string().contains("disk limit (16 MiB"), "{error}");
    // An unknown sandbox is named.
    let mut gone = sandbox.clone();
    gone.id = "nowhere-1".into();
    let missing = backend
        .spawn(&gone, &spawn_request(&["true"], false))
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    backend.release(&sandbox).await.unwrap();
}
