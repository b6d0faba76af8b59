//! The real node itself: a Pod placed by the scheduler really runs, and dropping the
//! node leaves the machine as it found it. Needs root; skipped with a message
//! otherwise (the machine-wide state it changes is why).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{LogParams, PostParams};
use serde_json::json;
use tenantplane_testenv::node::{NODE_DIR, NODE_IP};
use tenantplane_testenv::{RealNode, TestEnv};

/// The tests compare the machine before and after their node: one at a time, or
/// one's "before" would see another's node.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What a node changes on the machine, in a form two snapshots compare by.
#[derive(Debug, PartialEq, Eq)]
struct MachineState {
    iptables: BTreeSet<String>,
    sysctls: Vec<String>,
    links: BTreeSet<String>,
    netns: BTreeSet<String>,
    netns_dir: bool,
    kubepods_cgroups: Vec<String>,
}

fn machine_state() -> MachineState {
    let save = std::process::Command::new("iptables-save")
        .output()
        .unwrap();
    let iptables = String::from_utf8_lossy(&save.stdout)
        .lines()
        // Comments carry a timestamp; counters change with any traffic.
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.split_once(" [") {
            Some((chain, _)) if l.starts_with(':') => chain.to_owned(),
            _ => l.to_owned(),
        })
        .collect();
    let sysctls = [
        "vm/overcommit_memory",
        "kernel/panic",
        "kernel/panic_on_oops",
        "net/ipv4/ip_forward",
        "net/ipv4/conf/all/route_localnet",
    ]
    .iter()
    .map(|k| {
        format!(
            "{k}={}",
            std::fs::read_to_string(Path::new("/proc/sys").join(k))
                .unwrap()
                .trim()
        )
    })
    .collect();
    let names = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kubepods_cgroups = names("/sys/fs/cgroup")
        .into_iter()
        .map(|h| format!("/sys/fs/cgroup/{h}/kubepods"))
        .filter(|p| Path::new(p).exists())
        .collect();
    MachineState {
        iptables,
        sysctls,
        links: names("/sys/class/net"),
        netns: names("/run/netns"),
        netns_dir: Path::new("/run/netns").exists(),
        kubepods_cgroups,
    }
}

/// Processes whose command line mentions the node's directory (ours, the shims,
/// containerd, the kubelet).
fn node_processes() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline
                .contains(NODE_DIR)
                .then(|| format!("{pid}: {cmdline}"))
        })
        .collect()
}

