//! ResourcePool rules behind a real kube-apiserver: a pool cannot shrink below what
//! it has granted, and a bound claim cannot be changed or moved, whatever the patch.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_admission::{WebhookClient, serve, tls_config, webhook_configuration};
use tenantplane_api::{ResourcePool, ResourcePoolClaim};
use tenantplane_testenv::TestEnv;

const DEADLINE: Duration = Duration::from_secs(30);
const DENIED_BY: &str = "admission webhook \"validate.tenantplane.io\" denied the request";

fn pool(hard: Value) -> ResourcePool {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "ResourcePool",
        "metadata": { "name": "shared" },
        "spec": { "namespaceSelector": {}, "quota": { "hard": hard } }
    }))
    .unwrap()
}

fn claim(name: &str, cpu: &str) -> ResourcePoolClaim {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "ResourcePoolClaim",
        "metadata": { "name": name },
        "spec": { "pool": "shared", "claim": { "cpu": cpu } }
    }))
    .unwrap()
}

fn merge(value: Value) -> Patch<Value> {
    Patch::Merge(value)
}

/// The API server's refusal of `result`, failing if it was admitted.
fn denial<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.message.contains(DENIED_BY) => status.message,
        other => panic!("not refused by the webhook: {other:?}"),
    }
}

#[tokio::test]
async fn pools_keep_their_grants_and_bound_claims_keep_their_shape() {
    let env = TestEnv::start_shared().await.unwrap();
    let server = env.start_apiserver("host").await.unwrap();
    let client: Client = server.client().await.unwrap();
    server.install_crds(tenantplane_api::crds()).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();

    let cert = env.ca().issue(&["127.0.0.1"]).unwrap();
    let tls = tls_config(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let webhook = tokio::spawn(serve(listener, tls, async {
        stopped.await.ok();
    }));
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configs
        .create(
            &PostParams::default(),
            &webhook_configuration(
                WebhookClient::Url(format!("https://127.0.0.1:{port}/validate")),
                env.ca().cert_pem().as_bytes(),
            ),
        )
        .await
        .unwrap();

    let pools: Api<ResourcePool> = Api::all(client.clone());
    // Wait until the API server consults the webhook: a pool with no resources is refused.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let empty = pool(json!({}));
    tenantplane_testenv::until_refused(DENIED_BY, DEADLINE, || pools.create(&dry_run, &empty))
        .await;
    let message = denial(pools.create(&dry_run, &pool(json!({"cpu": "lots"}))).await);
    assert!(message.contains("spec.quota.hard[cpu]"), "{message}");

    pools
        .create(&PostParams::default(), &pool(json!({"cpu": "4"})))
        .await
        .unwrap();
    // The controller's ledger says 3 CPUs are granted (written as it would).
    pools
        .patch_status(
            "shared",
            &PatchParams::default(),
            &merge(json!({"status": {"allocated": {"cpu": "3"}}})),
        )
        .await
        .unwrap();
    let message = denial(
        pools
            .patch(
                "shared",
                &PatchParams::default(),
                &merge(json!({"spec": {"quota": {"hard": {"cpu": "2"}}}})),
            )
            .await,
    );
    assert!(
        message.contains("cpu cannot shrink to 2: 3 of it is granted"),
        "{message}"
    );
    // A JSON patch removing the resource is refused the same way.
    let message = denial(
        pools
            .patch(
                "shared",
                &PatchParams::default(),
                &Patch::<Value>::Json(
                    serde_json::from_value(
                        json!([{"op": "replace", "path": "/spec/quota/hard", "value": {"memory": "1Gi"}}]),
                    )
                    .unwrap(),
                ),
            )
            .await,
    );
    assert!(message.contains("cpu cannot leave the pool"), "{message}");
    // Shrinking down to the grants is fine.
    pools
        .patch(
            "shared",
            &PatchParams::default(),
            &merge(json!({"spec": {"quota": {"hard": {"cpu": "3"}}}})),
        )
        .await
        .unwrap();

    let claims: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), "team");
    claims
        .create(&PostParams::default(), &claim("bound", "1"))
        .await
        .unwrap();
    claims
        .create(&PostParams::default(), &claim("waiting", "1"))
        .await
        .unwrap();
    claims
        .patch_status(
            "bound",
            &PatchParams::default(),
            &merge(json!({"status": {"pool": "shared", "bound": {"cpu": "1"}}})),
        )
        .await
        .unwrap();
    let message = denial(
        claims
            .patch(
                "bound",
                &PatchParams::default(),
                &merge(json!({"spec": {"claim": {"cpu": "2"}}})),
            )
            .await,
    );
    assert!(message.contains("cannot change"), "{message}");
    let message = denial(
        claims
            .patch(
                "bound",
                &PatchParams::default(),
                &merge(json!({"spec": {"pool": "other"}})),
            )
            .await,
    );
    assert!(message.contains("cannot move"), "{message}");
    // A claim that is not bound yet may still be edited.
    claims
        .patch(
            "waiting",
            &PatchParams::default(),
            &merge(json!({"spec": {"claim": {"cpu": "2"}}})),
        )
        .await
        .unwrap();

    stop.send(()).unwrap();
    webhook.await.unwrap().unwrap();
}
