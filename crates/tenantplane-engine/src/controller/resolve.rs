//! Resolving a TenantCluster: its IsolationProfile, SyncPolicy and tenant
//! kubeconfig (given, or from its provisioned control plane), or what blocks it.

use super::*;

pub(super) struct Resolved {
    pub(super) policy: Arc<SyncPolicy>,
    pub(super) profile: Arc<IsolationProfile>,
    pub(super) tenant: Client,
    pub(super) endpoint: String,
    pub(super) external_endpoint: Option<String>,
    /// The tenant client is the syncer's own identity (a provisioned control plane).
    pub(super) syncer_identity: bool,
    pub(super) secret_version: String,
    /// What `tenant` was built from, as a digest (see [`client_key`]).
    pub(super) client_key: String,
}

/// What [`resolve`] uses of a provisioned control plane's Ready state.
pub(super) struct Provisioned {
    pub(super) endpoint: String,
    pub(super) external_endpoint: Option<String>,
    pub(super) service_url: Option<String>,
    pub(super) syncer_token: Option<crate::provision::SyncerToken>,
}

/// What resolving found: the isolation verdict (once the profile is known) and
/// either everything needed to sync or what blocks it.
pub(super) struct Resolution {
    pub(super) isolation: Option<IsolationVerdict>,
    pub(super) outcome: Result<Resolved, Blocker>,
}

