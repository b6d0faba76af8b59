//! Services on both sides, against two real API servers: the tenant Service carries
//! its host copy's ClusterIP and node ports, the host's load balancer status flows
//! back, and a tenant API server serving another service CIDR is a condition and a
//! Skip, not a loop.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::harness::*;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tenantplane_testenv::{ApiServerOptions, PooledServer, TestEnv};

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
                        "annotations": {"team": "shop"}},
           "spec": spec})
}

fn ip(o: &DynamicObject) -> Option<String> {
    o.data["spec"]["clusterIP"].as_str().map(str::to_owned)
}

/// Waits until tenant Service `name` and its host copy exist with one ClusterIP,
/// and returns both.
async fn same_address(h: &Harness, name: &str) -> (DynamicObject, DynamicObject) {
    let tenant_api = h.tenant_api("v1", "Service", "default");
    let host_api = h.host_api("v1", "Service");
    let host_name = predicted(name, "default", "dev");
    eventually(
        &format!("Service {name} with its host copy's ClusterIP"),
        || {
            let (tenant_api, host_api, host_name) =
                (tenant_api.clone(), host_api.clone(), host_name.clone());
            async move {
                let tenant = tenant_api.get_opt(name).await.unwrap()?;
                let host = host_api.get_opt(&host_name).await.unwrap()?;
                (ip(&tenant).is_some() && ip(&tenant) == ip(&host)).then_some((tenant, host))
            }
        },
    )
    .await
}

#[tokio::test]
async fn a_service_has_one_cluster_ip_and_its_node_ports_on_both_sides_and_settles() {
    let h = Harness::start().await;
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    let tenant_api = h.tenant_api("v1", "Service", "default");
    let host_api = h.host_api("v1", "Service");
    // The address the tenant API server gave it, from the create's own answer: a
    // read afterwards could already see the re-created Service (or none at all).
    let created = create(
        &h.tenant,
        service(
            "web",
            json!({"type": "NodePort", "selector": {"app": "web"},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
        ),
    )
    .await;
    let first_ip = ip(&created).unwrap();

    let (tenant, host) = same_address(&h, "web").await;
    assert_ne!(
        ip(&tenant),
        Some(first_ip),
        "the tenant Service was re-created with the host's address"
    );
    assert_eq!(
        tenant.data["spec"]["clusterIPs"],
        host.data["spec"]["clusterIPs"]
    );
    assert_eq!(
        tenant.data["spec"]["ports"][0]["nodePort"], host.data["spec"]["ports"][0]["nodePort"],
        "the host's node port"
    );
    // Everything else is the tenant's, as it was.
    assert_eq!(tenant.metadata.labels.as_ref().unwrap()["app"], "web");
    assert_eq!(
        tenant.metadata.annotations.as_ref().unwrap()["team"],
        "shop"
    );
    assert_eq!(tenant.data["spec"]["selector"], json!({"app": "web"}));
    assert_eq!(tenant.data["spec"]["ports"][0]["targetPort"], 8080);
    // The re-create's deletion never took the host copy: it is the one first made.
    let host_uid = host.metadata.uid.clone().unwrap();
    let decisions = eventually("an Update decision for the re-create", || async {
        let decisions = h.decisions("dev").await;
        decisions
            .iter()
            .any(|d| {
                d["action"] == "Update"
                    && d["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("re-created the tenant Service"))
            })
            .then_some(decisions)
    })
    .await;
    assert!(
        !decisions.iter().any(|d| d["action"] == "Delete"),
        "no host copy was deleted: {decisions:#?}"
    );

    // Settled: full passes write neither Service on either side.
    controller.wait_passes("dev", 1).await;
    let host_before = h.host_server.request_counts().await.unwrap();
    let tenant_before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 2).await;
    let host_writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&host_before);
    let tenant_writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&tenant_before);
    assert_eq!(
        host_writes.writes(Some("services")),
        0,
        "host: {host_writes:?}"
    );
    assert_eq!(
        tenant_writes.writes(Some("services")),
        0,
        "tenant: {tenant_writes:?}"
    );
    let host_now = host_api
        .get(&predicted("web", "default", "dev"))
        .await
        .unwrap();
    assert_eq!(host_now.metadata.uid.as_deref(), Some(host_uid.as_str()));
    assert_eq!(ip(&tenant_api.get("web").await.unwrap()), ip(&host_now));

    // Headless and ExternalName Services keep having no address, on both sides.
    create(
        &h.tenant,
        service(
            "peers",
            json!({"clusterIP": "None", "selector": {"app": "peers"},
        "ports": [{"port": 5432}]}),
        ),
    )
    .await;
    create(
        &h.tenant,
        service(
            "ext",
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
        ),
    )
    .await;
    for (name, expected) in [("peers", Some("None")), ("ext", None)] {
        let host_name = predicted(name, "default", "dev");
        let host = eventually(&format!("host copy of {name}"), || {
            let (host_api, host_name) = (host_api.clone(), host_name.clone());
            async move { host_api.get_opt(&host_name).await.unwrap() }
        })
        .await;
        assert_eq!(ip(&host).as_deref(), expected, "{name} on the host");
        assert_eq!(
            ip(&tenant_api.get(name).await.unwrap()).as_deref(),
            expected,
            "{name} in the tenant"
        );
    }
    controller.stop().await;
}

