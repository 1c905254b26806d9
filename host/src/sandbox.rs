//! One extension's sandbox: its grant applied to the capability layer, audited.
//!
//! [`Sandbox`] is the single place where a capability use is decided. Both
//! front ends call it: the WIT host functions of a wasm guest, and the data
//! tools (which run a declared operation on the user's behalf). Each call is
//! checked against the effective grant (declared ∩ policy), shell commands
//! also pass the guard chain, and every decision — allowed or refused — is
//! one line in the audit log.
//!
//! Rules:
//!
//! - **A refusal is a `deny` line** (`THREATS.md` rule 9), whichever layer
//!   caught it: the grant, the policy, the guard, the jail (cap-std or the
//!   kernel), a request refused as malformed, a capability used before the
//!   workspace is known, a declared variable the policy took away. Only an
//!   allowed use that then failed (a missing file, a network error, a cap
//!   hit) is an `allow` line with `failed: …`.
//! - **No grant reaches a control path** (rule 3): the jail is opened with
//!   [`ControlSources::control_paths`] of its workspace, computed when the
//!   jail is opened (for `zotbox run`, once zot's `hello_ack` names the
//!   workspace).
//! - **A secret is used, never read.** A request may name a secret only by
//!   its placeholder, and only one the grant holds (declared ∩ policy); its
//!   value comes from the [`SecretSource`] the moment the request is sent
//!   (see `capability::http` for where it may go), and every granted value
//!   is redacted from the response and from any error. A placeholder in a
//!   shell command is refused: nothing substitutes it there, and a command
//!   may print what it gets.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::audit::{AuditLog, AuditRecord, Decision};
use crate::capability::fs::{Entry, FsGrant, FsLimits, Jail, Metadata};
use crate::capability::http::{BoundSecret, HttpClient, HttpConfig, HttpGrant, Request, Response};
use crate::capability::shell::{Output, Rendered, ShellGrant, ShellLimits};
use crate::capability::{Capability, CapabilityError};
use crate::discovery::ControlSources;
use crate::policy::Grant;

/// How much of an oversized subject the audit log is given: no more than
/// it keeps of any subject.
const OVERSIZED_HEAD: usize = 1024;

fn command_within_size(command: &str) -> Result<(), CapabilityError> {
    crate::capability::within_size(
        "the command line",
        command.len(),
        crate::capability::MAX_COMMAND_BYTES,
    )
}

/// Asks the guard chain about a shell command before it runs.
#[async_trait::async_trait]
pub trait CommandGuard: Send + Sync {
    /// `Err((who, why))` when the chain blocks `command`, run on behalf of `caller`.
    async fn check_command(&self, caller: &str, command: &str) -> Result<(), (String, String)>;
}

/// Why a secret's value is not available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretUnavailable {
    /// The user never set it.
    NotSet,
    /// The user set it for these extensions only.
    NotFor(Vec<String>),
    /// The store cannot be read (the phrase never quotes its content).
    Unreadable(String),
}

/// Where secrets' values come from: the user's store (`store::secret`).
pub trait SecretSource: Send + Sync {
    /// The value of secret `name` for extension `who`.
    ///
    /// # Errors
    ///
    /// Why there is none for `who`.
    fn value(&self, who: &str, name: &str) -> Result<String, SecretUnavailable>;
}

/// No secrets at all: every one is [`SecretUnavailable::NotSet`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSecrets;

impl SecretSource for NoSecrets {
    fn value(&self, _who: &str, _name: &str) -> Result<String, SecretUnavailable> {
        Err(SecretUnavailable::NotSet)
    }
}

/// What every sandbox of one host shares.
pub struct Services {
    // Known at start for a standalone host; for `zotbox run`, only once zot's
    // `hello_ack` names it (capability calls before that are refused).
    workspace: OnceLock<PathBuf>,
    // Why the workspace is no project (`None`: it is one), once it is known:
    // neither it nor the environment changes after.
    no_project: OnceLock<Option<String>>,
    jail: OnceLock<Result<Arc<Jail>, String>>,
    http: OnceLock<Result<Arc<HttpClient>, String>>,
    http_config: HttpConfig,
    control: ControlSources,
    /// Caps on file reads and writes.
    pub fs_limits: FsLimits,
    /// Caps on shell commands.
    pub shell_limits: ShellLimits,
    /// What the policy says about kernel confinement of shell commands.
    pub confinement: crate::capability::confine::Settings,
    /// Where every decision is recorded.
    pub audit: Arc<AuditLog>,
    /// The guard chain shell commands pass.
    pub guard: Arc<dyn CommandGuard>,
    /// Where secrets' values come from. Default [`NoSecrets`].
    pub secrets: Arc<dyn SecretSource>,
    /// Where granted environment variables come from: the environment of
    /// the `zotbox run` the shared host serves (`None`: this process's).
    environment: Option<Arc<std::collections::HashMap<String, String>>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// Services for the workspace at `workspace` (`None`: set it later with
    /// [`Services::set_workspace`]). The jail and the HTTP client are set up
    /// on first use.
    pub fn new(
        workspace: Option<PathBuf>,
        http_config: HttpConfig,
        audit: Arc<AuditLog>,
        guard: Arc<dyn CommandGuard>,
    ) -> Self {
        let known = OnceLock::new();
        if let Some(workspace) = workspace {
            let _ = known.set(workspace);
        }
        Self {
            workspace: known,
            no_project: OnceLock::new(),
            jail: OnceLock::new(),
            http: OnceLock::new(),
            http_config,
            control: ControlSources::default(),
            fs_limits: FsLimits::default(),
            shell_limits: ShellLimits::default(),
            confinement: crate::capability::confine::Settings::default(),
            audit,
            guard,
            secrets: Arc::new(NoSecrets),
            environment: None,
        }
    }

