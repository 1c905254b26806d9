//! The frames of zot's extension protocol, as serde types.
//!
//! [`ExtensionFrame`] is everything an extension writes on its stdout;
//! [`HostFrame`] is everything the host (zot, or zotbox) writes on the
//! extension's stdin. Both are internally tagged by the `type` field. Unknown
//! fields are ignored when decoding so that newer peers can add fields
//! without breaking older ones; optional fields are omitted when encoding.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this crate speaks, sent in `hello_ack`.
pub const PROTOCOL_VERSION: u32 = 1;

/// A frame sent by an extension to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExtensionFrame {
    /// The mandatory first frame: who the extension is.
    Hello(Hello),
    /// Registers a slash command.
    RegisterCommand(RegisterCommand),
    /// Registers a tool the model may call.
    RegisterTool(RegisterTool),
    /// Subscribes to events, and optionally asks to intercept some of them.
    Subscribe(Subscribe),
    /// Ends registration.
    Ready(Ready),
    /// Answers a `command_invoked`.
    CommandResponse(CommandResponse),
    /// Answers a `tool_call`.
    ToolResult(ToolResult),
    /// Answers an `event_intercept`.
    EventInterceptResponse(InterceptResponse),
    /// A one-shot note for the user.
    Notify(Notify),
    /// Retracts every note this extension pushed.
    ClearNotes(ClearNotes),
    /// Draws (or redraws) a panel the extension owns.
    PanelRender(PanelRender),
    /// Closes a panel the extension owns.
    PanelClose(PanelClose),
    /// Acknowledges `shutdown`; the extension exits next.
    ShutdownAck(ShutdownAck),
}

/// A frame sent by the host to an extension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostFrame {
    /// The answer to `hello`.
    HelloAck(HelloAck),
    /// The user ran one of the extension's slash commands.
    CommandInvoked(CommandInvoked),
    /// The model called one of the extension's tools.
    ToolCall(ToolCall),
    /// A one-way lifecycle event the extension subscribed to.
    Event(Event),
    /// A request to allow, block or rewrite something before it happens.
    EventIntercept(EventIntercept),
    /// A key pressed while the extension's panel had focus.
    PanelKey(PanelKey),
    /// The terminal area of a panel changed size.
    PanelResize(PanelResize),
    /// The user closed the extension's panel.
    PanelClose(PanelClose),
    /// The extension should answer `shutdown_ack` and exit.
    Shutdown(Shutdown),
}

/// `hello`: the extension's identity.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Hello {
    /// The extension's name; it should match its manifest.
    pub name: String,
    /// The extension's version, informational.
    #[serde(default)]
    pub version: String,
    /// Advisory: `commands`, `tools`, `events`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
}

/// `register_command`: a slash command.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct RegisterCommand {
    /// The command name, without the slash.
    pub name: String,
    /// One line shown in the command palette.
    #[serde(default)]
    pub description: String,
}

/// `register_tool`: a tool the model may call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct RegisterTool {
    /// The tool name the model calls.
    pub name: String,
    /// What the model reads to decide when to use it.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the tool's arguments. Hosts require a JSON object
    /// (or a string holding one); see [`RegisterTool::schema_object`].
    #[serde(default)]
    pub schema: Value,
}

impl RegisterTool {
    /// The schema as a JSON object, accepting a string that holds one (some
    /// SDKs send the schema pre-encoded).
    ///
    /// # Errors
    ///
    /// A phrase saying why the schema is not a JSON object.
    pub fn schema_object(&self) -> Result<Value, String> {
        match &self.schema {
            Value::Object(_) => Ok(self.schema.clone()),
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(value @ Value::Object(_)) => Ok(value),
                Ok(_) => Err("the schema string does not hold a JSON object".to_owned()),
                Err(err) => Err(format!("the schema string is not JSON: {err}")),
            },
            Value::Null => Err("the schema is missing".to_owned()),
            _ => Err("the schema is not a JSON object".to_owned()),
        }
    }
}

/// `subscribe`: events to receive, and which of them to intercept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Subscribe {
    /// Event names delivered one way as `event` frames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// Event names delivered as `event_intercept` requests that must be answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intercept: Vec<String>,
}

