//! `zotbox list`: every extension and what it registered.
//!
//! Everything an author wrote (names, versions, templates, reasons quoting
//! them) is escaped before it reaches the terminal; `--json` stays plain.
//! The list also says what zot itself does with the workspace's manifests:
//! which it runs natively, outside the sandbox, and which replace one of
//! the user's.

use anyhow::Result;

use super::output::{cell, json_line, table};
use super::{Context, EXIT_ERROR, EXIT_OK};
use zotbox::discovery::ZotShadow;
use zotbox::host::ExtensionState;
use zotbox::text::{Shown, shown};

/// Arguments of `zotbox list`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let host = context.host().await?;
        let infos = host.list();
        let data = host.data_set();
        let refusal = host.workspace_refusal();
        let shadows = host.search_path().zot_shadows();
        let data_rows = data_rows(&data, refusal.as_deref(), host.policy());
        host.shutdown().await;
        // As `--help` says: 1 when an extension failed to load or start.
        let status = if infos
            .iter()
            .any(|info| matches!(info.state, ExtensionState::Failed | ExtensionState::Invalid))
        {
            EXIT_ERROR
        } else {
            EXIT_OK
        };
        if context.json {
            for info in &infos {
                json_line(info)?;
            }
            for row in &data_rows {
                json_line(row)?;
            }
            for shadow in &shadows {
                json_line(&serde_json::json!({
                    "zot_shadow": shadow.name,
                    "workspace": shadow.workspace,
                    "user": shadow.user,
                    "serve_launcher": shadow.serve_launcher,
                }))?;
            }
            return Ok(status);
        }
        if infos.is_empty() && data_rows.is_empty() {
            println!("no extensions found");
            return Ok(status);
        }
        if !data_rows.is_empty() {
            print_data(&data_rows);
        }
        if infos.is_empty() {
            print_shadows(&shadows);
            return Ok(status);
        }
        let rows: Vec<Vec<String>> = infos
            .iter()
            .map(|info| {
                // Never label as sandboxed what zot runs natively.
                let kind = match (info.kind, &info.zot_runs_natively) {
                    ("", _) => "-".to_owned(),
                    ("wasm", Some(_)) => "wasm, zot: native".to_owned(),
                    (kind, _) => kind.to_owned(),
                };
                vec![
                    shown(&info.name).into_owned(),
                    if info.version.is_empty() {
                        "-".to_owned()
                    } else {
                        shown(&info.version).into_owned()
                    },
                    kind,
                    info.origin.to_owned(),
                    info.state.as_str().to_owned(),
                    shown(&cell(&info.commands)).into_owned(),
                    shown(&cell(&info.tools)).into_owned(),
                    shown(&cell(&info.events)).into_owned(),
                    shown(&cell(&info.intercepts)).into_owned(),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "NAME",
                    "VERSION",
                    "KIND",
                    "ORIGIN",
                    "STATE",
                    "COMMANDS",
                    "TOOLS",
                    "EVENTS",
                    "INTERCEPTS"
                ],
                &rows
            )
        );
        for info in &infos {
            let name = Shown(&info.name);
            if let Some(reason) = &info.reason {
                println!("{name}: {}", shown(reason));
            }
            for shadowed in &info.shadowed {
                println!("{name}: {} is shadowed", shown(shadowed));
            }
            for warning in &info.warnings {
                println!("{name}: warning: {}", shown(warning));
            }
        }
        print_zot_natives(&infos);
        print_shadows(&shadows);
        Ok(status)
    }
}

/// What zot itself runs outside the sandbox, for each manifest where the
/// table could not say it.
fn print_zot_natives(infos: &[zotbox::host::ExtensionInfo]) {
    for info in infos {
        if let Some(command) = &info.zot_runs_natively {
            let whose = if info.origin == "project" {
                "this workspace extension"
            } else {
                "it"
            };
            println!(
                "{}: zot itself runs {whose} natively, outside the sandbox: `{}`",
                Shown(&info.name),
                shown(command)
            );
        }
    }
}

