//! `zotbox approve NAME`: allow a data tool that asks for approval.

use anyhow::{Context as _, Result, bail};

use super::output::json_line;
use super::{Context, EXIT_OK};
use crate::data::{Approvals, DataSearch, ToolKind};

/// Arguments of `zotbox approve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The data tool's name.
    name: String,
    /// Withdraw an earlier approval instead.
    #[arg(long)]
    revoke: bool,
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        let mut approvals = Approvals::load(home.root())?;
        if self.revoke {
            if !approvals.revoke(&self.name) {
                bail!("tool `{}` was not approved", self.name);
            }
            approvals.save()?;
            return report(context, "revoked", &self.name, None);
        }
        let data = DataSearch::new(context.workspace()?, home.root()).load();
        let tool = data.tool(&self.name).with_context(|| {
            let known: Vec<&str> = data.tools.iter().map(|t| t.name.as_str()).collect();
            format!(
                "no data tool `{}` (known: {})",
                self.name,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )
        })?;
        approvals.approve(tool);
        approvals.save()?;
        // Approval is bound to exactly this template: show what was approved.
        let what = match &tool.kind {
            ToolKind::Shell { command, .. } => format!("shell `{command}`"),
            ToolKind::Http { url } => format!("http `{url}`"),
            ToolKind::Read { path } => format!("read `{path}`"),
        };
        report(context, "approved", &self.name, Some(&what))
    }
}

fn report(context: &Context, action: &str, name: &str, what: Option<&str>) -> Result<u8> {
    if context.json {
        json_line(&serde_json::json!({"action": action, "tool": name, "operation": what}))?;
    } else {
        match what {
            Some(what) => {
                println!("{action} `{name}`: {what}; editing its manifest revokes the approval")
            }
            None => println!("{action} `{name}`"),
        }
    }
    Ok(EXIT_OK)
}
