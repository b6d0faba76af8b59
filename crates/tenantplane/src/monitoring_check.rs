//! deploy/monitoring/ uses only metrics tenantplane exports: every `tenantplane_*`
//! name in the Grafana dashboard's and the alert rules' expressions is a sample name
//! of the controller's or the webhook's registry, as their text exposition says.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use prometheus_client::registry::Registry;
use serde_json::Value;

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/monitoring");

/// Sample names the registries can produce, from the `# TYPE` lines of the
/// exposition. A family without a label set is not exposed at all: each gets one.
fn exported_names() -> BTreeSet<String> {
    use tenantplane_engine::metrics::{
        ActionLabels, Metrics, ResultLabels, TenantLabels, VerbLabels,
    };
    let mut registry = Registry::default();
    let controller = Metrics::new(&mut registry);
    let tenant = TenantLabels { tenant: "t".into() };
    controller
        .reconciles
        .get_or_create(&ResultLabels {
            controller: "tenantcluster",
            result: "error",
        })
        .inc();
    controller
        .decisions
        .get_or_create(&ActionLabels { action: "Skip" })
        .inc();
    controller
        .host_writes
        .get_or_create(&VerbLabels { verb: "create" })
        .inc();
    controller.queue_depth.get_or_create(&tenant).set(1);
    controller.passes.get_or_create(&tenant).inc();
    let webhook = super::WebhookMetrics::new(&mut registry);
    let path = "/validate";
    webhook
        .requests
        .get_or_create(&super::RequestLabels {
            path,
            allowed: "false",
        })
        .inc();
    webhook
        .latency
        .get_or_create(&super::PathLabels { path })
        .observe(0.01);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// Every `tenantplane_*` identifier in a PromQL expression.
fn used_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tenantplane_") {
        // Not the tail of a longer identifier.
        let boundary = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        if boundary {
            names.push(tail[..len].to_owned());
        }
        rest = &tail[len..];
    }
    names
}

fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(format!("{MONITORING}/grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

fn alert_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(format!("{MONITORING}/alerts.yaml")).unwrap();
    let rules: Value = serde_saphyr::from_str(&text).unwrap();
    let groups = rules["groups"].as_array().unwrap();
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            assert!(
                r["alert"].is_string() && r["labels"]["severity"].is_string(),
                "{r}"
            );
            r["expr"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn every_metric_the_dashboard_and_alerts_use_is_exported() {
    let exported = exported_names();
    for (source, exprs) in [("dashboard", dashboard_exprs()), ("alerts", alert_exprs())] {
        assert!(exprs.len() >= 8, "{source} has {} expressions", exprs.len());
        for expr in exprs {
            let names = used_names(&expr);
            assert!(
                !names.is_empty(),
                "{source}: {expr} uses no tenantplane metric"
            );
            for name in names {
                assert!(
                    exported.contains(&name),
                    "{source}: {name} in `{expr}` is not exported; exported: {exported:?}"
                );
            }
        }
    }
}

#[test]
fn the_dashboard_and_alerts_cover_what_operators_watch() {
    let all: String = dashboard_exprs().join("\n") + &alert_exprs().join("\n");
    for needed in [
        "tenantplane_sync_latency_seconds_bucket",
        "tenantplane_decisions_total",
        "action=\"Skip\"",
        "tenantplane_sync_errors_total",
        "tenantplane_queue_depth",
        "tenantplane_webhook_latency_seconds_bucket",
        "tenantplane_webhook_requests_total{allowed=\"false\"}",
    ] {
        assert!(all.contains(needed), "nothing watches {needed}");
    }
}

#[test]
fn names_are_extracted_whole() {
    assert_eq!(
        used_names("sum(rate(tenantplane_a_total[5m])) / x_tenantplane_b + tenantplane_c"),
        ["tenantplane_a_total", "tenantplane_c"]
    );
    // A misspelt name is caught.
    assert!(!exported_names().contains("tenantplane_decision_total"));
}
