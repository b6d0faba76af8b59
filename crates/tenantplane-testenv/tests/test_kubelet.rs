//! The test kubelet behind a real host API server: logs, exec, attach and
//! port-forward through `pods/*` subresources with kube-rs and with real kubectl.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, LogParams, PostParams};
use kube::{Api, Client};
use tenantplane_testenv::test_kubelet::stream::SPDY_REFUSAL;
use tenantplane_testenv::{
    ApiServerOptions, PooledServer, RecordedRequest, ServerPool, TestKubelet, TestKubeletOptions,
};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt, AsyncWriteExt};

const NS: &str = "default";
const POD: &str = "web-7d4f9";
const NODE: &str = "test-node-1";
const DEADLINE: Duration = Duration::from_secs(30);

/// Bounds a step so a broken stream fails the test instead of hanging it.
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {DEADLINE:?}: {what}"))
}

/// Host API servers, handed on from test to test (this binary's modules run as one
/// process): each test registers its kubelet and Pod on a server reset to how it
/// started.
static HOSTS: ServerPool = ServerPool::new();

async fn host() -> PooledServer {
    HOSTS
        .take_with(ApiServerOptions::new("host"))
        .await
        .unwrap()
}

/// A host API server, a test kubelet registered as its Node, and host Pod `POD`
/// bound to it and Running.
async fn setup() -> (PooledServer, TestKubelet, Client) {
    let host = host().await;
    let kubelet = TestKubelet::start(&host, NODE).await.unwrap();
    let client = host.client().await.unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": POD, "namespace": NS },
        "spec": { "containers": [{ "name": "app", "image": "busybox" }] },
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    kubelet.bind_pod(&client, NS, POD).await.unwrap();
    (host, kubelet, client)
}

fn last_request(kubelet: &TestKubelet, path_prefix: &str) -> RecordedRequest {
    kubelet
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.starts_with(path_prefix))
        .unwrap_or_else(|| panic!("no request to {path_prefix}; got {:?}", kubelet.requests()))
}

fn lines(from: usize, to: usize) -> String {
    (from..=to)
        .map(|n| format!("log line {n} from {NS}/{POD}/app\n"))
        .collect()
}

#[tokio::test]
async fn node_and_pod_are_registered_for_the_api_server() {
    let (_host, kubelet, client) = setup().await;
    let node = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(NODE)
        .await
        .unwrap();
    let status = node.status.unwrap();
    let addresses = status.addresses.unwrap();
    assert_eq!(addresses.len(), 1);
    assert_eq!(addresses[0].type_, "InternalIP");
    assert_eq!(addresses[0].address, "127.0.0.1");
    let port = status
        .daemon_endpoints
        .unwrap()
        .kubelet_endpoint
        .unwrap()
        .port;
    assert_eq!(port, i32::from(kubelet.port()));
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");

    let pod = Api::<Pod>::namespaced(client, NS).get(POD).await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(NODE));
    let status = pod.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.container_statuses.unwrap()[0].ready);
}

