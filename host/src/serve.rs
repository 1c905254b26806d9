//! `zotbox serve`: the data side of zotbox as one zot extension.
//!
//! zot runs it like any extension (`zotbox setup` registers it). It speaks
//! the protocol on stdio as the extension `zotbox`:
//!
//! - every data tool (shell / http / read) becomes a zot tool taking one
//!   optional `arg` string, run through the capability layer;
//! - every data skill becomes a slash command answering `prompt` with the
//!   skill's body (and the user's arguments appended);
//! - it intercepts `tool_call` and applies the refusal plugins' deny rules to
//!   zot's own tools too (`bash` → `command`; `read`/`write`/`edit` → `path`);
//! - at `session_start` it shows each refusal plugin's appendix as a note;
//! - on `shutdown` it answers and exits, so zot's `/reload-ext` restarts it
//!   with fresh files.
//!
//! It does not run the extensions in zot's folders: zot already does.

use std::path::PathBuf;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use zotbox_protocol::{
    CommandAction, CommandResponse, Content, DEFAULT_MAX_LINE, ExtensionFrame, Hello, HelloAck,
    HostFrame, InterceptResponse, Notify, Ready, RegisterCommand, RegisterTool, ShutdownAck,
    Subscribe, ToolResult, encode_frame, event_name,
};

use crate::home::ZotHome;
use crate::host::{DecisionVerdict, Host};
use crate::session::reader::FrameReader;

/// The name `serve` introduces itself with.
pub const SERVE_NAME: &str = "zotbox";

/// zot's own tool names and the names refusal plugins often use for them,
/// so a rule written for either catches both.
const TOOL_ALIASES: &[(&str, &str)] = &[
    ("write", "write_file"),
    ("edit", "edit_file"),
    ("read", "read_file"),
];

