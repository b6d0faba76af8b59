//! `tenantplane render webhook-certificate --out-dir DIR`: a CA and the webhook's
//! serving certificate made by tenantplane itself, for installs without
//! cert-manager. Writes the files deploy/overlays/self-signed/kustomization.yaml
//! names: the TLS Secret the webhook Deployment mounts, and strategic-merge patches
//! that put the CA into both webhook configurations' caBundle (and drop the
//! cert-manager annotation nobody would act on).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};
use tenantplane_admission::{
    WebhookClient, namespace_webhook_configuration, webhook_configuration,
};

/// Where deploy/install runs the webhook and which Secret it mounts.
const NAMESPACE: &str = "tenantplane-system";
const SERVICE: &str = "tenantplane-webhook";
const SECRET: &str = "tenantplane-webhook-tls";

/// The files the self-signed overlay's kustomization.yaml lists.
pub const FILES: [&str; 3] = [
    "webhook-tls.yaml",
    "validating-ca-bundle.yaml",
    "mutating-ca-bundle.yaml",
];

#[derive(Debug, clap::Args)]
pub struct WebhookCertificateArgs {
    /// Directory to write the Secret and the caBundle patches into (the self-signed
    /// overlay: deploy/overlays/self-signed). Existing files are replaced.
    #[arg(long)]
    pub out_dir: PathBuf,
}

pub fn run(args: WebhookCertificateArgs) -> anyhow::Result<String> {
    let ca =
        tenantplane_testenv::TestCa::new("tenantplane-webhook-ca").context("generating the CA")?;
    let dns = [
        format!("{SERVICE}.{NAMESPACE}.svc"),
        format!("{SERVICE}.{NAMESPACE}.svc.cluster.local"),
    ];
    let cert = ca
        .issue(&[dns[0].as_str(), dns[1].as_str()])
        .context("issuing the serving certificate")?;
    let ca_pem = ca.cert_pem();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": SECRET, "namespace": NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "tenantplane"}},
        "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem, "ca.crt": ca_pem},
    });
    let client = || WebhookClient::Service {
        namespace: NAMESPACE.to_owned(),
        name: SERVICE.to_owned(),
        port: Some(443),
    };
    let validating = serde_json::to_value(webhook_configuration(client(), ca_pem.as_bytes()))
        .context("rendering the ValidatingWebhookConfiguration")?;
    let mutating =
        serde_json::to_value(namespace_webhook_configuration(client(), ca_pem.as_bytes()))
            .context("rendering the MutatingWebhookConfiguration")?;
    let out = &args.out_dir;
    write(out, FILES[0], &secret)?;
    write(out, FILES[1], &ca_bundle_patch(&validating))?;
    write(out, FILES[2], &ca_bundle_patch(&mutating))?;
    Ok(format!(
        "wrote {} (Secret {NAMESPACE}/{SECRET} with its private key: keep it out of version control), {} and {}\n",
        out.join(FILES[0]).display(),
        out.join(FILES[1]).display(),
        out.join(FILES[2]).display()
    ))
}

/// The caBundle of every webhook in `config`, as a strategic-merge patch (webhooks
/// merge by name), without the cert-manager injection annotation.
pub fn ca_bundle_patch(config: &Value) -> Value {
    let webhooks: Vec<Value> = config["webhooks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|w| json!({"name": w["name"], "clientConfig": {"caBundle": w["clientConfig"]["caBundle"]}}))
        .collect();
    json!({
        "apiVersion": config["apiVersion"], "kind": config["kind"],
        "metadata": {"name": config["metadata"]["name"],
                     "annotations": {"cert-manager.io/inject-ca-from": null}},
        "webhooks": webhooks,
    })
}

fn write(dir: &Path, file: &str, value: &Value) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(file);
    let text = serde_saphyr::to_string(value).context("rendering YAML")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // The Secret holds a private key: owner-only, like a kubeconfig.
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}
