//! `tenantplane connect -n NAMESPACE NAME`: the tenant's kubeconfig, from the
//! external control plane's Secret or the provisioned `<name>-kubeconfig` Secret,
//! as one context named after the TenantCluster; printed (`--print`) or merged into
//! the kubeconfig file, like `vcluster connect`. Credentials are never logged: only
//! names appear in messages and errors.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::{Value, json};
use tenantplane_api::TenantCluster;
use tenantplane_engine::provision::{KUBECONFIG_KEY, kubeconfig_secret_name};

use crate::kube_client::ClusterArgs;

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// Namespace of the TenantCluster on the host.
    #[arg(short = 'n', long)]
    pub namespace: String,
    /// The TenantCluster's name; also the name of the kubeconfig context.
    pub name: String,
    /// Print the tenant's kubeconfig to stdout instead of merging it into the
    /// kubeconfig file (--kubeconfig, else the first KUBECONFIG entry, else ~/.kube/config).
    #[arg(long)]
    pub print: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

pub fn run(args: ConnectArgs) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let tenant = runtime.block_on(tenant_kubeconfig(&args))?;
    let single = single_context(&tenant, &args.namespace, &args.name)?;
    if args.print {
        return serde_saphyr::to_string(&single).context("rendering the kubeconfig");
    }
    let path = merge_target(args.cluster.kubeconfig.as_deref())?;
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text).with_context(|| format!("parsing {}", path.display()))?,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => json!({}),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    let merged = merge(existing, &single);
    let text = serde_saphyr::to_string(&merged).context("rendering the kubeconfig")?;
    write_private(&path, &text)?;
    Ok(format!(
        "Switched to context \"{}\" in {} (TenantCluster {}/{}).\n",
        args.name,
        path.display(),
        args.namespace,
        args.name
    ))
}

/// The kubeconfig text in the Secret the TenantCluster names, or the provisioned one.
async fn tenant_kubeconfig(args: &ConnectArgs) -> anyhow::Result<Value> {
    let client = args.cluster.client().await?;
    let (ns, name) = (&args.namespace, &args.name);
    let tc = Api::<TenantCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .with_context(|| format!("reading TenantCluster {ns}/{name}"))?
        .with_context(|| format!("TenantCluster {ns}/{name} not found"))?;
    let (secret_name, key) = match &tc.spec.control_plane.external {
        Some(external) => (
            external.kubeconfig_secret_ref.name.clone(),
            external.kubeconfig_secret_ref.key.clone(),
        ),
        None => (kubeconfig_secret_name(name), KUBECONFIG_KEY.to_owned()),
    };
    let secret = Api::<Secret>::namespaced(client, ns)
        .get_opt(&secret_name)
        .await
        .with_context(|| format!("reading Secret {ns}/{secret_name}"))?
        .with_context(|| {
            format!("Secret {ns}/{secret_name} not found (is the control plane provisioned yet?)")
        })?;
    let bytes = secret
        .data
        .and_then(|mut data| data.remove(&key))
        .with_context(|| format!("Secret {ns}/{secret_name} has no key {key:?}"))?;
    let text = String::from_utf8(bytes.0)
        .with_context(|| format!("Secret {ns}/{secret_name} key {key:?} is not UTF-8"))?;
    // The parse error would quote the document: name the Secret only.
    parse(&text).map_err(|_| {
        anyhow::anyhow!("Secret {ns}/{secret_name} key {key:?} does not hold a kubeconfig")
    })
}

fn parse(text: &str) -> anyhow::Result<Value> {
    let value: Value = serde_saphyr::from_str(text).context("not YAML")?;
    match value {
        Value::Object(_) => Ok(value),
        Value::Null => Ok(json!({})),
        _ => bail!("not a kubeconfig (a mapping is expected)"),
    }
}

fn named<'a>(config: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    config[list]
        .as_array()?
        .iter()
        .find(|entry| entry["name"] == name)
}

/// The tenant kubeconfig's current (else only) context, with its cluster and user,
/// renamed: the context after the TenantCluster, cluster and user after its
/// namespace too, so two tenants never overwrite each other's credentials.
pub fn single_context(tenant: &Value, namespace: &str, name: &str) -> anyhow::Result<Value> {
    let contexts = tenant["contexts"].as_array().map_or(&[][..], Vec::as_slice);
    let context = match tenant["current-context"].as_str() {
        Some(current) if !current.is_empty() => {
            named(tenant, "contexts", current).with_context(|| {
                format!("the tenant kubeconfig's current-context {current:?} is not defined")
            })?
        }
        _ => match contexts {
            [only] => only,
            _ => bail!(
                "the tenant kubeconfig has no current-context and {} contexts",
                contexts.len()
            ),
        },
    };
    let cluster_name = context["context"]["cluster"].as_str().unwrap_or_default();
    let user_name = context["context"]["user"].as_str().unwrap_or_default();
    let cluster = named(tenant, "clusters", cluster_name)
        .with_context(|| format!("the tenant kubeconfig has no cluster {cluster_name:?}"))?;
    let user = named(tenant, "users", user_name)
        .with_context(|| format!("the tenant kubeconfig has no user {user_name:?}"))?;
    let entry = format!("tenantplane-{namespace}-{name}");
    let mut inner = context["context"].clone();
    inner["cluster"] = json!(entry);
    inner["user"] = json!(entry);
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": entry, "cluster": cluster["cluster"]}],
        "users": [{"name": entry, "user": user["user"]}],
        "contexts": [{"name": name, "context": inner}],
        "current-context": name,
    }))
}

