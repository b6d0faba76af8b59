//! Host and tenant API servers (the tenant one presenting a kubelet client
//! certificate), the controller with decision routes, and the kubelet endpoint,
//! all in-process; plus a raw HTTPS client for calling the endpoint directly.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use serde_json::json;
use tenantplane_engine::controller::{self, ControllerConfig};
use tenantplane_engine::decisions::DecisionRoutes;
use tenantplane_engine::metrics::Metrics;
use tenantplane_kubelet::{KubeletState, ServingCert, SharedRegistry};
use tenantplane_testenv::{
    ApiServerOptions, IssuedCert, PooledServer, ServerPool, TestEnv, TestKubelet,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

#[path = "../../../tenantplane-engine/tests/harness.rs"]
pub mod harness;

pub use harness::*;

pub const POD_KINDS: &[(&str, &str)] = &[("v1", "Pod")];
pub const KUBELET_SECRET: &str = "dev-kubelet-client";
/// The host node the TestKubelet plays.
pub const NODE: &str = "node-a";

pub struct World {
    pub h: Harness,
    /// The certificate the tenant API server presents to the kubelet endpoint.
    pub client_cert: IssuedCert,
    pub endpoint: std::net::SocketAddr,
    pub registry: SharedRegistry,
    pub shutdown: CancellationToken,
    pub controller: tokio::task::JoinHandle<()>,
}

/// The certificate every tenant API server of this binary presents to the kubelet
/// endpoint, its files in the directory of an environment kept for the process: one
/// for all, so the tenant servers' flags are the same and later ones start on the
/// first one's storage.
async fn kubelet_client_cert() -> &'static (TestEnv, IssuedCert) {
    static CERT: tokio::sync::OnceCell<(TestEnv, IssuedCert)> = tokio::sync::OnceCell::const_new();
    CERT.get_or_init(|| async {
        let env = TestEnv::start_shared().await.expect("etcd");
        env.remove_dir_at_exit()
            .expect("a directory removed at exit");
        let cert = env
            .ca()
            .issue(&["tenant-apiserver-kubelet-client"])
            .expect("cert");
        let dir = env.root().join("kubelet-client");
        std::fs::create_dir_all(&dir).expect("kubelet-client directory");
        std::fs::write(dir.join("tls.crt"), &cert.cert_pem).expect("tls.crt");
        std::fs::write(dir.join("tls.key"), &cert.key_pem).expect("tls.key");
        (env, cert)
    })
    .await
}

/// Tenant API servers that present [`kubelet_client_cert`], with [`tenant_crds`],
/// handed on from test to test as the harness's pools are.
static KUBELET_TENANT_POOL: ServerPool = ServerPool::new();

async fn pooled_kubelet_tenant() -> PooledServer {
    let dir = kubelet_client_cert().await.0.root().join("kubelet-client");
    let mut options = ApiServerOptions::new("tenant");
    options.crds = tenant_crds();
    options.extra_args = vec![
        format!(
            "--kubelet-client-certificate={}",
            dir.join("tls.crt").display()
        ),
        format!("--kubelet-client-key={}", dir.join("tls.key").display()),
    ];
    KUBELET_TENANT_POOL
        .take_with(options)
        .await
        .expect("tenant")
}

