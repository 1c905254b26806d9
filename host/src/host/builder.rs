//! [`HostBuilder`]: the host's settings, with zot's defaults.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use super::{Host, Inner, RestartPolicy, Settings};
use crate::discovery::SearchPath;
use crate::event::HostEvent;
use crate::home::ZotHome;
use crate::session::{FailMode, SessionConfig};

/// Host events kept for a subscriber that falls behind.
const EVENT_BACKLOG: usize = 1024;

/// Builds a [`Host`].
///
/// Defaults: the workspace is the current directory; `$ZOT_HOME` as zot
/// resolves it; no explicit extensions; zot's timings (hello 10 s, ready
/// idle 250 ms, tool call 60 s, intercept 5 s failing open, shutdown 2 s +
/// 1 s); the default [`RestartPolicy`]; `hello_ack` reports zot version
/// `zotbox-<version>`, provider and model `none`.
#[derive(Debug, Clone)]
pub struct HostBuilder {
    workspace: Option<PathBuf>,
    home: Option<ZotHome>,
    explicit: Vec<PathBuf>,
    session: SessionConfig,
    restart: RestartPolicy,
    zot_version: String,
    provider: String,
    model: String,
    // Made with the builder, so a caller can subscribe before the start
    // (first compiles happen while the host is built).
    events: broadcast::Sender<HostEvent>,
    policy: Option<crate::policy::Policy>,
    run_extensions: bool,
    compiler: Option<PathBuf>,
}

