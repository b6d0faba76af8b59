//! The API servers this binary's tests hand on to each other (see
//! [`tenantplane_testenv::ServerPool`]): a test that neither stops its server nor
//! panics gives it back when it ends, and the next test gets it reset to how it was
//! right after its start. scripts/run-tests.sh runs this binary's modules as one
//! process, so every module's tests share the pools.

#![allow(clippy::expect_used)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tenantplane_testenv::{ApiServerOptions, PooledServer, ServerPool};

static HOSTS: ServerPool = ServerPool::new();
static HOSTS_WITH_CRDS: ServerPool = ServerPool::new();
static TENANTS: ServerPool = ServerPool::new();

async fn take(
    pool: &'static ServerPool,
    name: &str,
    crds: Vec<CustomResourceDefinition>,
) -> PooledServer {
    let mut options = ApiServerOptions::new(name);
    options.crds = crds;
    pool.take_with(options)
        .await
        .unwrap_or_else(|err| panic!("a {name} API server: {err}"))
}

/// A host API server with no CRDs.
pub async fn host() -> PooledServer {
    take(&HOSTS, "host", Vec::new()).await
}

/// A host API server with tenantplane's CRDs, `Established`.
pub async fn host_with_crds() -> PooledServer {
    take(&HOSTS_WITH_CRDS, "host", tenantplane_api::crds()).await
}

/// A tenant API server (no CRDs).
pub async fn tenant() -> PooledServer {
    take(&TENANTS, "tenant", Vec::new()).await
}
