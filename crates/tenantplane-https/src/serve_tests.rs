//! The accept loop over a real TLS connection: answers while serving, lets a
//! request in flight finish at shutdown, and leaves nothing listening afterwards.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};

use crate::{ClientAuth, serve_router, server_config_from_pem};

fn certificate() -> (String, String) {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("self-signed certificate");
    (generated.cert.pem(), generated.signing_key.serialize_pem())
}

async fn get_over_tls(port: u16, cert_pem: &str, path: &str) -> std::io::Result<String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let cert = CertificateDer::from_pem_slice(cert_pem.as_bytes()).expect("PEM");
    roots.add(cert).expect("root");
    let config = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("localhost").expect("name");
    let mut tls = connector.connect(name, tcp).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await?;
    Ok(answer)
}

#[tokio::test]
async fn serves_finishes_the_request_in_flight_and_then_stops_listening() {
    let (cert, key) = certificate();
    let tls = server_config_from_pem(cert.as_bytes(), key.as_bytes(), |_| ClientAuth::None)
        .expect("config");
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let started_tx = Arc::new(std::sync::Mutex::new(Some(started_tx)));
    let release = Arc::new(Notify::new());
    let release_slow = release.clone();
    let app = Router::new()
        .route("/fast", get(|| async { "fast\n" }))
        .route(
            "/slow",
            get(move || {
                let started = started_tx.clone();
                let release = release_slow.clone();
                async move {
                    if let Some(tx) = started.lock().expect("lock").take() {
                        let _ = tx.send(());
                    }
                    release.notified().await;
                    "slow\n"
                }
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve_router(listener, tls, app, async move {
        let _ = stop_rx.await;
    }));

    let fast = get_over_tls(port, &cert, "/fast")
        .await
        .expect("fast answer");
    assert!(fast.starts_with("HTTP/1.1 200"), "{fast}");
    assert!(fast.ends_with("fast\n"), "{fast}");

    let cert_for_slow = cert.clone();
    let slow = tokio::spawn(async move { get_over_tls(port, &cert_for_slow, "/slow").await });
    started_rx
        .await
        .expect("the slow request reached its handler");
    stop_tx.send(()).expect("server still running");
    // The listener closes at shutdown while the slow request is still in flight.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepting after shutdown"
        );
        tokio::task::yield_now().await;
    }
    assert!(
        !server.is_finished(),
        "returned before the request in flight finished"
    );
    release.notify_one();
    let slow = slow.await.expect("join").expect("slow answer");
    assert!(
        slow.ends_with("slow\n"),
        "the request in flight was cut off: {slow}"
    );
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server returns once drained")
        .expect("join");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_does_not_block_others() {
    let (cert, key) = certificate();
    let tls = server_config_from_pem(cert.as_bytes(), key.as_bytes(), |_| ClientAuth::None)
        .expect("config");
    let app = Router::new().route("/fast", get(|| async { "fast\n" }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let server = tokio::spawn(serve_router(listener, tls, app, std::future::pending()));
    // Opens TCP and says nothing.
    let _silent = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let fast = tokio::time::timeout(Duration::from_secs(5), get_over_tls(port, &cert, "/fast"))
        .await
        .expect("answered while another client stalls its handshake")
        .expect("fast answer");
    assert!(fast.ends_with("fast\n"), "{fast}");
    server.abort();
}