    /// These services, granting variables from `environment` rather than
    /// this process's own.
    pub fn with_environment(
        mut self,
        environment: Arc<std::collections::HashMap<String, String>>,
    ) -> Self {
        self.environment = Some(environment);
        // The home folder comes from it now.
        self.no_project = OnceLock::new();
        self
    }

    /// The value of variable `name` in the extension's environment.
    fn env_var(&self, name: &str) -> Option<String> {
        match &self.environment {
            Some(environment) => environment.get(name).cloned(),
            None => std::env::var(name).ok(),
        }
    }

    /// Services whose secrets come from `source`.
    pub fn with_secrets(mut self, source: Arc<dyn SecretSource>) -> Self {
        self.secrets = source;
        self
    }

    /// Services whose jail also refuses writes to what `control` names
    /// (the workspace's `.git`, `.zot` and `.shiro` are refused anyway).
    pub fn with_control(mut self, control: ControlSources) -> Self {
        self.control = control;
        self
    }

    /// The workspace root, once known.
    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.get().map(PathBuf::as_path)
    }

    /// These services with the policy's confinement settings, each
    /// command's census written down in `home` while it runs.
    pub fn with_confinement(
        mut self,
        policy: &crate::policy::Policy,
        home: &crate::home::ZotHome,
    ) -> Self {
        self.confinement = confinement_of(policy);
        self.confinement.records = Some(home.census_records());
        self.take_back_abandoned();
        self
    }

    /// Names the workspace root; only the first call has an effect.
    pub fn set_workspace(&self, workspace: PathBuf) {
        if self.workspace.set(workspace).is_ok() {
            self.take_back_abandoned();
        }
    }

    /// Takes back, once the workspace and the records are known, what the
    /// confined commands of a zotbox that died (`SIGKILL`, a crash) left
    /// in it, on a thread of its own: at the start of the next zotbox
    /// there (zot started again), not at its first command only.
    fn take_back_abandoned(&self) {
        let (Some(records), Some(workspace)) = (&self.confinement.records, self.workspace()) else {
            return;
        };
        if !crate::capability::confine::Census::any_recorded(records) {
            return;
        }
        let (records, workspace) = (records.clone(), workspace.to_owned());
        let spawned = std::thread::Builder::new()
            .name("take-back".into())
            .spawn(move || crate::capability::shell::take_back_abandoned(&records, &workspace));
        if let Err(err) = spawned {
            tracing::warn!("cannot take back what earlier commands left: {err}");
        }
    }

    /// The workspace, or a refusal of `capability` on `subject`: nothing
    /// can be used before zot names the workspace.
    fn workspace_or_refuse(
        &self,
        capability: Capability,
        subject: &str,
    ) -> Result<&Path, CapabilityError> {
        let workspace = self.workspace().ok_or_else(|| {
            CapabilityError::denied(
                capability,
                subject,
                "the workspace is not known yet (no `hello_ack` from zot)",
            )
        })?;
        if let Some(why) = self.not_a_project() {
            return Err(CapabilityError::denied(capability, subject, why));
        }
        Ok(workspace)
    }

    /// Why the workspace, once known, is no project an extension may use
    /// (the user's home folder, or what holds it).
    pub(crate) fn not_a_project(&self) -> Option<String> {
        let workspace = self.workspace()?;
        self.no_project
            .get_or_init(|| {
                let home = self.env_var("HOME").filter(|home| !home.is_empty());
                no_project_refusal(workspace, home.as_deref().map(Path::new))
            })
            .clone()
    }

    fn jail(&self, capability: Capability, subject: &str) -> Result<Arc<Jail>, CapabilityError> {
        let workspace = self.workspace_or_refuse(capability, subject)?;
        self.jail
            .get_or_init(|| {
                Jail::open(workspace)
                    .map(|jail| Arc::new(jail.with_control(self.control.control_paths(workspace))))
                    .map_err(|err| {
                        format!("cannot open the workspace `{}`: {err}", workspace.display())
                    })
            })
            .clone()
            .map_err(CapabilityError::Failed)
    }

    fn http(&self) -> Result<Arc<HttpClient>, CapabilityError> {
        self.http
            .get_or_init(|| {
                HttpClient::new(self.http_config.clone())
                    .map(Arc::new)
                    .map_err(|err| err.to_string())
            })
            .clone()
            .map_err(CapabilityError::Failed)
    }
}

