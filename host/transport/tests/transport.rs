//! The transport against scripted HTTP servers on loopback: what is retried
//! and what is not, stale keep-alive connections, Retry-After, the shared
//! create pace, clients per configuration, and the errors it reports.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use sandfleet_core::ErrorKind;
use sandfleet_transport::{Call, CallKind, Clients, HttpFailure, TransportConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// What the server does with one request.
#[derive(Debug, Clone)]
enum Answer {
    /// Status, extra headers, body.
    Respond(u16, Vec<(&'static str, String)>, String),
    /// Close the connection without answering.
    Drop,
}

fn ok() -> Answer {
    Answer::Respond(200, vec![], "{}".into())
}

/// A server on 127.0.0.1 that answers the nth request (from 0) with
/// `script(n)`, and drops any request that arrives on a connection idle for
/// longer than `keep_alive` — as a server closing that socket at the same
/// moment would.
struct Server {
    url: String,
    requests: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(
        keep_alive: Duration,
        script: impl Fn(usize) -> Answer + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let (r, c, p) = (requests.clone(), connections.clone(), paths.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let (script, requests, paths) = (script.clone(), r.clone(), p.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    let mut idle_since = Instant::now();
                    loop {
                        let mut line = String::new();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let mut length = 0;
                        loop {
                            let mut header = String::new();
                            read.read_line(&mut header).await.unwrap();
                            let header = header.trim_end().to_ascii_lowercase();
                            if header.is_empty() {
                                break;
                            }
                            if let Some(value) = header.strip_prefix("content-length:") {
                                length = value.trim().parse().unwrap();
                            }
                        }
                        let mut body = vec![0; length];
                        read.read_exact(&mut body).await.unwrap();
                        if idle_since.elapsed() > keep_alive {
                            return;
                        }
                        let n = requests.fetch_add(1, Ordering::SeqCst);
                        paths
                            .lock()
                            .unwrap()
                            .push(line.split_whitespace().nth(1).unwrap_or("").to_string());
                        match script(n) {
                            Answer::Drop => return,
                            Answer::Respond(status, headers, body) => {
                                let mut head = format!(
                                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                                    body.len()
                                );
                                for (name, value) in headers {
                                    head.push_str(&format!("{name}: {value}\r\n"));
                                }
                                head.push_str("\r\n");
                                write.write_all(head.as_bytes()).await.unwrap();
                                write.write_all(body.as_bytes()).await.unwrap();
                            }
                        }
                        idle_since = Instant::now();
                    }
                });
            }
        });
        Server {
            url,
            requests,
            connections,
            paths,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn quick() -> TransportConfig {
    TransportConfig {
        attempts: 3,
        ..TransportConfig::default()
    }
}

fn get(url: &str) -> Call {
    Call::new(
        Method::GET,
        format!("{url}/v1/sandboxes/s1"),
        CallKind::Lifecycle,
        "get sandbox s1",
    )
}

fn command(url: &str) -> Call {
    Call::new(
        Method::POST,
        format!("{url}/command"),
        CallKind::Command { timeout: None },
        "command `true` in s1",
    )
    .json(serde_json::json!({"command": "true"}))
}

#[tokio::test]
async fn a_refused_connection_is_retried_on_any_method_and_reported_as_unsent() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let clients = Clients::new();
    let transport = clients.transport(&quick()).unwrap();
    let error = transport.send("east", &command(&url)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport { sent: false });
    assert!(
        error.to_string().starts_with(
            "east: command `true` in s1: POST /command: cannot connect (after 3 attempts)"
        ),
        "{error}"
    );
    let stats = transport.stats();
    assert_eq!((stats.requests, stats.retries), (3, 2));
    assert_eq!(stats.failures.get("transport_unsent"), Some(&3));
}

#[tokio::test]
async fn a_connection_lost_before_the_answer_is_retried_only_when_idempotent() {
    let drop_first = |n| if n == 0 { Answer::Drop } else { ok() };
    let clients = Clients::new();
    let transport = clients.transport(&quick()).unwrap();

    let server = Server::start(Duration::from_secs(60), drop_first).await;
    transport.send("east", &get(&server.url)).await.unwrap();
    assert_eq!(server.requests(), 2);

    // The command may have started: it is not sent again.
    let server = Server::start(Duration::from_secs(60), drop_first).await;
    let error = transport
        .send("east", &command(&server.url))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transport { sent: true });
    assert_eq!(server.requests(), 1);
    assert!(
        error
            .to_string()
            .contains("the connection was lost before a complete answer"),
        "{error}"
    );
}

#[tokio::test]
async fn idle_connections_expire_before_the_server_closes_them() {
    // The server closes sockets idle for 600 ms; a request written to one
    // of them is lost. Commands with idle gaps longer than that:
    let keep_alive = Duration::from_millis(600);
    let gap = Duration::from_millis(800);
    let commands = 4;
    let mut lost = Vec::new();
    for idle_timeout in [Duration::from_millis(300), Duration::from_secs(30)] {
        let server = Server::start(keep_alive, |_| ok()).await;
        let clients = Clients::new();
        let config = TransportConfig {
            idle_timeout,
            ..quick()
        };
        let transport = clients.transport(&config).unwrap();
        let mut failed = 0;
        for i in 0..commands {
            if i > 0 {
                tokio::time::sleep(gap).await;
            }
            if transport.send("east", &command(&server.url)).await.is_err() {
                failed += 1;
            }
        }
        lost.push(failed);
        if idle_timeout < keep_alive {
            assert_eq!(
                server.connections(),
                commands,
                "a fresh connection after each gap"
            );
        }
    }
    // Below the server's keep-alive nothing is lost; a 30 s pool (the old
    // client default) reuses stale sockets and loses commands.
    assert_eq!(lost[0], 0, "{lost:?}");
    assert!(lost[1] > 0, "{lost:?}");
}

#[tokio::test]
async fn throttling_is_waited_out_for_idempotent_calls_and_reported_otherwise() {
    let throttle_first = |n| {
        if n == 0 {
            Answer::Respond(
                429,
                vec![("retry-after", "1".into())],
                r#"{"code":"KUBERNETES::POOL_CAPACITY_EXHAUSTED","message":"pool at capacity"}"#
                    .into(),
            )
        } else {
            ok()
        }
    };
    let clients = Clients::new();
    let transport = clients.transport(&quick()).unwrap();
    let server = Server::start(Duration::from_secs(60), throttle_first).await;
    let started = Instant::now();
    transport.send("east", &get(&server.url)).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(server.requests(), 2);

    let server = Server::start(Duration::from_secs(60), throttle_first).await;
    let create = Call::new(
        Method::POST,
        format!("{}/v1/sandboxes", server.url),
        CallKind::Create,
        "create sandbox",
    );
    let error = transport.send("east", &create).await.unwrap_err();
    assert_eq!(
        error.kind(),
        ErrorKind::Throttled {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    assert_eq!(
        server.requests(),
        1,
        "a create is never repeated by the transport"
    );
    let failure = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<HttpFailure>())
        .unwrap();
    assert!(failure.code_is("POOL_CAPACITY_EXHAUSTED"));
}

#[tokio::test]
async fn a_proxy_that_could_not_reach_the_sandbox_lets_even_a_command_be_sent_again() {
    let unreachable_first = |n| {
        if n == 0 {
            Answer::Respond(
                502,
                vec![],
                r#"{"code":"BACKEND_CONNECTION_FAILED","message":"Could not connect to the backend sandbox 127.0.0.1:44772"}"#.into(),
            )
        } else {
            ok()
        }
    };
    let clients = Clients::new();
    let transport = clients.transport(&quick()).unwrap();
    let server = Server::start(Duration::from_secs(60), unreachable_first).await;
    let proxied = command(&server.url)
        .not_delivered_when(|failure| failure.code_is("BACKEND_CONNECTION_FAILED"));
    transport.send("east", &proxied).await.unwrap();
    assert_eq!(server.requests(), 2);

    let server = Server::start(Duration::from_secs(60), unreachable_first).await;
    let error = transport
        .send("east", &command(&server.url))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable);
    assert_eq!(server.requests(), 1);
}

#[tokio::test]
async fn a_rejected_request_names_the_cluster_the_call_and_the_servers_reason() {
    let server = Server::start(Duration::from_secs(60), |_| {
        Answer::Respond(
            422,
            vec![],
            r#"{"detail":[{"loc":["body","timeout"],"msg":"Input should be greater than or equal to 60"}]}"#.into(),
        )
    })
    .await;
    let clients = Clients::new();
    let transport = clients.transport(&quick()).unwrap();
    let create = Call::new(
        Method::POST,
        format!("{}/v1/sandboxes?x=secret", server.url),
        CallKind::Create,
        "create sandbox of sf-calc-7de942bd30",
    );
    let error = transport.send("east", &create).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Invalid);
    assert_eq!(
        error.to_string(),
        "east: create sandbox of sf-calc-7de942bd30: POST /v1/sandboxes: 422 Unprocessable Entity: body.timeout: Input should be greater than or equal to 60"
    );
    assert_eq!(
        server.paths.lock().unwrap().as_slice(),
        ["/v1/sandboxes?x=secret"]
    );
}

#[test]
fn equal_configurations_share_a_client_and_different_ones_never_do() {
    let clients = Clients::new();
    let a = clients.transport(&TransportConfig::default()).unwrap();
    let again = clients.transport(&TransportConfig::default()).unwrap();
    assert!(Arc::ptr_eq(&a, &again));
    let other = TransportConfig {
        max_idle_per_host: 8,
        ..TransportConfig::default()
    };
    let b = clients.transport(&other).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(b.config().max_idle_per_host, 8);
    assert_eq!(clients.len(), 2);
    let broken = TransportConfig {
        attempts: 0,
        ..TransportConfig::default()
    };
    assert_eq!(
        clients.transport(&broken).err().unwrap(),
        "transport.attempts must be at least 1"
    );
}
