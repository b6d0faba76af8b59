//! `tenantplane dns` as a real process against a real host API server, queried
//! with a real DNS client (`dig`, Debian `bind9-dnsutils`).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::transform::{TenantTarget, to_host};

const HOST_NS: &str = "team";

/// A `tenantplane dns` process, killed when dropped.
struct DnsServer {
    child: Child,
    port: u16,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 right now.
fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn start_dns(kubeconfig: &str, tenant: &str, domain: &str, upstream: &str) -> DnsServer {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "dns",
            "--kubeconfig",
            kubeconfig,
            "--tenant-cluster",
            &format!("{HOST_NS}/{tenant}"),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--cluster-domain",
            domain,
            "--upstream",
            upstream,
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("start tenantplane dns");
    DnsServer { child, port }
}

/// What `dig` saw: the status and the answer section's data (last fields).
#[derive(Debug, PartialEq)]
struct DigAnswer {
    status: String,
    data: Vec<String>,
}

fn dig(port: u16, name: &str, qtype: &str, tcp: bool) -> Option<DigAnswer> {
    let mut args = vec![
        "@127.0.0.1".to_owned(),
        "-p".into(),
        port.to_string(),
        name.into(),
        qtype.into(),
        "+time=1".into(),
        "+tries=1".into(),
        "+noall".into(),
        "+comments".into(),
        "+answer".into(),
    ];
    if tcp {
        args.push("+tcp".into());
    }
    let out = Command::new("dig").args(&args).output().expect("run dig");
    let text = String::from_utf8_lossy(&out.stdout);
    let status = text
        .split("status: ")
        .nth(1)?
        .split(',')
        .next()?
        .trim()
        .to_owned();
    let mut data: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .map(|l| {
            // name ttl class type rdata...
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.get(4..).unwrap_or_default().join(" ")
        })
        .collect();
    data.sort();
    Some(DigAnswer { status, data })
}

/// Polls `dig` until it sees `want` (the server is watch-fed).
fn eventually_dig(port: u16, name: &str, qtype: &str, tcp: bool, want: &DigAnswer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = dig(port, name, qtype, tcp);
        if got.as_ref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} {qtype}: want {want:?}, last answer {got:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn answer(status: &str, data: &[&str]) -> DigAnswer {
    let mut data: Vec<String> = data.iter().map(|s| (*s).to_owned()).collect();
    data.sort();
    DigAnswer {
        status: status.into(),
        data,
    }
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind))
}

/// Creates the host copy of a tenant object exactly as the engine stamps it and
/// returns it as the API server stored it.
async fn host_copy(client: &Client, tenant: &str, kind: &str, object: Value) -> Value {
    let target = TenantTarget::new(tenant, HOST_NS).unwrap();
    let (_, host) = to_host(
        &target,
        &GroupKind::new("", kind),
        Scope::Namespaced,
        &object,
    )
    .unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), HOST_NS, &resource(kind));
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(host).unwrap(),
        )
        .await
        .unwrap();
    serde_json::to_value(created).unwrap()
}

fn service(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// A host Pod of `tenant`, made Ready with `ip` (playing the kubelet).
async fn ready_pod(client: &Client, tenant: &str, name: &str, spec: Value, ip: &str) -> String {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec});
    let host = host_copy(client, tenant, "Pod", pod).await;
    let host_name = host["metadata"]["name"].as_str().unwrap().to_owned();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), HOST_NS, &resource("Pod"));
    let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}], "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(&host_name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    host_name
}

