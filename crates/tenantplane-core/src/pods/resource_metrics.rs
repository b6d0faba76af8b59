//! A host kubelet's `/metrics/resource` (Prometheus text) as a tenant may see it,
//! by the rules of [`super::stats`]: samples of the tenant's synced Pods only,
//! their `namespace` and `pod` labels renamed to the tenant's; the node's figures
//! (`node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`) replaced by
//! the sums of the tenant's containers; every other sample without Pod labels
//! dropped, except `scrape_error`.

use std::collections::BTreeMap;

use super::stats::StatsPods;

/// Node samples recomputed from the tenant's containers: node metric → container metric.
const NODE_SUMS: &[(&str, &str)] = &[
    (
        "node_cpu_usage_seconds_total",
        "container_cpu_usage_seconds_total",
    ),
    (
        "node_memory_working_set_bytes",
        "container_memory_working_set_bytes",
    ),
];

/// Samples without Pod labels that say nothing about the host's load.
const KEPT_UNLABELLED: &[&str] = &["scrape_error"];

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
    timestamp: Option<i64>,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn render(&self) -> String {
        let mut line = self.name.clone();
        if !self.labels.is_empty() {
            let labels: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            line.push('{');
            line.push_str(&labels.join(","));
            line.push('}');
        }
        line.push(' ');
        line.push_str(&self.value.to_string());
        if let Some(ts) = self.timestamp {
            line.push(' ');
            line.push_str(&ts.to_string());
        }
        line
    }
}

/// The tenant's `/metrics/resource` from the host's `text` (see the module docs).
pub fn tenant_resource_metrics(text: &str, host_namespace: &str, pods: &StatsPods) -> String {
    let mut out = Vec::new();
    // Per node metric: the sum of the kept container samples, and their latest time.
    let mut sums: BTreeMap<&str, (f64, Option<i64>)> = BTreeMap::new();
    let mut node_lines = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            out.push(line.to_owned());
            continue;
        }
        let Some(mut sample) = parse_sample(line) else {
            continue;
        };
        if let Some((node, _)) = NODE_SUMS.iter().find(|(node, _)| *node == sample.name) {
            // Where the node's line was: its place keeps the output's grouping.
            node_lines.push((out.len(), *node));
            continue;
        }
        let (Some(namespace), Some(pod)) = (sample.label("namespace"), sample.label("pod")) else {
            if KEPT_UNLABELLED.contains(&sample.name.as_str()) {
                out.push(sample.render());
            }
            continue;
        };
        if namespace != host_namespace {
            continue;
        }
        let Some((_, tenant)) = pods.get(pod) else {
            continue;
        };
        for (key, value) in sample.labels.iter_mut() {
            match key.as_str() {
                "namespace" => *value = tenant.namespace.clone(),
                "pod" => *value = tenant.name.clone(),
                _ => {}
            }
        }
        if let Some((node, _)) = NODE_SUMS
            .iter()
            .find(|(_, container)| *container == sample.name)
        {
            let entry = sums.entry(node).or_insert((0.0, None));
            entry.0 += sample.value;
            entry.1 = entry.1.max(sample.timestamp);
        }
        out.push(sample.render());
    }
    // The node lines, in their places (from the last, so earlier places hold).
    for (at, node) in node_lines.into_iter().rev() {
        let (value, timestamp) = sums.get(node).copied().unwrap_or((0.0, None));
        let line = Sample {
            name: node.to_owned(),
            labels: Vec::new(),
            value,
            timestamp,
        }
        .render();
        out.insert(at.min(out.len()), line);
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// Parses `name{k="v",...} value [timestamp]`; `None` for anything else.
fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next()?.parse::<f64>().ok()?;
    let timestamp = match fields.next() {
        Some(ts) => Some(ts.parse::<i64>().ok()?),
        None => None,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
        timestamp,
    })
}

/// The labels up to the closing `}`, and what follows it.
fn parse_labels(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, after_key) = text.split_once('=')?;
        let mut chars = after_key.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key.trim().to_owned(), value));
        text = &after_key[1 + end + 1..];
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
#[path = "resource_metrics_tests.rs"]
mod tests;
