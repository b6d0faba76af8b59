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
