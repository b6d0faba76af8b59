use super::*;
use crate::pods::refs::tests::every_reference_pod;

fn dev() -> TenantTarget {
    TenantTarget::new("dev", "team-dev").unwrap()
}

fn ctx() -> HostPodContext {
    HostPodContext {
        controls: PodControls {
            runtime_class_name: Some("gvisor".into()),
            block_host_path_volumes: true,
            block_privileged_containers: true,
            rules: None,
        },
        api_endpoint: TenantApiEndpoint::from_url("https://10.0.0.7:6443"),
        dns: PodDns::Unchanged,
    }
}

#[test]
fn every_reference_is_rewritten_to_its_host_name() {
    let pod = every_reference_pod();
    let host = to_host_pod(&dev(), &pod, &ctx()).unwrap();
    assert_eq!(host.object["metadata"]["name"], "web-x-shop-x-dev");
    assert_eq!(host.object["metadata"]["namespace"], "team-dev");
    for r in host
        .references
        .iter()
        .filter(|r| !r.field.starts_with("spec.ephemeralContainers"))
    {
        assert_eq!(
            host.object.pointer(&r.pointer).and_then(Value::as_str),
            Some(format!("{}-x-shop-x-dev", r.name).as_str()),
            "{}",
            r.field
        );
    }
    assert_eq!(host.references.len(), 15);
    assert!(host.object["spec"].get("ephemeralContainers").is_none());
}

#[test]
fn the_pod_talks_to_the_tenant_api_server_without_host_credentials() {
    let mut pod = every_reference_pod();
    pod["spec"]["serviceAccountName"] = json!("builder");
    pod["spec"]["containers"][0]["env"] =
        json!([{"name": "KUBERNETES_SERVICE_HOST", "value": "evil"}]);
    let host = to_host_pod(&dev(), &pod, &ctx()).unwrap();
    let spec = &host.object["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert!(spec.get("serviceAccountName").is_none());
    assert_eq!(host.service_account, "builder");
    assert_eq!(spec["runtimeClassName"], "gvisor");
    for list in ["containers", "initContainers"] {
        let env = &spec[list][0]["env"];
        assert_eq!(
            env.as_array()
                .unwrap()
                .iter()
                .filter(|e| e["name"] == "KUBERNETES_SERVICE_HOST")
                .count(),
            1,
            "{list}: {env}"
        );
        assert!(
            env.as_array()
                .unwrap()
                .contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.7"}))
        );
        assert!(
            env.as_array()
                .unwrap()
                .contains(&json!({"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}))
        );
    }
    assert_eq!(
        spec["hostAliases"],
        json!([{"ip": "10.0.0.7", "hostnames": ["kubernetes", "kubernetes.default", "kubernetes.default.svc"]}])
    );
}

#[test]
fn a_dns_endpoint_sets_the_environment_but_no_host_alias() {
    let mut c = ctx();
    c.api_endpoint = TenantApiEndpoint::from_url("https://dev-cp.team-dev-cp.svc:6443");
    let host = to_host_pod(&dev(), &every_reference_pod(), &c).unwrap();
    assert!(host.object["spec"].get("hostAliases").is_none());
    assert!(
        host.object["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .contains(
                &json!({"name": "KUBERNETES_SERVICE_HOST", "value": "dev-cp.team-dev-cp.svc"})
            )
    );
}

#[test]
fn endpoints_parse() {
    let e = |u: &str| TenantApiEndpoint::from_url(u).map(|e| (e.host, e.port));
    assert_eq!(e("https://1.2.3.4"), Some(("1.2.3.4".into(), 443)));
    assert_eq!(e("https://[::1]:6443/"), Some(("::1".into(), 6443)));
    assert_eq!(e("https://a.b:99/x"), Some(("a.b".into(), 99)));
    assert_eq!(e("http://a.b"), None);
    assert_eq!(e("https://a.b:notaport"), None);
    assert_eq!(e("https://"), None);
    assert_eq!(e("https://u@a.b"), None);
}

#[test]
fn projected_tokens_come_from_the_token_secret() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "image": "x"}], "volumes": [{"name": "kube-api-access", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        {"serviceAccountToken": {"path": "vault", "audience": "vault"}}
    ]}}]}});
    let host = to_host_pod(&dev(), &pod, &HostPodContext::default()).unwrap();
    let secret = token_secret_name(&dev(), "default", "p");
    assert!(
        secret.starts_with(TOKEN_SECRET_PREFIX) && secret.len() <= 63,
        "{secret}"
    );
    let sources = &host.object["spec"]["volumes"][0]["projected"]["sources"];
    assert_eq!(
        sources[0],
        json!({"secret": {"name": secret, "items": [{"key": "token-0-0", "path": "token"}]}})
    );
    assert_eq!(
        sources[1]["configMap"]["name"],
        "kube-root-ca.crt-x-default-x-dev"
    );
    assert_eq!(
        sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.annotations['tenantplane.io/virtual-namespace']"
    );
    assert_eq!(
        sources[3]["secret"]["items"][0],
        json!({"key": "token-0-3", "path": "vault"})
    );
    assert_eq!(
        host.tokens,
        vec![
            TokenProjection {
                key: "token-0-0".into(),
                audience: None,
                expiration_seconds: 3607,
                field: "spec.volumes[0].projected.sources[0].serviceAccountToken".into()
            },
            TokenProjection {
                key: "token-0-3".into(),
                audience: Some("vault".into()),
                expiration_seconds: 3600,
                field: "spec.volumes[0].projected.sources[3].serviceAccountToken".into()
            },
        ]
    );
    assert!(!host.object.to_string().contains("serviceAccountToken"));
}

#[test]
fn downward_api_env_reads_the_tenant_identity() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "env": [
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}});
    let host = to_host_pod(&dev(), &pod, &HostPodContext::default()).unwrap();
    let env = &host.object["spec"]["containers"][0]["env"];
    assert_eq!(
        env[0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['tenantplane.io/virtual-name']"
    );
    assert_eq!(env[1]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
}

#[test]
fn refusals_and_invalid_references_are_typed() {
    let mut pod = every_reference_pod();
    pod["spec"]["hostNetwork"] = json!(true);
    match to_host_pod(&dev(), &pod, &ctx()) {
        Err(HostPodError::Refused(r)) => assert_eq!(r[0].field, "spec.hostNetwork"),
        other => panic!("{other:?}"),
    }
    let mut pod = every_reference_pod();
    pod["spec"]["volumes"][0]["configMap"]["name"] = json!("Not_Valid");
    match to_host_pod(&dev(), &pod, &ctx()) {
        Err(HostPodError::InvalidReference { field, .. }) => {
            assert_eq!(field, "spec.volumes[0].configMap.name")
        }
        other => panic!("{other:?}"),
    }
}
