//! Data-only extensions inside the host: data tools as tools, refusal
//! plugins as the first link of the guard chain, skills on request.

use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use zotbox_protocol::{Content, ToolResult};

use super::{Host, Inner};
use crate::capability::http::Request;
use crate::data::{Approvals, DataSearch, DataSet, DataTool, ToolKind};
use crate::guard::DenyRules;
use crate::sandbox::{CommandGuard, Sandbox};

/// The most a data tool returns to the model, in characters.
pub const DATA_OUTPUT_CAP: usize = 30_000;

/// Arguments longer than this (the strings deny rules read, together) are
/// checked on a blocking thread within [`DENY_CHECK_DEADLINE`]; shorter
/// ones at once, where a check takes microseconds, unless it resolves paths.
pub(crate) const DENY_INLINE_BYTES: usize = 64 * 1024;

/// How long the deny check of long arguments, or of paths resolved on the
/// filesystem, may take before the call is refused: zot allows a call whose
/// intercept is not answered in 5 s, so a check that outlasts it would be
/// consent.
pub(crate) const DENY_CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// What the deny rules make of a tool call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DenyCheck {
    /// A rule blocks it.
    Hit(crate::guard::deny::DenyHit),
    /// No rule does.
    Clear,
    /// The check did not end within the deadline.
    TooSlow {
        /// The bytes of arguments the rules read, when that many sent the
        /// check to a thread of its own; `None` when resolving the call's
        /// paths did (a folder on a network mount that does not answer).
        long_arguments: Option<usize>,
    },
}

/// Checks `tool_name` with `tool_args` against `deny`: at once for short
/// arguments, on a blocking thread within `deadline` for long ones and for
/// a check that resolves paths on the filesystem, which may not answer (an
/// unreachable network mount on the way) while the intercept must.
pub(crate) async fn check_deny(
    deny: &Arc<DenyRules>,
    tool_name: &str,
    tool_args: &Value,
    deadline: std::time::Duration,
) -> DenyCheck {
    let of =
        |hit: Option<crate::guard::deny::DenyHit>| hit.map_or(DenyCheck::Clear, DenyCheck::Hit);
    let bytes: usize = crate::data::DenyField::Path
        .arg_keys()
        .iter()
        .chain(crate::data::DenyField::Command.arg_keys())
        .filter_map(|key| tool_args.get(key)?.as_str())
        .map(str::len)
        .sum();
    let long = bytes > DENY_INLINE_BYTES;
    if !long && !deny.resolves_paths_of(tool_name) {
        return of(deny.check(tool_name, tool_args));
    }
    let (deny, name, args) = (deny.clone(), tool_name.to_owned(), tool_args.clone());
    let check = tokio::task::spawn_blocking(move || deny.check(&name, &args));
    match tokio::time::timeout(deadline, check).await {
        Ok(Ok(hit)) => of(hit),
        // Past the deadline (the check runs on, its answer unread), or the
        // check panicked: refused either way.
        _ => DenyCheck::TooSlow {
            long_arguments: long.then_some(bytes),
        },
    }
}

/// The data files in force and the deny rules compiled from their plugins.
#[derive(Debug, Default)]
pub(crate) struct DataState {
    pub(crate) set: DataSet,
    pub(crate) deny: Arc<DenyRules>,
    // Each data tool's sandbox, by tool and grant, made on first use.
    sandboxes: std::sync::Mutex<std::collections::HashMap<String, Arc<Sandbox>>>,
}

impl DataState {
    /// Loads every data folder. A project plugin shadows a user plugin of
    /// the same name for listing, but the user's deny rules stay in force
    /// (see [`DenyRules::for_data`]). Unless `workspace_trusted`, the
    /// workspace's tools are held ([`DataSet::untrusted_tools`]); its
    /// refusal plugins load all the same (they can only block).
    pub(crate) fn load(search: &DataSearch, workspace_trusted: bool) -> Self {
        let mut set = if workspace_trusted {
            search.load()
        } else {
            search.load_holding_project_tools()
        };
        // Each problem was logged by the loader as it was found.
        let deny = DenyRules::for_data(&set, &search.workspace);
        deny.report_to(&mut set);
        Self {
            set,
            deny: Arc::new(deny),
            sandboxes: std::sync::Mutex::default(),
        }
    }

