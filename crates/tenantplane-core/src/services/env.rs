//! The service environment a Pod gets on a real cluster, from the tenant's own
//! Services. Host Pods run with `enableServiceLinks: false` (the host kubelet
//! would inject the host's Services, under host names); these variables, made as
//! kubelet's `envvars.FromServices` makes them, take their place.

use serde_json::{Value, json};

/// `my-svc` → `MY_SVC`, as the kubelet names variables.
fn variable_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// `host:port`, bracketing an IPv6 address (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The variables for `services` (the tenant Services of one virtual namespace),
/// in a stable order. Services without a ClusterIP (headless, ExternalName) or
/// without ports give none, as on a real cluster; the tenant API server's own
/// `kubernetes` Service is left out (a synced Pod gets its own `KUBERNETES_*`).
pub fn service_env(services: &[Value]) -> Vec<(String, String)> {
    let mut services: Vec<&Value> = services.iter().collect();
    services.sort_by_key(|s| s.pointer("/metadata/name").and_then(Value::as_str));
    let mut vars = Vec::new();
    for service in services {
        let Some(name) = service.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let namespace = service
            .pointer("/metadata/namespace")
            .and_then(Value::as_str);
        if name == "kubernetes" && namespace == Some("default") {
            continue;
        }
        let Some(ip) = super::address::cluster_ip(service) else {
            continue;
        };
        let ports: Vec<&Value> = service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .map(|p| p.iter().collect())
            .unwrap_or_default();
        let Some(first) = ports
            .first()
            .and_then(|p| p.get("port"))
            .and_then(Value::as_i64)
        else {
            continue;
        };
        let prefix = variable_name(name);
        vars.push((format!("{prefix}_SERVICE_HOST"), ip.to_owned()));
        vars.push((format!("{prefix}_SERVICE_PORT"), first.to_string()));
        for port in &ports {
            let (Some(port_name), Some(number)) = (
                port.get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty()),
                port.get("port").and_then(Value::as_i64),
            ) else {
                continue;
            };
            vars.push((
                format!("{prefix}_SERVICE_PORT_{}", variable_name(port_name)),
                number.to_string(),
            ));
        }
        // Docker-link variables.
        for (i, port) in ports.iter().enumerate() {
            let Some(number) = port.get("port").and_then(Value::as_i64) else {
                continue;
            };
            let protocol = port
                .get("protocol")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!(
                "{}://{}",
                protocol.to_lowercase(),
                join_host_port(ip, number)
            );
            if i == 0 {
                vars.push((format!("{prefix}_PORT"), url.clone()));
            }
            let port_prefix = format!("{prefix}_PORT_{number}_{}", protocol.to_uppercase());
            vars.push((port_prefix.clone(), url));
            vars.push((format!("{port_prefix}_PROTO"), protocol.to_lowercase()));
            vars.push((format!("{port_prefix}_PORT"), number.to_string()));
            vars.push((format!("{port_prefix}_ADDR"), ip.to_owned()));
        }
    }
    vars
}

/// Adds `vars` to every container and init container of a host Pod `spec`,
/// unless the tenant Pod turned service links off. A container's own variable of
/// the same name wins; the service variables come first, so the container's
/// `$(VAR)` references to them expand as the kubelet expands them.
pub fn add_service_env(tenant_spec: &Value, host_spec: &mut Value, vars: &[(String, String)]) {
    if tenant_spec
        .get("enableServiceLinks")
        .and_then(Value::as_bool)
        == Some(false)
        || vars.is_empty()
    {
        return;
    }
    for list in ["containers", "initContainers"] {
        let Some(containers) = host_spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let own: Vec<Value> = container
                .get("env")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let defined = |name: &str| {
                own.iter()
                    .any(|e| e.get("name").and_then(Value::as_str) == Some(name))
            };
            let mut env: Vec<Value> = vars
                .iter()
                .filter(|(name, _)| !defined(name))
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect();
            env.extend(own.iter().cloned());
            container.insert("env".into(), Value::Array(env));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(name: &str, ip: &str, ports: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {"clusterIP": ip, "ports": ports}})
    }

    fn get<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn variables_are_the_kubelets() {
        let vars = service_env(&[svc(
            "my-db",
            "10.0.0.11",
            json!([{"name": "sql", "port": 5432}, {"name": "metrics-http", "port": 9187, "protocol": "TCP"}, {"port": 53, "protocol": "UDP", "name": "dns"}]),
        )]);
        let expected = [
            ("MY_DB_SERVICE_HOST", "10.0.0.11"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_SQL", "5432"),
            ("MY_DB_SERVICE_PORT_METRICS_HTTP", "9187"),
            ("MY_DB_SERVICE_PORT_DNS", "53"),
            ("MY_DB_PORT", "tcp://10.0.0.11:5432"),
            ("MY_DB_PORT_5432_TCP", "tcp://10.0.0.11:5432"),
            ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
            ("MY_DB_PORT_5432_TCP_PORT", "5432"),
            ("MY_DB_PORT_5432_TCP_ADDR", "10.0.0.11"),
            ("MY_DB_PORT_53_UDP", "udp://10.0.0.11:53"),
            ("MY_DB_PORT_53_UDP_PROTO", "udp"),
        ];
        for (name, value) in expected {
            assert_eq!(get(&vars, name), Some(value), "{name}: {vars:?}");
        }
        assert_eq!(vars.len(), 5 + 1 + 3 * 4);
    }

    #[test]
    fn services_without_an_address_or_ports_and_the_api_server_give_none() {
        let mut api = svc("kubernetes", "10.0.0.1", json!([{"port": 443}]));
        api["metadata"]["namespace"] = json!("default");
        let external = json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "x.example.com"}});
        let vars = service_env(&[
            svc("headless", "None", json!([{"port": 80}])),
            svc("portless", "10.0.0.5", json!([])),
            external,
            api,
        ]);
        assert!(vars.is_empty(), "{vars:?}");
        let v6 = service_env(&[svc("v6", "fd00::1", json!([{"port": 80}]))]);
        assert_eq!(get(&v6, "V6_PORT"), Some("tcp://[fd00::1]:80"));
    }

    #[test]
    fn the_containers_own_variable_wins_and_links_off_means_none() {
        let vars = service_env(&[svc("web", "10.0.0.7", json!([{"port": 80}]))]);
        let mut host = json!({"containers": [{"name": "a", "env": [{"name": "WEB_SERVICE_HOST", "value": "mine"}, {"name": "URL", "value": "$(WEB_PORT)"}]}],
                              "initContainers": [{"name": "i"}]});
        add_service_env(&json!({}), &mut host, &vars);
        let env = host["containers"][0]["env"].as_array().unwrap();
        let hosts: Vec<&Value> = env
            .iter()
            .filter(|e| e["name"] == "WEB_SERVICE_HOST")
            .collect();
        assert_eq!(
            hosts,
            [&json!({"name": "WEB_SERVICE_HOST", "value": "mine"})]
        );
        // Service variables first, so $(WEB_PORT) expands.
        let position = |n: &str| env.iter().position(|e| e["name"] == n).unwrap();
        assert!(position("WEB_PORT") < position("URL"));
        assert_eq!(
            host["initContainers"][0]["env"][0],
            json!({"name": "WEB_SERVICE_HOST", "value": "10.0.0.7"})
        );

        let mut off = json!({"containers": [{"name": "a"}]});
        add_service_env(&json!({"enableServiceLinks": false}), &mut off, &vars);
        assert!(off["containers"][0].get("env").is_none());
    }
}