/// `running_client`: the running engine's tenant client and its [`client_key`],
/// reused when the kubeconfig and the address are unchanged.
pub(super) async fn resolve(
    tc: &TenantCluster,
    namespace: &str,
    ctx: &Context,
    running_client: Option<(String, Client)>,
) -> Result<Resolution, ReconcileError> {
    let host = &ctx.config.host;
    let service_cidr = ctx.config.service_cidr.as_str();
    let blocked = |isolation: Option<IsolationVerdict>, blocker: Blocker| Resolution {
        isolation,
        outcome: Err(blocker),
    };
    let Some(profile) = ctx
        .caches
        .profile(host, &tc.spec.isolation_profile_ref.name)
        .await?
    else {
        let message = format!(
            "IsolationProfile {:?} does not exist: create it or change spec.isolationProfileRef",
            tc.spec.isolation_profile_ref.name
        );
        let isolation = IsolationVerdict {
            applied: false,
            reason: "IsolationProfileNotFound",
            message: message.clone(),
        };
        return Ok(blocked(
            Some(isolation),
            Blocker::new("IsolationProfileNotFound", message),
        ));
    };
    let peers = ctx.caches.peer_levels(host, tc).await?;
    let memo_key = (namespace.to_owned(), tc.name_any());
    // Everything the boundary is compiled from; the owner reference needs the uid.
    let inputs = digest(&json!({
        "uid": tc.uid(),
        "spec": tc.spec,
        "profile": profile.spec,
        "peers": peers,
    }));
    let remembered = ctx
        .isolation_memo
        .fresh(&memo_key, &inputs, std::time::Instant::now());
    let isolation = match remembered {
        Some(verdict) => verdict,
        None => apply_and_remember(ctx, tc, &profile, &peers, memo_key, inputs).await?,
    };
    if !isolation.applied {
        // No workload is synced into a namespace whose boundary is not in place.
        let blocker = Blocker::new("IsolationNotApplied", isolation.message.clone());
        return Ok(blocked(Some(isolation), blocker));
    }
    let isolation = Some(isolation);
    let Some(policy) = ctx
        .caches
        .policy(host, &tc.spec.sync_policy_ref.name)
        .await?
    else {
        let message = format!(
            "SyncPolicy {:?} does not exist: create it or change spec.syncPolicyRef",
            tc.spec.sync_policy_ref.name
        );
        return Ok(blocked(
            isolation,
            Blocker::new("SyncPolicyNotFound", message),
        ));
    };
    let (secret_ref, provisioned) = match ensure_control_plane(ctx, tc, service_cidr).await? {
        ControlPlaneState::External { kubeconfig_secret } => (kubeconfig_secret, None),
        ControlPlaneState::Ready {
            kubeconfig_secret,
            endpoint,
            external_endpoint,
            service_url,
            syncer_token,
        } => (
            kubeconfig_secret,
            Some(Provisioned {
                endpoint,
                external_endpoint,
                service_url,
                syncer_token,
            }),
        ),
        ControlPlaneState::Provisioning { message } => {
            return Ok(blocked(isolation, Blocker::provisioning(message)));
        }
        ControlPlaneState::Refused { reason, message } => {
            return Ok(blocked(isolation, Blocker::new(reason, message)));
        }
    };
    let secrets: Api<Secret> = Api::namespaced(host.clone(), namespace);
    let Some(secret) = secrets.get_opt(&secret_ref.name).await? else {
        let message = format!("Secret {namespace}/{} does not exist", secret_ref.name);
        return Ok(blocked(
            isolation,
            Blocker::new("KubeconfigSecretNotFound", message),
        ));
    };
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&secret_ref.key)) else {
        let message = format!(
            "Secret {namespace}/{} has no key {:?}",
            secret_ref.name, secret_ref.key
        );
        return Ok(blocked(
            isolation,
            Blocker::new("KubeconfigKeyMissing", message),
        ));
    };
    // Never log or report the kubeconfig itself: it holds credentials.
    let invalid = |why: String| {
        let message = format!(
            "Secret {namespace}/{} key {:?} is not a usable kubeconfig: {why}",
            secret_ref.name, secret_ref.key
        );
        blocked(
            isolation.clone(),
            Blocker::new("InvalidKubeconfig", message),
        )
    };
    let Ok(text) = std::str::from_utf8(&bytes.0) else {
        return Ok(invalid("not UTF-8".into()));
    };
    let kubeconfig = match Kubeconfig::from_yaml(text) {
        Ok(k) => k,
        Err(e) => return Ok(invalid(yaml_failure(&e))),
    };
    let mut config =
        match kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await
        {
            Ok(c) => c,
            Err(e) => return Ok(invalid(e.to_string())),
        };
    let mut cluster_url = config.cluster_url.to_string();
    // A provisioned control plane is dialled at its Service's address, presenting
    // the Service's DNS name for TLS: no cluster DNS needed (see `service_url`).
    if let Some(p) = &provisioned
        && let Some(service_url) = &p.service_url
        && let Ok(uri) = service_url.parse::<http::Uri>()
    {
        config.cluster_url = uri;
        config.tls_server_name = Some(crate::provision::in_cluster_host(&tc.name_any(), namespace));
        cluster_url = format!(
            "{} (dialled at its Service address {service_url})",
            p.endpoint
        );
    }
    // The syncer's own identity, so the tenant's admission can tell its writes apart.
    let syncer_token = provisioned.as_ref().and_then(|p| p.syncer_token.as_ref());
    if let Some(token) = syncer_token {
        config.auth_info.token = Some(token.expose().to_owned().into());
    }
    let syncer_identity = syncer_token.is_some();
    let config_url = config.cluster_url.to_string();
    let key = client_key(
        &bytes.0,
        provisioned.as_ref().and_then(|p| p.service_url.as_deref()),
        syncer_token.map(|t| t.expose()),
    );
    let tenant = match running_client {
        Some((running_key, client)) if running_key == key => client,
        _ => match crate::tenant_client::tenant_client(config) {
            Ok(c) => c,
            Err(e) => return Ok(invalid(e.to_string())),
        },
    };
    let unreachable = match tokio::time::timeout(TENANT_TIMEOUT, tenant.apiserver_version()).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!(
            "the tenant API server at {cluster_url} did not answer: {e}"
        )),
        Err(_) => Some(format!(
            "the tenant API server at {cluster_url} did not answer within {TENANT_TIMEOUT:?}"
        )),
    };
    if let Some(message) = unreachable {
        return Ok(blocked(isolation, Blocker::tenant_unreachable(message)));
    }
    let (endpoint, external_endpoint) = match provisioned {
        Some(p) => (p.endpoint, p.external_endpoint),
        None => (config_url, None),
    };
    Ok(Resolution {
        isolation,
        outcome: Ok(Resolved {
            policy,
            profile,
            tenant,
            endpoint,
            external_endpoint,
            syncer_identity,
            secret_version: secret.resource_version().unwrap_or_default(),
            client_key: key,
        }),
    })
}

/// A digest of what a tenant client is built from: the kubeconfig, the Service
/// address it is dialled at, the syncer's token. Kept in memory only, never
/// logged (it is derived from credentials).
fn client_key(kubeconfig: &[u8], service_url: Option<&str>, token: Option<&str>) -> String {
    use base64::Engine as _;
    digest(&json!({
        "kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig),
        "serviceUrl": service_url,
        "token": token,
    }))
}