    /// Checks that each of the workspace's tools that loaded (not held) is
    /// what `assessment` hashed; the first that is not, named, otherwise.
    pub(crate) fn check_trust(
        &self,
        assessment: &crate::store::trust::Assessment,
    ) -> Result<(), String> {
        let project = self
            .set
            .tools
            .iter()
            .filter(|tool| tool.origin == crate::data::DataOrigin::Project);
        for tool in project {
            assessment
                .check(&tool.path, &tool.sha256)
                .map_err(|err| format!("data tool `{}` {err}", crate::text::Shown(&tool.name)))?;
        }
        Ok(())
    }
}

/// The guard chain as the shell capability sees it: every command a
/// sandbox runs is asked about as zot's `bash` tool.
pub(crate) struct HostGuard(pub(crate) Weak<Inner>);

#[async_trait::async_trait]
impl CommandGuard for HostGuard {
    async fn check_command(&self, who: &str, command: &str) -> Result<(), (String, String)> {
        let Some(inner) = self.0.upgrade() else {
            return Ok(());
        };
        let host = Host { inner };
        let subject = crate::session::Interceptable::ToolCall {
            tool_name: "bash".to_owned(),
            tool_args: json!({ "command": command }),
        };
        // The caller is blocked in this very call: asking it to intercept
        // would only wait out its deadline.
        let decision = host.intercept_excluding(subject, Some(who)).await;
        match decision.verdict {
            super::Verdict::Block { reason } => Err((decision.decided_by.join(", "), reason)),
            _ => Ok(()),
        }
    }
}

fn text_result(text: String, is_error: bool) -> ToolResult {
    ToolResult {
        id: String::new(),
        content: vec![Content::text(cap_output(text))],
        is_error,
    }
}

/// Cuts `text` to [`DATA_OUTPUT_CAP`] characters, saying how much was cut.
pub(crate) fn cap_output(mut text: String) -> String {
    // No more characters than bytes: short texts need no counting.
    if text.len() <= DATA_OUTPUT_CAP {
        return text;
    }
    let Some((cut, _)) = text.char_indices().nth(DATA_OUTPUT_CAP) else {
        return text;
    };
    let more = text[cut..].chars().count();
    text.truncate(cut);
    text.push_str(&format!("\n[truncated: {more} more characters]"));
    text
}

/// Bytes as text, without a copy when they are valid UTF-8.
fn into_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

impl Host {
    /// The data tool `name`, if one is in force (and not shadowed by an
    /// extension's tool of the same name).
    pub(crate) fn data_tool(&self, name: &str) -> Option<DataTool> {
        self.data().set.tool(name).cloned()
    }

    pub(crate) fn data(&self) -> std::sync::RwLockReadGuard<'_, DataState> {
        self.inner
            .data
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a data tool the guard chain already allowed: approval, then the
    /// declared operation through a sandbox of its own, output capped.
    ///
    /// # Errors
    ///
    /// [`HostError::Blocked`](super::HostError::Blocked) when a deny rule
    /// naming the tool matches what it would run or read.
    pub(crate) async fn run_data_tool(
        &self,
        tool: &DataTool,
        args: &Value,
    ) -> Result<ToolResult, super::HostError> {
        let arg = args.get("arg").and_then(Value::as_str);
        let rendered = match tool.kind.shell_template() {
            // An argument the template refuses is answered in the run below.
            Some(template) => template
                .ok()
                .and_then(|t| t.render(arg).ok())
                .map(|command| json!({ "command": command.shown })),
            None => match tool.kind.render(arg) {
                crate::data::Rendered::Read { path } => Some(json!({ "path": path })),
                _ => None,
            },
        };
        if let Some(subject) = rendered
            && let Some(blocked) = self.deny_rendered(tool, subject).await
        {
            return Err(blocked);
        }
        Ok(self.run_data_tool_inner(tool, args).await)
    }

