//! Resolving a TenantCluster: its IsolationProfile, SyncPolicy and tenant
//! kubeconfig (given, or from its provisioned control plane), or what blocks it.

use super::*;

pub(super) struct Resolved {
    pub(super) policy: SyncPolicy,
    pub(super) profile: IsolationProfile,
    pub(super) tenant: Client,
    pub(super) endpoint: String,
    pub(super) external_endpoint: Option<String>,
    /// The tenant client is the syncer's own identity (a provisioned control plane).
    pub(super) syncer_identity: bool,
    pub(super) secret_version: String,
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

pub(super) async fn resolve(
    tc: &TenantCluster,
    namespace: &str,
    host: &Client,
    service_cidr: &str,
) -> Result<Resolution, ReconcileError> {
    let blocked = |isolation: Option<IsolationVerdict>, blocker: Blocker| Resolution {
        isolation,
        outcome: Err(blocker),
    };
    let profiles: Api<IsolationProfile> = Api::all(host.clone());
    let Some(profile) = profiles
        .get_opt(&tc.spec.isolation_profile_ref.name)
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
    let isolation = match apply_isolation(host, tc, &profile).await {
        Ok(outcome) => IsolationVerdict {
            applied: outcome.is_applied(),
            reason: outcome.reason(),
            message: outcome.summary(),
        },
        Err(err) => IsolationVerdict {
            applied: false,
            reason: "IsolationNotApplied",
            message: err.to_string(),
        },
    };
    if !isolation.applied {
        // No workload is synced into a namespace whose boundary is not in place.
        let blocker = Blocker::new("IsolationNotApplied", isolation.message.clone());
        return Ok(blocked(Some(isolation), blocker));
    }
    let isolation = Some(isolation);
    let policies: Api<SyncPolicy> = Api::all(host.clone());
    let Some(policy) = policies.get_opt(&tc.spec.sync_policy_ref.name).await? else {
        let message = format!(
            "SyncPolicy {:?} does not exist: create it or change spec.syncPolicyRef",
            tc.spec.sync_policy_ref.name
        );
        return Ok(blocked(
            isolation,
            Blocker::new("SyncPolicyNotFound", message),
        ));
    };
    let (secret_ref, provisioned) = match ensure_control_plane_with(host, tc, service_cidr).await? {
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
    let tenant = match Client::try_from(config) {
        Ok(c) => c,
        Err(e) => return Ok(invalid(e.to_string())),
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
        }),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

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