#[tokio::test]
async fn kube_rs_logs_through_the_host_api_server() {
    let (_host, kubelet, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client, NS);

    let all = pods.logs(POD, &LogParams::default()).await.unwrap();
    assert_eq!(all, lines(1, 10));
    let request = last_request(&kubelet, "/containerLogs/");
    assert_eq!(request.path, format!("/containerLogs/{NS}/{POD}/app"));
    assert_eq!(request.method, "GET");
    assert_eq!(request.status, 200);

    let tail = LogParams {
        tail_lines: Some(3),
        timestamps: true,
        ..LogParams::default()
    };
    let text = pods.logs(POD, &tail).await.unwrap();
    assert_eq!(
        text,
        format!(
            "2026-01-01T00:00:08.000000000Z log line 8 from {NS}/{POD}/app\n\
             2026-01-01T00:00:09.000000000Z log line 9 from {NS}/{POD}/app\n\
             2026-01-01T00:00:10.000000000Z log line 10 from {NS}/{POD}/app\n"
        )
    );
    let request = last_request(&kubelet, "/containerLogs/");
    assert_eq!(request.param("tailLines"), Some("3"));
    assert_eq!(request.param("timestamps"), Some("true"));

    // Follow: the 10 lines there are, then more as they are "written".
    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let stream = pods.log_stream(POD, &follow).await.unwrap();
    let mut stream_lines = stream.lines();
    let mut got = String::new();
    for _ in 0..13 {
        let line = bounded("a followed log line", stream_lines.next())
            .await
            .unwrap()
            .unwrap();
        got.push_str(&line);
        got.push('\n');
    }
    assert_eq!(got, lines(1, 13));
    drop(stream_lines);
    let request = last_request(&kubelet, "/containerLogs/");
    assert_eq!(request.param("follow"), Some("true"));
}