/// `existing` with `single`'s entries added, replacing same-named ones, and its
/// context made current. Everything else in `existing` is kept as it was.
pub fn merge(mut existing: Value, single: &Value) -> Value {
    if !existing.is_object() {
        existing = json!({});
    }
    for (field, value) in [("apiVersion", "v1"), ("kind", "Config")] {
        if existing.get(field).is_none() {
            existing[field] = json!(value);
        }
    }
    for list in ["clusters", "users", "contexts"] {
        let new = single[list].as_array().cloned().unwrap_or_default();
        let mut entries: Vec<Value> = existing[list]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|old| !new.iter().any(|n| n["name"] == old["name"]))
            .collect();
        entries.extend(new);
        existing[list] = Value::Array(entries);
    }
    existing["current-context"] = single["current-context"].clone();
    existing
}

/// kubectl's choice of file to write: --kubeconfig, the first KUBECONFIG entry,
/// ~/.kube/config.
fn merge_target(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path.to_owned());
    }
    if let Some(first) = std::env::var_os("KUBECONFIG")
        .as_deref()
        .and_then(|v| std::env::split_paths(v).find(|p| !p.as_os_str().is_empty()))
    {
        return Ok(first);
    }
    let home =
        std::env::var_os("HOME").context("neither --kubeconfig, KUBECONFIG nor HOME is set")?;
    Ok(Path::new(&home).join(".kube").join("config"))
}

/// Writes through a temporary file in the same directory (a crash never leaves half a
/// kubeconfig), readable by the owner only: it holds credentials.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tenantplane-{}",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("config"),
        std::process::id()
    ));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn tenant() -> Value {
        json!({"apiVersion": "v1", "kind": "Config", "current-context": "admin@t",
            "clusters": [{"name": "t", "cluster": {"server": "https://t:6443"}},
                         {"name": "other", "cluster": {"server": "https://o"}}],
            "users": [{"name": "admin", "user": {"token": "s3cret"}}],
            "contexts": [{"name": "admin@t", "context": {"cluster": "t", "user": "admin", "namespace": "shop"}}]})
    }

    #[test]
    fn one_context_named_after_the_tenant_cluster() {
        let single = single_context(&tenant(), "team-dev", "dev").unwrap();
        assert_eq!(single["current-context"], "dev");
        assert_eq!(single["contexts"][0]["name"], "dev");
        assert_eq!(
            single["contexts"][0]["context"]["cluster"],
            "tenantplane-team-dev-dev"
        );
        assert_eq!(single["contexts"][0]["context"]["namespace"], "shop");
        assert_eq!(single["clusters"].as_array().unwrap().len(), 1);
        assert_eq!(single["clusters"][0]["cluster"]["server"], "https://t:6443");
        assert_eq!(single["users"][0]["user"]["token"], "s3cret");
    }

    #[test]
    fn broken_tenant_kubeconfigs_are_errors() {
        let mut bad = tenant();
        bad["current-context"] = json!("missing");
        assert!(single_context(&bad, "n", "d").is_err());
        let mut no_user = tenant();
        no_user["users"] = json!([]);
        assert!(single_context(&no_user, "n", "d").is_err());
        assert!(single_context(&json!({}), "n", "d").is_err());
    }

    #[test]
    fn merge_keeps_other_entries_and_replaces_its_own() {
        let single = single_context(&tenant(), "team-dev", "dev").unwrap();
        let host = json!({"apiVersion": "v1", "kind": "Config", "current-context": "host", "preferences": {"colors": true},
            "clusters": [{"name": "host", "cluster": {"server": "https://h"}}],
            "users": [{"name": "host", "user": {"token": "h"}}],
            "contexts": [{"name": "host", "context": {"cluster": "host", "user": "host"}}]});
        let once = merge(host, &single);
        let twice = merge(once.clone(), &single);
        assert_eq!(once, twice);
        assert_eq!(twice["current-context"], "dev");
        assert_eq!(twice["contexts"].as_array().unwrap().len(), 2);
        assert_eq!(twice["clusters"][0]["name"], "host");
        assert_eq!(twice["preferences"]["colors"], true);
        let fresh = merge(Value::Null, &single);
        assert_eq!(fresh["kind"], "Config");
        assert_eq!(fresh["users"].as_array().unwrap().len(), 1);
    }
}