    async fn run_data_tool_inner(&self, tool: &DataTool, args: &Value) -> ToolResult {
        if !tool.auto_approve || self.inner.policy.require_approval() {
            // Under a policy that requires approval, `autoApprove` counts for nothing.
            let mut strict = tool.clone();
            strict.auto_approve = false;
            let refusal = match Approvals::load(self.inner.settings.search.home.root()) {
                Ok(approvals) => approvals
                    .check(&strict, &self.inner.settings.search.workspace)
                    .err()
                    .map(|refusal| refusal.to_string()),
                Err(err) => Some(format!("tool `{}`: {err}", tool.name)),
            };
            if let Some(refusal) = refusal {
                self.inner
                    .services
                    .audit
                    .record(crate::audit::AuditRecord::now(
                        format!("data:{}", tool.name),
                        "approval",
                        &tool.name,
                        crate::audit::Decision::Deny,
                        &refusal,
                    ));
                return text_result(refusal, true);
            }
        }
        let arg = match args.get("arg") {
            None | Some(Value::Null) => None,
            Some(Value::String(arg)) => Some(arg.as_str()),
            Some(other) => {
                return text_result(
                    format!(
                        "tool `{}`: `arg` must be a string, got `{other}`",
                        tool.name
                    ),
                    true,
                );
            }
        };
        match &tool.kind {
            ToolKind::Shell { .. } => {
                let command = match tool.kind.shell_template() {
                    Some(Ok(template)) => template.render(arg),
                    // Refused at load, so only a manifest changed under us lands here.
                    Some(Err(reason)) => {
                        return text_result(
                            format!("tool `{}`: its command is refused: {reason}", tool.name),
                            true,
                        );
                    }
                    None => {
                        return text_result(
                            format!("tool `{}`: not a shell tool", tool.name),
                            true,
                        );
                    }
                };
                let command = match command {
                    Ok(command) => command,
                    Err(refusal) => {
                        self.record_refusal(tool, &refusal);
                        return text_result(refusal.to_string(), true);
                    }
                };
                let sandbox = match self.data_sandbox(tool, None) {
                    Ok(sandbox) => sandbox,
                    Err(result) => return result,
                };
                match sandbox.run_command(&command).await {
                    Ok(output) => {
                        let mut text = output.stdout;
                        if !output.stderr.is_empty() {
                            text.push_str(&format!("\n[stderr]\n{}", output.stderr));
                        }
                        let failed = output.exit_code != Some(0);
                        if failed {
                            let status = output.exit_code.map_or_else(
                                || "killed by a signal".to_owned(),
                                |c| format!("exit status {c}"),
                            );
                            text.push_str(&format!("\n[{status}]"));
                        }
                        text_result(text, failed)
                    }
                    Err(err) => text_result(err.to_string(), true),
                }
            }
            ToolKind::Http { headers, .. } => {
                let crate::data::Rendered::Http { url } = tool.kind.render(arg) else {
                    return text_result(format!("tool `{}`: not an http tool", tool.name), true);
                };
                if let Some(refusal) = self.refused_secret(tool, &url) {
                    return text_result(refusal, true);
                }
                if arg.is_some_and(|a| {
                    matches!(a.trim(), "." | ".." | "%2e" | "%2E" | "%2e%2e" | "%2E%2E")
                }) {
                    return text_result(
                        format!(
                            "tool `{}`: `arg` may not be a `.` or `..` path segment",
                            tool.name
                        ),
                        true,
                    );
                }
                let sandbox = match self.data_sandbox(tool, Some(&url)) {
                    Ok(sandbox) => sandbox,
                    Err(result) => return result,
                };
                let mut request = Request::get(url.clone());
                request.headers = headers.clone();
                match sandbox.fetch(request).await {
                    Ok(response) => {
                        let body = into_text(response.body);
                        if (200..300).contains(&response.status) {
                            text_result(body, false)
                        } else {
                            text_result(
                                format!("HTTP {} from `{url}`\n{body}", response.status),
                                true,
                            )
                        }
                    }
                    Err(err) => text_result(err.to_string(), true),
                }
            }
            ToolKind::Read { .. } => {
                let crate::data::Rendered::Read { path } = tool.kind.render(arg) else {
                    return text_result(format!("tool `{}`: not a read tool", tool.name), true);
                };
                let sandbox = match self.data_sandbox(tool, None) {
                    Ok(sandbox) => sandbox,
                    Err(result) => return result,
                };
                match sandbox.read(&path).await {
                    Ok(bytes) => text_result(into_text(bytes), false),
                    Err(err) => text_result(err.to_string(), true),
                }
            }
        }
    }

    /// A workspace's or an installed package's http tool that names a
    /// secret: refused (and audited), since a cloned repository or a
    /// published package may not send the user's secrets anywhere, even
    /// once trusted to run (an install refuses such a package already).
    /// Only the user's own tools use them.
    fn refused_secret(&self, tool: &DataTool, url: &str) -> Option<String> {
        let whose = match tool.origin {
            crate::data::DataOrigin::Project => "a workspace's",
            crate::data::DataOrigin::Registry => "an installed package's",
            crate::data::DataOrigin::User | crate::data::DataOrigin::Builtin => return None,
        };
        let (name, _) = tool.kind.secrets().into_iter().next()?;
        let refusal = crate::capability::CapabilityError::denied(
            crate::capability::Capability::Http,
            url,
            format!(
                "secret `{name}` may not be used by {whose} data tool: only your own tools \
                 (in `$ZOT_HOME/tools`) use secrets"
            ),
        );
        self.record_refusal(tool, &refusal);
        Some(refusal.to_string())
    }

