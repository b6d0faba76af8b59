//! `tenantplane up --real-node` end to end: the playground with a real node (root
//! only; it skips otherwise). Its own module so that only it waits in the test
//! runner's real-node lane, not the other `tenantplane up` and CLI tests.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Polls `check` until it returns `Some`, failing with `what` (and `context()`) at
/// the deadline.
fn poll<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for: {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn kubectl(kubeconfig: &str, args: &[&str]) -> Result<String, String> {
    tenantplane_testenv::kubectl(std::path::Path::new(kubeconfig), args)
}

/// `tenantplane up --real-node` is a cluster a team can use: a tenant Deployment
/// behind a tenant Service answers a client Pod by the tenant's DNS names (`web`,
/// `web.default`, `web.default.svc.cluster.local`), through kube-proxy and the
/// tenant's DNS server running as a real Pod with in-cluster config; on SIGTERM it
/// stops and leaves the machine as it was.
#[test]
fn up_with_a_real_node_serves_tenant_services_by_dns_name_and_restores_the_machine() {
    use std::io::BufRead;
    use std::sync::{Arc, Mutex};

    if let Some(reason) = tenantplane_testenv::RealNode::unavailable() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    // Real containers start in seconds, but CI machines are shared and busy.
    const REAL: Duration = Duration::from_secs(180);
    let mut up = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["up", "--real-node"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run tenantplane up --real-node");
    let printed = Arc::new(Mutex::new(String::new()));
    let reader = {
        let printed = Arc::clone(&printed);
        let stdout = up.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let mut all = printed.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        })
    };
    let stdout = || printed.lock().unwrap().clone();
    let tenant_kc = poll(
        "up to print the tenant kubeconfig and its first decision",
        REAL,
        || {
            let out = stdout();
            out.contains("Create ConfigMap default/welcome -> team-dev/welcome-x-default-x-dev")
                .then(|| {
                    out.lines()
                        .find_map(|l| l.trim().strip_prefix("tenant kubeconfig: "))
                        .map(str::to_owned)
                })
                .flatten()
        },
        stdout,
    );
    let out = stdout();
    assert!(out.contains("real node 10.99.0.1"), "{out}");
    assert!(out.contains("--image=local/tenantplane:dev"), "{out}");
    assert!(
        out.contains("exec client -- wget -qO- http://web/"),
        "{out}"
    );

    // What the printed lines tell a user to run.
    let kc = tenant_kc.as_str();
    kubectl(
        kc,
        &[
            "create",
            "deployment",
            "web",
            "--image=local/busybox:1",
            "--",
            "sh",
            "-c",
            "echo tenant-web-page > /tmp/index.html; exec httpd -f -p 8080 -h /tmp",
        ],
    )
    .unwrap();
    kubectl(
        kc,
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
        ],
    )
    .unwrap();
    kubectl(
        kc,
        &[
            "run",
            "client",
            "--image=local/busybox:1",
            "--restart=Never",
            "--",
            "sleep",
            "3600",
        ],
    )
    .unwrap();
    let host_kc = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("host   kubeconfig: "))
        .unwrap()
        .to_owned();
    let host_pods =
        || kubectl(&host_kc, &["get", "pods", "-A", "-o", "wide"]).unwrap_or_else(|e| e);
    for name in ["web", "web.default", "web.default.svc.cluster.local"] {
        let url = format!("http://{name}/");
        let page = poll(
            &format!("the client to get {url}"),
            REAL,
            || {
                kubectl(
                    kc,
                    &["exec", "client", "--", "timeout", "5", "wget", "-qO-", &url],
                )
                .ok()
                .filter(|page| page.contains("tenant-web-page"))
            },
            || {
                let last = kubectl(
                    kc,
                    &["exec", "client", "--", "timeout", "5", "wget", "-qO-", &url],
                );
                format!("last answer: {last:?}\nhost Pods:\n{}", host_pods())
            },
        );
        assert_eq!(page.trim(), "tenant-web-page");
    }
    // The answer came from the tenant's DNS server, a real Pod in the host namespace.
    let dns_pods = kubectl(
        &host_kc,
        &[
            "-n",
            "team-dev",
            "get",
            "pods",
            "-l",
            "tenantplane.io/component=dns",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
    )
    .unwrap();
    assert_eq!(dns_pods, "Running");
    // SIGTERM: everything it changed is back: no bridge, no node directory, no
    // kubepods cgroups.
    assert!(
        Command::new("kill")
            .args(["-TERM", &up.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = poll(
        "up to exit after SIGTERM",
        Duration::from_secs(60),
        || up.try_wait().unwrap(),
        stdout,
    );
    assert!(status.success(), "{status:?}");
    reader.join().unwrap();
    assert!(!std::path::Path::new("/sys/class/net/rn0").exists());
    assert!(!std::path::Path::new("/sys/class/net/rncni0").exists());
    assert!(!std::path::Path::new(tenantplane_testenv::node::NODE_DIR).exists());
    assert!(!std::path::Path::new("/sys/fs/cgroup/memory/kubepods").exists());
}