fn cluster_ip(service: &Value) -> String {
    service["spec"]["clusterIP"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn dig_gets_the_tenants_records_and_never_another_tenants() {
    let server = crate::servers::host().await;
    let client = server.client().await.unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": HOST_NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let kubeconfig = server.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().unwrap();

    // Tenant b first: by the time a's server answers a's last Service, it has seen
    // b's (one watch, in resourceVersion order).
    let b_web = host_copy(
        &client,
        "b",
        "Service",
        service(
            "default",
            "web",
            json!({"ports": [{"name": "http", "port": 80}]}),
        ),
    )
    .await;
    let b_only = host_copy(
        &client,
        "b",
        "Service",
        service("default", "only-b", json!({"ports": [{"port": 80}]})),
    )
    .await;
    let b_pod = ready_pod(
        &client,
        "b",
        "intruder",
        json!({"hostname": "db-0", "subdomain": "db"}),
        "10.244.9.9",
    )
    .await;

    let a_web = host_copy(
        &client,
        "a",
        "Service",
        service(
            "default",
            "web",
            json!({"ports": [{"name": "http", "port": 80}]}),
        ),
    )
    .await;
    host_copy(
        &client,
        "a",
        "Service",
        service(
            "default",
            "ext",
            json!({"type": "ExternalName", "externalName": "db.example.org"}),
        ),
    )
    .await;
    let a_db = host_copy(
        &client,
        "a",
        "Service",
        service(
            "default",
            "db",
            json!({"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}),
        ),
    )
    .await;
    let a_pod = ready_pod(
        &client,
        "a",
        "db-0",
        json!({"hostname": "db-0", "subdomain": "db"}),
        "10.244.0.5",
    )
    .await;
    ready_pod(
        &client,
        "a",
        "solo",
        json!({"hostname": "solo", "subdomain": "db"}),
        "10.244.0.6",
    )
    .await;
    // The host Endpoints of a's headless Service, as the endpoints controller would
    // write them, but with b's Pod in it too (a host selector that selected too much).
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": a_db["metadata"]["name"], "namespace": HOST_NS},
        "subsets": [{"addresses": [
            {"ip": "10.244.0.5", "targetRef": {"kind": "Pod", "name": a_pod, "namespace": HOST_NS}},
            {"ip": "10.244.9.9", "targetRef": {"kind": "Pod", "name": b_pod, "namespace": HOST_NS}}],
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}]});
    Api::<DynamicObject>::namespaced_with(client.clone(), HOST_NS, &resource("Endpoints"))
        .create(
            &PostParams::default(),
            &serde_json::from_value(endpoints).unwrap(),
        )
        .await
        .unwrap();

    // b's server serves another domain and is a's upstream: a name outside a's
    // domain goes there, so forwarding is checked end to end.
    let b = start_dns(kubeconfig, "b", "b.test", "127.0.0.1:9");
    let a = start_dns(
        kubeconfig,
        "a",
        "cluster.local",
        &format!("127.0.0.1:{}", b.port),
    );

    let d = ".default.svc.cluster.local";
    eventually_dig(
        a.port,
        &format!("web{d}"),
        "A",
        false,
        &answer("NOERROR", &[&cluster_ip(&a_web)]),
    );
    // The same over TCP.
    eventually_dig(
        a.port,
        &format!("web{d}"),
        "A",
        true,
        &answer("NOERROR", &[&cluster_ip(&a_web)]),
    );
    eventually_dig(
        a.port,
        &format!("_http._tcp.web{d}"),
        "SRV",
        false,
        &answer("NOERROR", &[&format!("0 100 80 web{d}.")]),
    );
    eventually_dig(
        a.port,
        &format!("ext{d}"),
        "A",
        false,
        &answer("NOERROR", &["db.example.org."]),
    );
    // Headless: only a's ready endpoint, never b's Pod the host Endpoints listed.
    eventually_dig(
        a.port,
        &format!("db{d}"),
        "A",
        false,
        &answer("NOERROR", &["10.244.0.5"]),
    );
    eventually_dig(
        a.port,
        &format!("_pg._tcp.db{d}"),
        "SRV",
        false,
        &answer("NOERROR", &[&format!("0 100 5432 db-0.db{d}.")]),
    );
    // Pod hostname/subdomain, with or without an Endpoints address.
    eventually_dig(
        a.port,
        &format!("db-0.db{d}"),
        "A",
        false,
        &answer("NOERROR", &["10.244.0.5"]),
    );
    eventually_dig(
        a.port,
        &format!("solo.db{d}"),
        "A",
        false,
        &answer("NOERROR", &["10.244.0.6"]),
    );
    eventually_dig(
        a.port,
        &format!("nope{d}"),
        "A",
        false,
        &answer("NXDOMAIN", &[]),
    );

    // Tenant b's names: never answered by a's server, though b's server has them.
    eventually_dig(
        b.port,
        "only-b.default.svc.b.test",
        "A",
        false,
        &answer("NOERROR", &[&cluster_ip(&b_only)]),
    );
    eventually_dig(
        a.port,
        &format!("only-b{d}"),
        "A",
        false,
        &answer("NXDOMAIN", &[]),
    );
    assert_ne!(cluster_ip(&a_web), cluster_ip(&b_web));
    // Forwarded: a's server relays b's answer for a name outside its domain.
    eventually_dig(
        a.port,
        "web.default.svc.b.test",
        "A",
        false,
        &answer("NOERROR", &[&cluster_ip(&b_web)]),
    );

    // Watch-fed: a deleted Service disappears.
    Api::<DynamicObject>::namespaced_with(client.clone(), HOST_NS, &resource("Service"))
        .delete(
            a_web["metadata"]["name"].as_str().unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
    eventually_dig(
        a.port,
        &format!("web{d}"),
        "A",
        false,
        &answer("NXDOMAIN", &[]),
    );
}

#[test]
fn a_bad_tenant_cluster_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "dns",
            "--tenant-cluster",
            "no-slash",
            "--upstream",
            "127.0.0.1:53",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not NAMESPACE/NAME"), "{err}");
}
