//! Spans exported over OTLP/HTTP to a collector on loopback, as the
//! OpenTelemetry environment variables configure it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::mpsc;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::{Scratch, repo, stderr};

/// A collector that answers every POST with 200 and hands each body over
/// `bodies`, on one thread, until the test binary exits.
fn collector() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let (bodies, received) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            // Keep-alive: several requests may come on one connection.
            loop {
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                    break;
                }
                let path = request_line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                if bodies.send((path, body)).is_err() {
                    return;
                }
                writer
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    )
                    .unwrap();
            }
        }
    });
    (address, received)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            Value::IntValue(i) => Some(i.to_string()),
            _ => None,
        })
}

#[test]
fn a_run_exports_its_run_task_claim_exec_and_release_spans_as_one_trace() {
    let scratch = Scratch::new();
    let rows = vec![
        json!({"id": "t0", "image": "a", "test": "true"}),
        json!({"id": "t1", "image": "b", "test": "false"}),
    ];
    let fleet = scratch.fleet(&rows, "");
    let (endpoint, bodies) = collector();
    let run_id = crate::run_id("otlp");
    let output = Command::new(env!("CARGO_BIN_EXE_sandfleet"))
        .args(["run", fleet.to_str().unwrap(), "--run-id", &run_id, "--out"])
        .arg(scratch.path("out"))
        .current_dir(repo())
        .env("SANDFLEET_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "sandfleet-e2e")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));

    // Every body was received before its response, so before the process
    // (which flushes at exit) ended.
    let mut spans: Vec<Span> = Vec::new();
    let mut services = Vec::new();
    for (path, body) in bodies.try_iter() {
        assert_eq!(path, "/v1/traces");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        for resource in request.resource_spans {
            if let Some(resource) = &resource.resource {
                services.extend(
                    resource
                        .attributes
                        .iter()
                        .filter(|kv| kv.key == "service.name")
                        .map(|kv| format!("{:?}", kv.value)),
                );
            }
            spans.extend(resource.scope_spans.into_iter().flat_map(|s| s.spans));
        }
    }
    assert!(
        services.iter().all(|s| s.contains("sandfleet-e2e")) && !services.is_empty(),
        "{services:?}"
    );
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let runs = named("run");
    assert_eq!(
        runs.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let run = runs[0];
    assert_eq!(attribute(run, "run_id").as_deref(), Some(run_id.as_str()));

    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let ancestors = |span: &Span| -> Vec<String> {
        let mut names = Vec::new();
        let mut parent = by_id.get(span.parent_span_id.as_slice());
        while let Some(p) = parent {
            names.push(p.name.clone());
            parent = by_id.get(p.parent_span_id.as_slice());
        }
        names
    };
    let mut tasks: Vec<String> = named("task")
        .iter()
        .map(|task| {
            assert_eq!(task.trace_id, run.trace_id);
            assert_eq!(ancestors(task), ["run"]);
            attribute(task, "task").unwrap()
        })
        .collect();
    tasks.sort();
    assert_eq!(tasks, ["t0", "t1"]);
    for claim in named("claim") {
        assert_eq!(ancestors(claim), ["task", "run"]);
        assert!(attribute(claim, "sandbox").is_some(), "{claim:?}");
    }
    assert_eq!(named("claim").len(), 2);
    // Releases run after the tasks' records, in the run's span.
    let releases = named("release");
    assert_eq!(releases.len(), 2);
    for release in releases {
        assert_eq!(ancestors(release), ["run"]);
    }
    let execs = named("exec");
    assert!(execs.len() >= 2, "{}", execs.len());
    for exec in execs {
        assert_eq!(ancestors(exec).last().map(String::as_str), Some("run"));
        assert!(attribute(exec, "sandbox").is_some(), "{exec:?}");
    }
}
