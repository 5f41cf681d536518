//! Git images.

use std::fs;

use sandfleet_backend_local::{ImageSource, LimitOverrides};
use sandfleet_core::Backend;

use crate::common::{self, IMAGE, claim, sh, sh_ok, template};

#[tokio::test]
async fn a_git_image_is_a_clean_one_commit_repository() {
    let Some((mut fixture, _)) = common::namespaced().await else {
        return;
    };
    // The source's own repository is not part of the image.
    fs::create_dir(fixture.image_dir().join(".git")).unwrap();
    fs::write(fixture.image_dir().join(".git/HEAD"), "not a repository").unwrap();
    fixture.config.images.insert(
        IMAGE.into(),
        ImageSource {
            path: fixture.image_dir(),
            git: true,
            limits: LimitOverrides::default(),
        },
    );
    let backend = fixture.backend();
    let template = template(&backend, "git").await;
    let sandbox = claim(&backend, &template).await;

    let head = sh_ok(&backend, &sandbox, "git rev-parse HEAD").await;
    assert_eq!(head.trim().len(), 40, "{head}");
    assert_eq!(
        sh_ok(
            &backend,
            &sandbox,
            "git rev-list --count HEAD; git status --porcelain"
        )
        .await,
        "1\n"
    );
    assert_eq!(
        sh_ok(&backend, &sandbox, "git ls-files").await,
        "README.md\nsrc/app.py\n"
    );
    // ...and git sees changes, so the clean status above means something.
    sh_ok(&backend, &sandbox, "echo more >> README.md").await;
    assert_eq!(
        sh_ok(&backend, &sandbox, "git status --porcelain").await,
        " M README.md\n"
    );
    assert_eq!(
        sh(&backend, &sandbox, "git diff --quiet").await.exit_code,
        1
    );

    // A second backend (a later run) reuses the snapshot: same commit.
    let later = fixture.backend();
    let template = common::template(&later, "git").await;
    let again = claim(&later, &template).await;
    assert_eq!(sh_ok(&later, &again, "git rev-parse HEAD").await, head);
    let images = fs::read_dir(fixture.state_dir().join("images"))
        .unwrap()
        .count();
    assert_eq!(images, 1);
    backend.release(&sandbox).await.unwrap();
    later.release(&again).await.unwrap();
}