/// Why `workspace` is no project an extension may use: [`not_a_project`]
/// for the home folder `env_home` (the extension's `$HOME`) and the one the
/// user database names, should `$HOME` be unset or elsewhere, and
/// [`shared_by_the_session`].
pub(crate) fn no_project_refusal(workspace: &Path, env_home: Option<&Path>) -> Option<String> {
    static PASSWD_HOME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let passwd_home = PASSWD_HOME.get_or_init(|| {
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|user| user.dir)
            .filter(|dir| dir.parent().is_some())
    });
    let workspace = canonical(workspace);
    not_a_project(&workspace, env_home)
        .or_else(|| {
            passwd_home
                .as_deref()
                .and_then(|home| not_a_project(&workspace, Some(home)))
        })
        .or_else(|| shared_by_the_session(&workspace))
}

/// `path` through its links, or as it is when that cannot be read.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

/// Why `workspace` (canonical) is no project an extension may use: it is,
/// or holds, a folder every program of the user's session shares
/// ([`SOCKET_DIRS`](crate::capability::confine::SOCKET_DIRS): `/tmp`, …).
/// The sockets there (the ssh agent's, X11's, D-Bus's) are kept from a
/// confined command by covering those folders, which a workspace is not;
/// and other programs' files there are not the project's.
fn shared_by_the_session(workspace: &Path) -> Option<String> {
    let shared = crate::capability::confine::SOCKET_DIRS
        .iter()
        .map(|dir| canonical(Path::new(dir)))
        .find(|dir| dir.starts_with(workspace))?;
    let shown = crate::text::Shown(&workspace.to_string_lossy()).to_string();
    let what = if shared == workspace {
        format!("`{shown}`, a folder every program of your session shares")
    } else {
        format!(
            "`{shown}`, which holds `{}`, a folder every program of your session shares",
            shared.display()
        )
    };
    Some(format!(
        "the workspace {what}, is not a project: they keep their sockets and files there (the ssh \
         agent's, X11's), so no extension or tool may use it; start zot in a project's folder"
    ))
}

/// Why `workspace` (canonical) is no project an extension may use: it is
/// the user's home folder, or holds it (`/`, `/home`). There a grant of `**` would
/// reach the user's keys and credentials (`~/.ssh`, `~/.aws`) and the files
/// that run code at their next login (`~/.bashrc`, `~/.profile`, `~/bin`):
/// zot run in a terminal that has not changed folder names the home folder
/// as its workspace.
fn not_a_project(workspace: &Path, home: Option<&Path>) -> Option<String> {
    let home = home.map(canonical);
    let holds_home = home
        .as_ref()
        .is_some_and(|home| home.starts_with(workspace));
    if !holds_home && workspace.parent().is_some() {
        return None;
    }
    let what = match home {
        Some(home) if home == workspace => "your home folder".to_owned(),
        _ => "a folder that holds your home folder".to_owned(),
    };
    Some(format!(
        "the workspace `{}` is {what}, not a project: it holds your keys, credentials and the \
         files your shell runs at login, so no extension or tool may use it; start zot in a \
         project's folder",
        crate::text::Shown(&workspace.to_string_lossy())
    ))
}

/// What one extension (or data tool) may do.
#[derive(Debug)]
pub struct Sandbox {
    who: String,
    /// The extension's folder, in its audit records.
    folder: Option<String>,
    services: Arc<Services>,
    grant: Grant,
    fs: FsGrant,
    fs_declared: FsGrant,
    http: HttpGrant,
    http_declared: HttpGrant,
    shell: ShellGrant,
    shell_declared: ShellGrant,
    env_declared: Vec<String>,
    secrets_declared: std::collections::BTreeMap<String, crate::manifest::SecretSpec>,
}

impl Sandbox {
    /// The sandbox of `who` (an extension name, or `data:<tool>`), with its
    /// effective `grant` and the capabilities it `declared`.
    ///
    /// # Errors
    ///
    /// [`CapabilityError::Invalid`] when a declared glob, origin or command
    /// pattern does not parse.
    pub fn new(
        who: impl Into<String>,
        services: Arc<Services>,
        grant: Grant,
        declared: &crate::manifest::Capabilities,
    ) -> Result<Self, CapabilityError> {
        Ok(Self {
            folder: None,
            who: who.into(),
            fs: FsGrant::new(&grant.read, &grant.write)?,
            fs_declared: FsGrant::new(&declared.read, &declared.write)?,
            http: HttpGrant::new(&grant.http)?,
            http_declared: HttpGrant::new(&declared.http)?,
            shell: ShellGrant::new(&grant.shell)?,
            shell_declared: ShellGrant::new(&declared.shell)?,
            env_declared: declared.env.clone(),
            secrets_declared: declared.secrets.clone(),
            grant,
            services,
        })
    }

    /// Who this sandbox belongs to.
    pub fn who(&self) -> &str {
        &self.who
    }

    /// The effective grant.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// The shared services.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The sandbox of an extension in `folder`, which its audit records
    /// name.
    pub fn in_folder(mut self, folder: &Path) -> Self {
        self.folder = Some(folder.display().to_string());
        self
    }

