//! A token service on loopback, as Docker Hub's `auth.docker.io` works:
//! `GET /token?service=…&scope=repository:NAME:pull,push` answers a JWT
//! signed ES256 with a key whose self-signed certificate the registry
//! trusts (`auth.token.rootcertbundle`), carried in the header's `x5c`.
//! Anonymous callers may pull `public/*`; `alice` may pull and push
//! anything; a wrong password is refused with 401.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use serde_json::json;

pub(crate) use sandfleet_registry_testing::registry::{
    TOKEN_ISSUER as ISSUER, TOKEN_SERVICE as SERVICE,
};
pub(crate) const USER: &str = "alice";
pub(crate) const PASSWORD: &str = "wonderland";

struct Keys {
    key: EcdsaKeyPair,
    cert_der: Vec<u8>,
    rng: SystemRandom,
}

pub(crate) struct TokenServer {
    pub(crate) realm: String,
    pub(crate) cert_pem: String,
    keys: Arc<Keys>,
    task: tokio::task::JoinHandle<()>,
}

impl TokenServer {
    pub(crate) async fn start() -> TokenServer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let cert_key = rcgen::KeyPair::try_from(pkcs8.as_ref()).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["token-signer".to_string()])
            .unwrap()
            .self_signed(&cert_key)
            .unwrap();
        let keys = Arc::new(Keys {
            key,
            cert_der: cert.der().to_vec(),
            rng,
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let serving = keys.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let keys = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let keys = keys.clone();
                        async move { Ok::<_, Infallible>(answer(&keys, &request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        TokenServer {
            realm,
            cert_pem: cert.pem(),
            keys,
            task,
        }
    }

    /// A token that may push to `repo` (for the tests' own pushes).
    pub(crate) fn push_token(&self, repo: &str) -> String {
        format!("Bearer {}", sign(&self.keys, USER, repo, &["pull", "push"]))
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(
    keys: &Keys,
    request: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let query = request.uri().query().unwrap_or("");
    let params: Vec<(String, String)> = form_pairs(query);
    let scope = params
        .iter()
        .find(|(k, _)| k == "scope")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let user = match request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
    {
        None => None,
        Some(header) => {
            let decoded = header
                .strip_prefix("Basic ")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            if decoded != format!("{USER}:{PASSWORD}") {
                return hyper::Response::builder()
                    .status(401)
                    .body(Full::new(Bytes::from_static(
                        b"{\"details\":\"incorrect username or password\"}",
                    )))
                    .unwrap();
            }
            Some(USER)
        }
    };
    // scope = repository:NAME:actions
    let mut parts = scope.splitn(3, ':');
    let (_, name, _) = (parts.next(), parts.next().unwrap_or(""), parts.next());
    let actions: &[&str] = match user {
        Some(_) => &["pull", "push"],
        None if name.starts_with("public/") => &["pull"],
        None => &[],
    };
    let token = sign(keys, user.unwrap_or(""), name, actions);
    let body = json!({"token": token, "expires_in": 300}).to_string();
    hyper::Response::builder()
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn sign(keys: &Keys, subject: &str, repo: &str, actions: &[&str]) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = json!({
        "typ": "JWT",
        "alg": "ES256",
        "x5c": [base64::engine::general_purpose::STANDARD.encode(&keys.cert_der)],
    });
    let claims = json!({
        "iss": ISSUER,
        "sub": subject,
        "aud": SERVICE,
        "exp": now + 300,
        "nbf": now - 10,
        "iat": now,
        "jti": format!("{now}-{repo}"),
        "access": [{"type": "repository", "name": repo, "actions": actions}],
    });
    let signing_input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = keys.key.sign(&keys.rng, signing_input.as_bytes()).unwrap();
    format!("{signing_input}.{}", b64(signature.as_ref()))
}

fn form_pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}
