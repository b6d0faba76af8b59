//! YAML and JSON output, as one document or a `---` stream.

use anyhow::Context;
use serde::Serialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    Yaml,
    Json,
}

/// Renders one value.
pub fn render<T: Serialize>(value: &T, format: Format) -> anyhow::Result<String> {
    match format {
        Format::Yaml => serde_saphyr::to_string(value).context("rendering YAML"),
        Format::Json => {
            let mut text = serde_json::to_string_pretty(value).context("rendering JSON")?;
            text.push('\n');
            Ok(text)
        }
    }
}

/// Renders objects for `kubectl apply -f -`: a `---` YAML stream, or a JSON `v1/List`.
pub fn render_list(items: &[serde_json::Value], format: Format) -> anyhow::Result<String> {
    match format {
        Format::Yaml => {
            let mut out = String::new();
            for item in items {
                out.push_str("---\n");
                out.push_str(&render(item, format)?);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            Ok(out)
        }
        Format::Json => render(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
            format,
        ),
    }
}
