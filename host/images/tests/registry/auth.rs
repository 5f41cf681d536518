//! Credentials: htpasswd basic auth from a Docker config file, and a
//! token service as Docker Hub's (anonymous for public repositories).

use sandfleet_images::spec::Compression;
use sandfleet_images::{CredentialSource, Error, PullOptions};

use crate::support::image::{Layer, Tar, build, push};
use crate::support::registry::{Auth, Registry, docker_config};
use crate::support::token::{self, TokenServer};
use crate::support::*;

fn with_files(files: Vec<std::path::PathBuf>) -> PullOptions {
    PullOptions {
        credentials: CredentialSource::Files(files),
        platform: "linux/amd64".parse().unwrap(),
        ..options()
    }
}

fn small_image() -> crate::support::image::Built {
    build(
        &[Layer::new(
            Tar::new().file("hello", b"world").finish(),
            Compression::Gzip,
        )],
        "amd64",
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_uses_the_docker_config_and_names_what_was_refused() {
    let registry = Registry::start(Auth::Basic {
        user: "bob".to_string(),
        password: "s3cret".to_string(),
    })
    .await;
    push(&registry, "team/app", "1", &small_image()).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let reference = reference(&registry.host, "team/app:1");
    let host = registry.host.clone();

    let right = docker_config(dir.path(), &host, "bob", "s3cret");
    let image = store
        .pull(&reference, &with_files(vec![right]), &quiet)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(image.layer_dirs()[0].join("hello")).unwrap(),
        "world"
    );

    let other = tempfile::tempdir().unwrap();
    let store = crate::support::store(other.path());
    let wrong = docker_config(dir.path(), &host, "bob", "guess");
    let error = pull_fails(
        &store,
        &reference,
        &with_files(vec![wrong]),
        &[&host, "401", "\"bob\""],
    )
    .await;
    assert!(
        matches!(error, Error::Unauthorized { status: 401, .. }),
        "{error}"
    );
    pull_fails(
        &store,
        &reference,
        &options(),
        &[&host, "401", "no credentials"],
    )
    .await;

    let helper = dir.path().join("helper.json");
    std::fs::write(
        &helper,
        format!(r#"{{"auths":{{}},"credHelpers":{{"{host}":"pass"}}}}"#),
    )
    .unwrap();
    let error = pull_fails(
        &store,
        &reference,
        &with_files(vec![helper]),
        &["\"pass\"", "not supported", "REGISTRY_AUTH_FILE"],
    )
    .await;
    assert!(matches!(error, Error::CredentialHelper { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_pulls_public_images_anonymously_and_private_ones_with_credentials() {
    let tokens = TokenServer::start().await;
    let mut registry = Registry::start(Auth::Token {
        realm: tokens.realm.clone(),
        cert_pem: tokens.cert_pem.clone(),
    })
    .await;
    let image = small_image();
    registry.set_push_auth(tokens.push_token("public/app"));
    push(&registry, "public/app", "1", &image).await;
    registry.set_push_auth(tokens.push_token("private/app"));
    push(&registry, "private/app", "1", &image).await;

    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let host = registry.host.clone();
    store
        .pull(&reference(&host, "public/app:1"), &options(), &quiet)
        .await
        .unwrap();

    let private = reference(&host, "private/app:1");
    let error = pull_fails(
        &store,
        &private,
        &options(),
        &[&host, "401", "anonymous token"],
    )
    .await;
    assert!(matches!(error, Error::Unauthorized { .. }));
    let wrong = docker_config(dir.path(), &host, token::USER, "guess");
    pull_fails(
        &store,
        &private,
        &with_files(vec![wrong]),
        &["refused user \"alice\""],
    )
    .await;
    let right = docker_config(dir.path(), &host, token::USER, token::PASSWORD);
    let pulled = store
        .pull(&private, &with_files(vec![right]), &quiet)
        .await
        .unwrap();
    assert_eq!(pulled.layers.len(), 1);
}
