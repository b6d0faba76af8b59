//! The resourceVersions of both sides when a two-way pass last found nothing to
//! do. Any write to an object changes its resourceVersion, so while both sides
//! still carry the recorded ones another plan would find nothing either, and the
//! pass can be skipped.
//!
//! These live in the syncer's memory, not on the host copy: storing the host
//! copy's own resourceVersion in it would change that version. After a restart
//! each object is planned once, then skipped again while unchanged.

use serde_json::Value;

/// Both sides' resourceVersions at the last pass that had nothing to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncVersions {
    pub tenant: String,
    pub host: String,
}

impl SyncVersions {
    /// The versions the two objects carry, `None` when either has none (an object
    /// never stored by an API server).
    pub fn of(tenant: &Value, host: &Value) -> Option<Self> {
        Some(Self {
            tenant: resource_version(tenant)?.to_owned(),
            host: resource_version(host)?.to_owned(),
        })
    }

    /// Whether neither object was written since these versions were recorded.
    pub fn unchanged(&self, tenant: &Value, host: &Value) -> bool {
        Self::of(tenant, host).as_ref() == Some(self)
    }
}

/// An object's `metadata.resourceVersion`.
pub fn resource_version(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(version: &str) -> Value {
        json!({"metadata": {"name": "g1", "resourceVersion": version}, "spec": {"size": 1}})
    }

    #[test]
    fn unchanged_only_while_both_versions_match() {
        let agreed = SyncVersions::of(&at("10"), &at("20")).unwrap();
        assert_eq!(
            agreed,
            SyncVersions {
                tenant: "10".into(),
                host: "20".into()
            }
        );
        assert!(agreed.unchanged(&at("10"), &at("20")));
        assert!(!agreed.unchanged(&at("11"), &at("20")), "tenant written");
        assert!(!agreed.unchanged(&at("10"), &at("21")), "host written");
        // Versions are opaque: the sides' numbers are never compared with each other.
        assert!(!agreed.unchanged(&at("20"), &at("10")));
    }

    #[test]
    fn an_object_without_a_version_is_never_unchanged() {
        let unstored = json!({"metadata": {"name": "g1"}});
        assert_eq!(SyncVersions::of(&unstored, &at("1")), None);
        let agreed = SyncVersions::of(&at("1"), &at("1")).unwrap();
        assert!(!agreed.unchanged(&unstored, &at("1")));
    }
}