    /// Writes `record` to the audit log as this sandbox's.
    pub fn record(&self, record: AuditRecord) {
        let record = match &self.folder {
            Some(folder) => record.in_folder(folder.clone()),
            None => record,
        };
        self.services.audit.record(record);
    }

    /// Passes `within` on, auditing a refusal for size with the head of
    /// `subject` and its length: no copy, scan or quote of the whole, which
    /// is as long as the guest's memory allows.
    fn refuse_oversized(
        &self,
        capability: Capability,
        subject: &str,
        within: Result<(), CapabilityError>,
    ) -> Result<(), CapabilityError> {
        let Err(err) = within else {
            return Ok(());
        };
        let head = &subject[..subject.floor_char_boundary(OVERSIZED_HEAD)];
        let mut record = AuditRecord::now(
            &self.who,
            capability.as_str(),
            head,
            Decision::Deny,
            err.to_string(),
        );
        record.subject_len = Some(subject.len());
        self.record(record);
        Err(err)
    }

    fn audit<T>(
        &self,
        capability: Capability,
        subject: &str,
        outcome: &Result<T, CapabilityError>,
    ) {
        let (decision, reason) = match outcome {
            Ok(_) => (Decision::Allow, String::new()),
            Err(CapabilityError::Denied { reason, .. }) => (Decision::Deny, reason.clone()),
            // Refused before anything was touched: a path with a NUL or `\`,
            // a header the host manages.
            Err(invalid @ CapabilityError::Invalid(_)) => (Decision::Deny, invalid.to_string()),
            // Allowed, then failed: the use happened, so it is an allow.
            Err(other) => (Decision::Allow, format!("failed: {other}")),
        };
        self.record(AuditRecord::now(
            &self.who,
            capability.as_str(),
            subject,
            decision,
            reason,
        ));
    }

