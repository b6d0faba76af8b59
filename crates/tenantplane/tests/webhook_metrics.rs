//! The webhook's `/metrics`: a real API server calls `tenantplane webhook` over TLS
//! (registered as `tenantplane render webhookconfiguration` prints it); an allowed
//! and a denied TenantCluster show up as requests by answer and in the latency
//! histogram, scraped from the webhook's own HTTPS port.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tenantplane_api::TenantCluster;
use tenantplane_testenv::TestEnv;

const DEADLINE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn start_webhook(tls: &Path) -> (Process, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["webhook", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .arg("--tls-cert")
        .arg(tls.join("tls.crt"))
        .arg("--tls-key")
        .arg(tls.join("tls.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the webhook");
    let stderr = child.stderr.take().unwrap();
    let process = Process(child);
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && value["fields"]["listen"].is_string()
            {
                tx.send(value).ok();
            }
        }
    });
    let started = rx.recv_timeout(DEADLINE).expect("the webhook listens");
    let addr = started["fields"]["listen"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (process, addr)
}

/// The value of the sample `name{labels}` in a text exposition, 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn tenant_cluster(name: &str, version: &str) -> TenantCluster {
    serde_json::from_value(
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        "metadata": {"name": name, "namespace": "team-dev"},
        "spec": {"kubernetesVersion": version, "isolationProfileRef": {"name": "restricted"},
                 "syncPolicyRef": {"name": "default"}}}),
    )
    .unwrap()
}

#[tokio::test]
async fn webhook_metrics_count_denials_and_latency_of_real_admission_calls() {
    let env = TestEnv::start_shared().await.unwrap();
    let server = crate::servers::host_with_crds().await;
    let client = server.client().await.unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-dev"}})).unwrap(),
        )
        .await
        .unwrap();

    let cert = env.ca().issue(&["127.0.0.1"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, env.ca().cert_pem()).unwrap();
    let (_webhook, addr) = start_webhook(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["render", "webhookconfiguration", "-o", "json"])
        .arg("--ca-bundle")
        .arg(&ca)
        .args(["--url", &format!("https://{addr}/validate")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config: ValidatingWebhookConfiguration = serde_json::from_slice(&out.stdout).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .unwrap();

    let scrape = || {
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert"])
            .arg(&ca)
            .arg(format!("https://{addr}/metrics"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    const DENIED: &str = "tenantplane_webhook_requests_total{path=\"/validate\",allowed=\"false\"}";
    const ALLOWED: &str = "tenantplane_webhook_requests_total{path=\"/validate\",allowed=\"true\"}";
    const OBSERVED: &str = "tenantplane_webhook_latency_seconds_count{path=\"/validate\"}";
    assert_eq!(sample(&scrape(), DENIED), 0.0);

    // The configuration takes effect within moments: poll until the unsupported
    // version is denied (by the webhook: the schema accepts it).
    let tcs = Api::<TenantCluster>::namespaced(client.clone(), "team-dev");
    let start = Instant::now();
    loop {
        match tcs
            .create(&PostParams::default(), &tenant_cluster("legacy", "v1.27"))
            .await
        {
            Err(kube::Error::Api(status)) if status.message.contains("denied the request") => break,
            Err(err) => panic!("{err}"),
            Ok(_) => {
                tcs.delete("legacy", &Default::default()).await.unwrap();
                assert!(
                    start.elapsed() < DEADLINE,
                    "the webhook was never consulted"
                );
                tokio::time::sleep(POLL).await;
            }
        }
    }
    tcs.create(&PostParams::default(), &tenant_cluster("dev", "v1.31"))
        .await
        .unwrap();

    let text = scrape();
    assert_eq!(sample(&text, DENIED), 1.0, "{text}");
    assert!(sample(&text, ALLOWED) >= 1.0, "{text}");
    assert!(sample(&text, OBSERVED) >= 2.0, "{text}");
    assert!(
        text.contains("# TYPE tenantplane_webhook_latency_seconds histogram"),
        "{text}"
    );
    // Paths the webhook does not serve never become label values.
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "--cacert"])
        .arg(&ca)
        .arg(format!("https://{addr}/scan-me"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!scrape().contains("scan-me"));
}
