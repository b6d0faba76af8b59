//! One tenant's DNS records, indexed from its host objects. Only host objects of
//! the tenant are admitted (namespace, managed-by and tenant labels), and their
//! tenant names come from the reverse-mapping annotations, never from host names:
//! another tenant's objects in the same host namespace never enter the index.

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::metadata::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, LABEL_MANAGED_BY, LABEL_TENANT,
    MANAGED_BY_VALUE,
};

/// Whose names an index serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsTenant {
    pub host_namespace: String,
    /// The TenantCluster's name (the `tenantplane.io/tenant` label value).
    pub tenant: String,
}

/// A Service port, as SRV records name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub name: String,
    /// Lower case (`tcp`, `udp`, `sctp`), as in `_<port>._<proto>`.
    pub protocol: String,
    pub port: u16,
}

/// What a Service answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceShape {
    /// A virtual IP (the host copy's ClusterIPs).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the ready endpoints.
    Headless,
    /// A CNAME to the tenant's `externalName`.
    ExternalName(String),
}

/// A tenant Service, from its host copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEntry {
    pub namespace: String,
    pub name: String,
    pub shape: ServiceShape,
    pub ports: Vec<ServicePort>,
}

/// A ready endpoint address of a host Endpoints object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointAddress {
    pub ip: IpAddr,
    pub hostname: Option<String>,
    /// The host Pod behind it, when the address names one.
    pub pod: Option<String>,
    /// Port name → (protocol, port) of its subset.
    pub ports: Vec<ServicePort>,
}

/// A tenant Pod, from its host Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    pub namespace: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ips: Vec<IpAddr>,
    pub ready: bool,
}

/// The records of one tenant, fed object by object from watches.
#[derive(Clone, Debug)]
pub struct TenantIndex {
    tenant: DnsTenant,
    /// Host Service name → entry.
    services: HashMap<String, ServiceEntry>,
    /// (tenant namespace, tenant name) → host Service name.
    service_names: HashMap<(String, String), String>,
    /// Host Endpoints name (= host Service name) → ready addresses.
    endpoints: HashMap<String, Vec<EndpointAddress>>,
    /// Host Pod name → entry.
    pods: HashMap<String, PodEntry>,
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn metadata_str<'a>(object: &'a Value, map: &str, key: &str) -> Option<&'a str> {
    object
        .get("metadata")?
        .get(map)?
        .get(key)?
        .as_str()
        .filter(|s| !s.is_empty())
}

fn ips(values: impl IntoIterator<Item = Option<String>>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in values.into_iter().flatten().filter_map(|s| s.parse().ok()) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

fn ports_of(list: Option<&Value>) -> Vec<ServicePort> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())?;
            let port = u16::try_from(p.get("port").and_then(Value::as_u64)?).ok()?;
            let protocol = p
                .get("protocol")
                .and_then(Value::as_str)
                .unwrap_or("TCP")
                .to_ascii_lowercase();
            Some(ServicePort {
                name: name.to_ascii_lowercase(),
                protocol,
                port,
            })
        })
        .collect()
}

impl TenantIndex {
    pub fn new(tenant: DnsTenant) -> Self {
        Self {
            tenant,
            services: HashMap::new(),
            service_names: HashMap::new(),
            endpoints: HashMap::new(),
            pods: HashMap::new(),
        }
    }

    pub fn tenant(&self) -> &DnsTenant {
        &self.tenant
    }

    /// The host name and tenant identity of a host object of this tenant, `None`
    /// for anything else (another tenant, another namespace, not ours).
    fn identity(&self, object: &Value) -> Option<(String, String, String)> {
        let host_name = str_at(object, "/metadata/name")?;
        if str_at(object, "/metadata/namespace") != Some(self.tenant.host_namespace.as_str())
            || metadata_str(object, "labels", LABEL_MANAGED_BY) != Some(MANAGED_BY_VALUE)
            || metadata_str(object, "labels", LABEL_TENANT) != Some(self.tenant.tenant.as_str())
        {
            return None;
        }
        let namespace = metadata_str(object, "annotations", ANNOTATION_VIRTUAL_NAMESPACE)?;
        let name = metadata_str(object, "annotations", ANNOTATION_VIRTUAL_NAME)?;
        Some((
            host_name.to_owned(),
            namespace.to_ascii_lowercase(),
            name.to_ascii_lowercase(),
        ))
    }

