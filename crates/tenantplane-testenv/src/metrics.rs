//! The API server's own request counters, so tests and benchmarks count writes the
//! way the server saw them.

use std::collections::BTreeMap;

/// `apiserver_request_total`, summed by (verb, resource).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestCounts {
    pub by_verb_resource: BTreeMap<(String, String), u64>,
    /// Writes answered with an error (4xx or 5xx), by (verb, resource, code): a
    /// failure message then tells a refused or timed-out write from a second writer.
    pub refused: BTreeMap<(String, String, String), u64>,
}

/// Verbs that change state. Server-side apply is counted as `APPLY` by 1.20.
pub const WRITE_VERBS: &[&str] = &[
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

impl RequestCounts {
    /// Writes to `resource` (plural, such as `configmaps`), or to anything when `None`.
    pub fn writes(&self, resource: Option<&str>) -> u64 {
        self.by_verb_resource
            .iter()
            .filter(|((verb, res), _)| {
                WRITE_VERBS.contains(&verb.as_str()) && resource.is_none_or(|r| r == res)
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// `verb` requests to `resource` (plural, such as `configmaps`).
    pub fn requests(&self, verb: &str, resource: &str) -> u64 {
        self.by_verb_resource
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Writes to `resource` answered 409 Conflict (a stale write, or a create of
    /// something that exists).
    pub fn conflicts(&self, resource: &str) -> u64 {
        self.refused
            .iter()
            .filter(|((_, res, code), _)| res == resource && code == "409")
            .map(|(_, n)| n)
            .sum()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            by_verb_resource: delta(&self.by_verb_resource, &earlier.by_verb_resource),
            refused: delta(&self.refused, &earlier.refused),
        }
    }
}

/// Counters in `now` less those in `then`, keeping only the ones that grew.
fn delta<K: Clone + Ord>(now: &BTreeMap<K, u64>, then: &BTreeMap<K, u64>) -> BTreeMap<K, u64> {
    now.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(then.get(k).copied().unwrap_or(0)),
            )
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Parses the Prometheus text format for `apiserver_request_total` samples.
pub fn parse_request_counts(text: &str) -> RequestCounts {
    let mut counts = RequestCounts::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            let key = format!("{name}=\"");
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&key))
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or("")
                .to_owned()
        };
        let mut resource = label("resource");
        let subresource = label("subresource");
        if !subresource.is_empty() {
            resource = format!("{resource}/{subresource}");
        }
        // Counters are whole numbers; the text format just prints them as floats.
        let n = value.max(0.0).round() as u64;
        let key = (label("verb"), resource);
        let code = label("code");
        if WRITE_VERBS.contains(&key.0.as_str()) && (code.starts_with('4') || code.starts_with('5'))
        {
            let refused = (key.0.clone(), key.1.clone(), code);
            *counts.refused.entry(refused).or_default() += n;
        }
        *counts.by_verb_resource.entry(key).or_default() += n;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_writes_by_resource() {
        let text = r#"
# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 9
apiserver_request_total{code="409",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="504",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="404",component="apiserver",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 7
"#;
        let counts = parse_request_counts(text);
        assert_eq!(counts.writes(Some("configmaps")), 5);
        assert_eq!(counts.writes(Some("pods/status")), 2);
        assert_eq!(counts.writes(None), 7);
        assert_eq!(counts.requests("POST", "configmaps"), 5);
        assert_eq!(counts.conflicts("configmaps"), 1);
        assert_eq!(counts.conflicts("pods/status"), 0);
        let post = |code: &str| ("POST".to_owned(), "configmaps".to_owned(), code.to_owned());
        // Refused writes only: the GET's 404 is not one.
        assert_eq!(
            counts.refused,
            BTreeMap::from([(post("409"), 1), (post("504"), 1)])
        );
        let later = parse_request_counts(&text.replace("} 3", "} 5").replace("} 1", "} 2"));
        assert_eq!(later.since(&counts).writes(None), 4);
        assert_eq!(later.since(&counts).conflicts("configmaps"), 1);
        assert_eq!(
            later.since(&counts).refused,
            BTreeMap::from([(post("409"), 1), (post("504"), 1)])
        );
    }
}
