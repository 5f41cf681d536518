//! The API key never follows a redirect to another origin: two servers on
//! loopback, the first redirecting every request to the second, which
//! records what reaches it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use sandfleet_backend_opensandbox::{OpenSandboxBackend, OpenSandboxConfig};
use sandfleet_core::Backend;
use sandfleet_transport::Clients;

/// Serves on a loopback port: each request's header lines go to `seen`,
/// and `answer` is sent back whole.
fn serve(answer: impl Fn() -> String + Send + 'static) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                kept.lock().unwrap().push(line.trim().to_ascii_lowercase());
            }
            let _ = stream.write_all(answer().as_bytes());
        }
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_key_never_follows_a_redirect_to_another_origin() {
    let body = r#"{"items":[],"pagination":{"page":1,"pageSize":1,"totalItems":0,"totalPages":0,"hasNextPage":false}}"#;
    let (elsewhere, seen_elsewhere) = serve(move || {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    });
    let (server, seen_by_server) = serve(move || {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:{elsewhere}/v1/sandboxes?page=1&pageSize=1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    });
    let backend = OpenSandboxBackend::with_server(
        "os",
        OpenSandboxConfig::default(),
        &format!("http://127.0.0.1:{server}"),
        Some("secret".into()),
        &Clients::new(),
    )
    .unwrap();
    let found = backend.preflight().await;
    let server_saw = seen_by_server.lock().unwrap().clone();
    assert!(
        server_saw
            .iter()
            .any(|h| h == "open-sandbox-api-key: secret"),
        "{server_saw:?}"
    );
    let elsewhere_saw = seen_elsewhere.lock().unwrap().clone();
    assert!(
        !elsewhere_saw.iter().any(|h| h.starts_with("open-sandbox-")),
        "the key followed the redirect to another origin: {elsewhere_saw:?} (preflight: {found:?})"
    );
}