#[tokio::test]
async fn load_balancer_status_flows_back_to_the_tenant_service() {
    let h = Harness::start_on_shared_host().await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(
        &h.tenant,
        service(
            "lb",
            json!({"type": "LoadBalancer", "selector": {"app": "lb"},
        "ports": [{"port": 443}]}),
        ),
    )
    .await;
    let (_, host) = same_address(&h, "lb").await;
    // Play the host's cloud controller.
    h.host_api("v1", "Service")
        .patch_status(
            host.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}})),
        )
        .await
        .unwrap();
    let tenant_api = h.tenant_api("v1", "Service", "default");
    eventually("the load balancer address in the tenant", || {
        let tenant_api = tenant_api.clone();
        async move {
            let tenant = tenant_api.get_opt("lb").await.unwrap()?;
            (tenant.data["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.10")
                .then_some(())
        }
    })
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn a_tenant_api_server_on_another_service_cidr_is_a_condition_and_a_skip_not_a_loop() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let mut options = ApiServerOptions::new("tenant");
    options.crds = tenant_crds();
    // The later flag wins: the tenant serves a range the host's addresses are not in.
    options
        .extra_args
        .push("--service-cluster-ip-range=10.200.0.0/16".into());
    // Both at once, as `Harness::start` does.
    let (host_server, tenant_server) =
        tokio::join!(pooled_host(), env.start_apiserver_with(options));
    let tenant_server = PooledServer::own(tenant_server.expect("tenant"));
    let h = Harness::set_up_with(env, host_server, tenant_server).await;
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    create(
        &h.tenant,
        service(
            "web",
            json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
        ),
    )
    .await;

    let message = h
        .wait_condition(
            "dev",
            "ServiceCIDR",
            "False",
            "ServiceCIDRMismatch",
            Duration::from_secs(45),
        )
        .await;
    let host = h
        .host_api("v1", "Service")
        .get(&predicted("web", "default", "dev"))
        .await
        .unwrap();
    let host_ip = ip(&host).unwrap();
    assert!(
        message.contains(&host_ip) && message.contains("10.200.0.0/16"),
        "{message}"
    );
    let skip = eventually("a Skip naming the refused address", || async {
        h.decisions("dev").await.into_iter().find(|d| {
            d["action"] == "Skip" && d["reason"].as_str().is_some_and(|r| r.contains(&host_ip))
        })
    })
    .await;
    assert_eq!(skip["tenant"]["name"], "web", "{skip}");
    // The tenant keeps its Service (with an address of its own), and the host its copy.
    let tenant_api = h.tenant_api("v1", "Service", "default");
    let tenant = tenant_api.get("web").await.unwrap();
    assert!(
        ip(&tenant).unwrap().starts_with("10.200."),
        "{:?}",
        ip(&tenant)
    );

    // Not a loop: full passes write no Service on either side.
    controller.wait_passes("dev", 1).await;
    let host_before = h.host_server.request_counts().await.unwrap();
    let tenant_before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 2).await;
    let host_writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&host_before);
    let tenant_writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&tenant_before);
    assert_eq!(
        host_writes.writes(Some("services")),
        0,
        "host: {host_writes:?}"
    );
    assert_eq!(
        tenant_writes.writes(Some("services")),
        0,
        "tenant: {tenant_writes:?}"
    );
    assert_eq!(
        tenant_api.get("web").await.unwrap().metadata.uid,
        tenant.metadata.uid,
        "not re-created again"
    );
    controller.stop().await;
}

