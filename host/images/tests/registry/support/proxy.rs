//! A counting proxy in front of the registry: every request the client
//! makes is logged (so a test can say "the second pull fetched no blob"),
//! and faults can be injected (a status with `Retry-After`, a body cut
//! off, a flipped byte).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt as _, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

/// A fault for the next `times` requests whose path contains `path`.
#[derive(Clone, Debug)]
pub(crate) enum Fault {
    Status {
        status: u16,
        retry_after: Option<u32>,
    },
    /// Send this many bytes of the body, then break the connection.
    Cut { after: usize },
    /// Flip a byte in the middle of the body.
    Flip,
}

struct State {
    upstream: String,
    log: Mutex<Vec<(String, String)>>,
    faults: Mutex<Vec<(String, Fault, usize)>>,
    http: reqwest::Client,
}

pub(crate) struct Proxy {
    pub(crate) host: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

type Body = BoxBody<Bytes, std::io::Error>;

impl Proxy {
    pub(crate) async fn start(upstream: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            upstream: upstream.to_string(),
            log: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .tls_backend_rustls()
                .build()
                .unwrap(),
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |request| handle(state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        Proxy {
            host: addr.to_string(),
            state,
            task,
        }
    }

    pub(crate) fn fault(&self, path: &str, fault: Fault, times: usize) {
        self.state
            .faults
            .lock()
            .unwrap()
            .push((path.to_string(), fault, times));
    }

    pub(crate) fn clear(&self) {
        self.state.log.lock().unwrap().clear();
        self.state.faults.lock().unwrap().clear();
    }

    /// The requests seen: `(method, path)`.
    pub(crate) fn requests(&self) -> Vec<(String, String)> {
        self.state.log.lock().unwrap().clone()
    }

    /// GETs of blobs whose path contains `part` (a digest's hex, or "" for all).
    pub(crate) fn blob_gets(&self, part: &str) -> usize {
        self.requests()
            .iter()
            .filter(|(method, path)| {
                method == "GET" && path.contains("/blobs/") && path.contains(part)
            })
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    state: Arc<State>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Body>, Infallible> {
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    state
        .log
        .lock()
        .unwrap()
        .push((request.method().to_string(), path.clone()));
    let fault = {
        let mut faults = state.faults.lock().unwrap();
        let found = faults
            .iter_mut()
            .find(|(part, _, times)| *times > 0 && path.contains(part.as_str()));
        found.map(|(_, fault, times)| {
            *times -= 1;
            fault.clone()
        })
    };
    if let Some(Fault::Status {
        status,
        retry_after,
    }) = &fault
    {
        let mut response = hyper::Response::builder().status(*status);
        if let Some(seconds) = retry_after {
            response = response.header("Retry-After", seconds.to_string());
        }
        return Ok(response
            .body(full(Bytes::from_static(
                b"{\"errors\":[{\"code\":\"TOOMANYREQUESTS\",\"message\":\"slow down\"}]}",
            )))
            .unwrap());
    }
    let mut upstream = state.http.request(
        request.method().clone(),
        format!("http://{}{path}", state.upstream),
    );
    for name in ["authorization", "accept"] {
        if let Some(value) = request.headers().get(name) {
            upstream = upstream.header(name, value.as_bytes());
        }
    }
    let answer = upstream.send().await.unwrap();
    let mut response = hyper::Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" && name != "connection" {
            response = response.header(name.as_str(), value.as_bytes());
        }
    }
    let body = answer.bytes().await.unwrap();
    let body = match fault {
        Some(Fault::Cut { after }) => {
            let part = body.slice(..after.min(body.len()));
            let frames = stream::iter(vec![
                Ok(Frame::data(part)),
                Err(std::io::Error::other("cut by the test proxy")),
            ]);
            BoxBody::new(StreamBody::new(frames))
        }
        Some(Fault::Flip) => {
            let mut bytes = body.to_vec();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xff;
            full(Bytes::from(bytes))
        }
        _ => full(body),
    };
    Ok(response.body(body).unwrap())
}

fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}
