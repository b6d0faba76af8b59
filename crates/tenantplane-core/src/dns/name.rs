//! Which record a query name asks for, following the kube-dns/CoreDNS schema
//! (<https://github.com/kubernetes/dns/blob/master/docs/specification.md>). The
//! server answers FQDNs only: search paths and `ndots` are the client's business.

/// What a query name means under the cluster domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryName {
    /// Not under the cluster domain: forwarded upstream.
    Outside,
    /// `<svc>.<ns>.svc.<domain>`.
    Service { namespace: String, service: String },
    /// `<hostname>.<svc>.<ns>.svc.<domain>`: an endpoint of a headless Service.
    Endpoint {
        namespace: String,
        service: String,
        hostname: String,
    },
    /// `_<port>._<proto>.<svc>.<ns>.svc.<domain>`: an SRV name.
    Port {
        namespace: String,
        service: String,
        port: String,
        protocol: String,
    },
    /// `<domain>`, `svc.<domain>` or `<ns>.svc.<domain>`: names that exist (as
    /// parents of records) but hold no record themselves.
    Parent,
    /// Anything else under the domain: NXDOMAIN.
    Unknown,
}

/// Normalises a domain: lower case, no trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Classifies `qname` (any case, with or without the trailing dot) under `domain`
/// (already [`normalize`]d).
pub fn parse(qname: &str, domain: &str) -> QueryName {
    let name = normalize(qname);
    let rest = if name == domain {
        return QueryName::Parent;
    } else {
        match name.strip_suffix(domain).and_then(|r| r.strip_suffix('.')) {
            Some(rest) if !rest.is_empty() => rest,
            _ => return QueryName::Outside,
        }
    };
    // Labels from the domain outwards: svc, ns, svc-name, then hostname or _proto, _port.
    let mut labels: Vec<&str> = rest.split('.').collect();
    labels.reverse();
    if labels.iter().any(|l| l.is_empty()) {
        return QueryName::Unknown;
    }
    if labels.first() != Some(&"svc") {
        return QueryName::Unknown;
    }
    let owned = |s: &str| s.to_owned();
    match labels.as_slice() {
        [_] | [_, _] => QueryName::Parent,
        [_, ns, svc] => QueryName::Service {
            namespace: owned(ns),
            service: owned(svc),
        },
        [_, ns, svc, host] if !host.starts_with('_') => QueryName::Endpoint {
            namespace: owned(ns),
            service: owned(svc),
            hostname: owned(host),
        },
        [_, ns, svc, proto, port] => match (proto.strip_prefix('_'), port.strip_prefix('_')) {
            (Some(proto), Some(port)) if !proto.is_empty() && !port.is_empty() => QueryName::Port {
                namespace: owned(ns),
                service: owned(svc),
                port: owned(port),
                protocol: owned(proto),
            },
            _ => QueryName::Unknown,
        },
        _ => QueryName::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "cluster.local";

    #[test]
    fn service_names_in_any_case_with_or_without_dot() {
        let want = QueryName::Service {
            namespace: "default".into(),
            service: "web".into(),
        };
        assert_eq!(parse("web.default.svc.cluster.local.", D), want);
        assert_eq!(parse("WEB.Default.SVC.cluster.LOCAL", D), want);
    }

    #[test]
    fn srv_and_endpoint_names() {
        assert_eq!(
            parse("_http._tcp.web.default.svc.cluster.local.", D),
            QueryName::Port {
                namespace: "default".into(),
                service: "web".into(),
                port: "http".into(),
                protocol: "tcp".into()
            }
        );
        assert_eq!(
            parse("db-0.db.other.svc.cluster.local.", D),
            QueryName::Endpoint {
                namespace: "other".into(),
                service: "db".into(),
                hostname: "db-0".into()
            }
        );
        assert_eq!(
            parse("_x.web.default.svc.cluster.local", D),
            QueryName::Unknown
        );
        assert_eq!(
            parse("_.__tcp.web.default.svc.cluster.local", D),
            QueryName::Unknown
        );
    }

    #[test]
    fn outside_parent_and_unknown() {
        assert_eq!(parse("example.com.", D), QueryName::Outside);
        // A suffix match must end at a label boundary.
        assert_eq!(parse("evilcluster.local.", D), QueryName::Outside);
        assert_eq!(parse("cluster.local.", D), QueryName::Parent);
        assert_eq!(parse("svc.cluster.local.", D), QueryName::Parent);
        assert_eq!(parse("default.svc.cluster.local.", D), QueryName::Parent);
        assert_eq!(parse("x.pod.cluster.local.", D), QueryName::Unknown);
        assert_eq!(parse("a.b.c.d.svc.cluster.local.", D), QueryName::Unknown);
        assert_eq!(parse("a..svc.cluster.local.", D), QueryName::Unknown);
    }
}
