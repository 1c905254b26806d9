//! zot's extension protocol, version 1: the frames and the NDJSON codec.
//!
//! This crate is the one definition of the wire that both the host (`zotbox`)
//! and the guest SDK (`zotbox-guest`) speak. It has no I/O of its own.
//!
//! # The wire
//!
//! An extension is a peer that reads frames on its stdin and writes frames on
//! its stdout (a native subprocess's pipes, or a wasm guest's WASI stdio).
//! Every frame is **one JSON object on one line**, terminated by `\n`; a
//! trailing `\r` is tolerated and blank lines are ignored. The `type` field
//! says what the frame is. Fields a receiver does not know are ignored;
//! optional fields may be omitted.
//!
//! A receiver survives every bad line: a line that is not a JSON object, an
//! object whose `type` it does not know, a known frame with wrong fields, and a
//! line longer than the limit ([`DEFAULT_MAX_LINE`], 4 MiB, the frame cap) are
//! each reported ([`DecodeError`]) and skipped, and the frames after them are
//! read as usual. A **request** it cannot read is still answered, by the `id`
//! a lenient [`peek`] finds ([`Undecoded::answer`]): a check with a block that
//! says why, a tool call or a command with an error. zot allows a tool call
//! whose check is not answered in 5 s, so a guard that stays silent consents.
//!
//! zot may hold an extension to the frame cap: a host that reads a line over
//! the cap from an extension ends that extension at once.
//!
//! Stdout is reserved for frames; an extension logs to stderr, which the host
//! appends to `$ZOT_HOME/logs/ext-<name>.log`.
//!
//! ## Handshake and registration
//!
//! 1. The extension's **first** frame is [`hello`](Hello)
//!    `{"type":"hello","name":"weather","version":"1.0.0","capabilities":["tools"]}`.
//!    A host waits for it with a deadline (10 s) and gives up on an extension
//!    whose first frame is anything else.
//! 2. The host answers [`hello_ack`](HelloAck) with `protocol_version` (1),
//!    `zot_version`, `provider`, `model`, `cwd` (the workspace),
//!    `extension_dir` and `data_dir`.
//! 3. The extension registers, in any order:
//!    [`register_command`](RegisterCommand) `{name, description}`,
//!    [`register_tool`](RegisterTool) `{name, description, schema}` (the
//!    schema is a JSON Schema object), [`subscribe`](Subscribe)
//!    `{events: [...], intercept: [...]}`.
//! 4. It ends registration with [`ready`](Ready) `{}`. A host also treats
//!    250 ms without any frame as ready.
//!
//! ## Requests and answers
//!
//! Host requests carry an `id` unique within the session; the answer carries
//! the same `id`.
//!
//! | host → extension | extension → host | deadline |
//! |---|---|---|
//! | [`command_invoked`](CommandInvoked) `{id, name, args}` | [`command_response`](CommandResponse) `{id, action, prompt \| insert \| display \| open_panel, error}` | tool timeout |
//! | [`tool_call`](ToolCall) `{id, name, args}` | [`tool_result`](ToolResult) `{id, content, is_error}` | 60 s |
//! | [`event_intercept`](EventIntercept) `{id, event, tool_name, tool_args, step, text}` | [`event_intercept_response`](InterceptResponse) `{id, block, reason, modified_args, replace_text}` | 5 s, then allow |
//! | [`shutdown`](Shutdown) `{}` | [`shutdown_ack`](ShutdownAck) `{}`, then exit | 2 s, then terminate |
//!
//! `command_response.action` is one of `prompt`, `insert`, `display`, `noop`
//! and `open_panel` (with `open_panel: {id, title, lines, footer}`); `error`
//! is shown whatever the action. `tool_result.content` holds
//! `{"type":"text","text":…}` and `{"type":"image","mime_type":…,"data":…}`
//! blocks.
//!
//! Intercepts exist for `tool_call` (block, or rewrite the arguments with
//! `modified_args`, which must be a JSON object), `turn_start` (block only)
//! and `assistant_message` (block, or replace the text with `replace_text`).
//!
//! ## One-way frames
//!
//! Host → extension: [`event`](Event) `{event, ...}` for the events the
//! extension subscribed to (`session_start`; `turn_start {step}`;
//! `turn_end {stop, error}`; `tool_call {tool_id, tool_name, tool_args}`;
//! `assistant_message {text}`), and the panel frames
//! [`panel_key`](PanelKey) `{panel_id, key, text}`,
//! [`panel_resize`](PanelResize) `{panel_id, width, height}`,
//! [`panel_close`](PanelClose) `{panel_id}`.
//!
//! Extension → host, at any time after `hello`: [`notify`](Notify)
//! `{level, message}`, [`clear_notes`](ClearNotes) `{}`,
//! [`panel_render`](PanelRender) `{panel_id, title, lines, footer}`,
//! [`panel_close`](PanelClose) `{panel_id}`.

mod codec;
mod depth;
mod frame;
mod peek;
mod undecoded;
mod verdict;
pub mod zot_args;

pub use codec::{
    DEFAULT_MAX_LINE, DecodeError, Decoder, Frame, Line, LineSplitter, TOO_LONG_HEAD, decode_line,
    encode_frame, encode_to_vec,
};
pub use depth::{MAX_DEPTH, nested_deeper_than, value_nested_deeper_than};
pub use frame::*;
pub use peek::{Peek, PeekRef, peek, peek_borrowed};
pub use undecoded::{Undecoded, failed_request, request_answered_by};
pub use verdict::Verdict;
