//! `zotbox command NAME [ARGS...]`: run a slash command.

use anyhow::Result;
use zotbox_protocol::CommandAction;

use super::output::{drain_events, json_line};
use super::{Context, EXIT_OK, EXIT_REFUSED};
use zotbox::text::{Shown, shown, shown_text};

/// Arguments of `zotbox command`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The command's name (a leading `/` is allowed).
    name: String,
    /// Everything after the name, joined by spaces, as zot passes it.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let name = self.name.strip_prefix('/').unwrap_or(&self.name);
        let args = self.args.join(" ");
        let host = context.host().await?;
        let mut events = host.subscribe();
        let outcome = host.invoke_command(name, &args).await;
        drain_events(&mut events, context.json)?;
        let unowned = match &outcome {
            Err(zotbox::HostError::UnknownCommand { name, known }) => {
                super::call::unowned("command", name, known, &host, context)
            }
            _ => None,
        };
        host.shutdown().await;
        let response = match (outcome, unowned) {
            (Err(zotbox::HostError::UnknownCommand { .. }), Some(unowned)) => return Err(unowned),
            (outcome, _) => outcome?,
        };
        if context.json {
            json_line(&response)?;
        } else {
            print_response(&response);
        }
        Ok(if response.error.is_some() {
            EXIT_REFUSED
        } else {
            EXIT_OK
        })
    }
}

/// A command's answer for people. An error is an error: printed on stderr
/// as one, with nothing on stdout (zot shows it whatever the action says).
/// Every text in it is the extension's, escaped on the way.
fn print_response(response: &zotbox_protocol::CommandResponse) {
    if let Some(error) = &response.error {
        eprintln!("error: {}", Shown(error));
        return;
    }
    let text = match response.action {
        CommandAction::Prompt => response
            .prompt
            .as_deref()
            .map(|t| shown_text(t).into_owned()),
        CommandAction::Insert => response
            .insert
            .as_deref()
            .map(|t| shown_text(t).into_owned()),
        CommandAction::Display => response
            .display
            .as_deref()
            .map(|t| shown_text(t).into_owned()),
        CommandAction::OpenPanel => response.open_panel.as_ref().map(|panel| {
            let mut text = format!("{} [{}]", Shown(&panel.title), Shown(&panel.id));
            for line in &panel.lines {
                text.push_str("\n  ");
                text.push_str(&shown(line));
            }
            if let Some(footer) = &panel.footer {
                text.push_str("\n  -- ");
                text.push_str(&shown(footer));
            }
            text
        }),
        CommandAction::Noop => None,
    };
    match text {
        Some(text) => println!("{}: {text}", response.action.as_str()),
        None => println!("{}", response.action.as_str()),
    }
}