/// `ready`: registration is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ready {}

/// `clear_notes`: retract every note this extension pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClearNotes {}

/// `shutdown_ack`: the extension is about to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ShutdownAck {}

/// `shutdown`: the host asks the extension to exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Shutdown {}

/// What the host does with a command's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandAction {
    /// Submit `prompt` as a fresh user message.
    Prompt,
    /// Drop `insert` into the editor at the cursor.
    Insert,
    /// Append `display` to the chat as a one-shot note.
    Display,
    /// Nothing changes in the UI.
    #[default]
    Noop,
    /// Open the panel described by `open_panel`.
    OpenPanel,
}

impl CommandAction {
    /// The wire name of the action.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prompt => "prompt",
            Self::Insert => "insert",
            Self::Display => "display",
            Self::Noop => "noop",
            Self::OpenPanel => "open_panel",
        }
    }
}

/// `command_response`: the answer to `command_invoked`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct CommandResponse {
    /// The id of the `command_invoked` this answers.
    pub id: String,
    /// What to do with the answer; `noop` when absent.
    #[serde(default)]
    pub action: CommandAction,
    /// For `prompt`: the message to submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// For `insert`: the text for the editor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insert: Option<String>,
    /// For `display`: the note to show.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// For `open_panel`: the panel to open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_panel: Option<OpenPanel>,
    /// An error to show, whatever the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The panel a `command_response` with action `open_panel` opens.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct OpenPanel {
    /// The panel id the extension uses in later panel frames.
    pub id: String,
    /// The panel's title.
    #[serde(default)]
    pub title: String,
    /// The panel's body, one entry per line.
    #[serde(default)]
    pub lines: Vec<String>,
    /// A status line under the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `tool_result`: the answer to `tool_call`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ToolResult {
    /// The id of the `tool_call` this answers.
    pub id: String,
    /// The result, as text and image blocks.
    #[serde(default)]
    pub content: Vec<Content>,
    /// The tool failed; `content` says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// All text blocks joined by newlines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Content::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// The image's MIME type, e.g. `image/png`.
        mime_type: String,
        /// The image bytes in base64.
        data: String,
    },
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }
}

/// `event_intercept_response`: the verdict on an `event_intercept`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct InterceptResponse {
    /// The id of the `event_intercept` this answers.
    pub id: String,
    /// Refuse the intercepted action.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block: bool,
    /// Why it was blocked; handed to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For `tool_call`: replacement arguments (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_args: Option<Value>,
    /// For `assistant_message`: replacement text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_text: Option<String>,
}

/// `notify`: a one-shot note for the user.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Notify {
    /// `info`, `warn`, `error` or `success`.
    #[serde(default)]
    pub level: String,
    /// The note.
    #[serde(default)]
    pub message: String,
}

/// `panel_render`: the contents of a panel.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PanelRender {
    /// Which panel.
    pub panel_id: String,
    /// The panel's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The panel's body, one entry per line.
    #[serde(default)]
    pub lines: Vec<String>,
    /// A status line under the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footer: Option<String>,
}

/// `panel_close`, in either direction.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PanelClose {
    /// Which panel.
    pub panel_id: String,
}

/// `panel_key`: a key press in a panel.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PanelKey {
    /// Which panel.
    pub panel_id: String,
    /// The key's name, e.g. `enter`, `up`, `esc`, `a`.
    pub key: String,
    /// Printable text the key produced, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `panel_resize`: a panel's new size in cells.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct PanelResize {
    /// Which panel.
    pub panel_id: String,
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

/// `hello_ack`: the host's answer to `hello`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct HelloAck {
    /// The protocol version, [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The host's version string.
    #[serde(default)]
    pub zot_version: String,
    /// The model provider in use.
    #[serde(default)]
    pub provider: String,
    /// The model in use.
    #[serde(default)]
    pub model: String,
    /// The workspace the agent works in.
    #[serde(default)]
    pub cwd: String,
    /// The extension's own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_dir: Option<String>,
    /// Where the extension may keep data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<String>,
}