    /// A refusal by the effective grant that the declared grant would have
    /// allowed is the policy's doing: say so, and which rule.
    fn blame_policy(
        &self,
        err: CapabilityError,
        capability: &str,
        declared_allows: bool,
    ) -> CapabilityError {
        match err {
            CapabilityError::Denied {
                capability: cap,
                subject,
                reason,
            } if declared_allows => {
                let rule = self
                    .grant
                    .rows
                    .iter()
                    .find(|row| row.capability == capability)
                    .and_then(|row| row.refused.first())
                    .map_or_else(|| reason.clone(), |refusal| refusal.rule.clone());
                CapabilityError::Denied {
                    capability: cap,
                    subject,
                    reason: format!("declared by the extension but refused by policy: {rule}"),
                }
            }
            other => other,
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        capability: Capability,
        subject: &str,
        work: impl FnOnce(&Jail) -> Result<T, CapabilityError> + Send + 'static,
    ) -> Result<T, CapabilityError> {
        crate::capability::within_size(
            "the path",
            subject.len(),
            crate::capability::MAX_PATH_BYTES,
        )?;
        let jail = self.services.jail(capability, subject)?;
        tokio::task::spawn_blocking(move || work(&jail))
            .await
            .map_err(|err| CapabilityError::Failed(format!("the file task failed: {err}")))?
    }

    /// Reads a workspace file.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused, missing, too large, or failed.
    pub async fn read(&self, path: &str) -> Result<Vec<u8>, CapabilityError> {
        let (grant, limits, owned) = (self.fs.clone(), self.services.fs_limits, path.to_owned());
        let mut outcome = self
            .blocking(Capability::FsRead, path, move |jail| {
                jail.read(&grant, &limits, &owned)
            })
            .await;
        if let Err(err) = outcome {
            let declared_allows =
                self.fs_declared.admits(false, path) && !self.fs.admits(false, path);
            outcome = Err(self.blame_policy(err, "fs-read", declared_allows));
        }
        self.audit(Capability::FsRead, path, &outcome);
        outcome
    }

    /// Creates or replaces a workspace file.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused, too large, or failed.
    pub async fn write(&self, path: &str, contents: Vec<u8>) -> Result<(), CapabilityError> {
        let (grant, limits, owned) = (self.fs.clone(), self.services.fs_limits, path.to_owned());
        let mut outcome = self
            .blocking(Capability::FsWrite, path, move |jail| {
                jail.write(&grant, &limits, &owned, &contents)
            })
            .await;
        if let Err(err) = outcome {
            // Only the grant differs; a write the declared grant would allow is the policy's refusal.
            let declared_allows = err.is_denied()
                && self.fs_declared.admits(true, path)
                && !self.fs.admits(true, path);
            outcome = Err(self.blame_policy(err, "fs-write", declared_allows));
        }
        self.audit(Capability::FsWrite, path, &outcome);
        outcome
    }

    /// Lists a workspace directory.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused, missing, or failed.
    pub async fn list(&self, path: &str) -> Result<Vec<Entry>, CapabilityError> {
        let (grant, owned) = (self.fs.clone(), path.to_owned());
        let outcome = self
            .blocking(Capability::FsRead, path, move |jail| {
                jail.list(&grant, &owned)
            })
            .await;
        self.audit(Capability::FsRead, path, &outcome);
        outcome
    }

    /// Describes a workspace path.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused, missing, or failed.
    pub async fn stat(&self, path: &str) -> Result<Metadata, CapabilityError> {
        let (grant, owned) = (self.fs.clone(), path.to_owned());
        let outcome = self
            .blocking(Capability::FsRead, path, move |jail| {
                jail.stat(&grant, &owned)
            })
            .await;
        self.audit(Capability::FsRead, path, &outcome);
        outcome
    }

    /// Sends an HTTPS request to a granted host, with the placeholders of
    /// granted secrets replaced where the rules allow.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused, too large, timed out, or failed; a
    /// secret not granted is refused, one the user has not set failed.
    pub async fn fetch(&self, request: Request) -> Result<Response, CapabilityError> {
        let headers: usize = request
            .headers
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        self.refuse_oversized(
            Capability::Http,
            &request.url,
            crate::capability::within_size(
                "the URL",
                request.url.len(),
                crate::capability::MAX_URL_BYTES,
            )
            .and_then(|()| {
                crate::capability::within_size(
                    "the request's header block",
                    headers,
                    crate::capability::MAX_HEADER_BYTES,
                )
            }),
        )?;
        let url = request.url.clone();
        let mut bound = Vec::new();
        let mut outcome = match self.bind_secrets(&request) {
            Ok((secrets, used)) => {
                let sent = match self.services.http() {
                    Ok(client) => {
                        client
                            .fetch_with_secrets(&self.http, request, &secrets)
                            .await
                    }
                    Err(err) => Err(err),
                };
                // What the guest gets back is cleaned of the secrets this
                // request uses, no other: cleaning every one would tell a
                // guest which of its guesses, written anywhere, is a value.
                let in_use: Vec<BoundSecret> = secrets
                    .iter()
                    .filter(|secret| used.iter().any(|name| name == secret.name()))
                    .cloned()
                    .collect();
                bound = secrets;
                sent.map_err(|err| redact_error(&in_use, err))
            }
            Err(err) => Err(err),
        };
        if let Err(err) = outcome {
            let declared_allows = self.http_declared.admits(&url) && !self.http.admits(&url);
            outcome = Err(self.blame_policy(err, "http", declared_allows));
        }
        // The log holds no value, not even one the guest wrote as a guess.
        let logged = outcome
            .as_ref()
            .map(|_| ())
            .map_err(|err| redact_error(&bound, err.clone()));
        self.audit(
            Capability::Http,
            &crate::capability::http::redact(&bound, &url),
            &logged,
        );
        outcome
    }

    /// Every granted secret the user has set, bound to its origins, and the
    /// names of those `request` uses; a refusal when it uses one not
    /// granted, or a failure when it uses one that is not set.
    fn bind_secrets(
        &self,
        request: &Request,
    ) -> Result<(Vec<BoundSecret>, Vec<String>), CapabilityError> {
        let granted = &self.grant.secrets;
        // A name not granted passes the query rule here, to be refused
        // below for what it is.
        let used = crate::capability::http::secrets_used(request, |name| {
            granted.get(name).is_none_or(|spec| spec.query)
        })?;
        let refuse = |rule: String| CapabilityError::denied(Capability::Http, &request.url, rule);
        for name in &used {
            if granted.contains_key(name) {
                continue;
            }
            return Err(refuse(match self.secrets_declared.get(name) {
                Some(spec) => {
                    let item = crate::policy::secret_item(name, spec);
                    let rule = self
                        .grant
                        .policy_refusal("secrets", &item)
                        .unwrap_or("not granted");
                    format!(
                        "secret `{name}` is declared by the extension but refused by policy: {rule}"
                    )
                }
                None => format!(
                    "secret `{name}` is not declared in the extension's manifest \
                     (`capabilities.secrets`)"
                ),
            }));
        }
        let mut bound = Vec::new();
        for (name, spec) in granted {
            let value = match self.services.secrets.value(&self.who, name) {
                Ok(value) => value,
                Err(_) if !used.contains(name) => continue,
                Err(SecretUnavailable::NotSet) => {
                    return Err(CapabilityError::Failed(format!(
                        "secret `{name}` is not set: run `zotbox secret set {name}`"
                    )));
                }
                Err(SecretUnavailable::NotFor(allowed)) => {
                    return Err(refuse(format!(
                        "secret `{name}` is set for {} only, not for `{}`: run `zotbox secret \
                         set {name} --extension {}` to let it use one",
                        allowed
                            .iter()
                            .map(|who| format!("`{who}`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        self.who,
                        self.who
                    )));
                }
                Err(SecretUnavailable::Unreadable(why)) => {
                    return Err(CapabilityError::Failed(format!(
                        "secret `{name}` cannot be read: {why}"
                    )));
                }
            };
            bound.push(BoundSecret::new(name, value, &spec.http, spec.query)?);
        }
        Ok((bound, used))
    }

    /// Runs a shell command the grant allows, once the guard chain agrees.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`]: refused by the grant or the guard, timed out, or failed.
    pub async fn run_shell(&self, command: &str) -> Result<Output, CapabilityError> {
        self.refuse_oversized(Capability::Shell, command, command_within_size(command))?;
        self.run_command(&Rendered::shell(command)).await
    }

    /// Runs a rendered command (a data tool's `execve` argv, or a line for
    /// `sh -c`): the grant and the guard chain judge its shown line.
    ///
    /// # Errors
    ///
    /// As [`Sandbox::run_shell`].
    pub async fn run_command(&self, command: &Rendered) -> Result<Output, CapabilityError> {
        self.refuse_oversized(
            Capability::Shell,
            &command.shown,
            command_within_size(&command.shown),
        )?;
        let outcome = self.shell_unaudited(command).await;
        self.audit(Capability::Shell, &command.shown, &outcome);
        outcome
    }

    async fn shell_unaudited(&self, rendered: &Rendered) -> Result<Output, CapabilityError> {
        let command = rendered.shown.as_str();
        refuse_secret_in_shell(command)?;
        if let Err(err) = self.shell.allows(command) {
            let declared_allows = self.shell_declared.allows(command).is_ok();
            return Err(self.blame_policy(err, "shell", declared_allows));
        }
        if let Err((by, why)) = self.services.guard.check_command(&self.who, command).await {
            return Err(CapabilityError::denied(
                Capability::Shell,
                command,
                format!("blocked by {by}: {why}"),
            ));
        }
        let control = self
            .services
            .jail(Capability::Shell, command)?
            .control()
            .clone();
        crate::capability::shell::run(
            rendered,
            self.services
                .workspace_or_refuse(Capability::Shell, command)?,
            &self.services.shell_limits,
            &self.services.confinement,
            &control,
        )
        .await
    }

    /// For a native extension: each granted secret that declares an `env`
    /// variable, as `(variable, value)`, read from the store now. Each is
    /// an `allow` line (`env`, subject `secret NAME as VAR`, never the value);
    /// one the policy took away, or the user set for other extensions only,
    /// a `deny`; one not set is skipped with a warning naming the command.
    pub fn secret_env(&self) -> Vec<(String, String)> {
        let record = |subject: String, decision: Decision, reason: String| {
            self.record(AuditRecord::now(
                &self.who,
                Capability::Env.as_str(),
                &subject,
                decision,
                reason,
            ));
        };
        let mut env = Vec::new();
        for (name, spec) in &self.secrets_declared {
            let Some(variable) = &spec.env else {
                continue;
            };
            let subject = format!("secret {name} as {variable}");
            if !self.grant.secrets.contains_key(name) {
                let item = crate::policy::secret_item(name, spec);
                let rule = self
                    .grant
                    .policy_refusal("secrets", &item)
                    .unwrap_or("not granted");
                record(
                    subject,
                    Decision::Deny,
                    format!("declared by the extension but refused by policy: {rule}"),
                );
                continue;
            }
            match self.services.secrets.value(&self.who, name) {
                Ok(value) => {
                    record(subject, Decision::Allow, String::new());
                    env.push((variable.clone(), value));
                }
                Err(SecretUnavailable::NotSet) => tracing::warn!(
                    "extension `{}`: secret `{name}` is not set, so `{variable}` is not given: \
                     run `zotbox secret set {name}`",
                    self.who
                ),
                Err(SecretUnavailable::NotFor(_)) => record(
                    subject,
                    Decision::Deny,
                    format!(
                        "secret `{name}` is set for other extensions only: run `zotbox secret \
                         set {name} --extension {}` to let it use one",
                        self.who
                    ),
                ),
                Err(SecretUnavailable::Unreadable(why)) => {
                    tracing::warn!("extension `{}`: secret `{name}`: {why}", self.who);
                }
            }
        }
        env
    }

    /// The environment variables granted, with their values from the
    /// extension's environment. Each is an `allow` line; each declared name the policy
    /// took away, and each name of a grant that does not parse, a `deny`.
    pub fn env(&self) -> Vec<(String, String)> {
        let deny = |name: &str, reason: String| {
            self.record(AuditRecord::now(
                &self.who,
                Capability::Env.as_str(),
                name,
                Decision::Deny,
                reason,
            ));
        };
        for name in &self.env_declared {
            if !self.grant.env.contains(name) {
                let rule = self
                    .grant
                    .policy_refusal("env", name)
                    .unwrap_or("not granted");
                deny(
                    name,
                    format!("declared by the extension but refused by policy: {rule}"),
                );
            }
        }
        let granted =
            crate::capability::granted_env(&self.grant.env, |name| self.services.env_var(name));
        let granted = granted.unwrap_or_else(|err| {
            tracing::warn!("{}: {err}; no environment granted", self.who);
            for name in &self.grant.env {
                deny(name, format!("no environment granted: {err}"));
            }
            Vec::new()
        });
        for (name, _) in &granted {
            self.record(AuditRecord::now(
                &self.who,
                Capability::Env.as_str(),
                name,
                Decision::Allow,
                "",
            ));
        }
        granted
    }
}

/// A placeholder in a shell command is refused: the host never puts a
/// value there (a command can print what it gets), and a command that
/// looks like it uses a secret and silently does not helps no one.
fn refuse_secret_in_shell(command: &str) -> Result<(), CapabilityError> {
    if !command.contains(crate::capability::http::PLACEHOLDER_OPEN) {
        return Ok(());
    }
    let which = match crate::capability::http::placeholder_names(command) {
        Ok(names) => names
            .first()
            .map_or_else(|| "a secret".to_owned(), |name| format!("secret `{name}`")),
        Err(_) => "a secret".to_owned(),
    };
    Err(CapabilityError::denied(
        Capability::Shell,
        command,
        format!(
            "{which} may not be used in a shell command: secrets are only put into http \
             requests to the origins they are bound to"
        ),
    ))
}

/// `err` with every value of `secrets` redacted from its text.
fn redact_error(secrets: &[BoundSecret], err: CapabilityError) -> CapabilityError {
    if secrets.is_empty() {
        return err;
    }
    let clean = |text: String| crate::capability::http::redact(secrets, &text);
    match err {
        CapabilityError::Denied {
            capability,
            subject,
            reason,
        } => CapabilityError::Denied {
            capability,
            subject: clean(subject),
            reason: clean(reason),
        },
        CapabilityError::NotFound(what) => CapabilityError::NotFound(clean(what)),
        CapabilityError::TooLarge { what, limit } => CapabilityError::TooLarge {
            what: clean(what),
            limit,
        },
        CapabilityError::Timeout { what, ms } => CapabilityError::Timeout {
            what: clean(what),
            ms,
        },
        CapabilityError::Invalid(what) => CapabilityError::Invalid(clean(what)),
        CapabilityError::Failed(what) => CapabilityError::Failed(clean(what)),
    }
}

/// The confinement settings `policy` implies.
pub fn confinement_of(policy: &crate::policy::Policy) -> crate::capability::confine::Settings {
    crate::capability::confine::Settings {
        shell_network: policy.shell_network(),
        required_by: policy.confinement_required_by().map(Path::to_owned),
        records: None,
    }
}

/// The sandbox an extension runs in under `policy`: for a wasm guest, its
/// grant (declared ∩ policy); for a native extension, none. A native
/// extension the policy refuses gets the reason instead. The standalone
/// host and `zotbox run` both start extensions through this (and take their
/// limits from [`crate::policy::Policy::limits`]).
///
/// # Errors
///
/// Why the extension may not run: refused by policy, or capabilities that
/// do not parse.
pub fn confine(
    policy: &crate::policy::Policy,
    services: &Arc<Services>,
    manifest: &crate::manifest::Manifest,
) -> Result<Option<Arc<Sandbox>>, String> {
    match manifest.program {
        // Never started; its tools each get a sandbox of their own.
        crate::manifest::Program::Data => Ok(None),
        crate::manifest::Program::Native { .. } => match policy.native_refused_by() {
            Some(path) => Err(format!(
                "native extensions are refused by policy `{}` (`native_extensions: false`)",
                path.display()
            )),
            // A native extension is not sandboxed: its sandbox only hands
            // it the secrets it declared as variables ([`Sandbox::secret_env`]).
            None if manifest.raw.capabilities.secrets.is_empty() => Ok(None),
            None => {
                let declared = crate::manifest::Capabilities {
                    secrets: manifest.raw.capabilities.secrets.clone(),
                    ..crate::manifest::Capabilities::default()
                };
                let grant = policy.grant(&declared);
                let sandbox = Sandbox::new(manifest.name(), services.clone(), grant, &declared)
                    .map_err(unparsed_capabilities)?
                    .in_folder(&manifest.dir);
                Ok(Some(Arc::new(sandbox)))
            }
        },
        crate::manifest::Program::Wasm { .. } => {
            let declared = &manifest.raw.capabilities;
            let grant = policy.grant(declared);
            for row in &grant.rows {
                for refusal in &row.refused {
                    tracing::info!(
                        "extension `{}`: {} `{}` not granted: {}",
                        manifest.name(),
                        row.capability,
                        refusal.item,
                        refusal.rule
                    );
                }
            }
            let sandbox = Sandbox::new(manifest.name(), services.clone(), grant, declared)
                .map_err(unparsed_capabilities)?
                .in_folder(&manifest.dir);
            Ok(Some(Arc::new(sandbox)))
        }
    }
}

/// Why a manifest's capabilities cannot be built into a sandbox: the
/// problem as the manifest's reader needs it, without the "invalid
/// request" a guest's malformed request is told.
fn unparsed_capabilities(err: CapabilityError) -> String {
    match err {
        CapabilityError::Invalid(problem) => format!("its capabilities do not parse: {problem}"),
        other => format!("its capabilities do not parse: {other}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn the_home_folder_and_what_holds_it_are_no_project() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let home = root.join("users/me");
        std::fs::create_dir_all(home.join("code/app")).unwrap();
        symlink(&home, root.join("link-to-home")).unwrap();
        let why = |ws: &Path| no_project_refusal(ws, Some(&home));
        // Attack: zot run where a new terminal starts, or above it.
        let refused = |ws: &Path, what: &str| {
            format!(
                "the workspace `{}` is {what}, not a project: it holds your keys, credentials \
                 and the files your shell runs at login, so no extension or tool may use it; \
                 start zot in a project's folder",
                ws.display()
            )
        };
        assert_eq!(why(&home), Some(refused(&home, "your home folder")));
        assert_eq!(
            why(&root.join("link-to-home")),
            Some(refused(&home, "your home folder"))
        );
        assert_eq!(
            why(&root.join("users")),
            Some(refused(
                &root.join("users"),
                "a folder that holds your home folder"
            ))
        );
        assert_eq!(
            no_project_refusal(Path::new("/"), None),
            Some(refused(
                Path::new("/"),
                "a folder that holds your home folder"
            ))
        );
        // Control: a project, in the home folder or beside it.
        assert_eq!(why(&home.join("code/app")), None);
        assert_eq!(why(&home.join("code")), None);
        assert_eq!(
            why(&root),
            Some(refused(&root, "a folder that holds your home folder"))
        );
        assert_eq!(no_project_refusal(&home.join("code"), None), None);
        // With `$HOME` unset or elsewhere, the home folder the user database
        // names still counts.
        let user = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("this user in the user database");
        assert_eq!(
            no_project_refusal(&user.dir, None),
            Some(refused(
                &user.dir.canonicalize().unwrap(),
                "your home folder"
            ))
        );
        assert_eq!(no_project_refusal(&home.join("code"), None), None);
        // Attack: zot run in `/tmp`, where the ssh agent's and X11's sockets
        // lie, which the covers of a confined command would not hide.
        let shared = |ws: &str, what: &str| {
            format!(
                "the workspace `{ws}`{what}, is not a project: they keep their sockets and files \
                 there (the ssh agent's, X11's), so no extension or tool may use it; start zot in \
                 a project's folder"
            )
        };
        let tmp_dir = Path::new("/tmp").canonicalize().unwrap();
        let elsewhere = Path::new("/nonexistent-home");
        assert_eq!(
            no_project_refusal(&tmp_dir, Some(elsewhere)),
            Some(shared(
                &tmp_dir.display().to_string(),
                ", a folder every program of your session shares"
            ))
        );
        let var = Path::new("/var").canonicalize().unwrap();
        let var_tmp = Path::new("/var/tmp").canonicalize().unwrap();
        assert_eq!(
            no_project_refusal(&var, Some(elsewhere)),
            Some(shared(
                &var.display().to_string(),
                &format!(
                    ", which holds `{}`, a folder every program of your session shares",
                    var_tmp.display()
                )
            ))
        );
        // Control: a project below `/tmp` (the covers hide the rest of it).
        assert_eq!(no_project_refusal(&root, Some(elsewhere)), None);
    }

    #[test]
    fn control_sources_name_every_folder_that_decides_grants_or_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap().join("ws");
        let home = ws.join("home");
        for dir in [
            "home/extensions",
            "tools/linked",
            "proj",
            "dev/x",
            ".zot/extensions",
        ] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        // A user extension installed as a link to a folder in the workspace,
        // whose native program is a file beside its manifest.
        symlink(ws.join("tools/linked"), home.join("extensions/linked")).unwrap();
        std::fs::write(
            ws.join("tools/linked/extension.json"),
            r#"{"name":"linked","exec":"./run.sh"}"#,
        )
        .unwrap();
        // A project extension linked from elsewhere in the workspace.
        symlink("../../proj", ws.join(".zot/extensions/proj")).unwrap();
        // An explicit extension named by its manifest file.
        let sources = ControlSources::new(&home, &[ws.join("dev/x/extension.json")]);
        let shown: Vec<(String, bool)> = sources
            .control_paths(&ws)
            .paths()
            .iter()
            .map(|path| (path.shown(), path.secret))
            .collect();
        let shown: Vec<(&str, bool)> = shown.iter().map(|(p, s)| (p.as_str(), *s)).collect();
        assert_eq!(
            shown,
            [
                ("dev/x/", false),
                // Not even read: the user's secrets and keys, zot's credentials.
                ("home/", true),
                ("home/extensions/", false),
                ("proj/", false),
                ("tools/linked/", false),
                ("tools/linked/run.sh", false)
            ]
        );
        // Without a home and with nothing inside, only the names remain.
        let none = ControlSources::default().control_paths(&ws.join("dev"));
        assert_eq!(none.paths(), &[][..]);
    }

    #[test]
    fn a_workspace_inside_a_repository_s_folder_is_a_control_path_whole() {
        // zot started in a bare repository's `hooks/` (a server's
        // `site.git`): its hooks run on the next push, whatever the name.
        let tmp = tempfile::tempdir().unwrap();
        let bare = tmp.path().canonicalize().unwrap().join("site.git");
        for folder in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(bare.join(folder)).unwrap();
        }
        std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let control = ControlSources::default().control_paths(&bare.join("hooks"));
        let shown: Vec<(String, String)> = control
            .paths()
            .iter()
            .map(|path| (path.shown(), path.what.clone()))
            .collect();
        assert_eq!(
            shown,
            [(
                ".".to_owned(),
                "a repository: git runs what its config and hooks name".to_owned()
            )]
        );
        // Control: a folder beside it, with no `HEAD`, is no repository.
        std::fs::remove_file(bare.join("HEAD")).unwrap();
        let control = ControlSources::default().control_paths(&bare.join("hooks"));
        assert_eq!(control.paths(), &[][..]);
    }
}
