//! `tenantplane why -n NAMESPACE KIND/NAME`: who caused a host object and why it
//! exists, from its reverse-mapping metadata and the decisions recorded about it,
//! and for a bidirectional object its conflict history.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use kube::api::{ApiResource, DynamicObject};
use kube::discovery::{Discovery, Scope};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use tenantplane_api::{ConflictRecord, DecisionRecord, SyncDecision};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::provenance::reverse_lookup;
use tenantplane_core::selectors::host_selectors;
use tenantplane_core::three_way::history_of;

use crate::kube_client;
use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
pub struct WhyArgs {
    /// Namespace of the host object.
    #[arg(short = 'n', long)]
    pub namespace: String,
    /// The host object, as KIND/NAME: kind, plural or short name, optionally with
    /// `.group` (`configmap/web-x-default-x-dev`, `svc/api-x-web-x-dev`,
    /// `widgets.example.com/gizmo-x-web-x-dev`).
    pub object: String,
    #[command(flatten)]
    pub cluster: kube_client::ClusterArgs,
    /// How many of the latest decisions to show.
    #[arg(long, default_value_t = 10)]
    pub decisions: usize,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    host_object: HostObject,
    managed_by_tenantplane: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant_object: Option<TenantObject>,
    /// Why tenantplane does not claim the object, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The live host object's label selectors by field (see `explain-sync -f`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    selectors: BTreeMap<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    decisions: Vec<DecisionRecord>,
    /// A bidirectional object's latest conflicts and how each ended, newest last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conflicts: Vec<ConflictRecord>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct HostObject {
    kind: String,
    namespace: String,
    name: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct TenantObject {
    tenant_cluster: String,
    kind: String,
    namespace: String,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
}

pub fn run(args: WhyArgs) -> anyhow::Result<String> {
    let (kind, name) = args
        .object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .with_context(|| format!("{:?} is not KIND/NAME", args.object))?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let answer = runtime.block_on(async {
        let client = args.cluster.client().await?;
        let resource = find_resource(&client, kind).await?;
        answer(&client, &resource, &args.namespace, name, args.decisions).await
    })?;
    output::render(&answer, args.output)
}

/// Finds a namespaced resource by kind, plural, singular or short name, optionally `.group`.
async fn find_resource(client: &Client, wanted: &str) -> anyhow::Result<ApiResource> {
    let wanted = wanted.to_ascii_lowercase();
    let (name, group) = wanted
        .split_once('.')
        .map_or((wanted.as_str(), None), |(n, g)| (n, Some(g)));
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the host's API resources")?;
    let mut candidates = Vec::new();
    for api_group in discovery.groups() {
        if group.is_some_and(|g| g != api_group.name()) {
            continue;
        }
        // Short names (`cm`, `tc`) are not in kube's discovery; the raw resource
        // list of the group's preferred version has them.
        let version = api_group.preferred_version_or_latest();
        let short_names = short_names_of(client, api_group.name(), version).await;
        for (resource, caps) in api_group.recommended_resources() {
            let short = short_names
                .get(&resource.plural)
                .is_some_and(|names| names.iter().any(|s| s == name));
            let matches = short
                || [
                    resource.kind.to_ascii_lowercase(),
                    resource.plural.clone(),
                    resource.kind.to_ascii_lowercase() + "s",
                ]
                .iter()
                .any(|n| n == name);
            if matches && caps.scope == Scope::Namespaced {
                candidates.push(resource);
            }
        }
    }
    // The core group first, as kubectl does.
    candidates.sort_by_key(|r| !r.group.is_empty());
    candidates
        .into_iter()
        .next()
        .with_context(|| format!("the host API server serves no namespaced kind {wanted:?}"))
}

/// Plural → short names of the resources of `group`/`version`; empty when the
/// list cannot be read (short names are a convenience, never a failure).
async fn short_names_of(
    client: &Client,
    group: &str,
    version: &str,
) -> std::collections::HashMap<String, Vec<String>> {
    let list = if group.is_empty() {
        client.list_core_api_resources(version).await
    } else {
        client
            .list_api_group_resources(&format!("{group}/{version}"))
            .await
    };
    list.map(|list| {
        list.resources
            .into_iter()
            .filter_map(|r| Some((r.name, r.short_names?)))
            .collect()
    })
    .unwrap_or_default()
}

async fn answer(
    client: &Client,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    limit: usize,
) -> anyhow::Result<Answer> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let Some(object) = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {} {namespace}/{name}", resource.kind))?
    else {
        bail!("{} {namespace}/{name} does not exist", resource.kind);
    };
    let host_object = HostObject {
        kind: resource.kind.clone(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let selectors = GroupKind::from_api_version(&resource.api_version, &resource.kind)
        .map(|gk| host_selectors(&gk, &object.data))
        .unwrap_or_default();
    let labels = object.metadata.labels.clone().unwrap_or_default();
    let annotations = object.metadata.annotations.clone().unwrap_or_default();
    let identity = match reverse_lookup(&object.name_any(), &labels, &annotations) {
        Ok(identity) => identity,
        Err(why) => {
            return Ok(Answer {
                host_object,
                managed_by_tenantplane: false,
                tenant_object: None,
                reason: Some(format!("not managed by tenantplane: {why}")),
                selectors,
                decisions: Vec::new(),
                conflicts: Vec::new(),
            });
        }
    };
    let decisions: Api<SyncDecision> = Api::namespaced(client.clone(), namespace);
    let status = decisions
        .get_opt(&identity.tenant)
        .await
        .with_context(|| format!("reading SyncDecision {namespace}/{}", identity.tenant))?
        .and_then(|sd| sd.status)
        .unwrap_or_default();
    let conflicts = history_of(&status.conflicts, &resource.kind, name)
        .map(|history| history.records.clone())
        .unwrap_or_default();
    let mut about: Vec<DecisionRecord> = status
        .decisions
        .into_iter()
        .filter(|d| d.host.name == name && d.kind == resource.kind)
        .collect();
    let skip = about.len().saturating_sub(limit);
    about.drain(..skip);
    Ok(Answer {
        host_object,
        managed_by_tenantplane: true,
        tenant_object: Some(TenantObject {
            tenant_cluster: format!("{namespace}/{}", identity.tenant),
            kind: identity.group_kind.to_string(),
            namespace: identity.virtual_namespace,
            name: identity.name,
            uid: identity.uid,
        }),
        reason: None,
        selectors,
        decisions: about,
        conflicts,
    })
}
