//! Unit tests of the policy, calling its component through the test kit.

use sandfleet_testkit::fixtures::{claim, cluster, clusters};
use sandfleet_testkit::{CallErrorKind, TestPlugin};

#[test]
fn the_cluster_running_the_fewest_sandboxes_wins() {
    let policy = TestPlugin::load(sandfleet_guests::FEWEST_LIVE)
        .unwrap()
        .placement()
        .unwrap();
    let mut busy = cluster(10);
    busy.live = 7;
    let mut quiet = cluster(2);
    quiet.live = 1;
    assert_eq!(
        policy
            .place_blocking(&claim(0), &clusters(&[busy, quiet]))
            .unwrap(),
        1
    );
}

#[test]
fn full_and_unhealthy_clusters_are_skipped() {
    let policy = TestPlugin::load(sandfleet_guests::FEWEST_LIVE)
        .unwrap()
        .placement()
        .unwrap();
    let full = cluster(0);
    let mut sick = cluster(5);
    sick.healthy = false;
    let mut open = cluster(5);
    open.live = 3;
    assert_eq!(
        policy
            .place_blocking(&claim(0), &clusters(&[full, sick, open]))
            .unwrap(),
        2
    );

    let error = policy
        .place_blocking(&claim(0), &clusters(&[full, sick]))
        .unwrap_err();
    assert!(
        matches!(
            error.kind,
            CallErrorKind::Declined {
                kind: "unsatisfiable",
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn the_case_table_passes() {
    let cases = concat!(env!("CARGO_MANIFEST_DIR"), "/cases.toml");
    sandfleet_testkit::cases::assert_pass(sandfleet_guests::FEWEST_LIVE, cases);
}