/// [`ensure_control_plane_with`], skipping the cleanup of an external control
/// plane's provisioned leftovers once one found none for this generation: only a
/// spec change (a new generation) makes this controller provision again.
async fn ensure_control_plane(
    ctx: &Context,
    tc: &TenantCluster,
    service_cidr: &str,
) -> Result<ControlPlaneState, ReconcileError> {
    let memo = tc.uid().zip(tc.metadata.generation);
    if let (Some(external), Some(memo)) = (&tc.spec.control_plane.external, &memo) {
        let cleaned = ctx
            .external_cleaned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(memo);
        if cleaned {
            return Ok(ControlPlaneState::External {
                kubeconfig_secret: external.kubeconfig_secret_ref.clone(),
            });
        }
        // Switched from provisioned to external: remove what was provisioned.
        let outcome = cleanup_control_plane(&ctx.config.host, tc).await?;
        if outcome.deleted.is_empty() && !outcome.namespace_deleted {
            let mut cleaned = ctx
                .external_cleaned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // Earlier generations of the same TenantCluster are not asked again.
            cleaned.retain(|(uid, _)| *uid != memo.0);
            cleaned.insert(memo.clone());
        }
        return Ok(ControlPlaneState::External {
            kubeconfig_secret: external.kubeconfig_secret_ref.clone(),
        });
    }
    Ok(ensure_control_plane_with(&ctx.config.host, tc, service_cidr).await?)
}

/// Why a kubeconfig does not parse, without the parser's message: it quotes the
/// text it stopped at (the offending line, or the value of a mistyped field), and
/// that text may be a credential. Only the position is kept.
pub(super) fn yaml_failure(err: &KubeconfigError) -> String {
    let at = match err {
        KubeconfigError::Parse(e) => e
            .location()
            .map(|l| format!(" (at line {}, column {})", l.line(), l.column())),
        _ => None,
    };
    format!(
        "it is not a kubeconfig YAML document{}",
        at.unwrap_or_default()
    )
}

/// Applies the boundary on the host and remembers an applied one (see
/// [`super::isolation_memo`]).
async fn apply_and_remember(
    ctx: &Context,
    tc: &TenantCluster,
    profile: &IsolationProfile,
    peers: &[tenantplane_api::PodSecurityLevel],
    memo_key: (String, String),
    inputs: String,
) -> Result<IsolationVerdict, ReconcileError> {
    let verdict = match apply_isolation_among(&ctx.config.host, tc, profile, Some(peers)).await {
        Ok(outcome) => IsolationVerdict {
            applied: outcome.is_applied(),
            reason: outcome.reason(),
            message: outcome.summary(),
        },
        Err(err) => match err.into_unanswered() {
            // The host did not answer: an error to retry, as a failed read is. A
            // blocker would stop the running engine, and with it the release of
            // tenant objects held by finalizers while the host is down.
            Ok(unanswered) => {
                ctx.isolation_memo.forget(&memo_key);
                return Err(ReconcileError::Host(unanswered));
            }
            Err(err) => IsolationVerdict {
                applied: false,
                reason: "IsolationNotApplied",
                message: err.to_string(),
            },
        },
    };
    ctx.isolation_memo
        .record(memo_key, inputs, &verdict, std::time::Instant::now());
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_client_is_reused_only_for_the_same_kubeconfig_address_and_token() {
        let key = client_key(b"kubeconfig-a", None, None);
        assert_eq!(key, client_key(b"kubeconfig-a", None, None));
        for other in [
            client_key(b"kubeconfig-b", None, None),
            client_key(b"kubeconfig-a", Some("https://10.0.0.1:443"), None),
            client_key(b"kubeconfig-a", None, Some("token-1")),
        ] {
            assert_ne!(key, other);
        }
        assert_ne!(
            client_key(b"kubeconfig-a", None, Some("token-1")),
            client_key(b"kubeconfig-a", None, Some("token-2"))
        );
        // A digest, never the credential itself.
        assert!(!client_key(b"kubeconfig-a", None, Some("token-7f3a9c")).contains("7f3a9c"));
    }

    #[test]
    fn a_kubeconfig_that_does_not_parse_is_not_quoted() {
        for (text, line) in [
            ("token-7f3a9c-secret", 1),
            ("apiVersion: v1\nusers: token-7f3a9c-secret\n", 2),
            (
                "apiVersion: v1\nclusters:\n- name: [token-7f3a9c-secret\n",
                3,
            ),
        ] {
            let err = Kubeconfig::from_yaml(text).unwrap_err();
            let message = yaml_failure(&err);
            assert!(!message.contains("7f3a9c"), "{message}");
            assert!(
                message.starts_with("it is not a kubeconfig YAML document"),
                "{message}"
            );
            assert!(
                message.contains(&format!("line {line}")),
                "{text:?}: {message}"
            );
        }
    }
}