/// Plays the kubelet on the host: binds the host Pod and reports it Running and Ready.
async fn kubelet_runs(h: &Harness, name: &str, ip: &str) {
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}});
    let request = http::Request::post(format!("/api/v1/namespaces/{HOST_NS}/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    h.host
        .request_text(request)
        .await
        .expect("bind the host Pod");
    h.host_api("v1", "Pod")
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Running", "hostIP": "10.1.0.4", "podIP": ip,
                "podIPs": [{"ip": ip}], "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn endpoints_flow_from_the_host_with_tenant_pod_names_and_pods_get_the_service_env() {
    let h = Harness::start().await;
    // The host's endpoints controller fills the host copy's Endpoints; the tenant
    // runs none (as provisioned control planes do not).
    let _endpoints_controller = h
        .env
        .start_controller_manager_with(&h.host_server, "endpoint")
        .expect("kube-controller-manager");
    create(
        &h.host,
        policy("net", &[("v1", "Service"), ("v1", "Pod")], "2s"),
    )
    .await;
    create_namespace(&h.tenant, "shop").await;
    let controller = Controller::start(&h.host).await;
    h.create_dev_with("fast", "net").await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})).await;
    let host_services = h.host_api("v1", "Service");
    let tenant_services = h.tenant_api("v1", "Service", "shop");
    let service_ip = eventually("the Service's host address in the tenant", || {
        let (host_services, tenant_services) = (host_services.clone(), tenant_services.clone());
        async move {
            let host = host_services
                .get_opt(&predicted("web", "shop", "dev"))
                .await
                .unwrap()?;
            // Absent for a moment while the engine re-creates it with the host address.
            let tenant = tenant_services.get_opt("web").await.unwrap()?;
            (ip(&host).is_some() && ip(&host) == ip(&tenant)).then(|| ip(&host).unwrap())
        }
    })
    .await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "WEB_SERVICE_PORT", "value": "mine"}]}]}})).await;
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "no-links", "namespace": "shop"},
        "spec": {"enableServiceLinks": false, "containers": [{"name": "app", "image": "nginx"}]}}),
    )
    .await;
    let host_pod = predicted("web-1", "shop", "dev");
    let host_pods = h.host_api("v1", "Pod");
    let created = eventually("the host Pod", || {
        let (host_pods, host_pod) = (host_pods.clone(), host_pod.clone());
        async move { host_pods.get_opt(&host_pod).await.unwrap() }
    })
    .await;
    // The tenant's service variables, with the tenant Service's (= host) address;
    // the container's own variable wins; the host kubelet injects none of its own.
    let env = created.data["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let value = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        value("WEB_SERVICE_HOST"),
        Some(json!(service_ip)),
        "{env:?}"
    );
    assert_eq!(
        value("WEB_PORT_80_TCP"),
        Some(json!(format!("tcp://{service_ip}:80")))
    );
    assert_eq!(value("WEB_SERVICE_PORT"), Some(json!("mine")));
    assert_eq!(
        env.iter()
            .filter(|e| e["name"] == "WEB_SERVICE_PORT")
            .count(),
        1
    );
    assert_eq!(created.data["spec"]["enableServiceLinks"], false);
    let no_links = eventually("the host Pod without service links", || {
        let host_pods = host_pods.clone();
        async move {
            host_pods
                .get_opt(&predicted("no-links", "shop", "dev"))
                .await
                .unwrap()
        }
    })
    .await;
    let no_links_env = no_links.data["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !no_links_env
            .iter()
            .any(|e| e["name"].as_str().is_some_and(|n| n.starts_with("WEB_"))),
        "{no_links_env:?}"
    );
    kubelet_runs(&h, &host_pod, "10.2.0.9").await;
    let tenant_pod_uid = h
        .tenant_api("v1", "Pod", "shop")
        .get("web-1")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();

    let tenant_endpoints = h.tenant_api("v1", "Endpoints", "shop");
    let endpoints = eventually("the tenant Service's Endpoints from the host", || {
        let tenant_endpoints = tenant_endpoints.clone();
        async move {
            let e = tenant_endpoints.get_opt("web").await.unwrap()?;
            e.data["subsets"][0]["addresses"][0]["ip"]
                .is_string()
                .then_some(e)
        }
    })
    .await;
    assert_eq!(
        endpoints.data["subsets"],
        json!([{"addresses": [{"ip": "10.2.0.9", "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": tenant_pod_uid}}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}])
    );
    assert_eq!(endpoints.metadata.labels.as_ref().unwrap()["tier"], "front");

    // The same tenant Pod in the Service's EndpointSlice (the 1.20 tenant serves
    // discovery.k8s.io/v1beta1; its own endpointslice controller is off).
    let tenant_slices = h.tenant_api("discovery.k8s.io/v1beta1", "EndpointSlice", "shop");
    // Written after the Endpoints from the same plan, so it may still show the
    // earlier (empty) host state when the Endpoints already have the address.
    let slice = eventually("the tenant Service's EndpointSlice with the Pod", || {
        let tenant_slices = tenant_slices.clone();
        async move {
            let s = tenant_slices.get_opt("web").await.unwrap()?;
            s.data["endpoints"][0]["addresses"].is_array().then_some(s)
        }
    })
    .await;
    assert_eq!(slice.data["addressType"], "IPv4");
    assert_eq!(slice.data["endpoints"][0]["addresses"], json!(["10.2.0.9"]));
    assert_eq!(
        slice.data["endpoints"][0]["targetRef"],
        json!({"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": tenant_pod_uid})
    );
    assert_eq!(slice.data["endpoints"][0]["conditions"]["ready"], true);
    assert_eq!(
        slice.data["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    let slice_labels = slice.metadata.labels.as_ref().unwrap();
    assert_eq!(slice_labels["kubernetes.io/service-name"], "web");
    assert_eq!(
        slice_labels["endpointslice.kubernetes.io/managed-by"],
        "tenantplane.io"
    );

    // A slice tenantplane does not manage, named as a Service, is left alone.
    create(&h.tenant, json!({"apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
        "metadata": {"name": "api", "namespace": "shop", "labels": {
            "kubernetes.io/service-name": "api", "endpointslice.kubernetes.io/managed-by": "someone-else"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.9.9.9"]}], "ports": []})).await;
    let foreign = tenant_slices.get("api").await.unwrap();
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": "shop"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 81, "targetPort": 8080}]}}),
    )
    .await;
    eventually("the second Service's Endpoints from the host", || {
        let tenant_endpoints = tenant_endpoints.clone();
        async move {
            let e = tenant_endpoints.get_opt("api").await.unwrap()?;
            e.data["subsets"][0]["addresses"][0]["ip"]
                .is_string()
                .then_some(())
        }
    })
    .await;

    // Settled: full passes write no Endpoints in the tenant.
    controller.wait_passes("dev", 1).await;
    let before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 2).await;
    let writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&before);
    assert_eq!(writes.writes(Some("endpoints")), 0, "tenant: {writes:?}");
    assert_eq!(
        writes.writes(Some("endpointslices")),
        0,
        "tenant: {writes:?}"
    );

    // The Service goes: so do its Endpoints.
    h.tenant_api("v1", "Service", "shop")
        .delete("web", &Default::default())
        .await
        .unwrap();
    eventually("the tenant Endpoints gone with the Service", || {
        let tenant_endpoints = tenant_endpoints.clone();
        async move {
            tenant_endpoints
                .get_opt("web")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    eventually("the tenant EndpointSlice gone with the Service", || {
        let tenant_slices = tenant_slices.clone();
        async move {
            tenant_slices
                .get_opt("web")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    // The foreign slice is still there, unchanged.
    assert_eq!(
        tenant_slices
            .get_opt("api")
            .await
            .unwrap()
            .and_then(|s| s.metadata.resource_version),
        foreign.metadata.resource_version
    );
    controller.stop().await;
}

#[tokio::test]
async fn an_ingress_names_host_copies_is_refused_a_taken_host_name_and_gets_its_status_back() {
    let h = Harness::start().await;
    create(
        &h.host,
        policy(
            "web",
            &[
                ("v1", "Service"),
                ("v1", "Secret"),
                ("networking.k8s.io/v1", "Ingress"),
            ],
            "2s",
        ),
    )
    .await;
    // Someone on the host already serves taken.example.com.
    create_namespace(&h.host, "legacy").await;
    create(&h.host, json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "old", "namespace": "legacy"},
        "spec": {"rules": [{"host": "taken.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "old", "port": {"number": 80}}}}]}}]}})).await;
    let controller = Controller::start(&h.host).await;
    h.create_dev_with("fast", "web").await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-tls", "namespace": "default"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": "c", "tls.key": "k"}})).await;
    let ingress = |name: &str, host: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
                 "tls": [{"hosts": [host], "secretName": "shop-tls"}],
                 "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    };
    create(&h.tenant, ingress("shop", "shop.example.com")).await;
    create(&h.tenant, ingress("taken", "taken.example.com")).await;

    let host_ingresses = h.host_api("networking.k8s.io/v1", "Ingress");
    let host_name = predicted("shop", "default", "dev");
    let host = eventually("the host Ingress", || {
        let (host_ingresses, host_name) = (host_ingresses.clone(), host_name.clone());
        async move { host_ingresses.get_opt(&host_name).await.unwrap() }
    })
    .await;
    let spec = &host.data["spec"];
    assert_eq!(
        spec["defaultBackend"]["service"]["name"],
        predicted("fallback", "default", "dev")
    );
    assert_eq!(
        spec["tls"][0]["secretName"],
        predicted("shop-tls", "default", "dev")
    );
    assert_eq!(
        spec["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        predicted("web", "default", "dev")
    );
    assert_eq!(spec["rules"][0]["host"], "shop.example.com");

    let skip = eventually("a Skip naming the host name's owner", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == "taken")
    })
    .await;
    let reason = skip["reason"].as_str().unwrap();
    assert!(
        reason.contains("taken.example.com") && reason.contains("legacy/old"),
        "{reason}"
    );
    assert!(
        host_ingresses
            .get_opt(&predicted("taken", "default", "dev"))
            .await
            .unwrap()
            .is_none(),
        "no host copy for a taken host name"
    );

    // The host's ingress controller reports an address: the tenant sees it.
    host_ingresses
        .patch_status(
            &host_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.20"}]}}})),
        )
        .await
        .unwrap();
    let tenant_ingresses = h.tenant_api("networking.k8s.io/v1", "Ingress", "default");
    eventually("the Ingress status in the tenant", || {
        let tenant_ingresses = tenant_ingresses.clone();
        async move {
            let i = tenant_ingresses.get("shop").await.unwrap();
            (i.data["status"]["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.20").then_some(())
        }
    })
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn an_ingress_tls_secret_is_copied_like_a_pod_dependency_and_collected_with_it() {
    let h = Harness::start_on_shared_host().await;
    let web = h.named("web");
    // Secrets are not synced for their own sake: only the Ingress brings its own.
    create(
        &h.host,
        policy(
            &web,
            &[("v1", "Pod"), ("networking.k8s.io/v1", "Ingress")],
            "2s",
        ),
    )
    .await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with("fast", &web).await;
    create(&h.tenant, json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"tls": [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}],
                 "rules": [{"host": "shop.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})).await;

    // The Secret does not exist yet: a Skip naming it and the field, and no host copy.
    let skip = eventually("a Skip naming the missing TLS Secret", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == "shop")
    })
    .await;
    let reason = skip["reason"].as_str().unwrap();
    assert!(
        reason.contains("default/shop-tls") && reason.contains("spec.tls[0].secretName"),
        "{reason}"
    );
    let host_ingresses = h.host_api("networking.k8s.io/v1", "Ingress");
    let host_ingress_name = predicted("shop", "default", "dev");
    assert!(
        host_ingresses
            .get_opt(&host_ingress_name)
            .await
            .unwrap()
            .is_none()
    );

    // Once it exists, it is copied under the name the host Ingress refers to.
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-tls", "namespace": "default"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": "c", "tls.key": "k"}})).await;
    let host_secrets = h.host_api("v1", "Secret");
    let secret_name = predicted("shop-tls", "default", "dev");
    let copy = wait_for(&host_secrets, &secret_name).await;
    assert!(
        copy.metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .contains_key("tenantplane.io/pod-dependency")
    );
    let host = wait_for(&host_ingresses, &host_ingress_name).await;
    assert_eq!(host.data["spec"]["tls"][0]["secretName"], secret_name);
    let tenant_secret = h
        .tenant_api("v1", "Secret", "default")
        .get("shop-tls")
        .await
        .unwrap();
    assert!(
        tenant_secret
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "tenantplane.io/host-copy")
    );

    // Several passes with no Pod using it: the Ingress alone keeps it (the same
    // copy, not one collected and made again).
    controller.wait_passes("dev", 3).await;
    let kept = host_secrets.get_opt(&secret_name).await.unwrap();
    assert_eq!(kept.and_then(|s| s.metadata.uid), copy.metadata.uid);
    assert!(
        !h.decisions("dev")
            .await
            .iter()
            .any(|d| d["action"] == "Delete" && d["kind"] == "Secret"),
        "no Delete of the Secret copy while the Ingress uses it"
    );

    // No Ingress uses it any more: it is collected.
    h.tenant_api("networking.k8s.io/v1", "Ingress", "default")
        .delete("shop", &Default::default())
        .await
        .unwrap();
    wait_gone(&host_secrets, &secret_name).await;
    controller.stop().await;
}

#[tokio::test]
async fn an_ingress_of_a_class_the_profile_does_not_allow_is_refused() {
    let h = Harness::start_on_shared_host().await;
    let (web, classes) = (h.named("web"), h.named("classes"));
    create(
        &h.host,
        policy(&web, &[("networking.k8s.io/v1", "Ingress")], "2s"),
    )
    .await;
    create(&h.host, json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": classes},
        "spec": {"level": "restricted", "controls": {"apiFairness": {"qps": 1000, "burst": 2000},
                 "allowedIngressClasses": ["internal"]}}})).await;
    let controller = Controller::start_for(&h).await;
    h.create_dev_with(&classes, &web).await;
    let ingress = |name: &str, class: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"ingressClassName": class,
                 "rules": [{"host": format!("{name}.example.com"), "http": {"paths": [{"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    };
    create(&h.tenant, ingress("public", "public")).await;
    create(&h.tenant, ingress("allowed", "internal")).await;

    let host_ingresses = h.host_api("networking.k8s.io/v1", "Ingress");
    wait_for(&host_ingresses, &predicted("allowed", "default", "dev")).await;
    let skip = eventually("a Skip naming the class", || async {
        h.decisions("dev")
            .await
            .into_iter()
            .find(|d| d["action"] == "Skip" && d["tenant"]["name"] == "public")
    })
    .await;
    let reason = skip["reason"].as_str().unwrap();
    assert!(
        reason.contains("\"public\"") && reason.contains("spec.ingressClassName"),
        "{reason}"
    );
    let events = dynamic(&h.tenant, "events.k8s.io/v1", "Event", Some("default"));
    let event = eventually("a Warning Event on the Ingress", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.data["regarding"]["name"] == "public")
    })
    .await;
    assert_eq!(event.data["type"], "Warning");
    assert_eq!(event.data["reason"], "IsolationRefused");
    assert_eq!(event.data["regarding"]["kind"], "Ingress");
    controller.wait_passes("dev", 2).await;
    assert!(
        host_ingresses
            .get_opt(&predicted("public", "default", "dev"))
            .await
            .unwrap()
            .is_none(),
        "no host copy for a class the profile does not allow"
    );
    controller.stop().await;
}
