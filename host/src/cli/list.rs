//! `zotbox list`: every extension and what it registered.

use anyhow::Result;

use super::output::{cell, json_line, table};
use super::{Context, EXIT_OK};

/// Arguments of `zotbox list`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let host = context.host().await?;
        let infos = host.list();
        let data = host.data_set();
        host.shutdown().await;
        let data_rows = data_rows(&data);
        if context.json {
            for info in &infos {
                json_line(info)?;
            }
            for row in &data_rows {
                json_line(row)?;
            }
            return Ok(EXIT_OK);
        }
        if infos.is_empty() && data_rows.is_empty() {
            println!("no extensions found");
            return Ok(EXIT_OK);
        }
        if !data_rows.is_empty() {
            print_data(&data_rows);
        }
        if infos.is_empty() {
            return Ok(EXIT_OK);
        }
        let rows: Vec<Vec<String>> = infos
            .iter()
            .map(|info| {
                vec![
                    info.name.clone(),
                    if info.version.is_empty() {
                        "-".to_owned()
                    } else {
                        info.version.clone()
                    },
                    if info.kind.is_empty() {
                        "-".to_owned()
                    } else {
                        info.kind.to_owned()
                    },
                    info.origin.to_owned(),
                    info.state.as_str().to_owned(),
                    cell(&info.commands),
                    cell(&info.tools),
                    cell(&info.events),
                    cell(&info.intercepts),
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
            if let Some(reason) = &info.reason {
                println!("{}: {reason}", info.name);
            }
            for shadowed in &info.shadowed {
                println!("{}: {shadowed} is shadowed", info.name);
            }
            for warning in &info.warnings {
                println!("{}: warning: {warning}", info.name);
            }
        }
        Ok(EXIT_OK)
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
}

fn data_rows(data: &crate::data::DataSet) -> Vec<DataRow> {
    let mut rows = Vec::new();
    for tool in &data.tools {
        let approval = if tool.auto_approve {
            ""
        } else {
            ", needs approval"
        };
        rows.push(DataRow {
            data: "tool",
            name: tool.name.clone(),
            origin: tool.origin.as_str().to_owned(),
            state: "ready",
            detail: format!("{}: {}{approval}", tool.kind.as_str(), tool.kind.template()),
            path: tool.path.clone(),
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
                row.name.clone(),
                row.data.to_owned(),
                if row.origin.is_empty() {
                    "-".to_owned()
                } else {
                    row.origin.clone()
                },
                row.state.to_owned(),
                row.detail.clone(),
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
        println!("skipped {}", row.detail);
    }
    println!();
}
