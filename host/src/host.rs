//! The host: every extension's session in one registry, and the routing between them.
//!
//! [`Host`] is the library's front door. Build one with [`HostBuilder`]; it
//! discovers extensions, starts them in parallel, and routes commands, tool
//! calls, events and intercepts to whichever extension registered them.

mod builder;
mod data_tools;
pub(crate) mod launch;
mod registry;
mod supervisor;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, watch};
use zotbox_protocol::{CommandResponse, Event, ToolResult};

use crate::discovery::SearchPath;
use crate::event::HostEvent;
use crate::policy::Policy;
use crate::sandbox::Services;
use crate::session::{CallError, Interceptable, Session, SessionConfig, Verdict};
pub use builder::{BuildError, HostBuilder};
pub use data_tools::DATA_OUTPUT_CAP;
use data_tools::DataState;
use registry::Registry;
pub use registry::{CommandInfo, ExtensionInfo, ExtensionState, ToolInfo};
pub use supervisor::RestartPolicy;

/// A host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// No extension registered that command.
    #[error("no command `{name}`{}", hint(known))]
    UnknownCommand {
        /// The command asked for.
        name: String,
        /// Commands that exist, for the hint.
        known: Vec<String>,
    },
    /// No extension registered that tool.
    #[error("no tool `{name}`{}", hint(known))]
    UnknownTool {
        /// The tool asked for.
        name: String,
        /// Tools that exist, for the hint.
        known: Vec<String>,
    },
    /// The guard chain refused a tool call.
    #[error("tool `{tool}` blocked by {by}: {reason}")]
    Blocked {
        /// The tool.
        tool: String,
        /// Who blocked it.
        by: String,
        /// Why.
        reason: String,
    },
    /// The extension failed to answer.
    #[error(transparent)]
    Call(#[from] CallError),
    /// No extension of that name.
    #[error("no extension `{0}`")]
    UnknownExtension(String),
    /// The arguments nest deeper than an extension reads
    /// ([`crate::protocol::MAX_DEPTH`] levels, with the frame's own):
    /// nothing was asked or called.
    #[error("tool `{tool}`: its arguments are nested deeper than {limit} levels; not called")]
    NestedTooDeep {
        /// The tool.
        tool: String,
        /// The deepest nesting arguments may have.
        limit: usize,
    },
    /// The tool comes from a workspace the user has not trusted: it is
    /// refused by name, and nothing runs.
    #[error("tool `{tool}` {reason}")]
    Untrusted {
        /// The tool.
        tool: String,
        /// ``comes from the workspace `…`, which …``, with what to run.
        reason: String,
    },
}

/// The deepest nesting a tool's arguments may have: a frame's
/// [`crate::protocol::MAX_DEPTH`] levels, less the frame's own.
const MAX_ARGS_DEPTH: usize = crate::protocol::MAX_DEPTH - 1;

/// Whether `args` nest deeper than any frame that carries them may.
fn args_too_deep(args: &Value) -> bool {
    crate::protocol::value_nested_deeper_than(args, MAX_ARGS_DEPTH)
}

/// One line for the audit log: `bash {"command":"ls"}`, at most 500
/// characters, written only as far as that: the arguments of a call may be
/// megabytes.
fn describe(subject: &Interceptable) -> String {
    use std::fmt::Write;
    let mut line = Clipped {
        text: String::new(),
        left: 500,
    };
    // An `Err` only says the line is full.
    let _ = match subject {
        Interceptable::ToolCall {
            tool_name,
            tool_args,
        } => write!(line, "{tool_name} {tool_args}"),
        Interceptable::TurnStart { step } => write!(line, "turn_start {step}"),
        Interceptable::AssistantMessage { text } => write!(line, "assistant_message {text}"),
    };
    line.text
}

/// A string taking at most `left` more characters, then refusing the rest.
struct Clipped {
    text: String,
    left: usize,
}

impl std::fmt::Write for Clipped {
    fn write_str(&mut self, part: &str) -> std::fmt::Result {
        for c in part.chars() {
            if self.left == 0 {
                return Err(std::fmt::Error);
            }
            self.text.push(c);
            self.left -= 1;
        }
        Ok(())
    }
}

