//! The webhook behind a real kube-apiserver: registered by URL with a caBundle, it
//! denies invalid tenantplane resources with its message in the API error, admits
//! valid ones, and once stopped blocks only tenantplane's own resources.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_admission::config::CONFIGURATION_NAME;
use tenantplane_admission::tls::RELOAD_CHECK;
use tenantplane_admission::{
    WebhookClient, serve, tls_config, tls_config_from_files, webhook_configuration,
};
use tenantplane_testenv::{TestEnv, tls_handshake};

const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);
const DENIED_BY: &str = "admission webhook \"validate.tenantplane.io\" denied the request";

fn api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk(&GroupVersionKind::gvk("tenantplane.io", "v1alpha1", kind));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn tenant_cluster(name: &str, spec: Value) -> DynamicObject {
    let mut full = json!({"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"}});
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        "metadata": {"name": name, "namespace": "team-dev"}, "spec": full,
    }))
    .unwrap()
}

fn cluster_scoped(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

/// Creates `object` and returns the API server's refusal, failing if it was admitted.
async fn refused(api: &Api<DynamicObject>, object: &DynamicObject) -> kube::core::Status {
    match api.create(&PostParams::default(), object).await {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("{:?} was not refused: {other:?}", object.metadata.name),
    }
}

#[tokio::test]
async fn the_api_server_consults_the_webhook_and_fails_closed_only_for_tenantplane() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env
        .start_apiserver_with_crds("host", tenantplane_api::crds())
        .await
        .expect("apiserver");
    let client = server.client().await.expect("client");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-dev"}})).unwrap(),
        )
        .await
        .expect("namespace");

    // The webhook, on a free loopback port, with a certificate for 127.0.0.1.
    let cert = env.ca().issue(&["127.0.0.1"]).expect("serving certificate");
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).expect("TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let webhook = tokio::spawn(serve(listener, tls, async {
        stopped.await.ok();
    }));

    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = webhook_configuration(
        WebhookClient::Url(format!("https://127.0.0.1:{port}/validate")),
        env.ca().cert_pem().as_bytes(),
    );
    configs
        .create(&PostParams::default(), &config)
        .await
        .expect("webhook registered");

    let tcs = api(&client, "TenantCluster", Some("team-dev"));
    let long_name = "a".repeat(41);
    let too_long = tenant_cluster(&long_name, json!({}));
    // The API server picks up a new configuration asynchronously: dry-run the invalid
    // object until the webhook answers.
    until_message("the webhook to be consulted", &tcs, &too_long, |m| {
        m.contains(DENIED_BY)
    })
    .await;

    // Invalid objects: denied, with the webhook's message in the API error.
    let status = refused(&tcs, &too_long).await;
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains(&format!(
            "{DENIED_BY}: TenantCluster team-dev/{long_name} is invalid: metadata.name: "
        )),
        "{}",
        status.message
    );
    assert!(
        status.message.contains("at most 40 characters"),
        "{}",
        status.message
    );

    let old_version = tenant_cluster("legacy", json!({"kubernetesVersion": "v1.27"}));
    let status = refused(&tcs, &old_version).await;
    assert!(status.message.contains(DENIED_BY), "{}", status.message);
    assert!(
        status.message.contains(
            "spec.kubernetesVersion: kubernetesVersion \"v1.27\" is not supported: use one of v1.28, v1.29, v1.30, v1.31, v1.32, v1.33"
        ),
        "{}",
        status.message
    );

    let policies = api(&client, "SyncPolicy", None);
    let bad_policy = cluster_scoped(
        "SyncPolicy",
        "bad",
        json!({"driftDetection": {"interval": "100ms"}, "resources": [
            {"apiVersion": "v1", "kind": "ConfigMap"},
            {"apiVersion": "v1", "kind": "PersistentVolume"},
            {"apiVersion": "v1", "kind": "ConfigMap"},
        ]}),
    );
    let status = refused(&policies, &bad_policy).await;
    for expected in [
        DENIED_BY,
        "spec.resources[1]: PersistentVolume is cluster-scoped",
        "spec.resources[2]: ConfigMap is already listed at spec.resources[0]",
        "spec.driftDetection.interval: \"100ms\" is shorter than 1s",
    ] {
        assert!(status.message.contains(expected), "{}", status.message);
    }

    let profiles = api(&client, "IsolationProfile", None);
    let unfair = cluster_scoped(
        "IsolationProfile",
        "unfair",
        json!({"controls": {"apiFairness": {"qps": 20, "burst": 10}}}),
    );
    let status = refused(&profiles, &unfair).await;
    assert!(
        status
            .message
            .contains("burst (10) must be at least qps (20)"),
        "{}",
        status.message
    );
    // Nothing refused was stored.
    assert!(tcs.get_opt(&long_name).await.unwrap().is_none());
    assert!(policies.get_opt("bad").await.unwrap().is_none());

    // Valid objects are admitted.
    let pp = PostParams::default();
    profiles
        .create(
            &pp,
            &cluster_scoped(
                "IsolationProfile",
                "restricted",
                json!({"level": "restricted"}),
            ),
        )
        .await
        .expect("valid IsolationProfile admitted");
    policies
        .create(
            &pp,
            &cluster_scoped(
                "SyncPolicy",
                "default",
                json!({"resources": [{"apiVersion": "v1", "kind": "ConfigMap"}]}),
            ),
        )
        .await
        .expect("valid SyncPolicy admitted");
    let dev = tcs
        .create(
            &pp,
            &tenant_cluster(
                "dev",
                json!({"kubernetesVersion": "v1.31", "controlPlane": {"extraSANs": ["10.0.0.10", "dev.example.com"]}}),
            ),
        )
        .await
        .expect("valid TenantCluster admitted");

    // UPDATE goes through the webhook too: a mode change needs the migration flag.
    let mut dedicated = dev.clone();
    dedicated.data["spec"]["mode"] = json!("dedicated");
    match tcs.replace("dev", &pp, &dedicated).await {
        Err(kube::Error::Api(status)) => assert!(
            status
                .message
                .contains("spec.mode: cannot change from shared to dedicated"),
            "{}",
            status.message
        ),
        other => panic!("mode change admitted: {other:?}"),
    }
    dedicated.data["spec"]["migration"] = json!({"allowModeChange": true});
    let migrated = tcs
        .replace("dev", &pp, &dedicated)
        .await
        .expect("mode change with allowModeChange admitted");
    assert_eq!(migrated.data["spec"]["mode"], "dedicated");

    // Stop the webhook: it returns, and nothing answers on its port any more.
    stop.send(()).unwrap();
    tokio::time::timeout(DEADLINE, webhook)
        .await
        .expect("the webhook stops within the deadline")
        .expect("the webhook task")
        .expect("the webhook shut down cleanly");
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "the port is closed"
    );

    // Fail-closed only for tenantplane's own resources: a ConfigMap is created...
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team-dev");
    config_maps
        .create(
            &pp,
            &serde_json::from_value(
                json!({"metadata": {"name": "still-works"}, "data": {"k": "v"}}),
            )
            .unwrap(),
        )
        .await
        .expect("a ConfigMap is not blocked by the stopped webhook");
    // ...while a valid TenantCluster cannot be, because the webhook cannot be called.
    let status = refused(&tcs, &tenant_cluster("prod", json!({}))).await;
    assert!(
        status
            .message
            .contains("failed calling webhook \"validate.tenantplane.io\""),
        "{}",
        status.message
    );
    assert!(tcs.get_opt("prod").await.unwrap().is_none());
}

