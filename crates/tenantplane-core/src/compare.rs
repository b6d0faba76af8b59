//! Comparing a desired object with what the API server stored.
//!
//! The server defaults fields, drops empty ones and normalizes quantities, so
//! equality is the wrong test. "Holds" is: every field tenantplane sets is present
//! with an equal value; fields the server added are ignored.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::quantity::approximate_value;

/// Whether `observed` holds everything in `desired`.
pub fn holds(observed: Option<&Value>, desired: &Value) -> bool {
    first_difference(observed, desired, &mut String::new()).is_none()
}

/// The JSON path of the first field of `desired` that `observed` does not hold.
pub fn difference(observed: &Value, desired: &Value) -> Option<String> {
    first_difference(Some(observed), desired, &mut String::new())
}

/// Null, or maps and lists with nothing but empty values in them.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(m) => m.values().all(is_empty),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn first_difference(
    observed: Option<&Value>,
    desired: &Value,
    path: &mut String,
) -> Option<String> {
    let observed = match observed {
        // The server drops empty maps, lists and nulls.
        None | Some(Value::Null) => {
            return if is_empty(desired) {
                None
            } else {
                Some(path_or_root(path))
            };
        }
        Some(o) => o,
    };
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => {
            for (key, d_value) in d {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                let diff = first_difference(o.get(key), d_value, path);
                path.truncate(len);
                if diff.is_some() {
                    return diff;
                }
            }
            None
        }
        (Value::Array(d), Value::Array(o)) => {
            if d.len() != o.len() {
                return Some(path_or_root(path));
            }
            for (i, (d_item, o_item)) in d.iter().zip(o).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let diff = first_difference(Some(o_item), d_item, path);
                path.truncate(len);
                if diff.is_some() {
                    return diff;
                }
            }
            None
        }
        (Value::Number(d), Value::Number(o)) => {
            (d.as_f64() != o.as_f64()).then(|| path_or_root(path))
        }
        (Value::String(d), Value::String(o)) => {
            (d != o && !same_quantity(d, o)).then(|| path_or_root(path))
        }
        (d, o) if is_empty(d) && is_empty(o) => None,
        (d, o) => (d != o).then(|| path_or_root(path)),
    }
}

fn path_or_root(path: &str) -> String {
    if path.is_empty() {
        ".".to_owned()
    } else {
        path.to_owned()
    }
}

/// `observed` cut down to the shape of `desired`: what a later comparison looks at.
pub fn project(observed: &Value, desired: &Value) -> Value {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => Value::Object(
            d.iter()
                .filter_map(|(k, dv)| o.get(k).map(|ov| (k.clone(), project(ov, dv))))
                .collect(),
        ),
        (Value::Array(d), Value::Array(o)) if d.len() == o.len() => {
            Value::Array(d.iter().zip(o).map(|(dv, ov)| project(ov, dv)).collect())
        }
        (_, o) => o.clone(),
    }
}

/// A short stable digest of a JSON value (keys are sorted by serde_json's map).
pub fn digest(value: &Value) -> String {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let hash = Sha256::digest(&bytes);
    crate::hex::short_hex(hash, 8)
}

/// Whether two strings are the same Kubernetes quantity written differently
/// (`1000m` and `1`, `1Gi` and `1073741824`). Both must parse as quantities.
pub fn same_quantity(a: &str, b: &str) -> bool {
    match (approximate_value(a), approximate_value(b)) {
        (Some(x), Some(y)) => {
            let scale = x.abs().max(y.abs()).max(1e-12);
            ((x - y) / scale).abs() < 1e-9
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn server_additions_are_ignored() {
        let desired = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}});
        let observed = json!({"metadata": {"name": "a", "uid": "u", "labels": {"x": "1", "extra": "y"}}, "data": {"k": "v"}});
        assert!(holds(Some(&observed), &desired));
    }

    #[test]
    fn changed_and_missing_fields_are_found_by_path() {
        let desired = json!({"data": {"k": "v", "j": "w"}, "spec": {"ports": [{"port": 80}]}});
        let changed = json!({"data": {"k": "edited", "j": "w"}, "spec": {"ports": [{"port": 80}]}});
        assert_eq!(difference(&changed, &desired).as_deref(), Some(".data.k"));
        let missing = json!({"data": {"k": "v"}, "spec": {"ports": [{"port": 80}]}});
        assert_eq!(difference(&missing, &desired).as_deref(), Some(".data.j"));
        let port = json!({"data": {"k": "v", "j": "w"}, "spec": {"ports": [{"port": 81}]}});
        assert_eq!(
            difference(&port, &desired).as_deref(),
            Some(".spec.ports[0].port")
        );
        let more =
            json!({"data": {"k": "v", "j": "w"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}});
        assert_eq!(difference(&more, &desired).as_deref(), Some(".spec.ports"));
    }

    #[test]
    fn empty_values_match_absent_ones() {
        let desired = json!({"metadata": {"annotations": {}}, "data": null, "spec": {"list": []}});
        assert!(holds(Some(&json!({"spec": {}})), &desired));
        assert!(holds(None, &json!({})));
        assert!(!holds(None, &json!({"a": 1})));
    }

    #[test]
    fn quantities_are_compared_by_value() {
        assert!(same_quantity("1000m", "1"));
        assert!(same_quantity("1Gi", "1073741824"));
        assert!(same_quantity("0.5", "500m"));
        assert!(same_quantity("1e3", "1k"));
        assert!(same_quantity("500n", "0.5u"));
        assert!(!same_quantity("1", "2"));
        assert!(!same_quantity("abc", "abc1"));
        assert!(!same_quantity("", "0"));
        let desired = json!({"resources": {"requests": {"cpu": "1000m", "memory": "1024Mi"}}});
        let observed = json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}});
        assert!(holds(Some(&observed), &desired));
        assert!(holds(Some(&json!({"n": 1.0})), &json!({"n": 1})));
    }

    #[test]
    fn projection_keeps_only_the_desired_shape() {
        let desired = json!({"a": {"b": 1}, "c": [ {"d": 1} ]});
        let observed = json!({"a": {"b": 2, "x": 3}, "c": [ {"d": 1, "y": 2} ], "z": 9});
        assert_eq!(
            project(&observed, &desired),
            json!({"a": {"b": 2}, "c": [ {"d": 1} ]})
        );
        assert_eq!(
            digest(&json!({"b": 1, "a": 2})),
            digest(&json!({"a": 2, "b": 1}))
        );
    }
}