fn hint(known: &[String]) -> String {
    if known.is_empty() {
        "; no extension registered any".to_owned()
    } else {
        format!(" (known: {})", known.join(", "))
    }
}

/// The outcome of an intercept chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// The combined verdict: a block, or the final rewrite, or allow.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Who decided: the blocker, or every rewriter in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decided_by: Vec<String>,
}

impl Decision {
    /// Whether the chain blocked.
    pub fn is_block(&self) -> bool {
        matches!(self.verdict, Verdict::Block { .. })
    }
}

/// Who answers a tool call.
enum ToolOwner {
    Extension(Session),
    Data(Box<crate::data::DataTool>),
}

/// A running set of extensions. Cheap to clone; all clones share the sessions.
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

struct Inner {
    settings: Settings,
    launcher: crate::runtime::Launcher,
    policy: Policy,
    services: Arc<Services>,
    data: std::sync::RwLock<DataState>,
    // Where the workspace stands, as of the last start or reload.
    workspace: std::sync::RwLock<WorkspaceView>,
    events: broadcast::Sender<HostEvent>,
    registry: Mutex<Registry>,
    // Flipped to true to stop every supervisor of the current generation.
    stop: Mutex<watch::Sender<bool>>,
    // Serialises reload and shutdown: each sees the other's end state.
    lifecycle: tokio::sync::Mutex<()>,
}

/// The workspace as the last start or reload found it.
#[derive(Debug)]
struct WorkspaceView {
    // Shared with the supervisors, which check what they start against it.
    assessment: Arc<crate::store::trust::Assessment>,
    // The names of the extensions in its `.zot/extensions`, for the note.
    extensions: Vec<String>,
}

impl WorkspaceView {
    /// Before the first start: nothing of the workspace may run.
    fn before_start(workspace: &std::path::Path) -> Self {
        Self {
            assessment: Arc::new(crate::store::trust::Assessment::not_yet(workspace)),
            extensions: Vec::new(),
        }
    }
}

/// Everything fixed at build time.
#[derive(Debug, Clone)]
struct Settings {
    search: SearchPath,
    // `false` for `zotbox serve`: zot itself runs the extensions.
    run_extensions: bool,
    session: SessionConfig,
    restart: RestartPolicy,
    zot_version: String,
    provider: String,
    model: String,
}

impl Host {
    /// A builder with zot's defaults.
    pub fn builder() -> HostBuilder {
        HostBuilder::new()
    }