/// How long to wait for zot's `hello_ack` (which names the workspace)
/// before registering with the current directory as the workspace.
const HELLO_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The host could not be built (a bad policy, say).
    #[error(transparent)]
    Build(#[from] crate::host::BuildError),
    /// Reading or writing stdio failed.
    #[error("serve: {0}")]
    Io(#[from] std::io::Error),
}

struct Wire<R, W> {
    input: FrameReader<HostFrame, R>,
    output: W,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> Wire<R, W> {
    async fn send(&mut self, frame: &ExtensionFrame) -> std::io::Result<()> {
        let mut line = Vec::with_capacity(256);
        encode_frame(frame, &mut line).map_err(std::io::Error::other)?;
        self.output.write_all(&line).await?;
        self.output.flush().await
    }

    /// The next frame from zot; lines that do not decode are logged and skipped.
    async fn next(&mut self) -> Option<HostFrame> {
        loop {
            match self.input.next().await? {
                Ok(frame) => return Some(frame),
                Err(err) => tracing::warn!("serve: {err}"),
            }
        }
    }
}

/// Serves zot on `input`/`output` until `shutdown` or end of input.
///
/// # Errors
///
/// [`ServeError`] when the host cannot be built or stdio fails.
pub async fn serve(
    home: ZotHome,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin,
) -> Result<(), ServeError> {
    let mut wire = Wire {
        input: FrameReader::new(input, DEFAULT_MAX_LINE),
        output,
    };
    wire.send(&ExtensionFrame::Hello(Hello {
        name: SERVE_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: vec!["commands".into(), "tools".into(), "events".into()],
    }))
    .await?;
    // The workspace decides which project files count: wait for zot to name it.
    let mut early = Vec::new();
    let ack = tokio::time::timeout(HELLO_ACK_WAIT, async {
        while let Some(frame) = wire.next().await {
            match frame {
                HostFrame::HelloAck(ack) => return Some(ack),
                other => early.push(other),
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let workspace = workspace_of(ack.as_ref());
    let host = Host::builder()
        .workspace(&workspace)
        .zot_home(home.root())
        .run_extensions(false)
        .build()
        .await?;
    let data = host.data_set();
    for tool in &host.tools() {
        wire.send(&ExtensionFrame::RegisterTool(RegisterTool {
            name: tool.name.clone(),
            description: tool.description.clone(),
            schema: tool.schema.clone(),
        }))
        .await?;
    }
    for skill in &data.skills {
        wire.send(&ExtensionFrame::RegisterCommand(RegisterCommand {
            name: skill.name.clone(),
            description: skill.description.clone(),
        }))
        .await?;
    }
    wire.send(&ExtensionFrame::Subscribe(Subscribe {
        events: vec![event_name::SESSION_START.to_owned()],
        intercept: vec![event_name::TOOL_CALL.to_owned()],
    }))
    .await?;
    wire.send(&ExtensionFrame::Ready(Ready {})).await?;
    for problem in &data.problems {
        tracing::warn!("skipped `{}`: {}", problem.path.display(), problem.error);
    }

    let mut pending = early.into_iter();
    loop {
        let frame = match pending.next() {
            Some(frame) => frame,
            None => match wire.next().await {
                Some(frame) => frame,
                None => break,
            },
        };
        match frame {
            HostFrame::Shutdown(_) => {
                wire.send(&ExtensionFrame::ShutdownAck(ShutdownAck {}))
                    .await?;
                break;
            }
            HostFrame::ToolCall(call) => {
                let result = match host.call_tool(&call.name, call.args).await {
                    Ok(mut result) => {
                        result.id = call.id;
                        result
                    }
                    Err(err) => ToolResult {
                        id: call.id,
                        content: vec![Content::text(err.to_string())],
                        is_error: true,
                    },
                };
                wire.send(&ExtensionFrame::ToolResult(result)).await?;
            }
            HostFrame::CommandInvoked(invoked) => {
                let response = match data.skill(&invoked.name) {
                    Some(skill) => {
                        let mut prompt = skill.body.trim_end().to_owned();
                        if !invoked.args.trim().is_empty() {
                            prompt.push_str("\n\n");
                            prompt.push_str(invoked.args.trim());
                        }
                        CommandResponse {
                            id: invoked.id,
                            action: CommandAction::Prompt,
                            prompt: Some(prompt),
                            ..CommandResponse::default()
                        }
                    }
                    None => CommandResponse {
                        id: invoked.id,
                        error: Some(format!("no skill `{}`", invoked.name)),
                        ..CommandResponse::default()
                    },
                };
                wire.send(&ExtensionFrame::CommandResponse(response))
                    .await?;
            }
            HostFrame::EventIntercept(intercept) => {
                let mut response = InterceptResponse {
                    id: intercept.id,
                    ..InterceptResponse::default()
                };
                if intercept.event == event_name::TOOL_CALL {
                    let tool = intercept.tool_name.unwrap_or_default();
                    let args = intercept.tool_args.unwrap_or(Value::Null);
                    if let Some(reason) = refusal(&host, &tool, &args).await {
                        response.block = true;
                        response.reason = Some(reason);
                    }
                }
                wire.send(&ExtensionFrame::EventInterceptResponse(response))
                    .await?;
            }
            HostFrame::Event(event) if event.event == event_name::SESSION_START => {
                for plugin in &data.plugins {
                    if let Some(appendix) =
                        plugin.appendix.as_deref().filter(|a| !a.trim().is_empty())
                    {
                        wire.send(&ExtensionFrame::Notify(Notify {
                            level: "info".to_owned(),
                            message: format!("{}: {}", plugin.name, appendix.trim()),
                        }))
                        .await?;
                    }
                }
            }
            _ => {}
        }
    }
    host.shutdown().await;
    Ok(())
}

/// The deny rules' verdict on one of zot's tool calls, trying the common
/// alias of zot's file tools as well.
async fn refusal(host: &Host, tool: &str, args: &Value) -> Option<String> {
    let names = std::iter::once(tool).chain(
        TOOL_ALIASES
            .iter()
            .filter(|(zot, _)| *zot == tool)
            .map(|(_, alias)| *alias),
    );
    for name in names {
        let decision = host.intercept_tool_call(name, args.clone()).await;
        if let DecisionVerdict::Block { reason } = decision.verdict {
            return Some(format!("{reason} ({})", decision.decided_by.join(", ")));
        }
    }
    None
}

fn workspace_of(ack: Option<&HelloAck>) -> PathBuf {
    match ack
        .map(|ack| ack.cwd.as_str())
        .filter(|cwd| !cwd.is_empty())
    {
        Some(cwd) => PathBuf::from(cwd),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    }
}