/// What the API server answers to a dry-run create of `object` (admission runs,
/// nothing is stored): its error message, or "admitted" (as before a new webhook
/// configuration is picked up).
async fn dry_run_message(tcs: &Api<DynamicObject>, object: &DynamicObject) -> String {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match tcs.create(&dry_run, object).await {
        Ok(_) => "admitted".to_owned(),
        Err(kube::Error::Api(status)) => status.message,
        Err(other) => panic!("dry run failed: {other:?}"),
    }
}

/// Polls the dry run until its message satisfies `wanted`.
async fn until_message(
    what: &str,
    tcs: &Api<DynamicObject>,
    object: &DynamicObject,
    wanted: impl Fn(&str) -> bool,
) {
    tenantplane_testenv::eventually(what, DEADLINE, || async {
        let message = dry_run_message(tcs, object).await;
        if wanted(&message) {
            Ok(())
        } else {
            Err(message)
        }
    })
    .await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env
        .start_apiserver_with_crds("host", tenantplane_api::crds())
        .await
        .expect("apiserver");
    let client = server.client().await.expect("client");
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-dev"}})).unwrap(),
        )
        .await
        .expect("namespace");

    // Served from files, as `tenantplane webhook --tls-cert --tls-key` does.
    let dir = env.root().join("webhook-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    let first = env.ca().issue(&["127.0.0.1"]).unwrap();
    std::fs::write(&cert_file, &first.cert_pem).unwrap();
    std::fs::write(&key_file, &first.key_pem).unwrap();
    let tls = tls_config_from_files(&cert_file, &key_file).expect("TLS from files");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let webhook = tokio::spawn(serve(listener, tls, async {
        stopped.await.ok();
    }));
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let url = WebhookClient::Url(format!("https://127.0.0.1:{port}/validate"));
    configs
        .create(
            &PostParams::default(),
            &webhook_configuration(url.clone(), env.ca().cert_pem().as_bytes()),
        )
        .await
        .expect("webhook registered");
    let tcs = api(&client, "TenantCluster", Some("team-dev"));
    let invalid = tenant_cluster(&"a".repeat(41), json!({}));
    until_message("the webhook to answer", &tcs, &invalid, |m| {
        m.contains(DENIED_BY)
    })
    .await;

    // The rotation: a certificate from another CA. First the API server trusts only
    // the new CA, so the old certificate fails its calls (the test can tell)...
    let rotated_ca = tenantplane_testenv::TestCa::new("rotated").unwrap();
    let mut config = configs.get(CONFIGURATION_NAME).await.unwrap();
    let rotated_config = webhook_configuration(url, rotated_ca.cert_pem().as_bytes());
    config.webhooks = rotated_config.webhooks;
    configs
        .replace(CONFIGURATION_NAME, &PostParams::default(), &config)
        .await
        .unwrap();
    until_message("the old certificate to be refused", &tcs, &invalid, |m| {
        m.contains("failed calling webhook") && m.contains("x509")
    })
    .await;
    // ...then the files change under the running server, which serves them.
    let second = rotated_ca.issue(&["127.0.0.1"]).unwrap();
    std::fs::write(&key_file, &second.key_pem).unwrap();
    std::fs::write(&cert_file, &second.cert_pem).unwrap();
    until_message(
        "the rotated certificate to be served",
        &tcs,
        &invalid,
        |m| m.contains(DENIED_BY),
    )
    .await;

    // A broken file (a rotation half done) keeps the last good certificate: new
    // handshakes (the API server may reuse its connection) past the reload check
    // still get the rotated one.
    assert!(tls_handshake(port, &rotated_ca.cert_pem()).await.is_ok());
    std::fs::write(&cert_file, "not a certificate").unwrap();
    let start = Instant::now();
    while start.elapsed() < RELOAD_CHECK * 3 {
        let answer = tls_handshake(port, &rotated_ca.cert_pem()).await;
        assert!(answer.is_ok(), "{answer:?}");
        tokio::time::sleep(POLL).await;
    }
    assert!(tls_handshake(port, &env.ca().cert_pem()).await.is_err());
    let message = dry_run_message(&tcs, &invalid).await;
    assert!(message.contains(DENIED_BY), "{message}");
    stop.send(()).unwrap();
    webhook.await.unwrap().unwrap();
}
