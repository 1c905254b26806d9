//! `zotbox call TOOL [JSON]`: call a tool through the guard chain.

use anyhow::{Context as _, Result};
use serde_json::Value;
use zotbox_protocol::Content;

use super::output::{drain_events, json_line};
use super::{Context, EXIT_OK, EXIT_REFUSED};
use zotbox::HostError;
use zotbox::text::{Shown, shown_text};

/// Arguments of `zotbox call`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tool's name.
    tool: String,
    /// The arguments as a JSON object; `-` reads them from stdin.
    #[arg(default_value = "{}")]
    args: String,
}

/// Parses a JSON argument given on the command line (or `-` for stdin).
pub(crate) fn parse_json_arg(text: &str) -> Result<Value> {
    let text = if text == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read arguments from stdin")?
    } else {
        text.to_owned()
    };
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("arguments `{}` are not JSON", text.trim()))?;
    if !value.is_object() {
        anyhow::bail!("arguments `{}` must be a JSON object", text.trim());
    }
    Ok(value)
}

/// For a name no live extension owns: which extensions are held back (an
/// untrusted workspace's) and why, since one of them may own it.
pub(crate) fn held_extensions(host: &zotbox::Host) -> Option<String> {
    let held: Vec<zotbox::host::ExtensionInfo> = host
        .list()
        .into_iter()
        .filter(|info| info.state == zotbox::host::ExtensionState::Untrusted)
        .collect();
    let first = held.first()?;
    let names: Vec<String> = held.iter().map(|info| format!("`{}`", info.name)).collect();
    let (these, them) = if names.len() == 1 {
        ("the extension", "it")
    } else {
        ("the extensions", "they")
    };
    Some(format!(
        "{these} {} did not start: {them} {}",
        names.join(", "),
        first.reason.clone().unwrap_or_default()
    ))
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let args = parse_json_arg(&self.args)?;
        let host = context.host().await?;
        let mut events = host.subscribe();
        let outcome = host.call_tool(&self.tool, args).await;
        drain_events(&mut events, context.json)?;
        let held = held_extensions(&host);
        host.shutdown().await;
        match outcome {
            Ok(result) => {
                if context.json {
                    json_line(&result)?;
                } else {
                    for block in &result.content {
                        match block {
                            Content::Text { text } => println!("{}", shown_text(text)),
                            Content::Image { mime_type, data } => {
                                println!(
                                    "[image {}, {} base64 bytes]",
                                    Shown(mime_type),
                                    data.len()
                                );
                            }
                        }
                    }
                }
                Ok(if result.is_error {
                    EXIT_REFUSED
                } else {
                    EXIT_OK
                })
            }
            Err(err @ (HostError::Blocked { .. } | HostError::Untrusted { .. })) => {
                eprintln!("error: {}", zotbox::text::shown(&err.to_string()));
                Ok(EXIT_REFUSED)
            }
            Err(err @ HostError::UnknownTool { .. }) => match held {
                Some(held) => Err(anyhow::anyhow!("{err}; {held}")),
                None => Err(err.into()),
            },
            Err(err) => Err(err.into()),
        }
    }
}
