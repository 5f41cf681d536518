//! The Grafana dashboard (`deploy/grafana/sandfleet.json`) against the
//! daemon: it is what Grafana 10 and 11 import as it is, and every metric
//! its queries name is one a running daemon's `/metrics` exports, so
//! renaming a metric fails here instead of leaving a panel empty.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::{Served, image};

/// Every metric name in a PromQL expression: the identifiers that start
/// with `sandfleet_` (labels and functions never do).
fn metric_names(expr: &str) -> Vec<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sandfleet_") {
        let before = rest[..at].chars().next_back();
        let name: String = rest[at..].chars().take_while(|c| word(*c)).collect();
        if !before.is_some_and(word) {
            names.push(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    names
}

/// The series names an OpenMetrics exposition has: every sample's, and
/// every family's with the suffixes its type gives its samples (a family
/// with no sample yet still has its `# TYPE` line).
fn exported_names(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (family, kind) = declared.split_once(' ').unwrap();
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|suffix| format!("{family}{suffix}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_grafana_dashboard_uses_only_metrics_the_daemon_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/sandfleet.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    // What Grafana 10 and 11 need to import it as it is.
    for field in ["uid", "title"] {
        assert!(
            dashboard[field].as_str().is_some_and(|v| !v.is_empty()),
            "{field}"
        );
    }
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    let input = &dashboard["__inputs"][0];
    assert_eq!(
        (&input["name"], &input["type"], &input["pluginId"]),
        (
            &json!("DS_PROMETHEUS"),
            &json!("datasource"),
            &json!("prometheus")
        )
    );
    let requires = dashboard["__requires"].as_array().unwrap();
    for id in ["grafana", "prometheus", "timeseries"] {
        assert!(requires.iter().any(|r| r["id"] == id), "__requires {id}");
    }
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let source = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a data source variable");
    assert_eq!(source["query"], "prometheus");
    let reference = format!("${{{}}}", source["name"].as_str().unwrap());
    assert_eq!(source["current"]["value"], "${DS_PROMETHEUS}");

    // Every query: the panels' (rows may nest theirs) and the variables'.
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    let mut queries: Vec<(String, String)> = Vec::new();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            queries.push((title.clone(), expr.to_string()));
            assert_eq!(target["datasource"]["uid"], reference, "{title}");
        }
        if panel["type"] != "row" {
            assert_eq!(panel["datasource"]["uid"], reference, "{title}");
            assert!(!panel["targets"].as_array().unwrap().is_empty(), "{title}");
        }
    }
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap();
        queries.push((format!("${}", variable["name"]), query.to_string()));
    }
    assert!(queries.len() > 20, "{queries:?}");

    // A daemon that has served a lease and a command, so every family has
    // a series (one with no child yet writes no `# TYPE` line either).
    let served = Served::start("", "").await;
    let lease = served.acquire(image("calc")).await;
    served.exec(&lease.id, json!({"argv": ["true"]})).await;
    let (status, _) = served.get("/v1/leases/l-nope").await;
    assert_eq!(status, 404);
    let exposition = served.metrics().await;
    let exported = exported_names(&exposition);
    for family in [
        "sandfleet_execs_total",
        "sandfleet_exec_seconds_bucket",
        "sandfleet_pool_ready",
        "sandfleet_shared_heals_total",
        "sandfleet_http_request_seconds_count",
        "sandfleet_backend_calls_total",
    ] {
        assert!(exported.contains(family), "{family} in {exported:?}");
    }
    let mut used = BTreeSet::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{title}: no metric in {expr}");
        for name in names {
            assert!(
                exported.contains(&name),
                "panel `{title}` queries {name}, which /metrics does not export: {expr}"
            );
            used.insert(name);
        }
    }
    // What the dashboard is for, each shown somewhere.
    for needed in [
        "sandfleet_leases_acquired_total",
        "sandfleet_exec_seconds_bucket",
        "sandfleet_pool_ready",
        "sandfleet_pool_desired",
        "sandfleet_plugin_faults_total",
        "sandfleet_shared_heals_total",
        "sandfleet_http_request_seconds_count",
    ] {
        assert!(used.contains(needed), "the dashboard shows no {needed}");
    }
    served.release(&lease.id).await;
    served.stop().await;
}

#[test]
fn metric_names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.95, sum by (le) (rate(sandfleet_exec_seconds_bucket{instance=~"$instance"}[5m]))) / x_sandfleet_no"#
        ),
        ["sandfleet_exec_seconds_bucket"]
    );
    let names = exported_names(
        "# TYPE sandfleet_execs counter\n# TYPE sandfleet_x_seconds histogram\nsandfleet_live 3\n",
    );
    for name in [
        "sandfleet_execs_total",
        "sandfleet_x_seconds_bucket",
        "sandfleet_x_seconds_count",
        "sandfleet_live",
    ] {
        assert!(names.contains(name), "{name}");
    }
    assert!(!names.contains("sandfleet_execs"));
}
