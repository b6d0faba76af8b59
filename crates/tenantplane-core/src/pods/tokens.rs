//! Service-account tokens of a host Pod: requested from the tenant API server
//! (bound to the tenant Pod), kept in a host Secret (never an annotation), and
//! refreshed before they expire, as the kubelet does (at 80% of their lifetime).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::metadata::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, LABEL_KIND, LABEL_MANAGED_BY,
    LABEL_TENANT, MANAGED_BY_VALUE,
};
use crate::transform::{TenantTarget, string_map};

use super::host_pod::{TokenProjection, token_secret_name};

/// The kind label of token Secrets.
pub const TOKEN_KIND: &str = "ServiceAccountToken";
/// Unix seconds after which the tokens are requested again.
pub const ANNOTATION_REFRESH_AFTER: &str = "tenantplane.io/token-refresh-after";
/// The keys the Secret holds, comma-separated: a changed Pod spec asks for others.
pub const ANNOTATION_TOKEN_KEYS: &str = "tenantplane.io/token-keys";

/// When tokens issued at `issued` (unix seconds) are refreshed: at 80% of the
/// shortest lifetime among them.
pub fn refresh_after(issued: i64, tokens: &[TokenProjection]) -> i64 {
    let shortest = tokens
        .iter()
        .map(|t| t.expiration_seconds.max(1))
        .min()
        .unwrap_or(3600);
    issued.saturating_add(shortest.saturating_mul(4) / 5)
}

fn keys(tokens: &[TokenProjection]) -> String {
    tokens
        .iter()
        .map(|t| t.key.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `observed` (the token Secret, if any) must be (re)written at `now`.
pub fn needs_tokens(observed: Option<&Value>, tokens: &[TokenProjection], now: i64) -> bool {
    let Some(secret) = observed else {
        return !tokens.is_empty();
    };
    let annotations = string_map(secret.pointer("/metadata/annotations"));
    let due = annotations
        .get(ANNOTATION_REFRESH_AFTER)
        .and_then(|v| v.parse::<i64>().ok())
        .is_none_or(|after| now >= after);
    due || annotations.get(ANNOTATION_TOKEN_KEYS).map(String::as_str) != Some(keys(tokens).as_str())
}

/// The token Secret of tenant Pod `namespace/pod` holding `values` (key → token).
pub fn token_secret(
    target: &TenantTarget,
    namespace: &str,
    pod: &str,
    tokens: &[TokenProjection],
    values: &BTreeMap<String, String>,
    issued: i64,
) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {
            "name": token_secret_name(target, namespace, pod),
            "namespace": target.host_namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: target.tenant, LABEL_KIND: TOKEN_KIND},
            "annotations": {
                ANNOTATION_VIRTUAL_NAMESPACE: namespace,
                ANNOTATION_VIRTUAL_NAME: pod,
                ANNOTATION_REFRESH_AFTER: refresh_after(issued, tokens).to_string(),
                ANNOTATION_TOKEN_KEYS: keys(tokens),
            }
        },
        "stringData": values,
    })
}

/// Whether a host Secret is the token Secret of this tenant's Pod `namespace/pod`.
pub fn is_token_secret_of(
    target: &TenantTarget,
    namespace: &str,
    pod: &str,
    observed: &Value,
) -> bool {
    let labels = string_map(observed.pointer("/metadata/labels"));
    let annotations = string_map(observed.pointer("/metadata/annotations"));
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_TENANT) == Some(&target.tenant)
        && labels.get(LABEL_KIND).map(String::as_str) == Some(TOKEN_KIND)
        && annotations
            .get(ANNOTATION_VIRTUAL_NAMESPACE)
            .map(String::as_str)
            == Some(namespace)
        && annotations.get(ANNOTATION_VIRTUAL_NAME).map(String::as_str) == Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(key: &str, seconds: i64) -> TokenProjection {
        TokenProjection {
            key: key.into(),
            audience: None,
            expiration_seconds: seconds,
            field: String::new(),
        }
    }

    #[test]
    fn tokens_are_refreshed_at_80_percent_of_the_shortest_lifetime() {
        let tokens = [token("a", 3600), token("b", 600)];
        assert_eq!(refresh_after(1000, &tokens), 1480);
        let t = TenantTarget::new("dev", "team-dev").unwrap();
        let values: BTreeMap<String, String> = [
            ("a".to_owned(), "jwt-a".to_owned()),
            ("b".to_owned(), "jwt-b".to_owned()),
        ]
        .into();
        let secret = token_secret(&t, "shop", "web", &tokens, &values, 1000);
        assert_eq!(secret["stringData"]["b"], "jwt-b");
        assert!(is_token_secret_of(&t, "shop", "web", &secret));
        assert!(!is_token_secret_of(&t, "shop", "other", &secret));
        assert!(!needs_tokens(Some(&secret), &tokens, 1479));
        assert!(needs_tokens(Some(&secret), &tokens, 1480));
        assert!(
            needs_tokens(Some(&secret), &tokens[..1], 1000),
            "other keys wanted"
        );
        assert!(needs_tokens(None, &tokens, 0));
        assert!(!needs_tokens(None, &[], 0));
        // Nothing about the token in metadata.
        assert!(!secret["metadata"].to_string().contains("jwt"));
    }
}
