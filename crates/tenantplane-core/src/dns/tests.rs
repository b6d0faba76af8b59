//! The index admits only its tenant's objects, and answers follow the schema.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::{Value, json};

use super::*;

const D: &str = "cluster.local";

fn index() -> TenantIndex {
    TenantIndex::new(DnsTenant {
        host_namespace: "host".into(),
        tenant: "a".into(),
    })
}

fn meta(tenant: &str, ns: &str, name: &str, host_name: &str) -> Value {
    json!({
        "name": host_name,
        "namespace": "host",
        "labels": {"app.kubernetes.io/managed-by": "tenantplane", "tenantplane.io/tenant": tenant},
        "annotations": {"tenantplane.io/virtual-namespace": ns, "tenantplane.io/virtual-name": name},
    })
}

fn service(tenant: &str, ns: &str, name: &str, host_name: &str, spec: Value) -> Value {
    json!({"metadata": meta(tenant, ns, name, host_name), "spec": spec})
}

fn pod(host_name: &str, ns: &str, hostname: Option<&str>, subdomain: &str, ip: &str) -> Value {
    let mut p = json!({
        "metadata": meta("a", ns, host_name, host_name),
        "spec": {"subdomain": subdomain},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    });
    if let Some(h) = hostname {
        p["spec"]["hostname"] = json!(h);
    }
    p
}

fn a(ip: [u8; 4]) -> Record {
    Record::A(Ipv4Addr::from(ip))
}

fn ask(index: &TenantIndex, name: &str, qtype: QueryType) -> Answer {
    answer(index, name, qtype, D)
}

#[test]
fn cluster_ip_service_answers_a_aaaa_and_srv() {
    let mut idx = index();
    idx.apply_service(&service(
        "a",
        "default",
        "web",
        "web-x-default-x-a",
        json!({"clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9", "fd00::9"],
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"port": 81}]}),
    ));
    let name = "web.default.svc.cluster.local.";
    assert_eq!(
        ask(&idx, name, QueryType::A),
        Answer::Records(vec![a([10, 0, 0, 9])])
    );
    assert_eq!(
        ask(&idx, name, QueryType::Aaaa),
        Answer::Records(vec![Record::Aaaa("fd00::9".parse::<Ipv6Addr>().unwrap())])
    );
    let srv = Record::Srv {
        priority: 0,
        weight: 100,
        port: 80,
        target: "web.default.svc.cluster.local".into(),
    };
    assert_eq!(
        ask(
            &idx,
            "_http._tcp.web.default.svc.cluster.local",
            QueryType::Srv
        ),
        Answer::Records(vec![srv.clone()])
    );
    // Only named ports have SRV records; the protocol must match.
    assert_eq!(ask(&idx, name, QueryType::Srv), Answer::Records(vec![srv]));
    assert_eq!(
        ask(
            &idx,
            "_http._udp.web.default.svc.cluster.local",
            QueryType::Srv
        ),
        Answer::NxDomain
    );
    // The host name is not a tenant name.
    assert_eq!(
        ask(
            &idx,
            "web-x-default-x-a.host.svc.cluster.local",
            QueryType::A
        ),
        Answer::NxDomain
    );
}

