//! The offline CLI as a user runs it: real process, real stdout, stderr and exit code.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn tenantplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(args)
        .output()
        .expect("run tenantplane")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

#[test]
fn explain_sync_predicts_the_seed_example() {
    let out = tenantplane(&[
        "explain-sync",
        "--tenant",
        "dev",
        "--tenant-namespace",
        "team-dev",
        "--name",
        "nginx",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    for line in [
        "  namespace: team-dev\n  name: nginx-x-default-x-dev\n",
        "  app.kubernetes.io/managed-by: tenantplane\n",
        "  tenantplane.io/tenant: dev\n",
        "  tenantplane.io/virtual-namespace: default\n",
        "  tenantplane.io/kind: Pod\n",
        "  tenantplane.io/virtual-name: nginx\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(out.stderr.is_empty());
}

#[test]
fn explain_sync_from_a_file_prints_the_rewritten_selectors_or_the_refusal() {
    let dir = std::env::temp_dir().join(format!("tenantplane-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: open\n  namespace: shop\n\
         spec:\n  podSelector: {}\n  ingress:\n  - from:\n    - namespaceSelector: {}\n",
    )
    .unwrap();
    let args = [
        "explain-sync",
        "--tenant",
        "dev",
        "--tenant-namespace",
        "team-dev",
        "-o",
        "json",
        "-f",
    ];
    let out = tenantplane(&[&args[..], &[policy.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{out:?}");
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["action"], "Sync");
    assert_eq!(e["hostResource"]["name"], "open-x-shop-x-dev");
    assert_eq!(
        e["selectors"]["spec.podSelector"],
        serde_json::json!({"matchLabels": {"tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "shop"}})
    );
    assert_eq!(
        e["selectors"]["spec.ingress[0].from[0].podSelector"],
        serde_json::json!({"matchLabels": {"tenantplane.io/tenant": "dev"}})
    );

    let forged = dir.join("svc.json");
    std::fs::write(
        &forged,
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"tenantplane.io/tenant": "prod"}}}"#,
    )
    .unwrap();
    let out = tenantplane(&[&args[..], &[forged.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{out:?}");
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["action"], "Skip");
    assert!(
        e["reason"].as_str().unwrap().contains("spec.selector"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn explain_sync_predicts_a_two_way_pass_for_every_direction_and_policy() {
    let dir = tempfile::tempdir().unwrap();
    let widget = |size: u32, ready: bool| {
        format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: shop\n\
             spec:\n  size: {size}\nstatus:\n  ready: {ready}\n"
        )
    };
    let (tenant, host, base) = (
        dir.path().join("tenant.yaml"),
        dir.path().join("host.yaml"),
        dir.path().join("base.yaml"),
    );
    // Since the base (size 1, not ready) the tenant set size 2, the host set size 3
    // and became ready.
    std::fs::write(&tenant, widget(2, false)).unwrap();
    std::fs::write(&host, widget(3, true)).unwrap();
    std::fs::write(&base, widget(1, false)).unwrap();
    let path = |p: &std::path::PathBuf| p.to_str().unwrap().to_owned();
    let out = tenantplane(&[
        "explain-sync",
        "-o",
        "json",
        "-f",
        &path(&tenant),
        "--host-object",
        &path(&host),
        "--base",
        &path(&base),
    ]);
    assert!(out.status.success(), "{out:?}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = |direction: &str, policy: Option<&str>| -> (String, Vec<String>) {
        let row = rows
            .iter()
            .find(|r| r["direction"] == direction && r["conflictPolicy"].as_str() == policy)
            .unwrap_or_else(|| panic!("no row {direction} {policy:?} in {rows:?}"));
        let changes = row["changes"].as_array().unwrap();
        (
            row["action"].as_str().unwrap().to_owned(),
            changes
                .iter()
                .map(|c| c.as_str().unwrap().to_owned())
                .collect(),
        )
    };
    assert_eq!(rows.len(), 5, "{rows:?}");

    let (action, changes) = row("toHost", None);
    assert_eq!(action, "Update");
    assert!(
        changes.contains(&"host: set /spec/size = 2 (both changed it; the tenant wins)".to_owned()),
        "{changes:?}"
    );
    assert!(
        !changes.iter().any(|c| c.contains("/status")),
        "toHost leaves status alone: {changes:?}"
    );

    let (action, changes) = row("fromHost", None);
    assert_eq!(action, "Update");
    assert!(
        changes.contains(&"tenant: set /spec/size = 3 (both changed it; the host wins)".to_owned()),
        "{changes:?}"
    );
    assert!(
        changes.contains(&"tenant: set /status/ready = true (the host changed it)".to_owned()),
        "{changes:?}"
    );

    let (action, changes) = row("bidirectional", Some("manual"));
    assert_eq!(action, "Skip");
    assert!(
        changes.contains(&"tenant: set /status/ready = true (the host changed it)".to_owned()),
        "{changes:?}"
    );
    assert!(
        changes.contains(
            &"conflict: /spec/size is 2 in the tenant and 3 on the host: left alone (manual)"
                .to_owned()
        ),
        "{changes:?}"
    );
    assert!(
        !changes.iter().any(|c| c.starts_with("host:")),
        "manual writes nothing to the host: {changes:?}"
    );

    let (_, changes) = row("bidirectional", Some("tenant-wins"));
    assert!(
        changes.contains(&"host: set /spec/size = 2 (both changed it; the tenant wins)".to_owned()),
        "{changes:?}"
    );
    let (_, changes) = row("bidirectional", Some("host-wins"));
    assert!(
        changes.contains(&"tenant: set /spec/size = 3 (both changed it; the host wins)".to_owned()),
        "{changes:?}"
    );

    // --base needs --host-object, which needs -f.
    let out = tenantplane(&["explain-sync", "--base", &path(&base)]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
}

#[test]
fn explain_sync_json_is_machine_readable() {
    let out = tenantplane(&[
        "explain-sync",
        "--tenant",
        "dev",
        "--tenant-namespace",
        "team-dev",
        "--name",
        "app.config",
        "--kind",
        "ConfigMap",
        "--virtual-namespace",
        "web",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(value["hostResource"]["name"], "app.config-x-web-x-dev");
    assert_eq!(value["hostResource"]["kind"], "ConfigMap");
    assert_eq!(
        value["annotations"]["tenantplane.io/virtual-name"],
        "app.config"
    );
}

#[test]
fn long_and_ambiguous_names_are_hashed() {
    let long = "a".repeat(200);
    let out = tenantplane(&[
        "explain-sync",
        "--tenant",
        "dev",
        "--tenant-namespace",
        "team-dev",
        "--name",
        &long,
        "-o",
        "json",
    ]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let name = value["hostResource"]["name"].as_str().unwrap();
    assert!(
        name.len() <= 63 && value["hostResource"]["hashed"] == true,
        "{name}"
    );
    assert_eq!(
        value["annotations"]["tenantplane.io/virtual-name"],
        long.as_str()
    );

    let a = tenantplane(&[
        "explain-sync",
        "--tenant",
        "t",
        "--tenant-namespace",
        "h",
        "--name",
        "a-x-b",
        "--virtual-namespace",
        "c",
        "-o",
        "json",
    ]);
    let b = tenantplane(&[
        "explain-sync",
        "--tenant",
        "t",
        "--tenant-namespace",
        "h",
        "--name",
        "a",
        "--virtual-namespace",
        "b-x-c",
        "-o",
        "json",
    ]);
    let name = |o: &Output| {
        serde_json::from_str::<serde_json::Value>(&stdout(o)).unwrap()["hostResource"]["name"]
            .clone()
    };
    assert_ne!(name(&a), name(&b));
}

/// `explain-sync` arguments for `tenant`, `tenant_namespace` and `name`, then `extra`.
fn explain_args<'a>(
    tenant: &'a str,
    tenant_namespace: &'a str,
    name: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "explain-sync",
        "--tenant",
        tenant,
        "--tenant-namespace",
        tenant_namespace,
        "--name",
        name,
    ];
    args.extend_from_slice(extra);
    args
}

/// `render isolation` arguments for `profile` and `namespace`, then `extra`.
fn isolation_args<'a>(profile: &'a str, namespace: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["render", "isolation", "--profile", profile, "-n", namespace];
    args.extend_from_slice(extra);
    args
}

#[test]
fn invalid_input_is_one_line_on_stderr_and_nothing_on_stdout() {
    let too_long_tenant = "t".repeat(41);
    let long_namespace = "n".repeat(41);
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles.yaml");
    std::fs::write(&profiles, INVALID_PROFILES).unwrap();
    let profiles = profiles.to_str().unwrap().to_owned();
    let cases: Vec<Vec<&str>> = vec![
        explain_args("dev", "team-dev", "", &[]),
        explain_args("Dev", "team-dev", "x", &[]),
        explain_args("dev", "team_dev", "x", &[]),
        explain_args("dev", "team-dev", "x", &["--kind", "Namespace"]),
        explain_args("dev", "team-dev", "1svc", &["--kind", "Service"]),
        explain_args("dev", "team-dev", "x", &["--api-version", "a/b/c"]),
        explain_args(&too_long_tenant, "team-dev", "x", &[]),
        vec!["render", "isolationprofile", "strict"],
        vec!["render", "isolationprofile", "mine", "--level", "paranoid"],
        vec!["render", "tenantcluster", "Dev"],
        vec![
            "render",
            "tenantcluster",
            "dev",
            "--kubernetes-version",
            "1.31",
        ],
        vec!["render", "syncpolicy", "not/valid"],
        isolation_args("strict", "team-dev", &[]),
        isolation_args("baseline", "Team", &[]),
        // The tenant defaults to the namespace, here too long for a tenant name.
        isolation_args("baseline", &long_namespace, &[]),
        isolation_args("baseline", "a", &["--cpu", "lots"]),
        isolation_args("baseline", "a", &["--memory", "-1Gi"]),
        isolation_args("baseline", "a", &["--egress", "some"]),
        isolation_args("mine", "a", &["-f", "/nonexistent.yaml"]),
        isolation_args("mine", "a", &["-f", &profiles]),
        isolation_args("unfair", "a", &["-f", &profiles]),
        isolation_args("old", "a", &["-f", &profiles]),
        vec![
            "webhook",
            "--tls-cert",
            "/nonexistent",
            "--tls-key",
            "/nonexistent",
        ],
        vec!["webhook", "--tls-cert", &profiles, "--tls-key", &profiles],
        vec!["controller", "--host-unreachable-release-secs", "0"],
    ];
    for args in &cases {
        let out = tenantplane(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
}

#[test]
fn system_namespaces_are_explained_as_skipped() {
    let out = tenantplane(&[
        "explain-sync",
        "--tenant",
        "dev",
        "--tenant-namespace",
        "team-dev",
        "--name",
        "coredns",
        "--virtual-namespace",
        "kube-system",
    ]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("action: Skip"), "{text}");
    assert!(!text.contains("hostResource"), "{text}");
}

#[test]
fn render_prints_the_built_in_levels() {
    for (level, pss, runtime) in [
        ("baseline", "baseline", None),
        ("restricted", "restricted", None),
        ("sandboxed", "restricted", Some("kata-qemu")),
    ] {
        let out = tenantplane(&["render", "isolationprofile", level, "-o", "json"]);
        assert!(out.status.success());
        let profile: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        assert_eq!(profile["spec"]["level"], level);
        assert_eq!(profile["spec"]["controls"]["podSecurity"], pss);
        assert_eq!(
            profile["spec"]["controls"]["runtimeClassName"].as_str(),
            runtime
        );
        assert_eq!(profile["spec"]["controls"]["blockHostPathVolumes"], true);
    }
    let out = tenantplane(&[
        "render",
        "tenantcluster",
        "dev",
        "-n",
        "team-dev",
        "--profile",
        "sandboxed",
        "--kubeconfig-secret",
        "dev-kc",
        "-o",
        "json",
    ]);
    let tc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(tc["metadata"]["namespace"], "team-dev");
    assert_eq!(tc["spec"]["isolationProfileRef"]["name"], "sandboxed");
    assert_eq!(
        tc["spec"]["controlPlane"]["external"]["kubeconfigSecretRef"]["name"],
        "dev-kc"
    );
    // A provisioned one in the k8s distro; a distro with an attached one is an error.
    let out = tenantplane(&[
        "render",
        "tenantcluster",
        "dev",
        "--distro",
        "k8s",
        "-o",
        "json",
    ]);
    assert!(out.status.success());
    let tc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(tc["spec"]["controlPlane"]["distro"], "k8s");
    assert!(tc["spec"]["controlPlane"].get("external").is_none());
    let out = tenantplane(&[
        "render",
        "tenantcluster",
        "dev",
        "--distro",
        "k8s",
        "--kubeconfig-secret",
        "dev-kc",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--distro"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn crds_command_matches_the_committed_yaml() {
    let out = tenantplane(&["crds"]);
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/tenantplane.io.yaml"
    ))
    .expect("deploy/crds/tenantplane.io.yaml");
    assert!(
        stdout(&out) == committed,
        "deploy/crds/tenantplane.io.yaml is stale: run scripts/update-crds.sh and commit the result"
    );
}

#[test]
fn version_names_the_api() {
    let out = tenantplane(&["version"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("tenantplane.io/v1alpha1"));
}

/// Profiles `render isolation -f` must refuse: burst below qps, a wrong apiVersion.
const INVALID_PROFILES: &str = "\
apiVersion: tenantplane.io/v1alpha1
kind: IsolationProfile
metadata: {name: unfair}
spec:
  level: baseline
  controls: {apiFairness: {qps: 20, burst: 10}}
---
apiVersion: tenantplane.io/v1beta9
kind: IsolationProfile
metadata: {name: old}
spec: {level: baseline}
";

fn render_isolation(profile: &str, namespace: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = tenantplane(&isolation_args(profile, namespace, extra));
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let text = stdout(&out);
    assert!(text.starts_with("---\n"), "{text}");
    serde_saphyr::from_multiple(&text).expect("a YAML stream")
}

fn kinds(objects: &[serde_json::Value]) -> Vec<&str> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect()
}

#[test]
fn render_isolation_prints_what_the_compiler_produces() {
    let caps = ["--tenant", "dev", "--cpu", "8", "--memory", "16Gi"];
    let objects = render_isolation("restricted", "team-dev", &caps);
    let expected =
        tenantplane_core::isolation::compile(&tenantplane_core::isolation::IsolationInput {
            pods: tenantplane_core::isolation::PodScope::TenantCluster,
            tenant: "dev",
            host_namespace: "team-dev",
            profile: &tenantplane_api::IsolationProfileSpec::for_level(
                tenantplane_api::IsolationLevel::Restricted,
            ),
            resources: Some(&tenantplane_api::ResourceLimits {
                cpu: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "8".into(),
                )),
                memory: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "16Gi".into(),
                )),
            }),
            egress: tenantplane_api::EgressPolicy::AllowDns,
        })
        .unwrap()
        .to_manifests()
        .unwrap();
    assert_eq!(objects, expected);
    assert_eq!(
        kinds(&objects),
        ["Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange"]
    );

    // Baseline: no LimitRange; no caps: no ResourceQuota; the tenant defaults to the namespace.
    let objects = render_isolation("baseline", "team-dev", &["--egress", "denyAll"]);
    assert_eq!(kinds(&objects), ["Namespace", "NetworkPolicy"]);
    assert_eq!(
        objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "baseline"
    );
    assert_eq!(
        objects[1]["metadata"]["labels"]["tenantplane.io/tenant"],
        "team-dev"
    );
    assert_eq!(objects[1]["spec"]["egress"].as_array().unwrap().len(), 1);

    let json = ["--egress", "allowAll", "-o", "json"];
    let out = tenantplane(&isolation_args("sandboxed", "team-dev", &json));
    assert!(out.status.success(), "{out:?}");
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(kinds(items), ["Namespace", "NetworkPolicy", "LimitRange"]);
    assert_eq!(items[1]["spec"]["egress"][1], serde_json::json!({}));
}

#[test]
fn render_isolation_reads_a_profile_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("profiles.yaml");
    // A stream like the samples: other kinds and other profiles are passed over.
    std::fs::write(
        &file,
        "\
apiVersion: tenantplane.io/v1alpha1
kind: SyncPolicy
metadata: {name: default}
spec: {}
---
apiVersion: tenantplane.io/v1alpha1
kind: IsolationProfile
metadata: {name: other}
spec: {level: sandboxed}
---
apiVersion: tenantplane.io/v1alpha1
kind: IsolationProfile
metadata: {name: open-baseline}
spec:
  level: restricted
  controls: {podSecurity: baseline, defaultDenyNetworkPolicy: false}
",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let objects = render_isolation("open-baseline", "team-dev", &["-f", path]);
    // The file's overrides win over its level: no NetworkPolicy, baseline Pod Security,
    // but the level's LimitRange.
    assert_eq!(kinds(&objects), ["Namespace", "LimitRange"]);
    assert_eq!(
        objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "baseline"
    );

    let out = tenantplane(&isolation_args("missing", "a", &["-f", path]));
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("found: other, open-baseline"), "{err}");
}

#[test]
fn webhook_serves_until_sigterm_with_structured_logs() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};

    let ca = tenantplane_testenv::TestCa::new("test").unwrap();
    let cert = ca.issue(&["127.0.0.1"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert_file, &cert.cert_pem).unwrap();
    std::fs::write(&key_file, &cert.key_pem).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args(["webhook", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .arg("--tls-cert")
        .arg(&cert_file)
        .arg("--tls-key")
        .arg(&key_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the webhook");
    // Log lines arrive on a thread, so every wait below has a deadline.
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let value = serde_json::from_str(&line).expect("every log line is JSON");
            if lines_tx.send(value).is_err() {
                break;
            }
        }
    });
    let deadline = Duration::from_secs(20);
    let started = lines.recv_timeout(deadline).expect("a first log line");
    assert_eq!(started["level"], "INFO");
    let addr = started["fields"]["listen"]
        .as_str()
        .expect("the listen field");
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    std::net::TcpStream::connect(addr).expect("the webhook accepts connections");

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < deadline,
            "the webhook did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    // The rest of the log, up to the end of stderr (the process has exited).
    let mut messages = Vec::new();
    loop {
        match lines.recv_timeout(deadline) {
            Ok(line) => messages.push(
                line["fields"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(err) => panic!("stderr did not end: {err}"),
        }
    }
    assert_eq!(
        messages,
        ["SIGTERM: shutting down", "tenantplane webhook stopped"]
    );
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(stdout.is_empty(), "{stdout}");
}

#[test]
fn render_webhookconfiguration_trusts_the_given_ca() {
    let ca = tenantplane_testenv::TestCa::new("test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let ca_path = ca_file.to_str().unwrap();
    let out = tenantplane(&[
        "render",
        "webhookconfiguration",
        "--ca-bundle",
        ca_path,
        "--service",
        "tenantplane-system/tenantplane-webhook",
        "--port",
        "8443",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let config: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let expected = tenantplane_admission::webhook_configuration(
        tenantplane_admission::WebhookClient::Service {
            namespace: "tenantplane-system".into(),
            name: "tenantplane-webhook".into(),
            port: Some(8443),
        },
        ca.cert_pem().as_bytes(),
    );
    assert_eq!(config, serde_json::to_value(&expected).unwrap());
    assert_eq!(config["webhooks"][0]["failurePolicy"], "Fail");

    let out = tenantplane(&[
        "render",
        "webhookconfiguration",
        "--namespaces",
        "--ca-bundle",
        ca_path,
        "--service",
        "tenantplane-system/tenantplane-webhook",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let config: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let expected = tenantplane_admission::namespace_webhook_configuration(
        tenantplane_admission::WebhookClient::Service {
            namespace: "tenantplane-system".into(),
            name: "tenantplane-webhook".into(),
            port: None,
        },
        ca.cert_pem().as_bytes(),
    );
    assert_eq!(config, serde_json::to_value(&expected).unwrap());
    assert_eq!(config["kind"], "MutatingWebhookConfiguration");
    assert_eq!(
        config["webhooks"][0]["clientConfig"]["service"]["path"],
        "/namespaces"
    );
}