#[tokio::test]
async fn a_scheduled_pod_runs_and_the_node_leaves_nothing_behind() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env.start_apiserver("host").await.expect("apiserver");
    let before = machine_state();

    let node = RealNode::start(&server).await.expect("real node");
    assert!(Path::new("/sys/class/net/rn0").exists());
    let pods: Api<Pod> = Api::namespaced(server.client().await.unwrap(), "default");
    // No nodeName: kube-scheduler places it, which needs the not-ready taint gone.
    let pod = serde_json::from_value(json!({
        "metadata": {"name": "hello"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": "local/busybox:1", "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo hello-from-a-real-pod; id -u; exec sleep 3600"]}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let start = Instant::now();
    let running = loop {
        let p = pods.get("hello").await.unwrap();
        let status = p.status.clone().unwrap_or_default();
        if status.phase.as_deref() == Some("Running") {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "pod not Running: {status:?}\nkubelet:\n{}",
            node.log_tail("kubelet", 30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let spec = running.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(NODE_IP));
    let status = running.status.unwrap();
    assert!(
        status.pod_ip.as_deref().unwrap().starts_with("10.244.0."),
        "{status:?}"
    );
    // The container's own output, through API server -> kubelet -> containerd.
    let start = Instant::now();
    loop {
        let logs = pods
            .logs("hello", &LogParams::default())
            .await
            .unwrap_or_default();
        if logs == "hello-from-a-real-pod\n0\n" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "logs: {logs:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Dropped with the Pod still running: teardown must not depend on the API server.
    drop(node);
    assert_eq!(node_processes(), Vec::<String>::new());
    assert!(!Path::new(NODE_DIR).exists());
    assert_eq!(machine_state(), before);
}

/// A directory of stand-ins for the node binaries: a `kubelet` running `kubelet`
/// (a shell script body), the other processes sleeping, busybox as `pause` (any
/// static binary makes a pause image that imports).
fn fake_assets(kubelet: &str) -> tempfile::TempDir {
    let assets = tempfile::tempdir().unwrap();
    let script = |name: &str, body: &str| {
        let path = assets.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    };
    script("kubelet", kubelet);
    for name in ["kube-proxy", "kube-scheduler", "kube-controller-manager"] {
        script(name, "exec sleep 600");
    }
    std::fs::copy("/bin/busybox", assets.path().join("pause")).unwrap();
    assets
}

/// The kubelet checks containerd holds both local images, then fails.
const FAILING_KUBELET: &str = "for a in \"$@\"; do case $a in --container-runtime-endpoint=unix://*) s=${a#*unix://};; esac; done\n\
     ctr -a \"$s\" -n k8s.io images ls -q | grep -c '^docker.io/local/' >&2\n\
     echo kubelet-gives-up >&2; exit 1";

/// A node whose kubelet dies at start: the error names it with its log, and what was
/// done up to then (bridge, sysctls, iptables snapshot, containerd with the images
/// imported) is undone. Runs without the Kubernetes node binaries.
#[tokio::test]
async fn a_failed_start_leaves_the_machine_as_it_was() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env.start_apiserver("host").await.expect("apiserver");
    let assets = fake_assets(FAILING_KUBELET);
    let before = machine_state();

    let Err(err) = RealNode::start_with_assets(&server, assets.path()).await else {
        panic!("a node whose kubelet exits must not start");
    };
    let message = err.to_string();
    assert!(message.contains("kubelet exited"), "{message}");
    assert!(
        message.contains("2\nkubelet-gives-up"),
        "both images imported: {message}"
    );
    assert_eq!(node_processes(), Vec::<String>::new());
    assert!(!Path::new(NODE_DIR).exists());
    assert_eq!(machine_state(), before);
}

const KILLED_NODE_ASSETS: &str = "TENANTPLANE_TEST_KILLED_NODE_ASSETS";

/// A test of this file as the test binary names it: its module path without the
/// crate, so the name follows the file into whatever binary holds it.
fn test_name(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}

/// Not a test on its own: the child process that
/// `a_run_killed_without_unwinding_is_undone_by_the_next_start` kills while its node
/// starts. Returns at once unless that test started it.
#[tokio::test]
async fn killed_node_child() {
    let Some(assets) = std::env::var_os(KILLED_NODE_ASSETS) else {
        return;
    };
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env.start_apiserver("host").await.expect("apiserver");
    // The kubelet never reports: this waits until the parent kills the process.
    let _ = RealNode::start_with_assets(&server, Path::new(&assets)).await;
}

/// A run killed while its node starts (SIGKILL: no Drop, no unwinding) leaves the
/// bridge, the sysctls and the node directory; the next start undoes them first.
#[tokio::test]
async fn a_run_killed_without_unwinding_is_undone_by_the_next_start() {
    if let Some(reason) = RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env.start_apiserver("host").await.expect("apiserver");
    let hanging = fake_assets("exec sleep 600");
    let failing = fake_assets(FAILING_KUBELET);
    let before = machine_state();

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name("killed_node_child"), "--nocapture"])
        .env(KILLED_NODE_ASSETS, hanging.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let kubelet_log = Path::new(NODE_DIR).join("kubelet.log");
    let start = Instant::now();
    while !kubelet_log.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "the child's node never got to its kubelet"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What the dead run left: the parent-death signal took its processes, not this.
    assert!(Path::new("/sys/class/net/rn0").exists());
    assert!(Path::new(NODE_DIR).exists());
    assert_ne!(machine_state(), before);

    let Err(err) = RealNode::start_with_assets(&server, failing.path()).await else {
        panic!("a node whose kubelet exits must not start");
    };
    assert!(err.to_string().contains("kubelet-gives-up"), "{err}");
    assert_eq!(node_processes(), Vec::<String>::new());
    assert!(!Path::new(NODE_DIR).exists());
    assert_eq!(machine_state(), before);
}
