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

/// Parses a JSON argument given on the command line (or `-` for stdin, at
/// most a frame's worth: no extension could be sent more).
pub(crate) fn parse_json_arg(text: &str) -> Result<Value> {
    let text = if text == "-" {
        let limit = zotbox::protocol::DEFAULT_MAX_LINE;
        let mut read = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin(), limit as u64 + 1),
            &mut read,
        )
        .context("cannot read arguments from stdin")?;
        if read.len() > limit {
            anyhow::bail!("the arguments on stdin are over {limit} bytes, a frame's cap");
        }
        read
    } else {
        text.to_owned()
    };
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("arguments `{}` are not JSON", excerpt(&text)))?;
    if !value.is_object() {
        anyhow::bail!("arguments `{}` must be a JSON object", excerpt(&text));
    }
    Ok(value)
}

/// The start of `text` as an error quotes it: enough to recognise, never
/// a whole file pasted back.
fn excerpt(text: &str) -> String {
    zotbox::text::clipped(text.trim(), 200)
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

/// For a name no live extension owns: the `--ext` extensions that failed
/// to start, and why (one of them may own it), named as the user wrote them.
pub(crate) fn failed_explicit(host: &zotbox::Host, context: &Context) -> Option<String> {
    use zotbox::host::ExtensionState;
    let failed: Vec<String> = host
        .list()
        .into_iter()
        .filter(|info| {
            info.origin == "explicit"
                && matches!(
                    info.state,
                    ExtensionState::Failed | ExtensionState::Invalid | ExtensionState::Restarting
                )
        })
        .map(|info| {
            let given = context
                .ext
                .iter()
                .find(|given| names_manifest(given, &info.path))
                .map_or_else(|| info.name.clone(), |given| given.display().to_string());
            format!(
                "`--ext {given}`: failed to start ({})",
                info.reason.unwrap_or_default()
            )
        })
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// Whether `given` (a folder or its manifest, as typed) is `manifest`.
fn names_manifest(given: &std::path::Path, manifest: &std::path::Path) -> bool {
    let canonical = |path: &std::path::Path| std::fs::canonicalize(path).ok();
    let manifest = canonical(manifest);
    manifest.is_some()
        && (canonical(given) == manifest
            || canonical(&given.join(zotbox::manifest::MANIFEST_FILE)) == manifest)
}

/// The error for a tool or command nobody owns: what was asked (and the
/// known names, when there are some), then why it may be missing.
pub(crate) fn unowned(
    what: &str,
    name: &str,
    known: &[String],
    host: &zotbox::Host,
    context: &Context,
) -> Option<anyhow::Error> {
    let failed = failed_explicit(host, context);
    let held = held_extensions(host);
    // "no extension registered any" is true but useless when an `--ext`
    // extension failed: its failure is the reason.
    let known = match (&failed, known.is_empty()) {
        (_, false) => format!(" (known: {})", known.join(", ")),
        (None, true) => "; no extension registered any".to_owned(),
        (Some(_), true) => String::new(),
    };
    let reasons: Vec<String> = failed.into_iter().chain(held).collect();
    if reasons.is_empty() {
        return None;
    }
    Some(anyhow::anyhow!(
        "no {what} `{name}`{known}; {}",
        reasons.join("; ")
    ))
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let args = parse_json_arg(&self.args)?;
        let host = context.host().await?;
        let mut events = host.subscribe();
        let outcome = host.call_tool(&self.tool, args).await;
        drain_events(&mut events, context.json)?;
        let unowned = match &outcome {
            Err(HostError::UnknownTool { name, known }) => {
                unowned("tool", name, known, &host, context)
            }
            _ => None,
        };
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
            Err(err @ HostError::UnknownTool { .. }) => Err(unowned.unwrap_or_else(|| err.into())),
            Err(err) => Err(err.into()),
        }
    }
}