    /// Adds or replaces a host Service. Anything not of this tenant is ignored
    /// (and removes a former entry of that host name).
    pub fn apply_service(&mut self, object: &Value) {
        let Some((host_name, namespace, name)) = self.identity(object) else {
            if let Some(host_name) = str_at(object, "/metadata/name") {
                self.delete_service(host_name);
            }
            return;
        };
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        let cluster_ip = spec.get("clusterIP").and_then(Value::as_str);
        let shape = if kind == "ExternalName" {
            match spec.get("externalName").and_then(Value::as_str) {
                Some(target) if !target.is_empty() => {
                    ServiceShape::ExternalName(super::name::normalize(target))
                }
                _ => return self.delete_service(&host_name),
            }
        } else if cluster_ip == Some("None") {
            ServiceShape::Headless
        } else {
            let listed = spec
                .get("clusterIPs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().map(str::to_owned));
            let all = ips(std::iter::once(cluster_ip.map(str::to_owned)).chain(listed));
            ServiceShape::ClusterIp(all)
        };
        self.delete_service(&host_name);
        self.service_names
            .insert((namespace.clone(), name.clone()), host_name.clone());
        self.services.insert(
            host_name,
            ServiceEntry {
                namespace,
                name,
                shape,
                ports: ports_of(spec.get("ports")),
            },
        );
    }

    pub fn delete_service(&mut self, host_name: &str) {
        if let Some(old) = self.services.remove(host_name) {
            let key = (old.namespace, old.name);
            if self.service_names.get(&key).map(String::as_str) == Some(host_name) {
                self.service_names.remove(&key);
            }
        }
    }

    /// Adds or replaces host Endpoints. Only those in the host namespace are kept;
    /// they count only while a Service of this tenant has their name.
    pub fn apply_endpoints(&mut self, object: &Value) {
        let Some(host_name) = str_at(object, "/metadata/name") else {
            return;
        };
        if str_at(object, "/metadata/namespace") != Some(self.tenant.host_namespace.as_str()) {
            self.endpoints.remove(host_name);
            return;
        }
        let mut addresses = Vec::new();
        for subset in object
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ports = ports_of(subset.get("ports"));
            for address in subset
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(ip) = str_at(address, "/ip").and_then(|s| s.parse().ok()) else {
                    continue;
                };
                let pod = (str_at(address, "/targetRef/kind") == Some("Pod"))
                    .then(|| str_at(address, "/targetRef/name").map(str::to_owned))
                    .flatten();
                addresses.push(EndpointAddress {
                    ip,
                    hostname: str_at(address, "/hostname")
                        .filter(|h| !h.is_empty())
                        .map(str::to_ascii_lowercase),
                    pod,
                    ports: ports.clone(),
                });
            }
        }
        self.endpoints.insert(host_name.to_owned(), addresses);
    }

    pub fn delete_endpoints(&mut self, host_name: &str) {
        self.endpoints.remove(host_name);
    }

    /// Adds or replaces a host Pod of this tenant.
    pub fn apply_pod(&mut self, object: &Value) {
        let Some((host_name, namespace, _)) = self.identity(object) else {
            if let Some(host_name) = str_at(object, "/metadata/name") {
                self.pods.remove(host_name);
            }
            return;
        };
        let listed = object
            .pointer("/status/podIPs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| str_at(v, "/ip").map(str::to_owned));
        let pod_ips =
            ips(std::iter::once(str_at(object, "/status/podIP").map(str::to_owned)).chain(listed));
        let ready = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| str_at(c, "/type") == Some("Ready") && str_at(c, "/status") == Some("True"));
        let label = |field: &str| {
            str_at(object, field)
                .filter(|s| !s.is_empty())
                .map(str::to_ascii_lowercase)
        };
        self.pods.insert(
            host_name,
            PodEntry {
                namespace,
                hostname: label("/spec/hostname"),
                subdomain: label("/spec/subdomain"),
                ips: pod_ips,
                ready,
            },
        );
    }

    pub fn delete_pod(&mut self, host_name: &str) {
        self.pods.remove(host_name);
    }

    /// The Service `namespace/name` of this tenant, with its host name.
    pub fn service(&self, namespace: &str, name: &str) -> Option<(&str, &ServiceEntry)> {
        let host = self
            .service_names
            .get(&(namespace.to_owned(), name.to_owned()))?;
        self.services.get(host).map(|s| (host.as_str(), s))
    }

    /// Ready endpoints of a headless Service, each with the hostname its records
    /// use. An address naming a Pod that is not this tenant's is dropped: a host
    /// selector that selected too much still cannot leak another tenant's Pods.
    pub fn ready_endpoints(&self, host_service: &str, service: &ServiceEntry) -> Vec<Endpoint> {
        let mut out: Vec<Endpoint> = Vec::new();
        for address in self.endpoints.get(host_service).into_iter().flatten() {
            let pod = match &address.pod {
                Some(pod) => match self.pods.get(pod) {
                    Some(entry) if entry.namespace == service.namespace => Some(entry),
                    _ => continue,
                },
                None => None,
            };
            // The host Endpoints controller cannot know a Pod's tenant subdomain (it
            // compares it with the host Service name), so take it from the Pod.
            let hostname = pod
                .filter(|p| p.subdomain.as_deref() == Some(service.name.as_str()))
                .and_then(|p| p.hostname.clone())
                .or_else(|| address.hostname.clone())
                .unwrap_or_else(|| dashed(address.ip));
            out.push(Endpoint {
                ip: address.ip,
                hostname,
                ports: address.ports.clone(),
            });
        }
        out.sort_by(|a, b| (&a.hostname, a.ip).cmp(&(&b.hostname, b.ip)));
        out
    }

    /// IPs of ready Pods of `service`'s namespace with `hostname` and the Service's
    /// name as subdomain: their record exists even before (or without) an Endpoints
    /// address, as with kube-dns.
    pub fn pod_hostname_ips(&self, service: &ServiceEntry, hostname: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        for pod in self.pods.values() {
            if pod.namespace == service.namespace
                && pod.ready
                && pod.subdomain.as_deref() == Some(service.name.as_str())
                && pod.hostname.as_deref() == Some(hostname)
            {
                for ip in &pod.ips {
                    if !out.contains(ip) {
                        out.push(*ip);
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Forgets every Service (before a relist).
    pub fn clear_services(&mut self) {
        self.services.clear();
        self.service_names.clear();
    }

    pub fn clear_endpoints(&mut self) {
        self.endpoints.clear();
    }

    pub fn clear_pods(&mut self) {
        self.pods.clear();
    }

    /// How many Services the index holds (for logs and tests).
    pub fn service_count(&self) -> usize {
        self.services.len()
    }
}

/// One endpoint of a headless Service, as its records show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub hostname: String,
    pub ports: Vec<ServicePort>,
}

/// The endpoint name CoreDNS gives an address without a hostname: `10-1-2-3`.
pub fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6.to_string().replace(':', "-"),
    }
}
