//! `tenantplane status`: every TenantCluster and Tenant at a glance, from their
//! status and the SyncDecision each TenantCluster records into.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde::Serialize;
use tenantplane_api::{DecisionAction, SyncDecision, Tenant, TenantCluster};

use crate::kube_client::ClusterArgs;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusFormat {
    #[default]
    Table,
    Json,
    Yaml,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Only TenantClusters in this namespace (Tenants are cluster-scoped: all shown).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StatusFormat::Table)]
    pub output: StatusFormat,
}

/// How far back a Skip decision counts as a recent error.
const ERROR_WINDOW_SECONDS: i64 = 3600;

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub tenant_clusters: Vec<TenantClusterRow>,
    pub tenants: Vec<TenantRow>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantClusterRow {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub ready: String,
    /// Kinds with host copies (`apiVersion/Kind`), from the status.
    pub synced_kinds: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_decision: Option<LastDecision>,
    /// Decisions by action among those retained.
    pub decisions_by_action: BTreeMap<String, usize>,
    /// Skip decisions in the last hour: writes the engine refused or could not make.
    pub errors_last_hour: usize,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastDecision {
    pub action: String,
    pub kind: String,
    pub tenant_object: String,
    pub reason: String,
    pub time: String,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TenantRow {
    pub name: String,
    pub state: String,
    pub size: u32,
    pub ready: String,
}

pub fn run(args: StatusArgs) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let (tcs, decisions, tenants) = runtime.block_on(async {
        let client = args.cluster.client().await?;
        let (tc_api, sd_api) = match &args.namespace {
            Some(ns) => (
                Api::<TenantCluster>::namespaced(client.clone(), ns),
                Api::<SyncDecision>::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        let lp = ListParams::default();
        let tcs = tc_api.list(&lp).await.context("listing TenantClusters")?;
        let decisions = sd_api.list(&lp).await.context("listing SyncDecisions")?;
        let tenants = Api::<Tenant>::all(client)
            .list(&lp)
            .await
            .context("listing Tenants")?;
        anyhow::Ok((tcs.items, decisions.items, tenants.items))
    })?;
    let now = unix_now();
    let report = summarize(&tcs, &decisions, &tenants, now);
    match args.output {
        StatusFormat::Table => Ok(table(&report)),
        StatusFormat::Json => crate::output::render(&report, crate::output::Format::Json),
        StatusFormat::Yaml => crate::output::render(&report, crate::output::Format::Yaml),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn condition(conditions: &[Condition], type_: &str) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map_or_else(|| "Unknown".to_owned(), |c| c.status.clone())
}

/// The report, sorted by namespace and name; `now` in Unix seconds.
pub fn summarize(
    tcs: &[TenantCluster],
    decisions: &[SyncDecision],
    tenants: &[Tenant],
    now: i64,
) -> Report {
    let mut tenant_clusters: Vec<TenantClusterRow> = tcs
        .iter()
        .map(|tc| {
            let namespace = tc.namespace().unwrap_or_default();
            let name = tc.name_any();
            let status = tc.status.clone().unwrap_or_default();
            // The engine records into the SyncDecision named after the TenantCluster.
            let records = decisions
                .iter()
                .find(|sd| sd.namespace().as_deref() == Some(&namespace) && sd.name_any() == name)
                .and_then(|sd| sd.status.as_ref())
                .map(|s| s.decisions.as_slice())
                .unwrap_or_default();
            let mut by_action = BTreeMap::new();
            for record in records {
                *by_action
                    .entry(record.action.as_str().to_owned())
                    .or_insert(0) += 1;
            }
            TenantClusterRow {
                phase: status
                    .phase
                    .map_or_else(|| "Pending".to_owned(), |p| format!("{p:?}")),
                ready: condition(&status.conditions, "Ready"),
                synced_kinds: status
                    .synced_resources
                    .iter()
                    .map(|r| format!("{}/{}", r.api_version, r.kind))
                    .collect(),
                last_decision: records
                    .iter()
                    .max_by_key(|r| r.time.0)
                    .map(|r| LastDecision {
                        action: r.action.as_str().to_owned(),
                        kind: r.kind.clone(),
                        tenant_object: format!("{}/{}", r.tenant.namespace, r.tenant.name),
                        reason: r.reason.clone(),
                        time: r.time.0.to_string(),
                    }),
                decisions_by_action: by_action,
                errors_last_hour: records
                    .iter()
                    .filter(|r| {
                        r.action == DecisionAction::Skip
                            && now - r.time.0.as_second() <= ERROR_WINDOW_SECONDS
                    })
                    .count(),
                namespace,
                name,
            }
        })
        .collect();
    tenant_clusters.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut tenants: Vec<TenantRow> = tenants
        .iter()
        .map(|t| {
            let status = t.status.clone().unwrap_or_default();
            TenantRow {
                name: t.name_any(),
                state: status
                    .state
                    .map_or_else(|| "Unknown".to_owned(), |s| format!("{s:?}")),
                size: status.size,
                ready: condition(&status.conditions, "Ready"),
            }
        })
        .collect();
    tenants.sort_by(|a, b| a.name.cmp(&b.name));
    Report {
        tenant_clusters,
        tenants,
    }
}

/// Columns padded to their widest cell, like `kubectl get`.
fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("   ").trim_end());
    }
    out
}

pub fn table(report: &Report) -> String {
    let mut rows = vec![
        [
            "NAMESPACE",
            "TENANTCLUSTER",
            "PHASE",
            "READY",
            "SYNCED KINDS",
            "LAST DECISION",
            "ERRORS(1H)",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for tc in &report.tenant_clusters {
        let kinds: Vec<&str> = tc
            .synced_kinds
            .iter()
            .map(|k| k.rsplit('/').next().unwrap_or(k))
            .collect();
        rows.push(vec![
            tc.namespace.clone(),
            tc.name.clone(),
            tc.phase.clone(),
            tc.ready.clone(),
            if kinds.is_empty() {
                "-".into()
            } else {
                kinds.join(",")
            },
            tc.last_decision.as_ref().map_or_else(
                || "-".to_owned(),
                |d| format!("{} {} {} at {}", d.action, d.kind, d.tenant_object, d.time),
            ),
            tc.errors_last_hour.to_string(),
        ]);
    }
    let mut out = columns(&rows);
    out.push('\n');
    let mut rows = vec![
        ["TENANT", "STATE", "NAMESPACES", "READY"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for t in &report.tenants {
        rows.push(vec![
            t.name.clone(),
            t.state.clone(),
            t.size.to_string(),
            t.ready.clone(),
        ]);
    }
    out.push_str(&columns(&rows));
    out
}
