//! `sandfleet rehearse` at a smaller scale: 200 tasks over 100 images on two
//! devclusters, through the real engine and Kubernetes driver, holding the
//! rehearsal's invariants.

use serde_json::Value;

use crate::{sandfleet, stderr, stdout};

#[test]
fn a_rehearsal_over_two_devclusters_loses_nothing_repeats_nothing_and_keeps_to_its_plan() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let output = sandfleet(&[
        "rehearse",
        "--workload",
        "eval-500",
        "--scale",
        "0.2",
        "--clusters",
        "2",
        "--variant",
        "sliding",
        // Spread over both clusters (image-affinity packs the larger).
        "--placement",
        "capacity-weighted",
        "--task-time",
        "500ms",
        "--out",
        dir,
    ]);
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(output.status.success(), "{said}");
    let rehearsal: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("rehearsal.json")).unwrap()).unwrap();
    assert_eq!(rehearsal["tasks"], 200, "{rehearsal:#}");
    assert_eq!(rehearsal["images"], 100);
    let variant = &rehearsal["variants"][0];
    assert_eq!(variant["name"], "sliding");
    assert_eq!(variant["placement"], "capacity-weighted");
    assert_eq!(variant["ok"], 200, "{variant:#}");
    for invariant in ["lost", "ran_twice", "left_over"] {
        assert_eq!(variant[invariant], 0, "{invariant}: {variant:#}");
    }
    let clusters = variant["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2);
    for cluster in clusters {
        let (peak, bound) = (
            cluster["peak_pods"].as_u64(),
            cluster["peak_pods_bound"].as_u64(),
        );
        assert!(peak > Some(0) && peak <= bound, "{cluster:#}");
    }
    // Every task made a claim the clusters saw, and every image was pulled.
    let claims: u64 = clusters.iter().map(|c| c["claims"].as_u64().unwrap()).sum();
    assert_eq!(claims, 200, "{variant:#}");
    assert!(variant["pulls"].as_u64() >= Some(100), "{variant:#}");
    let ratio = variant["estimate_ratio"].as_f64().unwrap();
    assert!(ratio <= 1.2, "{ratio}: {variant:#}");
    assert!(variant["broken"].as_array().unwrap().is_empty());
    // The table says the same.
    let table = stdout(&output);
    assert!(
        table.contains("200 tasks over 100 images on 2 devcluster(s)"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("sliding ")), "{table}");
    // The run is there to read again: its fleet file, with relative paths.
    let fleet = std::fs::read_to_string(out.path().join("sliding/fleet.toml")).unwrap();
    assert!(
        fleet.contains("kubeconfig = \"fleet-a.kubeconfig\""),
        "{fleet}"
    );
    assert!(out.path().join("sliding/out/report.html").exists());
}

#[test]
fn an_unknown_workload_or_variant_is_refused_with_the_known_ones() {
    let output = sandfleet(&["rehearse", "--workload", "eval"]);
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(said.contains("eval-500, rl-50x40, mixed-10k"), "{said}");
    let out = tempfile::tempdir().unwrap();
    let output = sandfleet(&[
        "rehearse",
        "--workload",
        "rl-50x40",
        "--variant",
        "warm",
        "--out",
        out.path().to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(
        said.contains("rl-50x40 has no variant `warm`: one of fresh, recycled"),
        "{said}"
    );
}
