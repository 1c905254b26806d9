//! `zotbox approve NAME`: allow a data tool that asks for approval.
//!
//! The tool approved is the one in force here: a workspace tool (approved
//! for this workspace only, and only once the workspace is trusted; see
//! [`zotbox::data::approval`]) or a user tool (approved wherever it runs).

use anyhow::{Context as _, Result, bail};

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::data::{Approvals, DataOrigin, DataSearch, ToolKind};
use zotbox::text::Shown;

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
        let workspace = context.workspace()?;
        let workspace = std::fs::canonicalize(&workspace).unwrap_or(workspace);
        let mut approvals = Approvals::load(home.root())?;
        let policy = zotbox::policy::Policy::load_for(&home)?;
        let assessment = zotbox::store::trust::assess(&policy, &home, &workspace);
        let mut search = DataSearch::new(&workspace, home.root());
        // A package changed since its install brings no tool to approve.
        zotbox::store::lock::check_packages(&mut search, &home, &policy);
        let data = if assessment.standing.allows() {
            search.load()
        } else {
            search.load_holding_project_tools()
        };
        let name = Shown(&self.name);
        if self.revoke {
            // The approval of the tool in force here; without one, whichever exists.
            let revoked = match data.tool(&self.name).map(|t| t.origin) {
                Some(DataOrigin::Project) => approvals.revoke_in(&self.name, &workspace),
                Some(_) => approvals.revoke(&self.name),
                None => approvals.revoke_in(&self.name, &workspace) | approvals.revoke(&self.name),
            };
            if !revoked {
                bail!("tool `{name}` was not approved");
            }
            approvals.save()?;
            return report(context, "revoked", &self.name, None);
        }
        if data.untrusted_tool(&self.name).is_some()
            && data.tool(&self.name).is_none()
            && let Some(refusal) = assessment.refusal()
        {
            bail!("tool `{name}` {refusal}");
        }
        let tool = data.tool(&self.name).with_context(|| {
            let known: Vec<String> = data
                .tools
                .iter()
                .map(|t| Shown(&t.name).to_string())
                .collect();
            format!(
                "no data tool `{name}` (known: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )
        })?;
        approvals.approve(tool, &workspace)?;
        approvals.save()?;
        // Approval is bound to exactly this template: show what was approved.
        let what = match &tool.kind {
            ToolKind::Shell { command, .. } => format!("shell `{}`", Shown(command)),
            ToolKind::Http { url, .. } => format!("http `{}`", Shown(url)),
            ToolKind::Read { path } => format!("read `{}`", Shown(path)),
        };
        report(context, "approved", &self.name, Some(&what))
    }
}

fn report(context: &Context, action: &str, name: &str, what: Option<&str>) -> Result<u8> {
    if context.json {
        json_line(&serde_json::json!({"action": action, "tool": name, "operation": what}))?;
    } else {
        let name = Shown(name);
        match what {
            Some(what) => {
                println!("{action} `{name}`: {what}; editing its manifest revokes the approval")
            }
            None => println!("{action} `{name}`"),
        }
    }
    Ok(EXIT_OK)
}
