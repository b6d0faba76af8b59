//! The answer to one question, chosen from a [`TenantIndex`]: the records of
//! the kube-dns schema, NXDOMAIN for unknown names under the cluster domain, and
//! "forward" for everything else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::index::{Endpoint, ServiceEntry, ServiceShape, TenantIndex};
use super::name::{QueryName, parse};

/// The record types the schema answers; any other type gets an empty answer for a
/// name that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryType {
    A,
    Aaaa,
    Srv,
    Cname,
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    /// Target without the trailing dot.
    Cname(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        /// Target without the trailing dot.
        target: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Not under the cluster domain: ask the upstream.
    Forward,
    /// No such name under the cluster domain.
    NxDomain,
    /// The name exists; these records (possibly none) answer the type asked.
    Records(Vec<Record>),
}

/// Answers `qname`/`qtype` for the tenant of `index` under `domain` (normalised).
pub fn answer(index: &TenantIndex, qname: &str, qtype: QueryType, domain: &str) -> Answer {
    match parse(qname, domain) {
        QueryName::Outside => Answer::Forward,
        QueryName::Parent => Answer::Records(Vec::new()),
        QueryName::Unknown => Answer::NxDomain,
        QueryName::Service { namespace, service } => {
            let Some((host, entry)) = index.service(&namespace, &service) else {
                return Answer::NxDomain;
            };
            service_answer(index, host, entry, qtype, domain)
        }
        QueryName::Port {
            namespace,
            service,
            port,
            protocol,
        } => {
            let Some((host, entry)) = index.service(&namespace, &service) else {
                return Answer::NxDomain;
            };
            let records = srv_records(index, host, entry, domain, Some((&port, &protocol)));
            if records.is_empty() {
                Answer::NxDomain
            } else if qtype == QueryType::Srv {
                Answer::Records(records)
            } else {
                Answer::Records(Vec::new())
            }
        }
        QueryName::Endpoint {
            namespace,
            service,
            hostname,
        } => {
            let Some((host, entry)) = index.service(&namespace, &service) else {
                return Answer::NxDomain;
            };
            if entry.shape != ServiceShape::Headless {
                return Answer::NxDomain;
            }
            let mut ips: Vec<IpAddr> = index
                .ready_endpoints(host, entry)
                .into_iter()
                .filter(|e| e.hostname == hostname)
                .map(|e| e.ip)
                .collect();
            for ip in index.pod_hostname_ips(entry, &hostname) {
                if !ips.contains(&ip) {
                    ips.push(ip);
                }
            }
            if ips.is_empty() {
                Answer::NxDomain
            } else {
                Answer::Records(address_records(&ips, qtype))
            }
        }
    }
}

fn service_answer(
    index: &TenantIndex,
    host: &str,
    entry: &ServiceEntry,
    qtype: QueryType,
    domain: &str,
) -> Answer {
    let records = match (&entry.shape, qtype) {
        (ServiceShape::ExternalName(target), _) => vec![Record::Cname(target.clone())],
        (_, QueryType::Srv) => srv_records(index, host, entry, domain, None),
        (ServiceShape::ClusterIp(ips), _) => address_records(ips, qtype),
        (ServiceShape::Headless, _) => {
            let mut ips: Vec<IpAddr> = index
                .ready_endpoints(host, entry)
                .into_iter()
                .map(|e| e.ip)
                .collect();
            ips.sort();
            address_records(&ips, qtype)
        }
    };
    Answer::Records(records)
}

fn address_records(ips: &[IpAddr], qtype: QueryType) -> Vec<Record> {
    let mut seen: Vec<IpAddr> = Vec::new();
    let mut out = Vec::new();
    for ip in ips {
        if seen.contains(ip) {
            continue;
        }
        seen.push(*ip);
        match (ip, qtype) {
            (IpAddr::V4(v4), QueryType::A) => out.push(Record::A(*v4)),
            (IpAddr::V6(v6), QueryType::Aaaa) => out.push(Record::Aaaa(*v6)),
            _ => {}
        }
    }
    out
}

/// SRV records of the Service's named ports (only `wanted` when given): the
/// Service name as target for a ClusterIP Service, each ready endpoint's name for
/// a headless one.
fn srv_records(
    index: &TenantIndex,
    host: &str,
    entry: &ServiceEntry,
    domain: &str,
    wanted: Option<(&str, &str)>,
) -> Vec<Record> {
    let base = format!("{}.{}.svc.{domain}", entry.name, entry.namespace);
    let matches = |name: &str, protocol: &str| {
        wanted.is_none_or(|(port, proto)| port == name && proto == protocol)
    };
    let mut out = Vec::new();
    match &entry.shape {
        ServiceShape::ExternalName(_) => {}
        ServiceShape::ClusterIp(_) => {
            for p in entry.ports.iter().filter(|p| matches(&p.name, &p.protocol)) {
                out.push(Record::Srv {
                    priority: 0,
                    weight: 100,
                    port: p.port,
                    target: base.clone(),
                });
            }
        }
        ServiceShape::Headless => {
            let endpoints: Vec<Endpoint> = index.ready_endpoints(host, entry);
            let targets: Vec<(u16, String)> = endpoints
                .iter()
                .flat_map(|e| {
                    e.ports
                        .iter()
                        .filter(|p| matches(&p.name, &p.protocol))
                        .map(|p| (p.port, format!("{}.{base}", e.hostname)))
                })
                .collect();
            let weight = u16::try_from(100 / targets.len().max(1))
                .unwrap_or(1)
                .max(1);
            out.extend(targets.into_iter().map(|(port, target)| Record::Srv {
                priority: 0,
                weight,
                port,
                target,
            }));
        }
    }
    out
}
