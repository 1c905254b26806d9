//! Write zot extensions in Rust.
//!
//! An extension is a program that speaks zot's extension protocol
//! (newline-delimited JSON frames, see [`zotbox_protocol`]) on its stdin and
//! stdout. This crate speaks it for you: describe the extension with
//! [`Extension`], hand it your handlers, and [`run`](Extension::run) it.
//!
//! The same source builds two ways:
//!
//! - **natively** (`cargo build`): an ordinary zot extension, a subprocess
//!   talking over its pipes, with the user's permissions;
//! - **for `wasm32-wasip2`** (`cargo build --target wasm32-wasip2`): a
//!   component that zotbox runs in its sandbox, talking over WASI stdio,
//!   with only the capabilities its manifest asks for and the policy grants.
//!
//! So the SDK uses nothing but blocking std I/O and one thread: it reads a
//! frame, runs the handler, writes the answer, and reads the next.
//!
//! # Example
//!
//! ```no_run
//! use serde::Deserialize;
//! use zotbox_guest::{Context, Extension, Level, Response, ToolOutput, Verdict, schema};
//!
//! #[derive(Deserialize)]
//! struct WeatherArgs {
//!     city: String,
//! }
//!
//! fn main() -> std::io::Result<()> {
//!     Extension::new("weather", "1.0.0")
//!         // `/weather berlin` asks the model.
//!         .command("weather", "current weather for a city", |_ctx, args| {
//!             Response::prompt(format!("What is the weather in {args}? One line."))
//!         })
//!         // A tool the model calls; arguments arrive deserialized.
//!         .tool(
//!             "weather",
//!             "Get the current weather for a city.",
//!             schema::object()
//!                 .property("city", schema::string("the city"))
//!                 .required(["city"]),
//!             |ctx: &mut Context, args: WeatherArgs| {
//!                 ctx.notify(Level::Info, format!("looking up {}", args.city));
//!                 if args.city.is_empty() {
//!                     return ToolOutput::error("no city given");
//!                 }
//!                 ToolOutput::text(format!("{}: sunny, 21°C (fake)", args.city))
//!             },
//!         )
//!         // A guard over every tool call, the host's own included.
//!         .intercept_tool_call(|_ctx, tool, args| {
//!             let command = args["command"].as_str().unwrap_or_default();
//!             if tool == "bash" && command.contains("rm -rf") {
//!                 Verdict::block("refused: `rm -rf` is not allowed here")
//!             } else {
//!                 Verdict::Allow
//!             }
//!         })
//!         .run()
//! }
//! ```
//!
//! # The session
//!
//! [`Extension::run`] writes `hello` (with the capabilities implied by what
//! was registered), one `register_command` per command, one `register_tool`
//! per tool, one `subscribe` for the events and intercepts, and `ready`, all
//! at once. It then answers the host until `shutdown` (answered with
//! `shutdown_ack`) or the end of stdin, and returns:
//!
//! - `command_invoked` runs the command's handler and sends its
//!   `command_response`; an unknown command gets a response with an `error`;
//! - `tool_call` runs the tool's handler and sends its `tool_result`; an
//!   unknown tool or arguments that do not deserialize get an error result;
//! - `event` runs each handler subscribed to it;
//! - `event_intercept` asks the interceptors of its kind (none: allow);
//! - `hello_ack` is kept for [`Context::hello_ack`];
//! - panel frames run the panel handlers;
//! - a request that does not decode (nested past the parser's limit, not
//!   UTF-8, over the 4 MiB frame cap, …) is still answered by its `id`: an
//!   `event_intercept` with a **block** naming why (a guard that stays
//!   silent lets the call through), a `tool_call` or `command_invoked` with
//!   an error; other lines that do not decode are logged and skipped.
//!
//! Stdout carries frames only; log with [`Context::log`] (stderr, which the
//! host keeps in the extension's log file), never `println!`.
//!
//! # Panics
//!
//! Natively, a handler that panics does not take the extension down: a
//! command answers `error`, a tool answers an error result naming the panic,
//! a `tool_call` interceptor blocks the call (a guard that cannot decide
//! refuses), another interceptor counts as allowing, and the panic is logged. On
//! `wasm32-wasip2`, panics abort by default: the component traps, and the
//! host ends its session (and reports what the guest wrote to stderr).
//!
//! # Host capabilities
//!
//! Inside zotbox's sandbox a wasm guest reaches files, HTTP and the shell
//! only through the host functions of the `zot:host` WIT package, for what
//! its manifest declares and the policy grants. [`fs`], [`http`] and
//! [`shell`] wrap them as plain functions ([`secret`] writes the placeholder
//! of a secret the host puts into a request, never readable here); a refusal
//! comes back as a [`CapabilityError::Denied`] naming the rule, and the
//! extension goes on:
//!
//! ```no_run
//! use zotbox_guest::{CapabilityError, fs, http};
//!
//! fn readme() -> Result<String, CapabilityError> {
//!     // Needs `"capabilities": {"read": ["README.md"]}` in extension.json.
//!     fs::read_to_string("README.md")
//! }
//!
//! fn forecast() -> Result<String, CapabilityError> {
//!     // Needs `"http": ["https://api.open-meteo.com"]`.
//!     Ok(http::get("https://api.open-meteo.com/v1/forecast?latitude=52.5&longitude=13.4")?.text())
//! }
//! ```
//!
//! Built natively, the same calls go straight to the OS (relative to the
//! workspace zot names), except HTTP, which exists only in the sandbox.

mod capability;
mod context;
mod extension;
mod manifest;
mod response;
pub mod schema;
mod stdio;

pub use manifest::ManifestInfo;
/// Derives the schema of a tool's argument type (with the default
/// `derive-schema` feature); see [`Extension::typed_tool`].
#[cfg(feature = "derive-schema")]
pub use schemars::JsonSchema;

pub use capability::{Error as CapabilityError, fs, http, secret, shell};
pub use context::{Context, Level};
pub use extension::Extension;
pub use response::{IntoResponse, IntoToolOutput, Panel, Response, ToolOutput, Verdict};
pub use schema::Schema;
pub use zotbox_protocol::{Content, Event, HelloAck, event_name};

/// The wire types, for what the SDK does not wrap.
pub use zotbox_protocol as protocol;