/// The user's manifests a workspace manifest replaces inside zot.
fn print_shadows(shadows: &[ZotShadow]) {
    for shadow in shadows {
        let workspace = shadow.workspace.display().to_string();
        if shadow.serve_launcher {
            println!(
                "{}: inside zot, the workspace's `{}` replaces zotbox's serve launcher: every \
                 refusal plugin is off there",
                Shown(&shadow.name),
                shown(&workspace)
            );
        } else {
            println!(
                "{}: inside zot, the workspace's `{}` replaces yours at `{}`",
                Shown(&shadow.name),
                shown(&workspace),
                shown(&shadow.user.display().to_string())
            );
        }
    }
}

/// One data file as `list` shows it.
#[derive(Debug, serde::Serialize)]
struct DataRow {
    data: &'static str,
    name: String,
    origin: String,
    state: &'static str,
    detail: String,
    path: std::path::PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

fn tool_detail(tool: &zotbox::data::DataTool) -> String {
    let approval = if tool.auto_approve {
        ""
    } else {
        ", needs approval"
    };
    format!("{}: {}{approval}", tool.kind.as_str(), tool.kind.template())
}

fn data_rows(
    data: &zotbox::data::DataSet,
    refusal: Option<&str>,
    policy: &zotbox::policy::Policy,
) -> Vec<DataRow> {
    let mut rows = Vec::new();
    for tool in &data.tools {
        // What the policy takes away from what the template needs: every
        // call of such a tool is refused, so it is not `ready`.
        let refused: Vec<String> = policy
            .grant(&tool.declared())
            .rows
            .into_iter()
            .flat_map(|row| row.refused)
            .map(|r| super::policy::refused(&r))
            .collect();
        let (state, reason) = if refused.is_empty() {
            ("ready", None)
        } else {
            ("refused", Some(refused.join("; ")))
        };
        rows.push(DataRow {
            data: "tool",
            name: tool.name.clone(),
            origin: tool.origin.as_str().to_owned(),
            state,
            detail: tool_detail(tool),
            path: tool.path.clone(),
            reason,
        });
    }
    for tool in &data.untrusted_tools {
        rows.push(DataRow {
            data: "tool",
            name: tool.name.clone(),
            origin: tool.origin.as_str().to_owned(),
            state: "untrusted",
            detail: tool_detail(tool),
            path: tool.path.clone(),
            reason: refusal.map(str::to_owned),
        });
    }
    for plugin in &data.plugins {
        rows.push(DataRow {
            data: "plugin",
            name: plugin.name.clone(),
            origin: plugin.origin.as_str().to_owned(),
            state: "ready",
            detail: format!("{} deny rules", plugin.deny.len()),
            path: plugin.path.clone(),
            reason: None,
        });
    }
    for skill in &data.skills {
        rows.push(DataRow {
            data: "skill",
            name: skill.name.clone(),
            origin: skill.origin.as_str().to_owned(),
            state: "ready",
            detail: skill.description.clone(),
            path: skill.path.clone(),
            reason: None,
        });
    }
    for (kind, name, path) in &data.shadowed {
        rows.push(DataRow {
            data: if kind == "tool" {
                "tool"
            } else if kind == "plugin" {
                "plugin"
            } else {
                "skill"
            },
            name: name.clone(),
            origin: String::new(),
            state: "shadowed",
            detail: String::new(),
            path: path.clone(),
            reason: None,
        });
    }
    for problem in &data.problems {
        rows.push(DataRow {
            data: "file",
            name: problem
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            origin: String::new(),
            state: "invalid",
            detail: problem.error.clone(),
            path: problem.path.clone(),
            reason: None,
        });
    }
    rows
}

fn print_data(rows: &[DataRow]) {
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .filter(|row| row.state != "invalid")
        .map(|row| {
            vec![
                shown(&row.name).into_owned(),
                row.data.to_owned(),
                if row.origin.is_empty() {
                    "-".to_owned()
                } else {
                    row.origin.clone()
                },
                row.state.to_owned(),
                shown(&row.detail).into_owned(),
            ]
        })
        .collect();
    if !table_rows.is_empty() {
        print!(
            "{}",
            table(&["DATA", "KIND", "ORIGIN", "STATE", "DETAIL"], &table_rows)
        );
    }
    for row in rows.iter().filter(|row| row.state == "invalid") {
        // The detail names the file already.
        println!("skipped {}", shown(&row.detail));
    }
    for row in rows {
        if let Some(reason) = &row.reason {
            println!("{}: {}", Shown(&row.name), shown(reason));
        }
    }
    println!();
}
