use super::*;
use crate::pods::stats::StatsPod;

const HOST: &str = r#"# HELP container_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="team-dev",pod="web-x-shop-x-dev"} 1.5 1767225660000
container_cpu_usage_seconds_total{container="side",namespace="team-dev",pod="web-x-shop-x-dev"} 0.5 1767225661000
container_cpu_usage_seconds_total{container="app",namespace="team-dev",pod="web-x-shop-x-prod"} 99 1767225660000
container_cpu_usage_seconds_total{container="app",namespace="team-dev",pod="billing"} 98 1767225660000
container_cpu_usage_seconds_total{container="app",namespace="kube-system",pod="web-x-shop-x-dev"} 97 1767225660000
# HELP container_memory_working_set_bytes [ALPHA] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="team-dev",pod="web-x-shop-x-dev"} 1000 1767225660000
container_memory_working_set_bytes{container="app",namespace="team-dev",pod="billing"} 7e+09 1767225660000
# HELP node_cpu_usage_seconds_total [ALPHA] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 123456.7 1767225660000
# HELP node_memory_working_set_bytes [ALPHA] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 7.5e+09 1767225660000
# HELP some_host_thing a figure of the host
some_host_thing{node="secret-rack-7"} 3
host_disk_total 5
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
"#;

fn ours() -> StatsPods {
    StatsPods::from([(
        "web-x-shop-x-dev".to_owned(),
        (
            Some("h-web".to_owned()),
            StatsPod {
                namespace: "shop".into(),
                name: "web".into(),
                uid: Some("t-web".into()),
            },
        ),
    )])
}

#[test]
fn only_the_tenants_samples_cross_renamed_and_the_node_is_their_sum() {
    let out = tenant_resource_metrics(HOST, "team-dev", &ours());
    let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        samples,
        [
            r#"container_cpu_usage_seconds_total{container="app",namespace="shop",pod="web"} 1.5 1767225660000"#,
            r#"container_cpu_usage_seconds_total{container="side",namespace="shop",pod="web"} 0.5 1767225661000"#,
            r#"container_memory_working_set_bytes{container="app",namespace="shop",pod="web"} 1000 1767225660000"#,
            "node_cpu_usage_seconds_total 2 1767225661000",
            "node_memory_working_set_bytes 1000 1767225660000",
            "scrape_error 0",
        ]
    );
    for leak in [
        "team-dev",
        "x-shop-x",
        "billing",
        "kube-system",
        "secret-rack",
        "host_disk",
        "123456",
    ] {
        assert!(!out.contains(leak), "{leak} in {out}");
    }
    // The node lines stay under their HELP and TYPE lines.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("node_cpu_usage_seconds_total"))
        .unwrap();
    assert_eq!(lines[at - 1], "# TYPE node_cpu_usage_seconds_total counter");
}

#[test]
fn with_no_pod_of_the_tenant_the_node_uses_nothing() {
    let out = tenant_resource_metrics(HOST, "team-dev", &StatsPods::new());
    let samples: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        samples,
        [
            "node_cpu_usage_seconds_total 0",
            "node_memory_working_set_bytes 0",
            "scrape_error 0"
        ]
    );
}

#[test]
fn label_values_are_unescaped_and_escaped_again() {
    // (No node line in the host's text: none is made up.)
    let line = r#"container_cpu_usage_seconds_total{container="a\"b\\c",namespace="team-dev",pod="web-x-shop-x-dev"} 1"#;
    let out = tenant_resource_metrics(line, "team-dev", &ours());
    assert_eq!(
        out.trim_end(),
        r#"container_cpu_usage_seconds_total{container="a\"b\\c",namespace="shop",pod="web"} 1"#
    );
}

#[test]
fn hostile_text_does_not_panic_and_crosses_nothing() {
    for text in [
        "",
        "{",
        "x{pod=\"web-x-shop-x-dev\"",
        "x{namespace=\"team-dev\",pod=\"web-x-shop-x-dev\"} notanumber",
        "x{namespace=\"team-dev\",pod=\"web-x-shop-x-dev\"} 1 2 3",
        "x{namespace=\"team-dev\",pod=\"web-x-shop-x-dev\\",
        "x{namespace=team-dev} 1",
        "é{namespace=\"é\"} 1",
    ] {
        let out = tenant_resource_metrics(text, "team-dev", &ours());
        assert!(!out.contains("x-shop-x"), "{text:?}: {out}");
    }
}