#[test]
fn another_tenants_objects_never_enter_the_index() {
    let mut idx = index();
    let spec = json!({"clusterIP": "10.0.0.7"});
    idx.apply_service(&service(
        "b",
        "default",
        "web",
        "web-x-default-x-b",
        spec.clone(),
    ));
    let mut unmanaged = service("a", "default", "db", "db", spec.clone());
    unmanaged["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("someone");
    idx.apply_service(&unmanaged);
    let mut elsewhere = service("a", "default", "api", "api-x-default-x-a", spec.clone());
    elsewhere["metadata"]["namespace"] = json!("other-host");
    idx.apply_service(&elsewhere);
    assert_eq!(idx.service_count(), 0);
    for name in ["web", "db", "api"] {
        let q = format!("{name}.default.svc.cluster.local");
        assert_eq!(ask(&idx, &q, QueryType::A), Answer::NxDomain, "{q}");
    }
    // A Service that moves to another tenant leaves the index.
    idx.apply_service(&service("a", "default", "web", "w", spec.clone()));
    assert_eq!(idx.service_count(), 1);
    idx.apply_service(&service("b", "default", "web", "w", spec));
    assert_eq!(idx.service_count(), 0);
}

#[test]
fn tenant_identity_comes_from_annotations_not_the_host_name() {
    let mut idx = index();
    // A host name that looks like `web.default` of tenant a but is annotated otherwise.
    idx.apply_service(&service(
        "a",
        "other",
        "api",
        "web-x-default-x-a",
        json!({"clusterIP": "10.0.0.3"}),
    ));
    assert_eq!(
        ask(&idx, "web.default.svc.cluster.local", QueryType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&idx, "api.other.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 0, 0, 3])])
    );
    let mut unannotated = service("a", "x", "y", "z", json!({"clusterIP": "10.0.0.4"}));
    unannotated["metadata"]["annotations"] = json!({});
    idx.apply_service(&unannotated);
    assert_eq!(idx.service_count(), 1);
}

fn headless_index() -> TenantIndex {
    let mut idx = index();
    idx.apply_service(&service(
        "a",
        "default",
        "db",
        "db-host",
        json!({"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}),
    ));
    idx.apply_pod(&pod("db-0-host", "default", Some("db-0"), "db", "10.1.0.1"));
    idx.apply_pod(&pod("db-1-host", "default", None, "", "10.1.0.2"));
    let mut other_tenant = pod("b-pod", "default", None, "", "10.9.9.9");
    other_tenant["metadata"]["labels"]["tenantplane.io/tenant"] = json!("b");
    idx.apply_pod(&other_tenant);
    idx.apply_endpoints(&json!({
        "metadata": {"name": "db-host", "namespace": "host"},
        "subsets": [{
            "addresses": [
                {"ip": "10.1.0.1", "targetRef": {"kind": "Pod", "name": "db-0-host"}},
                {"ip": "10.1.0.2", "targetRef": {"kind": "Pod", "name": "db-1-host"}},
                {"ip": "10.9.9.9", "targetRef": {"kind": "Pod", "name": "b-pod"}},
            ],
            "notReadyAddresses": [{"ip": "10.1.0.3"}],
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        }],
    }));
    idx
}

#[test]
fn headless_service_answers_ready_tenant_endpoints_only() {
    let idx = headless_index();
    assert_eq!(
        ask(&idx, "db.default.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 1, 0, 1]), a([10, 1, 0, 2])])
    );
    let srv = |port, target: &str| Record::Srv {
        priority: 0,
        weight: 50,
        port,
        target: target.into(),
    };
    assert_eq!(
        ask(
            &idx,
            "_pg._tcp.db.default.svc.cluster.local",
            QueryType::Srv
        ),
        Answer::Records(vec![
            srv(5432, "10-1-0-2.db.default.svc.cluster.local"),
            srv(5432, "db-0.db.default.svc.cluster.local"),
        ])
    );
    assert_eq!(
        ask(&idx, "db-0.db.default.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 1, 0, 1])])
    );
    assert_eq!(
        ask(&idx, "10-1-0-2.db.default.svc.cluster.local", QueryType::A),
        Answer::Records(vec![a([10, 1, 0, 2])])
    );
    assert_eq!(
        ask(&idx, "10-9-9-9.db.default.svc.cluster.local", QueryType::A),
        Answer::NxDomain
    );
}

#[test]
fn pod_hostname_records_need_a_headless_service_of_that_name() {
    let mut idx = index();
    idx.apply_pod(&pod("p", "default", Some("h"), "sub", "10.2.0.1"));
    let q = "h.sub.default.svc.cluster.local";
    assert_eq!(ask(&idx, q, QueryType::A), Answer::NxDomain);
    idx.apply_service(&service(
        "a",
        "default",
        "sub",
        "s",
        json!({"clusterIP": "None"}),
    ));
    assert_eq!(
        ask(&idx, q, QueryType::A),
        Answer::Records(vec![a([10, 2, 0, 1])])
    );
    idx.delete_pod("p");
    assert_eq!(ask(&idx, q, QueryType::A), Answer::NxDomain);
}

#[test]
fn external_name_is_a_cname() {
    let mut idx = index();
    idx.apply_service(&service(
        "a",
        "default",
        "ext",
        "e",
        json!({"type": "ExternalName", "externalName": "Example.COM."}),
    ));
    let want = Answer::Records(vec![Record::Cname("example.com".into())]);
    assert_eq!(
        ask(&idx, "ext.default.svc.cluster.local", QueryType::A),
        want
    );
    assert_eq!(
        ask(&idx, "ext.default.svc.cluster.local", QueryType::Cname),
        want
    );
}

#[test]
fn unknown_forward_and_parent_names() {
    let mut idx = index();
    idx.apply_service(&service(
        "a",
        "default",
        "web",
        "w",
        json!({"clusterIP": "10.0.0.1"}),
    ));
    assert_eq!(ask(&idx, "example.com.", QueryType::A), Answer::Forward);
    assert_eq!(
        ask(&idx, "nope.default.svc.cluster.local", QueryType::A),
        Answer::NxDomain
    );
    assert_eq!(
        ask(&idx, "default.svc.cluster.local", QueryType::A),
        Answer::Records(vec![])
    );
    assert_eq!(
        ask(&idx, "web.default.svc.cluster.local", QueryType::Other),
        Answer::Records(vec![])
    );
    idx.delete_service("w");
    assert_eq!(
        ask(&idx, "web.default.svc.cluster.local", QueryType::A),
        Answer::NxDomain
    );
}