    /// Records a refusal made before the sandbox saw the call (an argument
    /// the template refuses) as the sandbox would: one `deny` line.
    fn record_refusal(&self, tool: &DataTool, refusal: &crate::capability::CapabilityError) {
        if let crate::capability::CapabilityError::Denied {
            capability,
            subject,
            reason,
        } = refusal
        {
            self.inner
                .services
                .audit
                .record(crate::audit::AuditRecord::now(
                    format!("data:{}", tool.name),
                    capability.as_str(),
                    subject,
                    crate::audit::Decision::Deny,
                    reason,
                ));
        }
    }

    /// The deny rules naming this data tool, matched against what it will
    /// actually run or read: the model's raw `arg` carries neither a
    /// `command` nor a `path` for the rules to see.
    async fn deny_rendered(&self, tool: &DataTool, subject: Value) -> Option<super::HostError> {
        let subject = crate::session::Interceptable::ToolCall {
            tool_name: tool.name.clone(),
            tool_args: subject,
        };
        let decision = self.deny_rules(&subject).await?;
        let super::Verdict::Block { reason } = decision.verdict else {
            return None;
        };
        let by = decision.decided_by.join(", ");
        self.inner
            .services
            .audit
            .record(crate::audit::AuditRecord::now(
                &by,
                "guard",
                super::describe(&subject),
                crate::audit::Decision::Deny,
                &reason,
            ));
        Some(super::HostError::Blocked {
            tool: tool.name.clone(),
            by,
            reason,
        })
    }

