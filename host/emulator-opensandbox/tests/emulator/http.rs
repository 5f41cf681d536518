//! A plain HTTP/1.1 client for the tests (hyper's), reading bodies to the
//! end or event by event.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub(crate) type Http = Client<HttpConnector, Full<Bytes>>;

pub(crate) fn client() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A reply read to its end.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_string()
    }
}

pub(crate) struct Call<'a> {
    http: &'a Http,
    request: hyper::http::request::Builder,
    body: Bytes,
}

pub(crate) fn call<'a>(http: &'a Http, method: Method, url: &str) -> Call<'a> {
    Call {
        http,
        request: Request::builder().method(method).uri(url),
        body: Bytes::new(),
    }
}

impl Call<'_> {
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.request = self.request.header(name, value);
        self
    }

    pub(crate) fn json(mut self, body: &Value) -> Self {
        self.request = self.request.header("content-type", "application/json");
        self.body = Bytes::from(serde_json::to_vec(body).unwrap());
        self
    }

    pub(crate) fn body(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.request = self.request.header("content-type", content_type);
        self.body = Bytes::from(body);
        self
    }

    pub(crate) async fn open(
        self,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        let request = self.request.body(Full::new(self.body)).unwrap();
        self.http.request(request).await
    }

    pub(crate) async fn send(self) -> Reply {
        let response = self.open().await.expect("the request is answered");
        let (parts, body) = response.into_parts();
        let body = tokio::time::timeout(Duration::from_secs(60), body.collect())
            .await
            .expect("the body ends within 60 s")
            .expect("the body is read")
            .to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }
}

/// One command stream read event by event.
pub(crate) struct Events {
    body: Incoming,
    buffer: Vec<u8>,
}

/// How a stream ended after its events.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// The body ended properly.
    Clean,
    /// The connection was dropped.
    Cut,
}

impl Events {
    pub(crate) fn new(response: Response<Incoming>) -> Events {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }

    /// The next event (bare JSON and `\n\n`), or how the stream ended.
    pub(crate) async fn next(&mut self) -> Result<Value, End> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                return Ok(serde_json::from_slice(&event[..end]).expect("each event is bare JSON"));
            }
            match tokio::time::timeout(Duration::from_secs(30), self.body.frame())
                .await
                .expect("an event or the end within 30 s")
            {
                None => return Err(End::Clean),
                Some(Err(_)) => return Err(End::Cut),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// Events up to and including the terminal one (pings skipped).
    pub(crate) async fn until_terminal(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self
                .next()
                .await
                .expect("the stream carries a terminal event");
            let kind = event["type"].as_str().unwrap().to_string();
            assert!(event["timestamp"].as_i64().is_some(), "{event}");
            if kind == "ping" {
                continue;
            }
            events.push(event);
            if kind == "execution_complete" || kind == "error" {
                return events;
            }
        }
    }

    /// How the stream ends after the terminal event, and when.
    pub(crate) async fn end(mut self) -> (End, Instant) {
        match self.next().await {
            Ok(event) => panic!("an event after the terminal one: {event}"),
            Err(end) => (end, Instant::now()),
        }
    }
}

/// Polls `check` until it returns `Some`, at most until `within` has
/// passed.
pub(crate) async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