/// `command_invoked`: the user ran a slash command.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct CommandInvoked {
    /// Correlates the `command_response`.
    pub id: String,
    /// The command name.
    pub name: String,
    /// Everything the user typed after the command name.
    #[serde(default)]
    pub args: String,
}

/// `tool_call`: the model called a tool.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct ToolCall {
    /// Correlates the `tool_result`.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments, matching the tool's schema.
    #[serde(default)]
    pub args: Value,
}

/// Names of the events of protocol version 1.
pub mod event_name {
    /// A session began.
    pub const SESSION_START: &str = "session_start";
    /// The agent starts a step; field `step`.
    pub const TURN_START: &str = "turn_start";
    /// The agent finished a turn; fields `stop`, `error`.
    pub const TURN_END: &str = "turn_end";
    /// The model called a tool; fields `tool_id`, `tool_name`, `tool_args`.
    pub const TOOL_CALL: &str = "tool_call";
    /// The model produced a message; field `text`.
    pub const ASSISTANT_MESSAGE: &str = "assistant_message";

    /// Every event name of protocol version 1.
    pub const ALL: &[&str] = &[
        SESSION_START,
        TURN_START,
        TURN_END,
        TOOL_CALL,
        ASSISTANT_MESSAGE,
    ];
    /// The events that may be intercepted.
    pub const INTERCEPTABLE: &[&str] = &[TOOL_CALL, TURN_START, ASSISTANT_MESSAGE];
    /// The intercepted events whose content an answer may change:
    /// `modified_args` rewrites a `tool_call`, `replace_text` an
    /// `assistant_message`.
    pub const REWRITABLE: &[&str] = &[TOOL_CALL, ASSISTANT_MESSAGE];
}

/// `event`: a one-way lifecycle event.
///
/// The event name is a string rather than an enum so that events added by a
/// newer host pass through older code untouched.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Event {
    /// One of [`event_name`].
    pub event: String,
    /// `turn_start`: the step number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// `turn_end`: why the turn stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// `turn_end`: the error that ended the turn, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `tool_call`: the call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    /// `tool_call`: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// `tool_call`: the call's arguments, each key where it was last
    /// written ([`crate::zot_args::InReadOrder`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::zot_args::deserialize_in_read_order"
    )]
    pub tool_args: Option<Value>,
    /// `assistant_message`: the message text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl Event {
    /// A `session_start` event.
    pub fn session_start() -> Self {
        Self::named(event_name::SESSION_START)
    }

    /// A `turn_start` event.
    pub fn turn_start(step: u64) -> Self {
        Self {
            step: Some(step),
            ..Self::named(event_name::TURN_START)
        }
    }

    /// A `turn_end` event.
    pub fn turn_end(stop: impl Into<String>, error: Option<String>) -> Self {
        Self {
            stop: Some(stop.into()),
            error,
            ..Self::named(event_name::TURN_END)
        }
    }

    /// A `tool_call` event.
    pub fn tool_call(
        tool_id: impl Into<String>,
        tool_name: impl Into<String>,
        args: Value,
    ) -> Self {
        Self {
            tool_id: Some(tool_id.into()),
            tool_name: Some(tool_name.into()),
            tool_args: Some(args),
            ..Self::named(event_name::TOOL_CALL)
        }
    }

    /// An `assistant_message` event.
    pub fn assistant_message(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::named(event_name::ASSISTANT_MESSAGE)
        }
    }

    fn named(event: &str) -> Self {
        Self {
            event: event.to_owned(),
            ..Self::default()
        }
    }
}

/// `event_intercept`: a request for a verdict before something happens.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct EventIntercept {
    /// Correlates the `event_intercept_response`.
    pub id: String,
    /// `tool_call`, `turn_start` or `assistant_message`.
    pub event: String,
    /// `tool_call`: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// `tool_call`: the call's arguments, each key where it was last
    /// written ([`crate::zot_args::InReadOrder`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::zot_args::deserialize_in_read_order"
    )]
    pub tool_args: Option<Value>,
    /// `turn_start`: the step number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// `assistant_message`: the message text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}