    /// The sandbox a data tool runs in: made once per tool and what it
    /// reaches (its grant depends on nothing else), then reused.
    fn data_sandbox(&self, tool: &DataTool, url: Option<&str>) -> Result<Arc<Sandbox>, ToolResult> {
        let declared = crate::data::tool::declared(&tool.kind, url);
        let key = format!("{}\0{:?}", tool.name, declared);
        let data = self.data();
        let mut cache = data
            .sandboxes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sandbox) = cache.get(&key) {
            return Ok(sandbox.clone());
        }
        let grant = self.inner.policy.grant(&declared);
        let sandbox = Sandbox::new(
            format!("data:{}", tool.name),
            self.inner.services.clone(),
            grant,
            &declared,
        )
        .map(Arc::new)
        .map_err(|err| text_result(format!("tool `{}`: {err}", tool.name), true))?;
        cache.insert(key, sandbox.clone());
        Ok(sandbox)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deny_check_of_long_arguments_is_refused_past_its_deadline() {
        let plugin = crate::data::Plugin::parse(
            r#"{"name":"p","description":"d","deny":[{"tools":["bash"],"commandPattern":"rm\\s+-rf","reason":"no"}]}"#,
            std::path::Path::new("/u/plugins/p.json"),
            crate::data::DataOrigin::User,
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .value;
        let deny = Arc::new(DenyRules::new(&[plugin]));
        let zero = std::time::Duration::ZERO;
        // Short arguments are checked at once: no deadline applies.
        let short = json!({"command": "rm -rf x"});
        assert!(matches!(
            check_deny(&deny, "bash", &short, zero).await,
            DenyCheck::Hit(_)
        ));
        let long = json!({"command": format!("echo {}; rm -rf x", "a ".repeat(40_000))});
        let bytes = long["command"].as_str().map_or(0, str::len);
        assert!(bytes > DENY_INLINE_BYTES);
        assert!(matches!(
            check_deny(&deny, "bash", &long, DENY_CHECK_DEADLINE).await,
            DenyCheck::Hit(_)
        ));
        assert_eq!(
            check_deny(&deny, "bash", &json!({"command": "ls"}), zero).await,
            DenyCheck::Clear
        );
        // A check that cannot end in time (here: no time at all) refuses.
        assert_eq!(
            check_deny(&deny, "bash", &long, zero).await,
            DenyCheck::TooSlow {
                long_arguments: Some(bytes)
            }
        );
    }

    /// A path rule resolves a call's path on the filesystem, where a folder
    /// on a network mount may not answer: that check runs on a blocking
    /// thread held to the deadline, however short the path. Here the one
    /// blocking thread is stuck, as on a mount that hangs: the path's check
    /// is refused at the deadline, while a command rule, which reads no
    /// file, still answers at once.
    #[test]
    fn a_deny_check_that_resolves_paths_is_held_to_its_deadline() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("config/production")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("config/production", ws.join("notes"))
            .unwrap_or_else(|e| panic!("{e}"));
        let plugin = crate::data::Plugin::parse(
            r#"{"name":"p","description":"d","deny":[
              {"tools":["write"],"pathPattern":"^config/production","reason":"no"},
              {"tools":["bash"],"commandPattern":"rm\\s+-rf","reason":"no"}]}"#,
            std::path::Path::new("/u/plugins/p.json"),
            crate::data::DataOrigin::User,
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .value;
        let resolving = Arc::new(DenyRules::new(std::slice::from_ref(&plugin)).resolving_from(&ws));
        let lexical = Arc::new(DenyRules::new(&[plugin]));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let write = json!({"path": "notes/app.yml", "content": "x"});
        let deadline = std::time::Duration::from_millis(200);
        runtime.block_on(async {
            assert!(matches!(
                check_deny(&resolving, "write", &write, deadline).await,
                DenyCheck::Hit(_)
            ));
        });
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck = runtime.spawn_blocking(move || stuck.recv());
        runtime.block_on(async {
            assert_eq!(
                check_deny(&resolving, "write", &write, deadline).await,
                DenyCheck::TooSlow {
                    long_arguments: None
                }
            );
            // A command rule reads no file, nor does a path rule with no
            // workspace to resolve from: both answer at once.
            let command = json!({"command": "rm -rf x"});
            assert!(matches!(
                check_deny(&resolving, "bash", &command, deadline).await,
                DenyCheck::Hit(_)
            ));
            let plain = json!({"path": "config/production/app.yml"});
            assert!(matches!(
                check_deny(&lexical, "write", &plain, deadline).await,
                DenyCheck::Hit(_)
            ));
        });
        let _ = release.send(());
        let _ = runtime.block_on(stuck);
    }

    #[test]
    fn a_workspace_tool_loaded_as_other_text_than_its_trust_hashed_is_named() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let (ws, home) = (
            root.join("ws"),
            crate::home::ZotHome::new(root.join("home")),
        );
        let tool = ws.join(".zot/tools/deploy.json");
        let write = |command: &str| {
            std::fs::create_dir_all(ws.join(".zot/tools")).unwrap_or_else(|e| panic!("{e}"));
            let text = format!(
                r#"{{"name":"deploy","description":"d","kind":"shell","command":"{command}"}}"#
            );
            std::fs::write(&tool, text).unwrap_or_else(|e| panic!("{e}"));
        };
        write("make deploy");
        crate::store::trust::trust_workspace(&home, &ws).unwrap_or_else(|e| panic!("{e}"));
        let policy = crate::policy::Policy::permissive();
        let trusted = crate::store::trust::assess(&policy, &home, &ws);
        let search = DataSearch::new(&ws, home.root());
        assert_eq!(DataState::load(&search, true).check_trust(&trusted), Ok(()));
        // Loaded after a change the assessment did not see.
        write("make deploy-elsewhere");
        let loaded = DataState::load(&search, true);
        assert_eq!(loaded.set.tools.len(), 1);
        assert_eq!(
            loaded.check_trust(&trusted),
            Err(format!(
                "data tool `deploy` comes from the workspace `{}`, whose `{}` is not the content \
                 zotbox checked against your trust (it changed since): review it with `zotbox \
                 trust`, then start it again",
                ws.display(),
                tool.display()
            ))
        );
        // Held (an untrusted workspace's): nothing of it runs, nothing to check.
        assert_eq!(
            DataState::load(&search, false).check_trust(&trusted),
            Ok(())
        );
    }

    #[test]
    fn output_is_capped_with_a_marker() {
        assert_eq!(cap_output("short".to_owned()), "short");
        let long = "é".repeat(DATA_OUTPUT_CAP + 5);
        let capped = cap_output(long);
        assert!(capped.ends_with("\n[truncated: 5 more characters]"));
        assert_eq!(
            capped.chars().filter(|&c| c == 'é').count(),
            DATA_OUTPUT_CAP
        );
    }
}
