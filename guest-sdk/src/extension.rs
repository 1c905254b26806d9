//! The [`Extension`] builder and its run loop.

use std::any::Any;
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::panic::{self, AssertUnwindSafe};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use zotbox_protocol::{
    CommandInvoked, Decoder, Event, EventIntercept, ExtensionFrame, Hello, HostFrame,
    InterceptResponse, PanelKey, PanelResize, Ready, RegisterCommand, RegisterTool, ShutdownAck,
    Subscribe, ToolCall, Undecoded, event_name,
};

use crate::context::Context;
use crate::response::{IntoResponse, IntoToolOutput, Response, ToolOutput, Verdict};
use crate::schema::Schema;

/// How much the run loop asks of its reader at a time: std's `BufReader`
/// size. The buffer is zeroed once and kept for the whole session, so each
/// of its pages stays resident in every instance (at 64 KiB it was a third
/// of what an idle wasm extension costs); a longer frame takes more reads.
const READ_CHUNK: usize = 8 * 1024;

type CommandFn = Box<dyn FnMut(&mut Context<'_>, &str) -> Response>;
type ToolFn = Box<dyn FnMut(&mut Context<'_>, Value) -> ToolOutput>;
type EventFn = Box<dyn FnMut(&mut Context<'_>, &Event)>;
type ToolCallInterceptFn = Box<dyn FnMut(&mut Context<'_>, &str, &Value) -> Verdict>;
type TurnStartInterceptFn = Box<dyn FnMut(&mut Context<'_>, u64) -> Verdict>;
type MessageInterceptFn = Box<dyn FnMut(&mut Context<'_>, &str) -> Verdict>;
type PanelKeyFn = Box<dyn FnMut(&mut Context<'_>, &str, &str, Option<&str>)>;
type PanelResizeFn = Box<dyn FnMut(&mut Context<'_>, &str, u32, u32)>;
type PanelCloseFn = Box<dyn FnMut(&mut Context<'_>, &str)>;

struct Command {
    name: String,
    description: String,
    handler: CommandFn,
}

struct Tool {
    name: String,
    description: String,
    schema: Value,
    handler: ToolFn,
}

struct EventHandler {
    /// `None`: every event.
    events: Option<Vec<String>>,
    handler: EventFn,
}

/// A zot extension: its identity, what it registers, and the handlers behind it.
///
/// Build it with the methods below, then call [`run`](Extension::run).
/// Defaults: nothing registered, no subscriptions, logs to stderr.
///
/// Every handler gets a [`Context`] first. Handlers run one at a time on the
/// thread that called `run`, so they may hold plain mutable state (`FnMut`);
/// a slow handler delays the frames behind it.
///
/// A command or tool registered twice under one name keeps its first place
/// in the registration order and its last handler.
pub struct Extension {
    name: String,
    version: String,
    commands: Vec<Command>,
    tools: Vec<Tool>,
    event_handlers: Vec<EventHandler>,
    tool_call_interceptors: Vec<ToolCallInterceptFn>,
    turn_start_interceptors: Vec<TurnStartInterceptFn>,
    message_interceptors: Vec<MessageInterceptFn>,
    panel_key: Option<PanelKeyFn>,
    panel_resize: Option<PanelResizeFn>,
    panel_close: Option<PanelCloseFn>,
    log: Box<dyn Write>,
}

impl fmt::Debug for Extension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let commands: Vec<&str> = self.commands.iter().map(|c| c.name.as_str()).collect();
        let tools: Vec<&str> = self.tools.iter().map(|t| t.name.as_str()).collect();
        f.debug_struct("Extension")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("commands", &commands)
            .field("tools", &tools)
            .field("subscribe", &self.subscription())
            .finish_non_exhaustive()
    }
}

/// Whether the run loop goes on after a frame.
#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

impl Extension {
    /// An extension named and versioned as its `extension.json` says, read
    /// at build time by [`manifest!`](crate::manifest): one source for both.
    ///
    /// ```ignore
    /// // In a crate with an extension.json beside its Cargo.toml:
    /// zotbox_guest::Extension::from_manifest(zotbox_guest::manifest!())
    /// ```
    pub fn from_manifest(manifest: crate::ManifestInfo) -> Self {
        Self::new(manifest.name, manifest.version)
    }

    /// An extension with this name (it should match `extension.json`) and version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            commands: Vec::new(),
            tools: Vec::new(),
            event_handlers: Vec::new(),
            tool_call_interceptors: Vec::new(),
            turn_start_interceptors: Vec::new(),
            message_interceptors: Vec::new(),
            panel_key: None,
            panel_resize: None,
            panel_close: None,
            log: Box::new(io::stderr()),
        }
    }

    /// Registers the slash command `/name`. The handler gets everything the
    /// user typed after the name and returns a [`Response`] (or a `Result`
    /// of one; an error is shown to the user).
    #[must_use]
    pub fn command<F, R>(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        mut handler: F,
    ) -> Self
    where
        F: FnMut(&mut Context<'_>, &str) -> R + 'static,
        R: IntoResponse,
    {
        let command = Command {
            name: name.into(),
            description: description.into(),
            handler: Box::new(move |ctx, args| handler(ctx, args).into_response()),
        };
        match self.commands.iter_mut().find(|c| c.name == command.name) {
            Some(slot) => *slot = command,
            None => self.commands.push(command),
        }
        self
    }

    /// Registers a tool the model may call, with typed arguments.
    ///
    /// The arguments are deserialized into `A` before the handler runs;
    /// arguments that do not fit (a missing field, a wrong type) never reach
    /// it: the model gets an error result naming the field, such as
    /// ``invalid arguments for tool `weather`: city: invalid type: integer `3`, expected a string``.
    /// Absent arguments count as `{}`.
    ///
    /// The handler returns a [`ToolOutput`], anything that converts into
    /// one (`String`, `&str`), or a `Result` of those whose error becomes an
    /// error result.
    #[must_use]
    pub fn tool<A, F, R>(
        self,
        name: impl Into<String>,
        description: impl Into<String>,
        schema: impl Into<Schema>,
        mut handler: F,
    ) -> Self
    where
        A: DeserializeOwned,
        F: FnMut(&mut Context<'_>, A) -> R + 'static,
        R: IntoToolOutput,
    {
        let name = name.into();
        let tool_name = name.clone();
        let typed = move |ctx: &mut Context<'_>, args: Value| {
            let args = if args.is_null() {
                Value::Object(Map::new())
            } else {
                args
            };
            match serde_path_to_error::deserialize::<_, A>(args) {
                Ok(args) => handler(ctx, args).into_tool_output(),
                Err(err) => {
                    ToolOutput::error(format!("invalid arguments for tool `{tool_name}`: {err}"))
                }
            }
        };
        self.add_tool(name, description.into(), schema.into(), Box::new(typed))
    }

    /// Registers a tool whose schema is derived from its argument type `A`
    /// (`#[derive(Deserialize, JsonSchema)]`): the type is the one
    /// description of the arguments, for the model and for deserializing.
    /// Otherwise as [`Extension::tool`].
    #[cfg(feature = "derive-schema")]
    #[must_use]
    pub fn typed_tool<A, F, R>(
        self,
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + schemars::JsonSchema,
        F: FnMut(&mut Context<'_>, A) -> R + 'static,
        R: IntoToolOutput,
    {
        self.tool(name, description, crate::schema::of::<A>(), handler)
    }

    /// Registers a tool the model may call, handing the handler the
    /// arguments as sent (`Value::Null` when absent).
    #[must_use]
    pub fn tool_json<F, R>(
        self,
        name: impl Into<String>,
        description: impl Into<String>,
        schema: impl Into<Schema>,
        mut handler: F,
    ) -> Self
    where
        F: FnMut(&mut Context<'_>, Value) -> R + 'static,
        R: IntoToolOutput,
    {
        let raw = move |ctx: &mut Context<'_>, args: Value| handler(ctx, args).into_tool_output();
        self.add_tool(
            name.into(),
            description.into(),
            schema.into(),
            Box::new(raw),
        )
    }

    fn add_tool(
        mut self,
        name: String,
        description: String,
        schema: Schema,
        handler: ToolFn,
    ) -> Self {
        let tool = Tool {
            name,
            description,
            schema: schema.into_value(),
            handler,
        };
        match self.tools.iter_mut().find(|t| t.name == tool.name) {
            Some(slot) => *slot = tool,
            None => self.tools.push(tool),
        }
        self
    }

    /// Subscribes to the named events (see [`event_name`]) and calls the
    /// handler for each. In zotbox's sandbox, events past the start and end
    /// of a session and a turn (`tool_call`, `assistant_message`) arrive
    /// only when the manifest lists them in `capabilities.events`.
    ///
    /// ```no_run
    /// use zotbox_guest::{Extension, event_name};
    ///
    /// Extension::new("audit", "1.0.0")
    ///     .on_event([event_name::TURN_START, event_name::TOOL_CALL], |ctx, event| {
    ///         ctx.log(format_args!("{event:?}"));
    ///     })
    ///     .run()
    /// # .ok();
    /// ```
    #[must_use]
    pub fn on_event<S, F>(mut self, events: impl IntoIterator<Item = S>, handler: F) -> Self
    where
        S: AsRef<str>,
        F: FnMut(&mut Context<'_>, &Event) + 'static,
    {
        let events = events.into_iter().map(|e| e.as_ref().to_owned()).collect();
        self.event_handlers.push(EventHandler {
            events: Some(events),
            handler: Box::new(handler),
        });
        self
    }

    /// Subscribes to every event of the protocol ([`event_name::ALL`]) and
    /// calls the handler for each.
    #[must_use]
    pub fn on_all_events<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &Event) + 'static,
    {
        self.event_handlers.push(EventHandler {
            events: None,
            handler: Box::new(handler),
        });
        self
    }

    /// Intercepts tool calls (the host's and other extensions') before they
    /// run. The handler gets the tool's name and arguments and may allow,
    /// [block](Verdict::block) or [rewrite](Verdict::rewrite) the call.
    ///
    /// Interceptors registered more than once run in order: the first block
    /// wins, and each sees the arguments as rewritten by those before it.
    /// Absent arguments are passed as `{}`.
    ///
    /// In zotbox's sandbox the manifest must grant it: `"capabilities":
    /// {"events": ["tool_call"]}` to be asked at all, and `"rewrite":
    /// ["tool_call"]` besides for a rewrite to count (without it, the
    /// verdict holds and the change is dropped).
    #[must_use]
    pub fn intercept_tool_call<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &str, &Value) -> Verdict + 'static,
    {
        self.tool_call_interceptors.push(Box::new(handler));
        self
    }

    /// Intercepts the start of each agent step; the handler gets the step
    /// number and may allow or [block](Verdict::block) it. In zotbox's
    /// sandbox the manifest must list `turn_start` in `capabilities.events`.
    #[must_use]
    pub fn intercept_turn_start<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, u64) -> Verdict + 'static,
    {
        self.turn_start_interceptors.push(Box::new(handler));
        self
    }

    /// Intercepts each assistant message; the handler gets its text and may
    /// allow, [block](Verdict::block) it, or
    /// [replace its text](Verdict::replace_text). Several interceptors chain
    /// as in [`intercept_tool_call`](Extension::intercept_tool_call). In
    /// zotbox's sandbox the manifest must list `assistant_message` in
    /// `capabilities.events`, and in `capabilities.rewrite` to replace text.
    #[must_use]
    pub fn intercept_assistant_message<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &str) -> Verdict + 'static,
    {
        self.message_interceptors.push(Box::new(handler));
        self
    }

    /// Handles key presses in this extension's panels: the panel id, the
    /// key's name (`enter`, `up`, `esc`, `a`, …) and the text it produced.
    /// Replaces any earlier panel key handler.
    #[must_use]
    pub fn on_panel_key<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &str, &str, Option<&str>) + 'static,
    {
        self.panel_key = Some(Box::new(handler));
        self
    }

    /// Handles size changes of this extension's panels: the panel id, then
    /// width and height in cells. Replaces any earlier resize handler.
    #[must_use]
    pub fn on_panel_resize<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &str, u32, u32) + 'static,
    {
        self.panel_resize = Some(Box::new(handler));
        self
    }

    /// Handles the user closing one of this extension's panels. Replaces
    /// any earlier close handler.
    #[must_use]
    pub fn on_panel_close<F>(mut self, handler: F) -> Self
    where
        F: FnMut(&mut Context<'_>, &str) + 'static,
    {
        self.panel_close = Some(Box::new(handler));
        self
    }

    /// Sends log lines (the SDK's and [`Context::log`]'s) to `sink` instead
    /// of stderr. Stdout is never a valid choice: it carries the frames.
    #[must_use]
    pub fn log_to(mut self, sink: impl Write + 'static) -> Self {
        self.log = Box::new(sink);
        self
    }

    /// Runs the extension over stdin and stdout until the host sends
    /// `shutdown` or closes stdin.
    ///
    /// # Errors
    ///
    /// Reading stdin or writing stdout failed (the host went away).
    pub fn run(self) -> io::Result<()> {
        self.run_with(crate::stdio::stdin(), crate::stdio::stdout())
    }

    /// Runs the extension over any reader and writer, e.g. byte buffers in
    /// a test.
    ///
    /// Writes `hello`, the registrations, `subscribe` (when anything was
    /// subscribed or intercepted) and `ready` at once, without waiting for
    /// `hello_ack`; then answers frames until `shutdown` (answered with
    /// `shutdown_ack`) or the end of input. A request that does not decode
    /// is still answered when its `id` can be read (a check with a block, a
    /// tool call or a command with an error); other lines that do not decode
    /// are logged and skipped.
    ///
    /// # Errors
    ///
    /// Reading from `reader` or writing to `writer` failed.
    pub fn run_with<R: Read, W: Write>(mut self, mut reader: R, mut writer: W) -> io::Result<()> {
        let mut log = std::mem::replace(&mut self.log, Box::new(io::sink()));
        let mut ctx = Context::new(self.name.clone(), &mut writer, &mut *log);
        for frame in self.registration() {
            ctx.send(&frame);
        }
        ctx.check()?;

        let mut decoder = Decoder::default();
        let mut chunk = vec![0; READ_CHUNK];
        loop {
            let read = match reader.read(&mut chunk) {
                Ok(read) => read,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => {
                    return Err(io::Error::new(
                        err.kind(),
                        format!("reading a frame from the host failed: {err}"),
                    ));
                }
            };
            if read == 0 {
                // A last frame without its newline still counts.
                if let Some(item) = decoder.finish::<HostFrame>() {
                    self.handle(&mut ctx, item)?;
                }
                return Ok(());
            }
            decoder.push(&chunk[..read]);
            while let Some(item) = decoder.next_frame::<HostFrame>() {
                if self.handle(&mut ctx, item)? == Flow::Stop {
                    return Ok(());
                }
            }
        }
    }

    /// The frames that open the session, in order.
    fn registration(&self) -> Vec<ExtensionFrame> {
        let subscribe = self.subscription();
        let mut capabilities = Vec::new();
        if !self.commands.is_empty() {
            capabilities.push("commands".to_owned());
        }
        if !self.tools.is_empty() {
            capabilities.push("tools".to_owned());
        }
        if !subscribe.events.is_empty() || !subscribe.intercept.is_empty() {
            capabilities.push("events".to_owned());
        }

        let mut frames = vec![ExtensionFrame::Hello(Hello {
            name: self.name.clone(),
            version: self.version.clone(),
            capabilities,
        })];
        frames.extend(self.commands.iter().map(|command| {
            ExtensionFrame::RegisterCommand(RegisterCommand {
                name: command.name.clone(),
                description: command.description.clone(),
            })
        }));
        frames.extend(self.tools.iter().map(|tool| {
            ExtensionFrame::RegisterTool(RegisterTool {
                name: tool.name.clone(),
                description: tool.description.clone(),
                schema: tool.schema.clone(),
            })
        }));
        if !subscribe.events.is_empty() || !subscribe.intercept.is_empty() {
            frames.push(ExtensionFrame::Subscribe(subscribe));
        }
        frames.push(ExtensionFrame::Ready(Ready {}));
        frames
    }

    /// The events asked for (in the order first named) and the intercepts.
    fn subscription(&self) -> Subscribe {
        let mut events: Vec<String> = Vec::new();
        for handler in &self.event_handlers {
            let names: Vec<&str> = match &handler.events {
                Some(names) => names.iter().map(String::as_str).collect(),
                None => event_name::ALL.to_vec(),
            };
            for name in names {
                if !events.iter().any(|known| known == name) {
                    events.push(name.to_owned());
                }
            }
        }
        let mut intercept = Vec::new();
        if !self.tool_call_interceptors.is_empty() {
            intercept.push(event_name::TOOL_CALL.to_owned());
        }
        if !self.turn_start_interceptors.is_empty() {
            intercept.push(event_name::TURN_START.to_owned());
        }
        if !self.message_interceptors.is_empty() {
            intercept.push(event_name::ASSISTANT_MESSAGE.to_owned());
        }
        Subscribe { events, intercept }
    }

    fn handle(
        &mut self,
        ctx: &mut Context<'_>,
        item: Result<HostFrame, Undecoded>,
    ) -> io::Result<Flow> {
        let frame = match item {
            Ok(frame) => frame,
            Err(undecoded) => {
                // A check left unanswered is a check passed: answer what can
                // be answered (a check with a block), and skip the rest.
                let reader = format!("extension `{}`", self.name);
                match undecoded.answer(&reader) {
                    Some(answer) => {
                        ctx.log(format_args!(
                            "answered a `{}` from the host it could not read: {undecoded}",
                            undecoded.peek.frame_type.as_deref().unwrap_or_default()
                        ));
                        ctx.send(&answer);
                        ctx.check()?;
                    }
                    None => ctx.log(format_args!("skipped a frame from the host: {undecoded}")),
                }
                return Ok(Flow::Continue);
            }
        };
        match frame {
            HostFrame::HelloAck(ack) => ctx.set_hello_ack(ack),
            HostFrame::CommandInvoked(call) => self.invoke_command(ctx, call),
            HostFrame::ToolCall(call) => self.call_tool(ctx, call),
            HostFrame::Event(event) => self.deliver_event(ctx, &event),
            HostFrame::EventIntercept(request) => {
                let response = self.intercept(ctx, request);
                ctx.send(&ExtensionFrame::EventInterceptResponse(response));
            }
            HostFrame::PanelKey(PanelKey {
                panel_id,
                key,
                text,
            }) => {
                if let Some(handler) = &mut self.panel_key {
                    let outcome = guarded(|| handler(ctx, &panel_id, &key, text.as_deref()));
                    log_panic(ctx, "panel key handler", outcome);
                }
            }
            HostFrame::PanelResize(PanelResize {
                panel_id,
                width,
                height,
            }) => {
                if let Some(handler) = &mut self.panel_resize {
                    let outcome = guarded(|| handler(ctx, &panel_id, width, height));
                    log_panic(ctx, "panel resize handler", outcome);
                }
            }
            HostFrame::PanelClose(close) => {
                if let Some(handler) = &mut self.panel_close {
                    let outcome = guarded(|| handler(ctx, &close.panel_id));
                    log_panic(ctx, "panel close handler", outcome);
                }
            }
            HostFrame::Shutdown(_) => {
                ctx.send(&ExtensionFrame::ShutdownAck(ShutdownAck {}));
                ctx.check()?;
                return Ok(Flow::Stop);
            }
        }
        ctx.check()?;
        Ok(Flow::Continue)
    }

    fn invoke_command(&mut self, ctx: &mut Context<'_>, call: CommandInvoked) {
        let response = match self.commands.iter_mut().find(|c| c.name == call.name) {
            None => Response::error(format!("unknown command `{}`", call.name)),
            Some(command) => {
                guarded(|| (command.handler)(ctx, &call.args)).unwrap_or_else(|panic| {
                    Response::error(format!(
                        "command `{}`: handler panicked: {panic}",
                        call.name
                    ))
                })
            }
        };
        ctx.send(&ExtensionFrame::CommandResponse(
            response.into_frame(call.id),
        ));
    }

    fn call_tool(&mut self, ctx: &mut Context<'_>, call: ToolCall) {
        let ToolCall { id, name, args } = call;
        let output = match self.tools.iter_mut().find(|t| t.name == name) {
            None => ToolOutput::error(format!("unknown tool `{name}`")),
            Some(tool) => guarded(|| (tool.handler)(ctx, args)).unwrap_or_else(|panic| {
                ToolOutput::error(format!("tool `{name}`: handler panicked: {panic}"))
            }),
        };
        ctx.send(&ExtensionFrame::ToolResult(output.into_frame(id)));
    }

    fn deliver_event(&mut self, ctx: &mut Context<'_>, event: &Event) {
        for entry in &mut self.event_handlers {
            let wanted = match &entry.events {
                Some(names) => names.contains(&event.event),
                None => event_name::ALL.contains(&event.event.as_str()),
            };
            if wanted {
                let outcome = guarded(|| (entry.handler)(ctx, event));
                log_panic(ctx, "event handler", outcome);
            }
        }
    }

    /// Asks every interceptor of the request's kind, in order: the first
    /// block wins, rewrites chain. A panicking `tool_call` interceptor
    /// blocks (the call it choked on is the one to stop); another kind's
    /// counts as allowing.
    fn intercept(&mut self, ctx: &mut Context<'_>, request: EventIntercept) -> InterceptResponse {
        let mut response = InterceptResponse {
            id: request.id,
            ..InterceptResponse::default()
        };
        let kind = request.event.as_str();
        let mut verdicts: Vec<Verdict> = Vec::new();
        match kind {
            event_name::TOOL_CALL => {
                let tool_name = request.tool_name.unwrap_or_default();
                let args = request
                    .tool_args
                    .unwrap_or_else(|| Value::Object(Map::new()));
                // As zot's own tools will read them (any case, the last key
                // winning): natively, zot hands a guard the model's spelling.
                let mut args =
                    zotbox_protocol::zot_args::as_zot_reads(&tool_name, &args).unwrap_or(args);
                let mut rewritten = false;
                for handler in &mut self.tool_call_interceptors {
                    match guarded(|| handler(ctx, &tool_name, &args)) {
                        Ok(Verdict::Rewrite { args: new_args }) if new_args.is_object() => {
                            args = new_args;
                            rewritten = true;
                        }
                        Ok(Verdict::Rewrite { .. }) => ctx.log(
                            "ignored a `tool_call` rewrite whose arguments are not a JSON object",
                        ),
                        Ok(verdict) => verdicts.push(verdict),
                        // A guard that cannot decide refuses: allowing
                        // would let through exactly the call it choked on.
                        Err(panic) => {
                            ctx.log(format_args!(
                                "`tool_call` interceptor panicked, blocking: {panic}"
                            ));
                            verdicts.push(Verdict::block(format!(
                                "the `tool_call` interceptor failed ({panic}); blocked to be safe"
                            )));
                        }
                    }
                    if let Some(Verdict::Block { .. }) = verdicts.last() {
                        break;
                    }
                }
                if rewritten {
                    response.modified_args = Some(args);
                }
            }
            event_name::TURN_START => {
                let step = request.step.unwrap_or_default();
                for handler in &mut self.turn_start_interceptors {
                    match guarded(|| handler(ctx, step)) {
                        Ok(verdict) => verdicts.push(verdict),
                        Err(panic) => ctx.log(format_args!(
                            "`turn_start` interceptor panicked, allowing: {panic}"
                        )),
                    }
                    if let Some(Verdict::Block { .. }) = verdicts.last() {
                        break;
                    }
                }
            }
            event_name::ASSISTANT_MESSAGE => {
                let mut text = request.text.unwrap_or_default();
                let mut replaced = false;
                for handler in &mut self.message_interceptors {
                    match guarded(|| handler(ctx, &text)) {
                        Ok(Verdict::Replace { text: new_text }) => {
                            text = new_text;
                            replaced = true;
                        }
                        Ok(verdict) => verdicts.push(verdict),
                        Err(panic) => ctx.log(format_args!(
                            "`assistant_message` interceptor panicked, allowing: {panic}"
                        )),
                    }
                    if let Some(Verdict::Block { .. }) = verdicts.last() {
                        break;
                    }
                }
                if replaced {
                    response.replace_text = Some(text);
                }
            }
            // An intercept this SDK does not know was never asked for.
            _ => {}
        }
        for verdict in verdicts {
            match verdict {
                Verdict::Allow => {}
                Verdict::Block { reason } => {
                    return InterceptResponse {
                        id: response.id,
                        block: true,
                        reason: (!reason.is_empty()).then_some(reason),
                        ..InterceptResponse::default()
                    };
                }
                other => ctx.log(format_args!(
                    "ignored a `{}` verdict on a `{kind}` intercept, which does not allow it",
                    // As the author wrote it: `Verdict::replace_text(…)`.
                    match other {
                        Verdict::Replace { .. } => "replace_text",
                        other => other.kind(),
                    }
                )),
            }
        }
        response
    }
}

/// Runs a handler, turning a panic into its message.
///
/// Where panics abort (wasm32 targets by default) there is nothing to catch:
/// the guest traps and the host ends its session.
fn guarded<T>(handler: impl FnOnce() -> T) -> Result<T, String> {
    // The handler's state may be half-updated after a panic; the SDK's own
    // state is not, and the extension answering with an error beats dying.
    panic::catch_unwind(AssertUnwindSafe(handler)).map_err(|payload| panic_message(&*payload))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

fn log_panic(ctx: &mut Context<'_>, what: &str, outcome: Result<(), String>) {
    if let Err(panic) = outcome {
        ctx.log(format_args!("{what} panicked: {panic}"));
    }
}