    /// Subscribes to host events (notes, panels, exits, restarts).
    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.inner.events.subscribe()
    }

    /// Every extension found, with its state, registrations and errors, in
    /// precedence order; then manifests that failed to load or lost on name.
    pub fn list(&self) -> Vec<ExtensionInfo> {
        self.registry().list()
    }

    /// The data extensions in force: tools, refusal plugins, skills, and the
    /// files that failed to load.
    pub fn data_set(&self) -> crate::data::DataSet {
        self.data().set.clone()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// Where this host looks for extensions.
    pub fn search_path(&self) -> &SearchPath {
        &self.inner.settings.search
    }

    /// Whether the workspace's own extensions and data tools may run (it is
    /// trusted, trusted by policy, or brings none), as of the last start or
    /// reload.
    pub fn workspace_trusted(&self) -> bool {
        self.workspace_view().assessment.standing.allows()
    }

    /// Where the workspace stands, in a few words: ``trusted on …``,
    /// ``not trusted: …``.
    pub fn workspace_summary(&self) -> String {
        self.workspace_view().assessment.standing.summary()
    }

    /// Why the workspace's extensions and data tools stay off:
    /// ``comes from the workspace `…`, which you have not trusted: run
    /// `zotbox trust` to review and trust it``; `None` when they may run.
    pub fn workspace_refusal(&self) -> Option<String> {
        self.workspace_view().assessment.refusal()
    }

    /// Why no extension or tool may use the workspace at all: it is the
    /// user's home folder, or holds it; `None` for a project.
    pub fn workspace_not_a_project(&self) -> Option<String> {
        self.inner.services.not_a_project()
    }

    /// What an untrusted workspace brings and why it stays off, in one
    /// line for a person (names escaped); `None` when the workspace is
    /// trusted or brings nothing. `zotbox serve` shows it once per session.
    pub fn workspace_note(&self) -> Option<String> {
        let view = self.workspace_view();
        let why = view.assessment.standing.untrusted()?;
        let tools: Vec<String> = self
            .data()
            .set
            .untrusted_tools
            .iter()
            .map(|t| format!("`{}`", crate::text::Shown(&t.name)))
            .collect();
        let extensions: Vec<String> = view
            .extensions
            .iter()
            .map(|name| format!("`{}`", crate::text::Shown(name)))
            .collect();
        let mut items = Vec::new();
        for (list, one, many) in [
            (&tools, "data tool", "data tools"),
            (&extensions, "extension", "extensions"),
        ] {
            match list.len() {
                0 => {}
                1 => items.push(format!("{one} {}", list[0])),
                _ => items.push(format!("{many} {}", list.join(", "))),
            }
        }
        if items.is_empty() {
            return None;
        }
        let count = tools.len() + extensions.len();
        let mut note = format!(
            "{} {} from the workspace `{}`, {why}; zotbox does not run {}",
            items.join(" and "),
            if count == 1 { "comes" } else { "come" },
            crate::text::Shown(&view.assessment.workspace.to_string_lossy()),
            if count == 1 { "it" } else { "them" },
        );
        if !extensions.is_empty() {
            note.push_str(
                ", but zot itself starts the workspace's extensions without asking \
                 (`zotbox doctor` says which run outside the sandbox)",
            );
        }
        Some(note)
    }

    fn workspace_view(&self) -> std::sync::RwLockReadGuard<'_, WorkspaceView> {
        self.inner
            .workspace
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the workspace stands as of the last start or reload: what the
    /// first start of each of its extensions is checked against.
    pub(crate) fn workspace_assessment(&self) -> Arc<crate::store::trust::Assessment> {
        self.workspace_view().assessment.clone()
    }

    /// Where the workspace stands *now* (hashed again): a restart must not
    /// start content changed since the start.
    pub(crate) fn workspace_assessment_now(&self) -> crate::store::trust::Assessment {
        let search = &self.inner.settings.search;
        crate::store::trust::assess(&self.inner.policy, &search.home, &search.workspace)
    }

    /// Where the audit log is written, if anywhere.
    pub fn audit_log(&self) -> Option<std::path::PathBuf> {
        self.inner
            .services
            .audit
            .path()
            .map(std::path::Path::to_path_buf)
    }

    /// Every live command, by name.
    pub fn commands(&self) -> Vec<CommandInfo> {
        self.registry().commands()
    }

    /// Every live tool, by name.
    pub fn tools(&self) -> Vec<ToolInfo> {
        let mut tools = self.registry().tools();
        // Data tools come after extensions' tools: first come, first served.
        for tool in &self.data().set.tools {
            if !tools.iter().any(|t| t.name == tool.name) {
                tools.push(ToolInfo {
                    name: tool.name.clone(),
                    description: tool.description.clone(),
                    schema: tool.schema(),
                    extension: format!("data:{}", tool.kind.as_str()),
                });
            }
        }
        tools
    }

    /// Runs slash command `name` with `args` in the extension that registered it.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownCommand`], or the extension's [`CallError`].
    pub async fn invoke_command(
        &self,
        name: &str,
        args: &str,
    ) -> Result<CommandResponse, HostError> {
        let session = self.registry().command_owner(name)?;
        Ok(session.invoke_command(name, args).await?)
    }

    /// Calls tool `name`: the guard chain first (which may block or rewrite
    /// the arguments), then a `tool_call` event to subscribers, then the call.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownTool`], [`HostError::Blocked`], or the extension's
    /// [`CallError`].
    pub async fn call_tool(&self, name: &str, args: Value) -> Result<ToolResult, HostError> {
        // Before anything copies them: cloning and writing a value recurse,
        // and a value built deep enough overflows the stack.
        if args_too_deep(&args) {
            return Err(HostError::NestedTooDeep {
                tool: name.to_owned(),
                limit: MAX_ARGS_DEPTH,
            });
        }
        // Bound first: the registry lock must be released before the arms run.
        let owned = self.registry().tool_owner(name);
        let owner = match owned {
            Ok(session) => ToolOwner::Extension(session),
            Err(unknown) => match self.data_tool(name) {
                Some(tool) => ToolOwner::Data(Box::new(tool)),
                None if self.data().set.untrusted_tool(name).is_some() => {
                    return Err(HostError::Untrusted {
                        tool: name.to_owned(),
                        reason: self.workspace_refusal().unwrap_or_else(|| {
                            "comes from a workspace that is not trusted: run `zotbox trust`"
                                .to_owned()
                        }),
                    });
                }
                None => {
                    return Err(match unknown {
                        HostError::UnknownTool { name, .. } => HostError::UnknownTool {
                            name,
                            known: self.tools().into_iter().map(|t| t.name).collect(),
                        },
                        other => other,
                    });
                }
            },
        };
        let decision = self.intercept_tool_call(name, args.clone()).await;
        let args = match decision.verdict {
            Verdict::Block { reason } => {
                return Err(HostError::Blocked {
                    tool: name.to_owned(),
                    by: decision.decided_by.join(", "),
                    reason,
                });
            }
            Verdict::Rewrite { args } => args,
            Verdict::Allow | Verdict::Replace { .. } => args,
        };
        let call_id = self.registry().next_call_id();
        self.emit_event(&Event::tool_call(call_id, name, args.clone()));
        match owner {
            ToolOwner::Extension(session) => Ok(session.call_tool(name, args, None).await?),
            ToolOwner::Data(tool) => self.run_data_tool(&tool, &args).await,
        }
    }

    /// Delivers `event` to every extension subscribed to it. Never waits.
    /// An event whose arguments nest deeper than a frame may is dropped:
    /// no extension could read it.
    pub fn emit_event(&self, event: &Event) {
        if event.tool_args.as_ref().is_some_and(args_too_deep) {
            tracing::warn!(
                "dropped a `{}` event whose arguments nest deeper than {MAX_ARGS_DEPTH} levels",
                crate::text::shown(&event.event)
            );
            return;
        }
        for session in self.registry().sessions() {
            if session.subscribes_to(&event.event) {
                session.emit_event(event);
            }
        }
    }

    /// Asks every `tool_call` interceptor, in order, about a call.
    ///
    /// A guard of one of zot's own tools is shown the arguments as Go's
    /// decoder reads them, the last key written winning: parse arguments
    /// taken from JSON text with [`protocol::zot_args::InReadOrder`] (or as
    /// part of a [`protocol::HostFrame`]), not as a plain [`Value`], which
    /// keeps a repeated key where it first stood.
    ///
    /// [`protocol::zot_args::InReadOrder`]: crate::protocol::zot_args::InReadOrder
    /// [`protocol::HostFrame`]: crate::protocol::HostFrame
    pub async fn intercept_tool_call(&self, tool_name: &str, tool_args: Value) -> Decision {
        self.intercept(Interceptable::ToolCall {
            tool_name: tool_name.to_owned(),
            tool_args,
        })
        .await
    }

    /// Asks every `turn_start` interceptor, in order, about a turn.
    pub async fn intercept_turn_start(&self, step: u64) -> Decision {
        self.intercept(Interceptable::TurnStart { step }).await
    }

    /// Asks every `assistant_message` interceptor, in order, about a message.
    pub async fn intercept_assistant_message(&self, text: &str) -> Decision {
        self.intercept(Interceptable::AssistantMessage {
            text: text.to_owned(),
        })
        .await
    }

    /// Runs the guard chain: for a tool call, the refusal plugins' deny
    /// rules first; then the extensions that intercept the event, one after
    /// another in a stable order. The first block wins; rewrites chain, each
    /// interceptor seeing the previous one's result, and a rewritten tool
    /// call passes the deny rules again. Every decision is audited.
    pub async fn intercept(&self, subject: Interceptable) -> Decision {
        self.intercept_excluding(subject, None).await
    }

    /// [`Host::intercept`] without asking `exclude` (an extension blocked in
    /// a capability call cannot answer an intercept).
    pub(crate) async fn intercept_excluding(
        &self,
        subject: Interceptable,
        exclude: Option<&str>,
    ) -> Decision {
        if let Interceptable::ToolCall {
            tool_name,
            tool_args,
        } = &subject
            && args_too_deep(tool_args)
        {
            // No guard could read the check (each is sent it in a frame),
            // so none is asked, whatever the fail mode. Nor is the value
            // written out for the log: that recurses as deep as it goes.
            let reason = format!(
                "the arguments are nested deeper than {MAX_ARGS_DEPTH} levels, \
                 which no guard reads; blocked to be safe"
            );
            self.inner
                .services
                .audit
                .record(crate::audit::AuditRecord::now(
                    "guard".to_owned(),
                    "guard",
                    format!("{tool_name} <arguments nested too deep>"),
                    crate::audit::Decision::Deny,
                    reason.clone(),
                ));
            return Decision {
                verdict: Verdict::Block { reason },
                decided_by: Vec::new(),
            };
        }
        let described = describe(&subject);
        let decision = self.run_chain(subject, exclude).await;
        let (outcome, reason) = match &decision.verdict {
            Verdict::Allow => (crate::audit::Decision::Allow, String::new()),
            Verdict::Block { reason } => (crate::audit::Decision::Deny, reason.clone()),
            Verdict::Rewrite { args } => {
                (crate::audit::Decision::Rewrite, format!("args now {args}"))
            }
            Verdict::Replace { .. } => {
                (crate::audit::Decision::Rewrite, "text replaced".to_owned())
            }
        };
        let by = if decision.decided_by.is_empty() {
            "guard".to_owned()
        } else {
            decision.decided_by.join(", ")
        };
        self.inner
            .services
            .audit
            .record(crate::audit::AuditRecord::now(
                by, "guard", described, outcome, reason,
            ));
        decision
    }

    async fn run_chain(&self, mut subject: Interceptable, exclude: Option<&str>) -> Decision {
        if let Some(block) = self.deny_rules(&subject).await {
            return block;
        }
        let interceptors: Vec<Session> = self
            .registry()
            .sessions()
            .into_iter()
            .filter(|s| s.intercepts(subject.event()) && Some(&**s.name()) != exclude)
            .collect();
        let mut rewritten_by = Vec::new();
        let mut changed = false;
        for session in interceptors {
            let (verdict, refused) = session.intercept(&subject).await;
            if let Some(why) = refused {
                self.inner
                    .services
                    .audit
                    .record(crate::audit::AuditRecord::now(
                        session.name().to_string(),
                        "rewrite",
                        subject.event(),
                        crate::audit::Decision::Deny,
                        why,
                    ));
            }
            match verdict {
                Verdict::Allow => {}
                Verdict::Block { reason } => {
                    return Decision {
                        verdict: Verdict::Block { reason },
                        decided_by: vec![session.name().to_string()],
                    };
                }
                Verdict::Rewrite { args } => {
                    if let Interceptable::ToolCall { tool_args, .. } = &mut subject {
                        *tool_args = args;
                        changed = true;
                        rewritten_by.push(session.name().to_string());
                    }
                }
                Verdict::Replace { text: new } => {
                    if let Interceptable::AssistantMessage { text } = &mut subject {
                        *text = new;
                        changed = true;
                        rewritten_by.push(session.name().to_string());
                    }
                }
            }
        }
        // A rewrite must not smuggle past the deny rules.
        if changed && let Some(block) = self.deny_rules(&subject).await {
            return block;
        }
        let verdict = match (changed, subject) {
            (true, Interceptable::ToolCall { tool_args, .. }) => {
                Verdict::Rewrite { args: tool_args }
            }
            (true, Interceptable::AssistantMessage { text }) => Verdict::Replace { text },
            _ => Verdict::Allow,
        };
        Decision {
            verdict,
            decided_by: rewritten_by,
        }
    }

    async fn deny_rules(&self, subject: &Interceptable) -> Option<Decision> {
        let Interceptable::ToolCall {
            tool_name,
            tool_args,
        } = subject
        else {
            return None;
        };
        let deny = self.data().deny.clone();
        let checked =
            data_tools::check_deny(&deny, tool_name, tool_args, data_tools::DENY_CHECK_DEADLINE)
                .await;
        match checked {
            data_tools::DenyCheck::Clear => None,
            data_tools::DenyCheck::Hit(hit) => Some(Decision {
                decided_by: vec![hit.decider()],
                verdict: Verdict::Block { reason: hit.reason },
            }),
            data_tools::DenyCheck::TooSlow { long_arguments } => Some(Decision {
                decided_by: vec!["guard".to_owned()],
                verdict: Verdict::Block {
                    reason: format!(
                        "the deny rules could not be checked within {} s ({}); a call whose \
                         check cannot be read is refused",
                        data_tools::DENY_CHECK_DEADLINE.as_secs(),
                        match long_arguments {
                            Some(bytes) => format!("{bytes} bytes of arguments"),
                            None => "the filesystem did not answer while its paths were \
                                     resolved"
                                .to_owned(),
                        }
                    ),
                },
            }),
        }
    }

    /// Sends a key press to `extension`'s panel.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownExtension`] when no live extension has that name.
    pub fn panel_key(
        &self,
        extension: &str,
        panel_id: &str,
        key: &str,
        text: Option<&str>,
    ) -> Result<(), HostError> {
        self.session(extension)?.panel_key(panel_id, key, text);
        Ok(())
    }

    /// Tells `extension` its panel was resized.
    ///
    /// # Errors
    ///
    /// As [`Host::panel_key`].
    pub fn panel_resize(
        &self,
        extension: &str,
        panel_id: &str,
        width: u32,
        height: u32,
    ) -> Result<(), HostError> {
        self.session(extension)?
            .panel_resize(panel_id, width, height);
        Ok(())
    }

    /// Tells `extension` the user closed its panel.
    ///
    /// # Errors
    ///
    /// As [`Host::panel_key`].
    pub fn panel_close(&self, extension: &str, panel_id: &str) -> Result<(), HostError> {
        self.session(extension)?.panel_close(panel_id);
        Ok(())
    }

    /// Stops every extension, rediscovers, and starts them again. Explicit
    /// paths given at build time are kept.
    pub async fn reload(&self) {
        let _lifecycle = self.inner.lifecycle.lock().await;
        self.stop_all().await;
        self.start_all().await;
    }

    /// Stops every extension (shutdown, terminate, kill), in parallel.
    pub async fn shutdown(&self) {
        // After a reload in progress, never in the middle of one.
        let _lifecycle = self.inner.lifecycle.lock().await;
        self.stop_all().await;
    }

    fn session(&self, extension: &str) -> Result<Session, HostError> {
        self.registry()
            .sessions()
            .into_iter()
            .find(|s| &**s.name() == extension)
            .ok_or_else(|| HostError::UnknownExtension(extension.to_owned()))
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn start_all(&self) {
        let search = &self.inner.settings.search;
        let (assessment, data) = self.assess_and_load_data();
        let trusted = assessment.standing.allows();
        let refusal = assessment.refusal().unwrap_or_default();
        *self
            .inner
            .data
            .write()
            .unwrap_or_else(PoisonError::into_inner) = data;
        let extensions = search
            .workspace_manifests()
            .iter()
            .filter_map(|path| crate::manifest::Manifest::load(path).ok())
            .map(|manifest| manifest.raw.name)
            .collect();
        *self
            .inner
            .workspace
            .write()
            .unwrap_or_else(PoisonError::into_inner) = WorkspaceView {
            assessment: Arc::new(assessment),
            extensions,
        };
        let discovery = if self.inner.settings.run_extensions {
            search.discover_trusting(trusted)
        } else {
            crate::discovery::Discovery::default()
        };
        let stop = {
            let (tx, rx) = watch::channel(false);
            *self
                .inner
                .stop
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = tx;
            rx
        };
        let slots = self.registry().reset(discovery, &refusal);
        let mut first_attempts = Vec::with_capacity(slots.len());
        for slot in slots {
            let (started_tx, started_rx) = tokio::sync::oneshot::channel();
            tokio::spawn(supervisor::supervise(
                self.clone(),
                slot,
                stop.clone(),
                started_tx,
            ));
            first_attempts.push(started_rx);
        }
        // All start in parallel: this waits as long as the slowest one.
        for started in first_attempts {
            let _ = started.await;
        }
    }

    /// Trust first: nothing of the workspace is loaded to run before it is
    /// assessed, and the tools of it that load must be the ones hashed (a
    /// `git pull` landing in between makes the start assess again, and so
    /// find the workspace changed).
    fn assess_and_load_data(&self) -> (crate::store::trust::Assessment, DataState) {
        let search = &self.inner.settings.search;
        let mut data_search = crate::data::DataSearch::new(&search.workspace, search.home.root());
        crate::store::lock::check_packages(&mut data_search, &search.home, &self.inner.policy);
        crate::store::trust::assess_then_load(
            || crate::store::trust::assess(&self.inner.policy, &search.home, &search.workspace),
            |assessment| DataState::load(&data_search, assessment.standing.allows()),
            |assessment, data| data.check_trust(assessment),
        )
    }

    async fn stop_all(&self) {
        let _ = self
            .inner
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(true);
        let sessions = self.registry().take_sessions();
        let mut stopping = tokio::task::JoinSet::new();
        for session in sessions {
            stopping.spawn(async move { session.shutdown().await });
        }
        while stopping.join_next().await.is_some() {}
        self.inner.services.audit.flush();
    }

    fn hello_ack(&self, manifest: &crate::manifest::Manifest) -> zotbox_protocol::HelloAck {
        let settings = &self.inner.settings;
        let dir = manifest.dir.display().to_string();
        zotbox_protocol::HelloAck {
            protocol_version: zotbox_protocol::PROTOCOL_VERSION,
            zot_version: settings.zot_version.clone(),
            provider: settings.provider.clone(),
            model: settings.model.clone(),
            cwd: settings.search.workspace.display().to_string(),
            extension_dir: Some(dir.clone()),
            // A confined native extension can write only its own data dir.
            data_dir: Some(
                self.inner
                    .launcher
                    .native_data_dir(manifest)
                    .map_or(dir, |d| d.display().to_string()),
            ),
        }
    }

    /// The limits one extension runs with under this host's policy, the
    /// host's own settings being the defaults.
    fn limits(&self, manifest: &crate::manifest::Manifest) -> crate::policy::EffectiveLimits {
        self.inner
            .policy
            .limits(&manifest.raw.limits, &self.limit_defaults())
    }

    /// The limits an extension gets where neither its manifest nor the
    /// policy sets one: the host's session settings.
    fn limit_defaults(&self) -> crate::policy::LimitDefaults {
        let session = &self.inner.settings.session;
        crate::policy::LimitDefaults {
            call_timeout: session.call_timeout,
            intercept_timeout: session.intercept_timeout,
            intercept_failure: session.intercept_failure,
            ..crate::policy::LimitDefaults::default()
        }
    }

    /// The session configuration for one extension: the host's, narrowed by
    /// the manifest's own limits and the policy's ceilings.
    fn session_config(&self, manifest: &crate::manifest::Manifest) -> SessionConfig {
        let mut config = self.inner.settings.session.clone();
        let policy = &self.inner.policy;
        let limits = self.limits(manifest);
        config.call_timeout = limits.call_timeout.value;
        config.intercept_timeout = limits.intercept_timeout.value;
        config.intercept_failure = limits.intercept_failure;
        config.registrations = config.registrations.within(policy);
        config
    }

    /// The launch step ([`launch::admit`]) for one of this host's
    /// extensions: its workspace's lock, the host's policy and services;
    /// `trust`, for a workspace's own extension, the assessment its files
    /// must match. Gives its guest limits and its sandbox.
    fn admit(
        &self,
        manifest: &crate::manifest::Manifest,
        trust: Option<&crate::store::trust::Assessment>,
    ) -> Result<launch::Admitted, launch::LaunchError> {
        let search = &self.inner.settings.search;
        launch::admit(
            manifest,
            &search.home,
            &self.inner.policy,
            &self.inner.services,
            Some(&search.workspace),
            trust,
            &self.limit_defaults(),
        )
    }
}
