//! On a real node (containerd, kubelet): `kubectl logs` (and `logs -f`), `exec` (and
//! `exec -i`, `exec -it` on a real terminal) and `port-forward` run in the
//! TENANT, against the tenant API server, reach the real container through
//! tenantplane's kubelet endpoint and the host API server. Needs root; skipped with
//! a message otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;
use tenantplane_testenv::RealNode;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// Real containers start in seconds, but this machine is shared and busy.
const REAL: Duration = Duration::from_secs(120);

/// `kubectl` against the tenant API server; (success, stdout, stderr).
fn tenant_kubectl(w: &World, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .arg(format!(
            "--kubeconfig={}",
            w.h.tenant_server.kubeconfig_path().display()
        ))
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl on PATH");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_and_exec_in_the_tenant_reach_the_real_container() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let w = World::start().await;
    let node = RealNode::start(&w.h.host_server).await.expect("real node");
    create(
        &w.h.tenant,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web", "namespace": "shop"},
               "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                   "name": "main", "image": "local/busybox:1", "imagePullPolicy": "Never",
                   "command": ["sh", "-c",
                       "echo web-started; echo tenant-page > /www/index.html; exec httpd -f -p 8080 -h /www"]}]}}),
    )
    .await;
    let tenant_pods: Api<Pod> = Api::namespaced(w.h.tenant.clone(), "shop");
    eventually_within("tenant Pod web Running on a tenant Node", REAL, || async {
        let pod = tenant_pods.get("web").await.ok()?;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        (running && pod.spec.as_ref()?.node_name.is_some()).then_some(())
    })
    .await;

    // kubectl logs in the tenant: the real container's output.
    let (_, out, _) = eventually_within("kubectl logs in the tenant", REAL, || async {
        let result = tenant_kubectl(&w, &["-n", "shop", "logs", "web"], None);
        (result.0 && result.1.contains("web-started")).then_some(result)
    })
    .await;
    assert_eq!(out, "web-started\n");

    // kubectl exec in the tenant: a command in the real container, and stdin.
    let (ok, out, err) = tenant_kubectl(
        &w,
        &["-n", "shop", "exec", "web", "--", "cat", "/www/index.html"],
        None,
    );
    assert!(ok, "kubectl exec failed: {err}");
    assert_eq!(out, "tenant-page\n");
    // The command reads one line rather than waiting for EOF: the host side speaks
    // v4.channel.k8s.io to a 1.20 kubelet, which has no way to close stdin alone.
    let (ok, out, err) = tenant_kubectl(
        &w,
        &[
            "-n",
            "shop",
            "exec",
            "-i",
            "web",
            "--",
            "sh",
            "-c",
            "read line; echo got:$line",
        ],
        Some("shout\n"),
    );
    assert!(ok, "kubectl exec -i failed: {err}");
    assert_eq!(out, "got:shout\n");
    let (ok, _, err) = tenant_kubectl(
        &w,
        &["-n", "shop", "exec", "web", "--", "sh", "-c", "exit 4"],
        None,
    );
    assert!(!ok);
    assert!(err.contains("exit code 4"), "{err}");

    // kubectl exec -it in the tenant: `script` gives kubectl a real terminal, so it
    // asks for a TTY; the container's shell sees one (`tty` names a pty) and
    // evaluates what was typed (the echo of the typed line shows `$((6*7))`, only
    // the shell's answer shows 42).
    let kubeconfig = format!(
        "--kubeconfig={}",
        w.h.tenant_server.kubeconfig_path().display()
    );
    let typed = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!(
            "kubectl {kubeconfig} --request-timeout=30s -n shop exec -it web -- sh"
        ))
        .arg("/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script (util-linux) on PATH");
    let mut typed = typed;
    typed
        .stdin
        .take()
        .unwrap()
        .write_all(b"tty; echo typed-$((6*7)); exit\n")
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), typed.wait_with_output())
        .await
        .expect("kubectl exec -it ended within 60 s")
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl exec -it failed: {shown} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("/dev/pts/"),
        "no TTY in the container: {shown}"
    );
    assert!(
        shown.contains("typed-42"),
        "the shell did not run the input: {shown}"
    );

    // kubectl logs -f in the tenant: the stream stays open and shows a line the
    // container writes after it started (to PID 1's stdout, the log the kubelet keeps).
    let mut follow = tokio::process::Command::new("kubectl")
        .arg(&kubeconfig)
        .args(["-n", "shop", "logs", "-f", "web"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut followed = tokio::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), followed.next_line())
        .await
        .expect("kubectl logs -f printed within 60 s")
        .unwrap();
    assert_eq!(first.as_deref(), Some("web-started"));
    let (ok, _, err) = tenant_kubectl(
        &w,
        &[
            "-n",
            "shop",
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "echo followed-line > /proc/1/fd/1",
        ],
        None,
    );
    assert!(ok, "writing a log line failed: {err}");
    let next = tokio::time::timeout(Duration::from_secs(60), followed.next_line())
        .await
        .expect("kubectl logs -f showed the new line within 60 s")
        .unwrap();
    assert_eq!(next.as_deref(), Some("followed-line"));
    follow.kill().await.unwrap();

    // kubectl port-forward in the tenant: an HTTP request reaches the container's
    // httpd through the endpoint, the host API server and the real kubelet.
    let mut forward = tokio::process::Command::new("kubectl")
        .arg(format!(
            "--kubeconfig={}",
            w.h.tenant_server.kubeconfig_path().display()
        ))
        .args(["-n", "shop", "port-forward", "pod/web", ":8080"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(forward.stdout.take().unwrap()).lines();
    let local_port: u16 = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("kubectl port-forward printed its port within 60 s")
            .unwrap()
            .expect("kubectl port-forward ended early");
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local_port))
        .await
        .unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_string(&mut answer))
        .await
        .expect("the web page within 30 s")
        .unwrap();
    assert!(
        answer.starts_with("HTTP/1.") && answer.ends_with("tenant-page\n"),
        "{answer}"
    );
    forward.kill().await.unwrap();

    w.stop().await;
    drop(node);
}