impl Default for HostBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// The host could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No `$ZOT_HOME` given and none can be derived.
    #[error("cannot find zot's home: set `ZOT_HOME` or `HOME`, or pass a zot home explicitly")]
    NoHome,
    /// A policy file is unreadable or invalid.
    #[error(transparent)]
    Policy(#[from] crate::user_file::FileError),
    /// The workspace folder is unusable.
    #[error("workspace `{}`: {error}", path.display())]
    Workspace {
        /// The folder.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

impl HostBuilder {
    /// A builder with the defaults above.
    pub fn new() -> Self {
        Self {
            workspace: None,
            home: None,
            explicit: Vec::new(),
            session: SessionConfig::default(),
            restart: RestartPolicy::default(),
            zot_version: concat!("zotbox-", env!("CARGO_PKG_VERSION")).to_owned(),
            provider: "none".to_owned(),
            model: "none".to_owned(),
            events: broadcast::channel(EVENT_BACKLOG).0,
            policy: None,
            run_extensions: true,
            compiler: None,
        }
    }

    /// Compiles each wasm program not compiled before in a child process of
    /// the zotbox executable `zotbox`, under the policy's memory cap (see
    /// [`Launcher::with_compiler_process`](crate::runtime::Launcher::with_compiler_process)).
    /// Without this, first compiles run in the embedding process, uncapped.
    pub fn compiler_process(mut self, zotbox: impl Into<PathBuf>) -> Self {
        self.compiler = Some(zotbox.into());
        self
    }

    /// With `false`, no extension is discovered or started: the host serves
    /// only the data side (data tools, refusal plugins, skills). `zotbox
    /// serve` uses this, since zot runs the extensions itself.
    pub fn run_extensions(mut self, run: bool) -> Self {
        self.run_extensions = run;
        self
    }

    /// Uses `policy` instead of reading the system and user policy files.
    pub fn policy(mut self, policy: crate::policy::Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Subscribes to the events of the host this builder builds, from the
    /// start on: unlike [`Host::subscribe`], this also sees what happens
    /// while it starts (a first compile, an extension failing to start).
    pub fn subscribe(&self) -> broadcast::Receiver<HostEvent> {
        self.events.subscribe()
    }

    /// The project root: `cwd` in `hello_ack`, and where `.zot/` is searched.
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// zot's home folder (`$ZOT_HOME`).
    pub fn zot_home(mut self, path: impl Into<PathBuf>) -> Self {
        self.home = Some(ZotHome::new(path));
        self
    }

    /// Loads the extension at `path` (a folder or its `extension.json`)
    /// ahead of discovered ones. Repeatable.
    pub fn extension(mut self, path: impl Into<PathBuf>) -> Self {
        self.explicit.push(path.into());
        self
    }

    /// Replaces every session timing at once.
    pub fn session_config(mut self, config: SessionConfig) -> Self {
        self.session = config;
        self
    }

    /// Deadline of the first frame.
    pub fn hello_timeout(mut self, timeout: Duration) -> Self {
        self.session.hello_timeout = timeout;
        self
    }

    /// Deadline of a tool call or command (a manifest's limit overrides it).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.session.call_timeout = timeout;
        self
    }

    /// Deadline of an intercept answer.
    pub fn intercept_timeout(mut self, timeout: Duration) -> Self {
        self.session.intercept_timeout = timeout;
        self
    }

    /// What a missed intercept means.
    pub fn intercept_failure(mut self, mode: FailMode) -> Self {
        self.session.intercept_failure = mode;
        self
    }

    /// When crashed extensions are restarted.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.restart = policy;
        self
    }

    /// `zot_version` in `hello_ack`.
    pub fn zot_version(mut self, version: impl Into<String>) -> Self {
        self.zot_version = version.into();
        self
    }

    /// `provider` in `hello_ack`.
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// `model` in `hello_ack`.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Discovers and starts every enabled extension, in parallel, and
    /// returns once each has become ready or failed. An extension that fails
    /// does not fail the build: `list` shows why.
    ///
    /// # Errors
    ///
    /// [`BuildError`] when the workspace or home cannot be determined.
    pub async fn build(self) -> Result<Host, BuildError> {
        let workspace = match self.workspace {
            Some(path) => path,
            None => std::env::current_dir().map_err(|error| BuildError::Workspace {
                path: PathBuf::from("."),
                error,
            })?,
        };
        let workspace =
            std::fs::canonicalize(&workspace).map_err(|error| BuildError::Workspace {
                path: workspace,
                error,
            })?;
        let home = self
            .home
            .or_else(ZotHome::from_env)
            .ok_or(BuildError::NoHome)?;
        let policy = match self.policy {
            Some(policy) => policy,
            None => crate::policy::Policy::load_for(&home)?,
        };
        let audit = std::sync::Arc::new(crate::audit::AuditLog::open(&home.audit_log()));
        let http_config = policy.http_config();
        let control = crate::discovery::ControlSources::new(home.root(), &self.explicit);
        // The control paths only for a confined native extension's jail
        // (the capability layer finds its own when first used).
        let confined = crate::runtime::native::NativeConfinement::wanted(&policy);
        let native = crate::runtime::native::NativeConfinement::from_policy(
            &policy,
            confined.then(|| (workspace.clone(), control.control_paths(&workspace))),
            &home,
        );
        let events = self.events;
        let mut launcher = crate::runtime::Launcher::new(home.clone())
            .with_events(events.clone())
            .with_native_confinement(native);
        if let Some(zotbox) = self.compiler {
            launcher = launcher.with_compiler_process(zotbox, policy.compile_memory_mb());
        }
        let (stop, _) = watch::channel(false);
        let host = Host {
            inner: std::sync::Arc::new_cyclic(|weak| Inner {
                services: std::sync::Arc::new(
                    crate::sandbox::Services::new(
                        Some(workspace.clone()),
                        http_config,
                        audit,
                        std::sync::Arc::new(super::data_tools::HostGuard(weak.clone())),
                    )
                    .with_control(control)
                    .with_confinement(&policy, &home)
                    .with_secrets(std::sync::Arc::new(
                        crate::store::secret::SecretStore::new(&home),
                    )),
                ),
                policy,
                data: std::sync::RwLock::default(),
                workspace: std::sync::RwLock::new(super::WorkspaceView::before_start(&workspace)),
                settings: Settings {
                    search: SearchPath {
                        explicit: self.explicit,
                        workspace,
                        home: home.clone(),
                    },
                    run_extensions: self.run_extensions,
                    session: self.session,
                    restart: self.restart,
                    zot_version: self.zot_version,
                    provider: self.provider,
                    model: self.model,
                },
                launcher,
                events,
                registry: Mutex::new(super::Registry::default()),
                stop: Mutex::new(stop),
                lifecycle: tokio::sync::Mutex::new(()),
            }),
        };
        host.start_all().await;
        Ok(host)
    }
}