impl World {
    /// Servers, policy `pods`, tenant namespace `shop`, TenantCluster `dev` naming
    /// its kubelet client certificate, the controller and the endpoint.
    pub async fn start() -> World {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let env = TestEnv::start_shared().await.expect("etcd");
        let client_cert = kubelet_client_cert().await.1.clone();
        let (host_server, tenant_server) = tokio::join!(pooled_host(), pooled_kubelet_tenant());
        let h = Harness::set_up_with(env, host_server, tenant_server).await;
        create(&h.host, policy("pods", POD_KINDS, "2s")).await;
        create_namespace(&h.tenant, "shop").await;
        cert_secret(&h.host, KUBELET_SECRET, &client_cert.cert_pem).await;

        let shutdown = CancellationToken::new();
        let routes = DecisionRoutes::new();
        // Bound first, so the tenant Nodes the engine writes advertise its port.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.local_addr().unwrap();

        let (tx, _) = broadcast::channel(100_000);
        let config = ControllerConfig {
            host: h.host.clone(),
            metrics: Arc::new(Metrics::unregistered()),
            decisions: tx,
            instance: "test".into(),
            workers: 8,
            host_unreachable_release: HOST_UNREACHABLE_RELEASE,
            service_cidr: tenantplane_engine::provision::DEFAULT_SERVICE_CIDR.into(),
            dns: None,
            kubelet_endpoint: Some(tenantplane_core::pods::KubeletEndpoint {
                address: "127.0.0.1".into(),
                port: endpoint.port(),
            }),
            tenant_webhook: None,
            shards: None,
            namespace: None,
        };
        let controller = tokio::spawn(controller::run_with_routes(
            config,
            routes.clone(),
            shutdown.clone(),
        ));

        let serving = ServingCert::generate(&[]).unwrap();
        let tls = tenantplane_kubelet::server_config(&serving).unwrap();
        let registry = SharedRegistry::new();
        let app = tenantplane_kubelet::router(KubeletState {
            host: h.host.clone(),
            registry: registry.clone(),
            decisions: routes,
        });
        let stop = shutdown.clone();
        tokio::spawn(tenantplane_kubelet::serve(listener, tls, app, async move {
            stop.cancelled().await
        }));
        tokio::spawn(tenantplane_kubelet::feeder::run(
            h.host.clone(),
            registry.clone(),
            shutdown.clone(),
        ));

        create(
            &h.host,
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
                "metadata": {"name": "dev", "namespace": HOST_NS},
                "spec": {"isolationProfileRef": {"name": "fast"}, "syncPolicyRef": {"name": "pods"},
                    "controlPlane": {"external": {"kubeconfigSecretRef": {"name": "dev-kubeconfig"},
                        "kubeletClientCertificateSecretRef": {"name": KUBELET_SECRET}}}}}),
        )
        .await;
        let fingerprint =
            tenantplane_kubelet::registry::fingerprint_pem(client_cert.cert_pem.as_bytes())
                .unwrap();
        eventually(
            "the registry knows dev's kubelet client certificate",
            || {
                let registry = registry.clone();
                let fingerprint = fingerprint.clone();
                async move { registry.lookup(&fingerprint) }
            },
        )
        .await;
        World {
            h,
            client_cert,
            endpoint,
            registry,
            shutdown,
            controller,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.controller.await.unwrap();
    }

    /// `GET path` on the endpoint presenting `cert` (none: no client certificate).
    pub async fn get(&self, cert: Option<&IssuedCert>, path: &str) -> Result<Answer, String> {
        https_get(self.endpoint, cert, path).await
    }

    /// `POST path` (no body) on the endpoint presenting `cert`.
    pub async fn post(&self, cert: Option<&IssuedCert>, path: &str) -> Result<Answer, String> {
        https_request(self.endpoint, cert, "POST", path).await
    }

    /// Skip decisions of `dev` whose reason names the kubelet endpoint.
    pub async fn kubelet_skips(&self) -> Vec<serde_json::Value> {
        self.h
            .decisions("dev")
            .await
            .into_iter()
            .filter(|d| {
                d["action"] == "Skip"
                    && d["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("kubelet endpoint refused"))
            })
            .collect()
    }
}

/// Pod `shop/web`, synced to the host and bound to a host node played by a
/// TestKubelet; checks the tenant Node it is bound to advertises the endpoint.
/// Returns the kubelet and the host Pod's name.
pub async fn web_pod(w: &World) -> (TestKubelet, String) {
    // The host node, played by a test kubelet the host API server proxies to.
    let kubelet = TestKubelet::start(&w.h.host_server, NODE).await.unwrap();
    create(
        &w.h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}]}}),
    )
    .await;
    let host_name = predicted("web", "shop", "dev");
    wait_for(&w.h.host_api("v1", "Pod"), &host_name).await;
    kubelet
        .bind_pod(&w.h.host, HOST_NS, &host_name)
        .await
        .unwrap();
    // The engine binds the tenant Pod to the (virtual) tenant Node of that host
    // node, which advertises tenantplane's kubelet endpoint, not the host's.
    let tenant_pod = wait_for_that(
        &w.h.tenant_api("v1", "Pod", "shop"),
        "web",
        "bound to a tenant Node and Running",
        |p| p.data["spec"]["nodeName"].is_string() && p.data["status"]["phase"] == "Running",
    )
    .await;
    let node_name = tenant_pod.data["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(node_name, NODE, "the tenant sees the host node's name");
    let node = Api::<Node>::all(w.h.tenant.clone())
        .get(&node_name)
        .await
        .unwrap();
    let status = node.status.unwrap();
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        i32::from(w.endpoint.port())
    );
    let addresses: Vec<String> = status
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| a.address)
        .collect();
    assert_eq!(addresses, ["127.0.0.1"]);

    (kubelet, host_name)
}

pub async fn cert_secret(host: &Client, name: &str, cert_pem: &str) {
    let api: Api<Secret> = Api::namespaced(host.clone(), HOST_NS);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "tls.crt".to_owned(),
                ByteString(cert_pem.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret).await.unwrap();
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// The test trusts the endpoint's generated serving certificate blindly: what is
/// tested is the endpoint's check of the caller.
#[derive(Debug)]
struct TrustAnything(rustls::crypto::WebPkiSupportedAlgorithms);

impl ServerCertVerifier for TrustAnything {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// One `GET` over TLS; see [`https_request`].
pub async fn https_get(
    addr: std::net::SocketAddr,
    cert: Option<&IssuedCert>,
    path: &str,
) -> Result<Answer, String> {
    https_request(addr, cert, "GET", path).await
}

/// One bodiless request over TLS with `Connection: close`, read to the end (no
/// chunked bodies are expected on the paths this serves).
pub async fn https_request(
    addr: std::net::SocketAddr,
    cert: Option<&IssuedCert>,
    method: &str,
    path: &str,
) -> Result<Answer, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TrustAnything(
            provider.signature_verification_algorithms,
        )));
    let config = match cert {
        Some(cert) => {
            let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("TLS write: {e}"))?;
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw)
        .await
        .map_err(|e| format!("TLS read: {e}"))?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or(format!("no HTTP answer: {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("no status in {head:?}"))?;
    Ok(Answer {
        status,
        body: body.to_owned(),
    })
}
