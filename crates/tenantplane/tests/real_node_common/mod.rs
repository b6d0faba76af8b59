//! What the real-node tests of this crate share: kubectl off the runtime, and a
//! host namespace with the IsolationProfile and SyncPolicy its TenantClusters use.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tenantplane_api::{
    IsolationLevel, IsolationProfile, IsolationProfileSpec, SyncPolicy, SyncPolicySpec,
};

pub fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

/// [`tenantplane_testenv::kubectl`] off the runtime, which also carries the
/// node's API relay.
pub async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let kubeconfig = kubeconfig.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tenantplane_testenv::kubectl(&kubeconfig, &args)
    })
    .await
    .expect("the kubectl task")
}

/// Host namespace `namespace`, IsolationProfile `restricted` (the built-in level)
/// and SyncPolicy `default`.
pub async fn tenancy_defaults(host: &Client, namespace: &str) {
    Api::<Namespace>::all(host.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(namespace, None),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    Api::<IsolationProfile>::all(host.clone())
        .create(
            &PostParams::default(),
            &IsolationProfile {
                metadata: meta("restricted", None),
                spec: IsolationProfileSpec::for_level(IsolationLevel::Restricted),
            },
        )
        .await
        .unwrap();
    Api::<SyncPolicy>::all(host.clone())
        .create(
            &PostParams::default(),
            &SyncPolicy {
                metadata: meta("default", None),
                spec: SyncPolicySpec::default_policy(),
            },
        )
        .await
        .unwrap();
}
