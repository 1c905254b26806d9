//! `zotbox check TOOL JSON`: ask the guard chain without running anything.

use anyhow::Result;

use super::call::parse_json_arg;
use super::output::json_line;
use super::{Context, EXIT_OK, EXIT_REFUSED};
use zotbox::Verdict;
use zotbox::text::Shown;

/// Arguments of `zotbox check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The tool's name (any tool, e.g. zot's own `bash`).
    tool: String,
    /// The call's arguments as a JSON object; `-` reads them from stdin.
    args: String,
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let args = parse_json_arg(&self.args)?;
        let host = context.host().await?;
        let decision = host.intercept_tool_call(&self.tool, args).await;
        host.shutdown().await;
        if context.json {
            json_line(&decision)?;
        } else {
            // Who decided and why are an interceptor's or a plugin's words.
            let by = decision.decided_by.join(", ");
            let by = Shown(&by);
            match &decision.verdict {
                Verdict::Allow => println!("allow"),
                Verdict::Block { reason } => {
                    println!("block by {by}: {}", Shown(reason));
                }
                // JSON passes a bidi override or a C1 control raw: the
                // command shown would not read as the one that runs.
                Verdict::Rewrite { args } => {
                    println!("rewrite by {by}: {}", zotbox::text::json(args)?);
                }
                Verdict::Replace { text } => {
                    println!("replace by {by}: {}", Shown(text));
                }
            }
        }
        Ok(if decision.is_block() {
            EXIT_REFUSED
        } else {
            EXIT_OK
        })
    }
}
