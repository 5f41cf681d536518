//! Running commands and moving files in namespaced sandboxes.

use std::time::{Duration, Instant};

use sandfleet_core::{Backend, ErrorKind, ExecRequest, OutputStream, TemplateSpec};

use crate::common::{self, claim, init_of, pid_namespace_members, request, sh, sh_ok, template};

#[tokio::test]
async fn a_timeout_kills_everything_the_command_started() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let init = init_of(&fixture.run_id, &sandbox.id);
    let request = ExecRequest {
        timeout: Duration::from_secs(1),
        ..request(["sh", "-c", "echo started; sleep 300 & sleep 300"])
    };
    let result = backend.exec(&sandbox, &request, None).await.unwrap();
    assert!(result.timed_out);
    assert_eq!(result.exit_code, -1);
    assert_eq!(result.stdout, b"started\n");
    // Nothing but the init is left in the sandbox, not even a zombie, once
    // the init has reaped the killed processes re-parented to it.
    let deadline = Instant::now() + common::PATIENCE;
    while pid_namespace_members(init) != [init] {
        assert!(
            Instant::now() < deadline,
            "left in the sandbox: {:?}",
            common::describe(&pid_namespace_members(init))
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // And the sandbox still works.
    assert_eq!(sh_ok(&backend, &sandbox, "echo ok").await, "ok\n");
    backend.release(&sandbox).await.unwrap();
}

/// Host pids whose command line is `argv`, zombies included.
fn processes_with_cmdline(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|arg| [arg.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

#[tokio::test]
async fn a_timed_out_command_is_reaped_before_exec_returns() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let backend = std::sync::Arc::new(backend);
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let init = init_of(&fixture.run_id, &sandbox.id);
    // A duration no other process on the machine sleeps for.
    let argv = ["sleep", "3133.7"];
    let request = ExecRequest {
        timeout: Duration::from_secs(2),
        ..request(argv)
    };
    let exec = {
        let (backend, sandbox) = (backend.clone(), sandbox.clone());
        tokio::spawn(async move { backend.exec(&sandbox, &request, None).await })
    };
    let deadline = Instant::now() + common::PATIENCE;
    let command = loop {
        if let [pid] = processes_with_cmdline(&argv)[..] {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(exec.await.unwrap().unwrap().timed_out);
    // nsenter, killed after its child rather than with it, reaped it: no
    // zombie is left for the host's init, which the sandbox's init would
    // have to wait for when it dies.
    assert!(
        !std::path::Path::new(&format!("/proc/{command}")).exists(),
        "{:?}",
        common::describe(&[command])
    );
    assert_eq!(pid_namespace_members(init), [init]);
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn output_streams_stdin_env_and_workdir() {
    let Some((fixture, backend)) = common::namespaced().await else {
        return;
    };
    let spec = TemplateSpec {
        env: [
            ("FROM_TEMPLATE".into(), "t".into()),
            ("SHARED".into(), "template".into()),
        ]
        .into(),
        ..common::spec(&fixture.run_id, "env")
    };
    let template = backend.ensure_template(&spec).await.unwrap();
    let sandbox = claim(&backend, &template).await;

    let interleaved = "echo 1; echo 2 >&2; echo 3; echo 4 >&2";
    let merged = ExecRequest {
        merge_stderr: true,
        ..request(["sh", "-c", interleaved])
    };
    let result = backend.exec(&sandbox, &merged, None).await.unwrap();
    assert_eq!(
        (result.stdout.as_slice(), result.stderr.as_slice()),
        (&b"1\n2\n3\n4\n"[..], &b""[..])
    );
    let result = sh(&backend, &sandbox, &format!("{interleaved}; exit 7")).await;
    assert_eq!(
        (result.stdout.as_slice(), result.stderr.as_slice()),
        (&b"1\n3\n"[..], &b"2\n4\n"[..])
    );
    assert_eq!(result.exit_code, 7);

    let stdin = ExecRequest {
        stdin: Some(b"line one\nline two\n".to_vec()),
        ..request(["wc", "-l"])
    };
    assert_eq!(
        backend.exec(&sandbox, &stdin, None).await.unwrap().stdout,
        b"2\n"
    );

    let env = ExecRequest {
        env: vec![
            ("FROM_REQUEST".into(), "r".into()),
            ("SHARED".into(), "request".into()),
        ],
        workdir: Some("src".into()),
        ..request([
            "sh",
            "-c",
            "echo $FROM_TEMPLATE $FROM_REQUEST $SHARED $HOME; pwd; env | wc -l",
        ])
    };
    let result = backend.exec(&sandbox, &env, None).await.unwrap();
    let text = String::from_utf8(result.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], ["t r request /root", "/workspace/src"]);
    // Only what was given (plus what sh itself sets): nothing of the host's.
    assert!(lines[2].parse::<u32>().unwrap() < 10, "{text}");

    let missing = backend
        .exec(&sandbox, &request(["no-such-program"]), None)
        .await
        .unwrap();
    assert_eq!(missing.exit_code, 127);
    let error = backend
        .exec(&sandbox, &request([]), None)
        .await
        .unwrap_err();
    assert!(error.kind() == ErrorKind::Invalid, "{error}");
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn streaming_sends_chunks_as_they_come() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;
    let (sink, mut chunks) = tokio::sync::mpsc::channel(64);
    let slow = request([
        "sh",
        "-c",
        "for i in 1 2 3; do echo $i; sleep 0.1; done; echo err >&2",
    ]);
    let result = backend.exec(&sandbox, &slow, Some(&sink)).await.unwrap();
    drop(sink);
    let mut streamed = Vec::new();
    let mut stdout_chunks = 0;
    while let Some(chunk) = chunks.recv().await {
        match chunk.stream {
            OutputStream::Stdout => {
                stdout_chunks += 1;
                streamed.extend(chunk.bytes);
            }
            OutputStream::Stderr => assert_eq!(chunk.bytes, b"err\n"),
        }
    }
    assert_eq!(streamed, result.stdout);
    assert_eq!(result.stdout, b"1\n2\n3\n");
    assert!(
        stdout_chunks >= 2,
        "output arrived in {stdout_chunks} chunk(s)"
    );
    backend.release(&sandbox).await.unwrap();
}

#[tokio::test]
async fn files_go_in_and_out_with_their_mode() {
    let Some((_fixture, backend)) = common::namespaced().await else {
        return;
    };
    let template = template(&backend, "t").await;
    let sandbox = claim(&backend, &template).await;

    let script = b"#!/bin/sh\necho ran\n";
    backend
        .put_file(&sandbox, "/workspace/deep/er/run.sh", script, 0o750)
        .await
        .unwrap();
    assert_eq!(
        sh_ok(
            &backend,
            &sandbox,
            "stat -c %a deep/er/run.sh; ./deep/er/run.sh"
        )
        .await,
        "750\nran\n"
    );
    let binary: Vec<u8> = (0..=255).cycle().take(100_000).collect();
    backend
        .put_file(&sandbox, "/tmp/blob", &binary, 0o600)
        .await
        .unwrap();
    assert_eq!(
        backend.get_file(&sandbox, "/tmp/blob").await.unwrap(),
        binary
    );
    // Relative paths are in the workdir; an existing file is replaced.
    backend
        .put_file(&sandbox, "README.md", b"new\n", 0o644)
        .await
        .unwrap();
    assert_eq!(
        backend
            .get_file(&sandbox, "/workspace/README.md")
            .await
            .unwrap(),
        b"new\n"
    );

    let error = backend
        .get_file(&sandbox, "/workspace/missing")
        .await
        .unwrap_err();
    assert!(
        error.kind() == ErrorKind::NotFound && error.to_string().contains("/workspace/missing"),
        "{error}"
    );
    let error = backend
        .put_file(&sandbox, "/usr/x", b"", 0o644)
        .await
        .unwrap_err();
    assert!(
        error.kind() == ErrorKind::Failed && error.to_string().contains("/usr/x"),
        "{error}"
    );
    backend.release(&sandbox).await.unwrap();
}
