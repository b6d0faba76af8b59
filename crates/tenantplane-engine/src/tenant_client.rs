//! The client for a tenant API server: kube's own stack, but speaking HTTP/2
//! when the server offers it (ALPN), as client-go does.
//!
//! Hand-built because kube's `Client::try_from` enables HTTP/1.1 only, where
//! every open watch holds its own TLS connection: a tenant's watches and
//! requests then cost one TCP+TLS connection (with its buffers) each, which at
//! a thousand tenants is thousands of connections from one process. Over
//! HTTP/2 they share one connection per tenant, kept alive by pings so a dead
//! peer is noticed within [`KEEP_ALIVE_TIMEOUT`] rather than at the read
//! timeout. Nothing on the tenant side needs an HTTP/1.1 upgrade (exec,
//! attach and port-forward go to the host), and a server without HTTP/2
//! still gets HTTP/1.1.

use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ClientBuilder, ConfigExt};
use kube::{Client, Config};
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// How often an HTTP/2 connection is pinged, also while it only holds idle watches.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// A ping unanswered for this long closes the connection (and so ends its watches,
/// which restart on a new one).
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum TenantClientError {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("tls-server-name {name:?} is not a valid server name: {reason}")]
    ServerName { name: String, reason: String },
}

/// A client for `config`'s API server, multiplexed over HTTP/2 where offered.
pub fn tenant_client(config: Config) -> Result<Client, TenantClientError> {
    // Dialling through a proxy is kube's (its proxy connectors, or its error when
    // the proxy feature is off): such a tenant keeps kube's HTTP/1.1 client.
    if config.proxy_url.is_some() {
        return Ok(Client::try_from(config)?);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_client_config()?;
    let mut https = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let server_name =
            name.clone()
                .try_into()
                .map_err(|e: rustls::pki_types::InvalidDnsNameError| {
                    TenantClientError::ServerName {
                        name: name.clone(),
                        reason: e.to_string(),
                    }
                })?;
        https = https.with_server_name_resolver(FixedServerNameResolver::new(server_name));
    }
    let https = https.enable_all_versions().wrap_connector(http);
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);

    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then_some(RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        )))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A proxy-url goes to kube's own client, which (without its proxy feature)
    /// refuses it by name, as it did before tenant clients spoke HTTP/2.
    #[test]
    fn a_proxied_tenant_gets_kubes_answer_for_its_proxy() {
        let mut config = Config::new("https://tenant.example:6443".parse().unwrap());
        config.proxy_url = Some("http://proxy.example:3128".parse().unwrap());
        let error = tenant_client(config).err().unwrap();
        assert!(
            matches!(
                error,
                TenantClientError::Kube(kube::Error::ProxyProtocolDisabled { .. })
            ),
            "{error:?}"
        );
    }
}
