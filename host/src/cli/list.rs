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
        host.shutdown().await;
        if context.json {
            for info in &infos {
                json_line(info)?;
            }
            return Ok(EXIT_OK);
        }
        if infos.is_empty() {
            println!("no extensions found");
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