#[tokio::test]
async fn follow_ends_at_the_configured_limit() {
    let host = host().await;
    let options = TestKubeletOptions {
        follow_limit: Some(12),
        follow_interval: Duration::from_millis(10),
        ..TestKubeletOptions::default()
    };
    let kubelet = TestKubelet::start_with(&host, NODE, options).await.unwrap();
    let client = host.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": POD, "namespace": NS },
        "spec": { "containers": [{ "name": "app", "image": "busybox" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    kubelet.bind_pod(&client, NS, POD).await.unwrap();
    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let stream = pods.log_stream(POD, &follow).await.unwrap();
    let all: Vec<String> = bounded(
        "the followed log to end",
        stream.lines().map(|l| l.unwrap()).collect(),
    )
    .await;
    assert_eq!(all.len(), 12);
    assert_eq!(all[11], format!("log line 12 from {NS}/{POD}/app"));
}

async fn read_all(mut reader: impl tokio::io::AsyncRead + Unpin) -> String {
    let mut out = String::new();
    bounded(
        "reading a stream to its end",
        reader.read_to_string(&mut out),
    )
    .await
    .unwrap();
    out
}

#[tokio::test]
async fn kube_rs_exec_attach_and_portforward_through_the_host_api_server() {
    let (_host, kubelet, client) = setup().await;
    let pods: Api<Pod> = Api::namespaced(client, NS);

    // echo, no stdin.
    let mut process = pods
        .exec(
            POD,
            ["echo", "hello", "world"],
            &AttachParams::default().stderr(false),
        )
        .await
        .unwrap();
    let stdout = read_all(process.stdout().unwrap()).await;
    let status = bounded("exec status", process.take_status().unwrap())
        .await
        .unwrap();
    assert_eq!(stdout, "hello world\n");
    assert_eq!(status.status.as_deref(), Some("Success"));
    let request = last_request(&kubelet, "/exec/");
    assert_eq!(request.path, format!("/exec/{NS}/{POD}/app"));
    assert_eq!(request.param_values("command"), ["echo", "hello", "world"]);
    assert_eq!(request.param("output"), Some("1"));
    assert_eq!(request.param("input"), None);
    assert_eq!(request.status, 101);
    assert_eq!(request.protocol.as_deref(), Some("v5.channel.k8s.io"));
    assert_eq!(
        request.offered_protocols(),
        ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    );

    // cat with stdin: what goes in comes out; closing stdin ends it.
    let mut process = pods
        .exec(
            POD,
            ["cat"],
            &AttachParams::default().stdin(true).stderr(false),
        )
        .await
        .unwrap();
    let mut stdin = process.stdin().unwrap();
    let stdout = process.stdout().unwrap();
    let status = process.take_status().unwrap();
    stdin.write_all(b"first line\n").await.unwrap();
    stdin.write_all(b"second line\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let out = read_all(stdout).await;
    assert_eq!(out, "first line\nsecond line\n");
    let status = bounded("cat status", status).await.unwrap();
    assert_eq!(status.status.as_deref(), Some("Success"));
    assert_eq!(last_request(&kubelet, "/exec/").param("input"), Some("1"));

    // A failing command: the exit code in the status channel.
    let mut process = pods
        .exec(POD, ["sh", "-c", "exit 3"], &AttachParams::default())
        .await
        .unwrap();
    let status = bounded("failing exec status", process.take_status().unwrap())
        .await
        .unwrap();
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let causes = status.details.unwrap().causes.unwrap();
    assert_eq!(causes[0].reason.as_deref(), Some("ExitCode"));
    assert_eq!(causes[0].message.as_deref(), Some("3"));

    let mut process = pods
        .exec(POD, ["false"], &AttachParams::default())
        .await
        .unwrap();
    let status = bounded("false status", process.take_status().unwrap())
        .await
        .unwrap();
    let causes = status.details.unwrap().causes.unwrap();
    assert_eq!(causes[0].message.as_deref(), Some("1"));

    // Any other command says what it ran.
    let mut process = pods
        .exec(
            POD,
            ["ls", "-l", "/"],
            &AttachParams::default().stderr(false),
        )
        .await
        .unwrap();
    assert_eq!(read_all(process.stdout().unwrap()).await, "ran: ls -l /\n");

    // attach with stdin.
    let mut process = pods
        .attach(POD, &AttachParams::default().stdin(true).stderr(false))
        .await
        .unwrap();
    let mut stdin = process.stdin().unwrap();
    let stdout = process.stdout().unwrap();
    stdin.write_all(b"typed\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let out = read_all(stdout).await;
    assert_eq!(out, format!("attached to {NS}/{POD}/app\ntyped\n"));
    let request = last_request(&kubelet, "/attach/");
    assert_eq!(request.path, format!("/attach/{NS}/{POD}/app"));

    // port-forward: an echo server on every port.
    let mut forwarder = pods.portforward(POD, &[8080, 9090]).await.unwrap();
    for (port, text) in [(8080, &b"ping 8080"[..]), (9090, &b"ping 9090"[..])] {
        let mut stream = forwarder.take_stream(port).unwrap();
        stream.write_all(text).await.unwrap();
        let mut echoed = vec![0; text.len()];
        bounded("port-forward echo", stream.read_exact(&mut echoed))
            .await
            .unwrap();
        assert_eq!(echoed, text);
    }
    let request = last_request(&kubelet, "/portForward/");
    assert_eq!(request.path, format!("/portForward/{NS}/{POD}"));
    // The API server passes the ports on as kube-rs sent them, comma-separated.
    assert_eq!(request.param_values("port").join(","), "8080,9090");
    assert_eq!(request.protocol.as_deref(), Some("v4.channel.k8s.io"));
    forwarder.abort();
}

/// The real kubectl against the host API server: the kubelet sees what a real
/// kubelet would.
#[tokio::test]
async fn kubectl_logs_exec_through_the_host_api_server() {
    let (host, kubelet, _client) = setup().await;
    let kubeconfig = host.kubeconfig_path();
    let kubectl = |args: &[&str]| {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", NS])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    };
    let run = |args: &'static [&'static str]| {
        let mut command = kubectl(args);
        async move { bounded("kubectl", command.output()).await.unwrap() }
    };

    let out = run(&["logs", POD]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), lines(1, 10));

    // logs -f: the last line there is, then new ones; killed after 3.
    let mut child = kubectl(&["logs", "-f", "--tail=1", POD])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got = String::new();
    for _ in 0..3 {
        let line = bounded("kubectl logs -f line", reader.next_line())
            .await
            .unwrap()
            .unwrap();
        got.push_str(&line);
        got.push('\n');
    }
    child.kill().await.unwrap();
    assert_eq!(got, lines(10, 12));
    let request = last_request(&kubelet, "/containerLogs/");
    assert_eq!(request.param("follow"), Some("true"));
    assert_eq!(request.param("tailLines"), Some("1"));

    let out = run(&["exec", POD, "--", "echo", "hi"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "hi\n");
    let exec = last_request(&kubelet, "/exec/");
    eprintln!(
        "kubectl exec: offered {:?}, agreed {:?}, upgrade {:?}",
        exec.offered_protocols(),
        exec.protocol,
        exec.header("upgrade")
    );
    assert_eq!(exec.status, 101);
    assert_eq!(exec.protocol.as_deref(), Some("v5.channel.k8s.io"));

    let mut child = kubectl(&["exec", "-i", POD, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello from stdin\n").await.unwrap();
    drop(stdin);
    let out = bounded("kubectl exec -i cat", child.wait_with_output())
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "hello from stdin\n");
    assert_eq!(last_request(&kubelet, "/exec/").param("input"), Some("1"));

    let out = run(&["exec", POD, "--", "sh", "-c", "exit 3"]).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

/// kubectl port-forward speaks SPDY only (tunnelled over WebSocket first, then
/// plain): the test kubelet refuses both, so kubectl fails before it listens. This
/// records that limit; kube-rs's port-forward (WebSocket) is tested above.
#[tokio::test]
async fn kubectl_port_forward_is_refused_without_spdy() {
    let (host, kubelet, _client) = setup().await;
    let child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(host.kubeconfig_path())
        .args(["--namespace", NS, "port-forward", POD, "0:8080"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = bounded("kubectl port-forward to give up", child.wait_with_output())
        .await
        .unwrap();
    let forwards: Vec<RecordedRequest> = kubelet
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/portForward/"))
        .collect();
    for r in &forwards {
        eprintln!(
            "kubectl port-forward request: status {}, upgrade {:?}, offered {:?}",
            r.status,
            r.header("upgrade"),
            r.offered_protocols()
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("kubectl port-forward: {:?}, stderr {stderr}", out.status);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains(SPDY_REFUSAL), "{stderr}");
    assert!(
        !forwards.is_empty(),
        "kubectl port-forward reached the kubelet"
    );
    assert!(forwards.iter().all(|r| r.status == 400), "{forwards:?}");
}

/// Called directly: health, 404s (recorded) and the SPDY refusal.
#[tokio::test]
async fn direct_calls_health_not_found_and_spdy() {
    let kubelet = TestKubelet::serve(NODE, TestKubeletOptions::default())
        .await
        .unwrap();
    let mut config = kube::Config::new(kubelet.url().parse().unwrap());
    config.accept_invalid_certs = true;
    let client = Client::try_from(config).unwrap();
    let get = |path: &str| http::Request::get(path).body(Vec::new()).unwrap();

    assert_eq!(client.request_text(get("/healthz")).await.unwrap(), "ok");
    assert!(client.request_text(get("/stats/summary")).await.is_err());
    let request = last_request(&kubelet, "/stats/summary");
    assert_eq!(request.status, 404);

    let spdy = http::Request::post(format!("/exec/{NS}/{POD}/app?command=true&output=1"))
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(spdy).await.unwrap();
    assert_eq!(response.status(), 400);
    let body = http_body_util_collect(response).await;
    assert_eq!(body.trim(), SPDY_REFUSAL);
    let request = last_request(&kubelet, "/exec/");
    assert_eq!(request.status, 400);
    assert_eq!(request.header("upgrade"), Some("SPDY/3.1"));

    // Dropping the kubelet closes its port.
    let addr = kubelet.addr();
    drop(kubelet);
    tenantplane_testenv::eventually(
        &format!("{addr} to refuse connections after the kubelet was dropped"),
        DEADLINE,
        || async {
            tokio::net::TcpStream::connect(addr)
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
}

async fn http_body_util_collect(response: http::Response<kube::client::Body>) -> String {
    use http_body_util::BodyExt;
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}
