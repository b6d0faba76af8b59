//! End to end with the real kubectl against the TENANT API server: `logs`,
//! `logs -f`, `exec -- echo` and `exec -i -- cat` reach the host Pod through
//! tenantplane's kubelet endpoint and the HOST API server, and the host-side
//! kubelet (a TestKubelet) sees the HOST Pod's name, never the tenant's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

async fn kubectl(w: &World, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let kubeconfig = w.h.tenant_server.kubeconfig_path();
    let mut command = tokio::process::Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("kubectl on PATH");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished within 60 s")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_and_exec_in_the_tenant_reach_the_host_pod() {
    let w = World::start().await;
    let (kubelet, host_name) = web_pod(&w).await;

    // kubectl logs: the host Pod's log, by the host Pod's name.
    let (ok, out, err) = kubectl(&w, &["-n", "shop", "logs", "web"], None).await;
    assert!(ok, "kubectl logs failed: {err}");
    assert!(
        out.contains(&format!("log line 1 from {HOST_NS}/{host_name}/app")),
        "{out}"
    );
    let (ok, out, err) = kubectl(&w, &["-n", "shop", "logs", "web", "--tail=2"], None).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");

    // kubectl logs -f: lines keep coming; read three, then stop it.
    let mut follow = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(w.h.tenant_server.kubeconfig_path())
        .args(["-n", "shop", "logs", "-f", "--tail=1", "web"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("a followed line within 30 s")
            .unwrap()
            .expect("the follow stream ended early");
        seen.push(line);
    }
    follow.kill().await.unwrap();
    assert!(seen.iter().all(|l| l.contains(&host_name)), "{seen:?}");

    // kubectl exec without stdin.
    let (ok, out, err) = kubectl(
        &w,
        &["-n", "shop", "exec", "web", "--", "echo", "hello", "tenant"],
        None,
    )
    .await;
    assert!(ok, "kubectl exec failed: {err}");
    assert_eq!(out, "hello tenant\n");

    // kubectl exec -i with stdin: cat echoes it back, and ends with stdin.
    let (ok, out, err) = kubectl(
        &w,
        &["-n", "shop", "exec", "-i", "web", "--", "cat"],
        Some("ping\npong\n"),
    )
    .await;
    assert!(ok, "kubectl exec -i failed: {err}");
    assert_eq!(out, "ping\npong\n");

    // A failing command's exit code comes through.
    let (ok, _, err) = kubectl(
        &w,
        &["-n", "shop", "exec", "web", "--", "sh", "-c", "exit 3"],
        None,
    )
    .await;
    assert!(!ok, "{err}");
    assert!(err.contains("exit code 3"), "{err}");

    // kubectl attach -i: the host Pod's container, stdin passed through.
    let (ok, out, err) = kubectl(
        &w,
        &["-n", "shop", "attach", "-i", "web", "-c", "app"],
        Some("hi\n"),
    )
    .await;
    assert!(ok, "kubectl attach failed: {err}");
    assert!(
        out.contains(&format!("attached to {HOST_NS}/{host_name}/app")),
        "{out}"
    );
    assert!(out.contains("hi\n"), "{out}");

    // The host kubelet saw only the host Pod, in the host namespace.
    let requests = kubelet.requests();
    let prefix = |kind: &str| format!("/{kind}/{HOST_NS}/{host_name}/app");
    assert!(
        requests.iter().any(|r| r.path == prefix("containerLogs")),
        "{requests:#?}"
    );
    assert!(
        requests.iter().any(|r| r.path == prefix("exec")),
        "{requests:#?}"
    );
    assert!(
        requests.iter().all(|r| !r.path.contains("/shop/")),
        "the host kubelet was asked for a tenant name: {requests:#?}"
    );
    // No refusal was recorded for these calls.
    assert!(w.kubelet_skips().await.is_empty());
    drop(kubelet);
    w.stop().await;
}

/// Runs `kubectl port-forward pod/web :8080` and checks four connections (two
/// one after the other, then two at once) each get their bytes echoed by the
/// host Pod's port. `websockets`: kubectl's `KUBECTL_PORT_FORWARD_WEBSOCKETS`.
async fn port_forward_echoes(w: &World, websockets: &str) {
    let mut forward = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(w.h.tenant_server.kubeconfig_path())
        .args(["-n", "shop", "port-forward", "pod/web", ":8080"])
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl on PATH");
    // kubectl's complaints, in the test's output when it fails.
    let mut complaints = BufReader::new(forward.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = complaints.next_line().await {
            println!("kubectl port-forward: {line}");
        }
    });
    let mut lines = BufReader::new(forward.stdout.take().unwrap()).lines();
    let local_port: u16 = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("kubectl port-forward printed its port within 60 s")
            .unwrap();
        let line = line.expect("kubectl port-forward ended early (its stderr is above)");
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Two connections, one after the other and then side by side: each gets its
    // own bytes echoed by the host Pod's port (the TestKubelet's echo server).
    let echo = |payload: &'static [u8]| async move {
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", local_port))
            .await
            .unwrap();
        conn.write_all(payload).await.unwrap();
        let mut back = vec![0u8; payload.len()];
        tokio::time::timeout(Duration::from_secs(30), conn.read_exact(&mut back))
            .await
            .expect("the echo within 30 s")
            .unwrap();
        assert_eq!(back, payload);
        conn
    };
    let first = echo(b"hello through the tenant").await;
    let second = echo(b"and a second connection").await;
    drop((first, second));
    let (a, b) = tokio::join!(echo(b"side"), echo(b"by side"));
    drop((a, b));
    forward.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_in_the_tenant_reaches_the_host_pod() {
    let w = World::start().await;
    let (kubelet, host_name) = web_pod(&w).await;
    // kubectl 1.32 tunnels SPDY in a WebSocket by default; with the tunnel off
    // it speaks plain SPDY/3.1. The endpoint serves both.
    port_forward_echoes(&w, "true").await;
    port_forward_echoes(&w, "false").await;

    // The host kubelet was asked for the host Pod's port-forward, never a tenant name.
    let requests = kubelet.requests();
    let path = format!("/portForward/{HOST_NS}/{host_name}");
    assert!(
        requests.iter().filter(|r| r.path == path).count() >= 8,
        "{requests:#?}"
    );
    assert!(
        requests.iter().all(|r| !r.path.contains("/shop/")),
        "the host kubelet was asked for a tenant name: {requests:#?}"
    );
    assert!(w.kubelet_skips().await.is_empty());
    drop(kubelet);
    w.stop().await;
}
