//! The binary as the kubectl plugin `kubectl tenantplane`: run through a symlink
//! named `kubectl-tenantplane`, found by kubectl on PATH, with kubectl's connection
//! flags against a real API server, and its shell completions.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::{Value, json};

/// A directory holding `kubectl-tenantplane -> tenantplane`, as a user installs it.
fn plugin_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-tenantplane");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tenantplane"), &link).unwrap();
    (dir, link)
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program).args(args).output().expect("runs")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn the_binary_is_a_kubectl_plugin_under_its_plugin_name() {
    let (dir, link) = plugin_dir();
    let direct = stdout(&run(&link, &["version"]));
    assert!(direct.starts_with("tenantplane "), "{direct}");

    // kubectl finds `kubectl-tenantplane` on PATH and runs it for `kubectl tenantplane`.
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .args(["tenantplane", "version"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    assert_eq!(stdout(&out), direct);
    let plugins = Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&plugins.stdout).contains("kubectl-tenantplane"),
        "{plugins:?}"
    );

    // Help and usage errors name the command the user typed.
    let help = stdout(&run(&link, &["why", "--help"]));
    assert!(help.contains("Usage: kubectl tenantplane why"), "{help}");
    for flag in ["--kubeconfig", "--context", "--namespace", "--output"] {
        assert!(help.contains(flag), "why --help lacks {flag}: {help}");
    }
    let plain = stdout(&run(
        Path::new(env!("CARGO_BIN_EXE_tenantplane")),
        &["why", "--help"],
    ));
    assert!(plain.contains("Usage: tenantplane why"), "{plain}");
}

#[test]
fn completions_cover_every_subcommand_for_bash_zsh_and_fish() {
    let binary = Path::new(env!("CARGO_BIN_EXE_tenantplane"));
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&run(binary, &["completion", shell]));
        for word in ["why", "render", "explain-sync", "completion", "kubeconfig"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    // The plugin's script completes the plugin's name (kubectl delegates to it).
    let (_dir, link) = plugin_dir();
    let bash = stdout(&run(&link, &["completion", "bash"]));
    assert!(bash.contains("kubectl-tenantplane"), "{bash}");
    // An unknown shell is a one-line usage error, not a panic.
    let out = run(binary, &["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[tokio::test]
async fn context_picks_the_kubeconfig_context_like_kubectl() {
    let server = crate::servers::host_with_crds().await;
    let client = server.client().await.unwrap();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("team-dev".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("plain".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client, "team-dev")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    // The working context plus a current-context pointing at nothing that listens.
    let mut config: Value =
        serde_saphyr::from_str(&server.kubeconfig_yaml("admin").unwrap()).unwrap();
    config["clusters"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}));
    config["contexts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "gone", "context": {"cluster": "gone", "user": "admin"}}));
    config["current-context"] = json!("gone");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(&kubeconfig, config.to_string()).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();

    let (_plugin, link) = plugin_dir();
    let why = |context: Option<&str>| {
        let mut args = vec![
            "why",
            "--kubeconfig",
            kubeconfig,
            "-n",
            "team-dev",
            "configmap/plain",
            "-o",
            "json",
        ];
        if let Some(context) = context {
            args.extend(["--context", context]);
        }
        run(&link, &args)
    };
    let answer: Value = serde_json::from_str(&stdout(&why(Some("host")))).unwrap();
    assert_eq!(answer["managedByTenantplane"], false);
    assert_eq!(answer["hostObject"]["name"], "plain");
    // Without --context the current (dead) one is used: a clear one-line failure.
    let out = why(None);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{out:?}"
    );
    // A context the file does not have is named in the error.
    let out = why(Some("nope"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nope"),
        "{out:?}"
    );
}
