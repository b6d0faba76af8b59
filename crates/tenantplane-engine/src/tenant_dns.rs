//! Runs each TenantCluster's DNS server on the host: the objects of
//! [`tenantplane_core::dns::dns_objects`], owned by the TenantCluster and
//! converged like the isolation objects (a foreign object under the name is left
//! alone and reported).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::ObjectMeta;
use kube::core::NamespaceResourceScope;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tenantplane_api::TenantCluster;
use tenantplane_core::dns::{
    DnsObjects, DnsServerSpec, dns_object_name, dns_objects, is_dns_object_of,
};

use crate::converge::{ObjectAction, converge};
use crate::isolation::ObjectResult;

/// How the controller runs tenant DNS servers.
#[derive(Clone, Debug)]
pub struct DnsDeployment {
    /// The image running `tenantplane dns` (the controller's own, by default).
    pub image: String,
    /// The tenants' cluster domain.
    pub cluster_domain: String,
}

/// Why the DNS objects could not be brought in place.
#[derive(Debug, thiserror::Error)]
pub enum TenantDnsError {
    #[error("the TenantCluster has no {0}")]
    MissingMetadata(&'static str),
    #[error("building the DNS objects: {0}")]
    Build(#[from] serde_json::Error),
    #[error("{kind} {name}: {reason}")]
    Host {
        kind: &'static str,
        name: String,
        reason: String,
    },
}

async fn one<K>(
    host: &Client,
    namespace: &str,
    tenant: &str,
    kind: &'static str,
    mut desired: K,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Result<ObjectResult, TenantDnsError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let meta: &mut ObjectMeta = desired.meta_mut();
    meta.owner_references = Some(vec![owner.clone()]);
    let name = meta.name.clone().unwrap_or_default();
    let api: Api<K> = Api::namespaced(host.clone(), namespace);
    let ours = |labels: &BTreeMap<String, String>| is_dns_object_of(labels, tenant);
    let action = converge(&api, &name, Some(&desired), &ours, &[])
        .await
        .map_err(|source| TenantDnsError::Host {
            kind,
            name: name.clone(),
            reason: source.to_string(),
        })?;
    if action == ObjectAction::Conflict {
        tracing::warn!(kind, %name, %namespace, "a foreign object holds the tenant DNS name; left alone");
    }
    Ok(ObjectResult { kind, name, action })
}

/// Creates or updates the DNS server's objects for `tc`.
pub async fn apply_tenant_dns(
    host: &Client,
    tc: &TenantCluster,
    config: &DnsDeployment,
) -> Result<Vec<ObjectResult>, TenantDnsError> {
    let namespace = tc
        .namespace()
        .ok_or(TenantDnsError::MissingMetadata("namespace"))?;
    let tenant = tc.name_any();
    let owner = tc
        .controller_owner_ref(&())
        .ok_or(TenantDnsError::MissingMetadata("uid"))?;
    let DnsObjects {
        service_account,
        role,
        role_binding,
        deployment,
        service,
        network_policy,
    } = dns_objects(&DnsServerSpec {
        namespace: &namespace,
        tenant: &tenant,
        image: &config.image,
        cluster_domain: &config.cluster_domain,
    })?;
    let (ns, t) = (namespace.as_str(), tenant.as_str());
    Ok(vec![
        one(host, ns, t, "ServiceAccount", service_account, &owner).await?,
        one(host, ns, t, "Role", role, &owner).await?,
        one(host, ns, t, "RoleBinding", role_binding, &owner).await?,
        one(host, ns, t, "NetworkPolicy", network_policy, &owner).await?,
        one(host, ns, t, "Service", service, &owner).await?,
        one::<Deployment>(host, ns, t, "Deployment", deployment, &owner).await?,
    ])
}

/// The ClusterIP of `tenant`'s DNS Service in `namespace`, once it has one and is
/// ours (a foreign Service under the name is never used as a nameserver).
pub async fn dns_service_ip(
    host: &Client,
    namespace: &str,
    tenant: &str,
) -> Result<Option<String>, kube::Error> {
    let api: Api<Service> = Api::namespaced(host.clone(), namespace);
    let Some(service) = api.get_opt(&dns_object_name(tenant)).await? else {
        return Ok(None);
    };
    if !is_dns_object_of(service.labels(), tenant) {
        return Ok(None);
    }
    Ok(service
        .spec
        .and_then(|s| s.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None"))
}
