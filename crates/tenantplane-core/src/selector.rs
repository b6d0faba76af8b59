//! Label selectors (`matchLabels` and `matchExpressions`) evaluated the way the API
//! server evaluates them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A selector the API server would refuse: an unknown operator, or values where the
/// operator takes none (or none where it needs some).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector: {0}")]
pub struct SelectorError(pub String);

/// Whether `labels` satisfy `selector`. An empty selector selects everything.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    for (key, value) in selector.match_labels.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Ok(false);
        }
    }
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.as_deref().unwrap_or_default();
        let value = labels.get(&expression.key);
        let ok = match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(SelectorError(format!(
                    "operator {} on {:?} needs values",
                    expression.operator, expression.key
                )));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(SelectorError(format!(
                    "operator {} on {:?} takes no values",
                    expression.operator, expression.key
                )));
            }
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => {
                return Err(SelectorError(format!(
                    "unknown operator {other:?} on {:?}",
                    expression.key
                )));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions_all_must_hold() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("team", "a")])),
            match_expressions: Some(vec![
                expr("env", "In", &["dev", "test"]),
                expr("frozen", "DoesNotExist", &[]),
                expr("tier", "NotIn", &["db"]),
                expr("team", "Exists", &[]),
            ]),
        };
        let yes = labels(&[("team", "a"), ("env", "dev")]);
        assert_eq!(matches(&selector, &yes), Ok(true));
        for no in [
            labels(&[("team", "b"), ("env", "dev")]),
            labels(&[("team", "a"), ("env", "prod")]),
            labels(&[("team", "a"), ("env", "dev"), ("frozen", "")]),
            labels(&[("team", "a"), ("env", "dev"), ("tier", "db")]),
            labels(&[("env", "dev")]),
        ] {
            assert_eq!(matches(&selector, &no), Ok(false), "{no:?}");
        }
        assert_eq!(matches(&LabelSelector::default(), &labels(&[])), Ok(true));
    }

    #[test]
    fn malformed_expressions_are_errors() {
        for bad in [
            expr("a", "In", &[]),
            expr("a", "Exists", &["x"]),
            expr("a", "Matches", &["x"]),
        ] {
            let selector = LabelSelector {
                match_expressions: Some(vec![bad]),
                ..LabelSelector::default()
            };
            assert!(matches(&selector, &labels(&[("a", "x")])).is_err());
        }
    }
}
