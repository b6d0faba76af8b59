#[test]
fn the_namespace_webhooks_match_namespaces_and_tenant_namespaces_only() {
    let config = namespace_webhook_configuration(
        WebhookClient::Service {
            namespace: "tenantplane-system".into(),
            name: "tenantplane-webhook".into(),
            port: None,
        },
        b"PEM",
    );
    let value = serde_json::to_value(&config).unwrap();
    assert_eq!(value["kind"], "MutatingWebhookConfiguration");
    let webhook = &value["webhooks"][0];
    assert_eq!(
        webhook["rules"],
        serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
            "scope": "Cluster"}])
    );
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
    assert_eq!(webhook["clientConfig"]["service"]["path"], "/namespaces");
    assert!(webhook.get("namespaceSelector").is_none());
    // Fail-closed for anything that has, or had, the tenant label (the API
    // server matches the old or the new object).
    assert_eq!(webhook["name"], "tenant-namespaces.tenantplane.io");
    assert_eq!(
        webhook["objectSelector"],
        serde_json::json!({"matchExpressions": [{"key": "tenantplane.io/tenant", "operator": "Exists"}]})
    );
    assert_eq!(value["webhooks"].as_array().unwrap().len(), 4);
    // Plain namespaces: same handler, same rules, but a down webhook lets them pass.
    let plain = &value["webhooks"][3];
    assert_eq!(plain["name"], "namespaces.tenantplane.io");
    assert_eq!(plain["failurePolicy"], "Ignore");
    assert_eq!(plain["rules"], webhook["rules"]);
    assert_eq!(plain["sideEffects"], "NoneOnDryRun");
    assert_eq!(plain["timeoutSeconds"], webhook["timeoutSeconds"]);
    assert_eq!(plain["clientConfig"]["service"]["path"], "/namespaces");
    assert_eq!(
        plain["objectSelector"],
        serde_json::json!({"matchExpressions": [{"key": "tenantplane.io/tenant", "operator": "DoesNotExist"}]})
    );
    assert!(plain.get("namespaceSelector").is_none());
    assert_eq!(plain["reinvocationPolicy"], "Never");
    let inside = &value["webhooks"][1];
    assert_eq!(inside["name"], "tenant-resources.tenantplane.io");
    assert_eq!(
        inside["clientConfig"]["service"]["path"],
        "/tenant-resources"
    );
    assert_eq!(
        inside["namespaceSelector"],
        serde_json::json!({"matchExpressions": [{"key": "tenantplane.io/tenant", "operator": "Exists"}]})
    );
    assert_eq!(inside["rules"][0]["scope"], "Namespaced");
    assert_eq!(
        inside["rules"][0]["operations"],
        serde_json::json!(["CREATE", "UPDATE", "DELETE"])
    );
    assert_eq!(
        inside["rules"][1],
        serde_json::json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"],
            "resources": ["pods/exec", "pods/attach", "pods/portforward"], "scope": "Namespaced"})
    );
    assert_eq!(
        inside["rules"][2],
        serde_json::json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods/eviction"], "scope": "Namespaced"})
    );
    assert_eq!(inside["failurePolicy"], "Fail");
    let deletion = &value["webhooks"][2];
    assert_eq!(deletion["name"], "namespace-deletion.tenantplane.io");
    assert_eq!(deletion["clientConfig"]["service"]["path"], "/namespaces");
    assert_eq!(
        deletion["rules"],
        serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["DELETE"], "resources": ["namespaces"], "scope": "Cluster"}])
    );
    assert_eq!(
        deletion["objectSelector"],
        serde_json::json!({"matchExpressions": [{"key": "tenantplane.io/tenant", "operator": "Exists"}]})
    );
    assert_eq!(deletion["failurePolicy"], "Fail");

    for url in [
        "https://h:8443",
        "https://h:8443/",
        "https://h:8443/namespaces",
    ] {
        let config = namespace_webhook_configuration(WebhookClient::Url(url.into()), b"PEM");
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(
            value["webhooks"][0]["clientConfig"]["url"],
            "https://h:8443/namespaces"
        );
        assert_eq!(
            value["webhooks"][1]["clientConfig"]["url"],
            "https://h:8443/tenant-resources"
        );
        assert_eq!(
            value["webhooks"][3]["clientConfig"]["url"],
            "https://h:8443/namespaces"
        );
    }
}

use super::*;

#[test]
fn only_tenantplanes_resources_are_matched_and_failure_closes() {
    let config = webhook_configuration(
        WebhookClient::Url("https://127.0.0.1:8443/validate".into()),
        b"PEM",
    );
    let value = serde_json::to_value(&config).unwrap();
    assert_eq!(value["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(value["kind"], "ValidatingWebhookConfiguration");
    assert_eq!(value["metadata"]["name"], "tenantplane-validation");
    let webhook = &value["webhooks"][0];
    assert_eq!(value["webhooks"].as_array().unwrap().len(), 1);
    assert_eq!(webhook["name"], "validate.tenantplane.io");
    assert_eq!(
        webhook["rules"],
        serde_json::json!([{
            "apiGroups": ["tenantplane.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["tenantclusters", "isolationprofiles", "syncpolicies", "resourcepools", "resourcepoolclaims", "tenants"],
            "scope": "*",
        }, {
            "apiGroups": ["tenantplane.io"],
            "apiVersions": ["*"],
            "operations": ["DELETE"],
            "resources": ["tenants"],
            "scope": "Cluster",
        }])
    );
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(webhook["sideEffects"], "None");
    assert_eq!(
        webhook["admissionReviewVersions"],
        serde_json::json!(["v1"])
    );
    assert_eq!(webhook["timeoutSeconds"], 5);
    assert_eq!(
        webhook["clientConfig"],
        // caBundle is base64 on the wire.
        serde_json::json!({"url": "https://127.0.0.1:8443/validate", "caBundle": "UEVN"})
    );
    assert!(webhook.get("namespaceSelector").is_none());
    assert!(webhook.get("objectSelector").is_none());
}

#[test]
fn a_service_reference_uses_the_validate_path() {
    let config = webhook_configuration(
        WebhookClient::Service {
            namespace: "tenantplane-system".into(),
            name: "tenantplane-webhook".into(),
            port: Some(8443),
        },
        b"PEM",
    );
    let value = serde_json::to_value(&config).unwrap();
    assert_eq!(
        value["webhooks"][0]["clientConfig"]["service"],
        serde_json::json!({"namespace": "tenantplane-system", "name": "tenantplane-webhook",
                           "path": "/validate", "port": 8443})
    );
    assert!(value["webhooks"][0]["clientConfig"].get("url").is_none());
}
