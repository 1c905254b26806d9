//! Team and user policy: ceilings on what any extension may be granted.
//!
//! A policy file is JSON. The system-wide one (`/etc/zotbox/policy.json`, or
//! `$ZOTBOX_SYSTEM_POLICY`) is read first; the user's
//! (`$ZOT_HOME/policy.json`) can only narrow it: booleans must both allow,
//! lists must both contain, limits take the smaller value, and a closed
//! intercept failure mode wins. An extension's effective grant is what it
//! declared ∩ what every policy layer allows; one that declares more still
//! loads, with the smaller grant, and `zotbox policy explain` shows the
//! difference.
//!
//! ```json
//! {
//!   "native_extensions": false,
//!   "http": ["https://api.open-meteo.com", "https://*.example.com"],
//!   "fs_write": false,
//!   "shell": false,
//!   "env": ["LANG", "TZ"],
//!   "events": ["tool_call"],
//!   "rewrite": [],
//!   "secrets": ["WEATHER_KEY"],
//!   "max_memory_mb": 256,
//!   "max_tool_timeout_ms": 30000,
//!   "max_registrations": 64,
//!   "max_description_bytes": 2048,
//!   "max_schema_bytes": 16384,
//!   "max_compile_memory_mb": 2048,
//!   "intercept_failure": "closed",
//!   "require_approval": true,
//!   "extra_root_certificates": ["/etc/ssl/corp-ca.pem"],
//!   "workspace_trust": "ask",
//!   "confine_native": true,
//!   "require_confinement": true,
//!   "shell_network": false,
//!   "registries": [{"url": "https://ext.example.com/index.json", "keys": ["RWQ…"]}],
//!   "publishers": ["RWQ…"],
//!   "require_signature": true
//! }
//! ```
//!
//! Every key is optional; an absent key sets no ceiling. A key the host
//! does not know, or anything after the JSON object, makes the file fail to
//! load: a misspelt ceiling (`"Shell": false`) silently not applying would
//! fail open, so the host refuses to start instead, naming the key and the
//! keys it knows.
//!
//! Three keys only ever tighten, whichever layer sets them:
//! `workspace_trust` (the stricter of the layers wins, and the user file
//! cannot go below the system's setting or the default `ask`),
//! `confine_native` and `require_confinement` (either layer's `true` holds).
//! `shell_network` is a switch like `shell`: network for shell commands
//! needs one layer to grant it and none to refuse it. Root certificates from
//! the user file apply only when there is no system policy, or the system
//! policy says `"user_root_certificates": true`.
//!
//! # Registries and publishers
//!
//! - `registries`: the registries extensions are installed from, each an
//!   `https://` URL of its index and the public keys (minisign base64 lines)
//!   that may sign that index. The layers' lists add up, system first; for
//!   a URL both layers list, the system's keys alone count (a user file
//!   cannot add a key to a registry the team configured). A URL that is not
//!   `https://`, or a key that does not parse, makes the file fail to load.
//! - `publishers`: the public keys trusted to sign extension archives. One
//!   layer setting it: that set. Both: the **intersection** (the system
//!   list is a ceiling the user can only narrow); a key the user lists
//!   outside the system's list is refused as "not among the allowed
//!   publishers" of the system file. Under a system `publishers` list, an
//!   unsigned entry is refused too: it has no publisher among the allowed.
//! - `require_signature`: refuse unsigned registry entries. It only
//!   tightens: either layer's `true` holds, a user `false` changes nothing.
//! - `native_extensions: false` also refuses native registry entries.
//!
//! [`Policy::registries`] and [`Policy::publisher_rules`] are the merged view.

use crate::user_file::FileError;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capability::http::Origin;
use crate::home::ZotHome;
use crate::manifest::Capabilities;

/// The system-wide policy file, unless `$ZOTBOX_SYSTEM_POLICY` names another.
pub const SYSTEM_POLICY: &str = "/etc/zotbox/policy.json";
/// The largest policy file read (a real one is a few KiB).
const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// What one policy file says. Every field is a ceiling; `None` sets none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct PolicyFile {
    /// Whether native (unsandboxed) extensions may run at all. Default: yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_extensions: Option<bool>,
    /// HTTPS origins an extension may be granted (`https://host[:port]`,
    /// `*.domain` allowed; no port means 443, as in a grant). Empty allows
    /// none. Default: whatever is declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<Vec<String>>,
    /// Whether any extension may write workspace files. Default: yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_write: Option<bool>,
    /// Whether any extension may run shell commands. Default: yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<bool>,
    /// Environment variables an extension may be granted. Default: any declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    /// Events an extension may be granted to see and intercept, past the
    /// start and end of a session and a turn, which any may see
    /// ([`EventRights`]). Empty allows none. Default: any declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// Intercepted events an extension may be granted to change
    /// (`tool_call`: its arguments; `assistant_message`: its text). Empty
    /// allows none. Default: any declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<Vec<String>>,
    /// Secrets an extension may be granted: `false` none, a list of names
    /// only those (each still only to the destinations its manifest binds
    /// it to). Default: any declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<SecretsCeiling>,
    /// Ceiling on a wasm guest's memory, MiB. Where no layer sets one,
    /// [`BUILT_IN_MAX_MEMORY_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Ceiling on a tool call's or command's deadline, ms. Where no layer
    /// sets one, [`BUILT_IN_MAX_TOOL_TIMEOUT_MS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_timeout_ms: Option<u64>,
    /// Ceiling on an intercept's deadline, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_intercept_timeout_ms: Option<u64>,
    /// Ceiling on the tools and commands one extension may register
    /// (together). The host's own cap is 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_registrations: Option<u64>,
    /// Ceiling on one tool's or command's description, bytes. The host's
    /// own cap is 4096.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_description_bytes: Option<u64>,
    /// Ceiling on one tool's schema serialized as JSON, bytes. The host's
    /// own cap is 65 536.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_schema_bytes: Option<u64>,
    /// The memory (data, MiB) the process compiling a wasm program the
    /// first time may use; the smallest of the layers applies. Default
    /// [`DEFAULT_COMPILE_MEMORY_MB`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_compile_memory_mb: Option<u64>,
    /// `open` (a missed intercept allows) or `closed` (it blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intercept_failure: Option<FailMode>,
    /// Require `zotbox approve` for every data tool, whatever its manifest says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
    /// PEM files of extra root certificates trusted for HTTPS (for a
    /// company proxy or a test server). Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_root_certificates: Vec<PathBuf>,
    /// System policy only: whether the user file's `extra_root_certificates`
    /// apply. Default: only when there is no system policy at all, since a
    /// root certificate widens whom every HTTPS grant trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_root_certificates: Option<bool>,
    /// Whether workspace extensions and data tools may run: `ask` (only once
    /// the user ran `zotbox trust`), `never`, or `always`. Default `ask`; the
    /// stricter layer wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_trust: Option<WorkspaceTrust>,
    /// Run native extensions under the same kernel confinement as shell
    /// commands. Default: no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confine_native: Option<bool>,
    /// Refuse to run shell commands and native extensions where the kernel
    /// cannot confine them. Default: no (run, and `doctor` says what is missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_confinement: Option<bool>,
    /// Whether shell commands (the capability and data shell tools) may open
    /// network connections. Default: no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_network: Option<bool>,
    /// Registries to install from: the index URL (`https://` only) and the
    /// keys that may sign it. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<Vec<RegistryConfig>>,
    /// Public keys (minisign base64) trusted to sign extension archives.
    /// The system layer's list is a ceiling (see the module docs). Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publishers: Option<Vec<String>>,
    /// Refuse registry entries without a publisher's signature. Either
    /// layer's `true` holds. Default: no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_signature: Option<bool>,
}

/// One registry a policy lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub struct RegistryConfig {
    /// The URL of its signed index (`https://` only).
    pub url: String,
    /// The public keys (minisign base64 lines) that may sign the index.
    pub keys: Vec<String>,
}

/// A registry in force, and the policy file that listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// The URL of its index.
    pub url: String,
    /// The keys that may sign its index.
    pub keys: Vec<String>,
    /// The file that listed it.
    pub path: PathBuf,
}

/// What the policy says about who may publish an extension: the merged
/// `publishers`, `require_signature` and `native_extensions` (see the
/// module docs). Each rule names the file that set it, for refusals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublisherRules {
    /// The keys (minisign base64) trusted to sign archives, in force.
    pub trusted: Vec<String>,
    /// Every key some layer lists, trusted or not: a signature by one of
    /// these that is not trusted is "not allowed", not "unknown".
    pub listed: Vec<String>,
    /// The system file whose `publishers` list is the ceiling, if any.
    pub restricted_by: Option<PathBuf>,
    /// The file whose `require_signature: true` is in force, if any.
    pub signature_required_by: Option<PathBuf>,
    /// The file whose `native_extensions: false` is in force, if any.
    pub native_forbidden_by: Option<PathBuf>,
}

/// The `secrets` key of a policy: a switch, or the names allowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretsCeiling {
    /// `false`: no secret for any extension; `true`: no ceiling.
    Allowed(bool),
    /// Only these names.
    Names(Vec<String>),
}

/// Whether a workspace's own extensions and data tools may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceTrust {
    /// Trusted without asking (a team that vets its repositories).
    Always,
    /// Trusted once the user has run `zotbox trust` on this exact content.
    Ask,
    /// Never: workspace extensions and data tools stay inert.
    Never,
}

impl WorkspaceTrust {
    /// The setting as written in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Ask => "ask",
            Self::Never => "never",
        }
    }
}

/// Which file a policy layer came from: the team's or the user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// `/etc/zotbox/policy.json` or `$ZOTBOX_SYSTEM_POLICY`.
    System,
    /// `$ZOT_HOME/policy.json`.
    User,
}

/// What a missed intercept means: the one fail mode of the host, the
/// sessions and the policy (written `"open"` or `"closed"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Allow (zot's behaviour): an unresponsive guard never stalls the agent.
    #[default]
    Open,
    /// Block: nothing passes a guard that cannot answer.
    Closed,
}

/// The default ceiling of a wasm guest's memories and tables, MiB.
pub const DEFAULT_MEMORY_MB: u64 = 128;

/// The ceiling on a wasm guest's memory, MiB, where no policy file sets
/// `max_memory_mb`. The manifest's author asks; in the shared host one
/// guest's memory is every session's risk (the kernel's out-of-memory
/// killer picks the host), so a guest gets no more than this unless the
/// user or the team says so.
pub const BUILT_IN_MAX_MEMORY_MB: u64 = 1024;

/// The ceiling on a tool call's deadline, ms, where no policy file sets
/// `max_tool_timeout_ms`. The deadline is also a call's compute budget:
/// a guest that spins gets this much of a CPU, not the manifest's hour.
pub const BUILT_IN_MAX_TOOL_TIMEOUT_MS: u64 = 600_000;

/// The default ceiling on the data memory of a first compile's process,
/// MiB. Compiling the largest guests measured (an 18 MB Python component,
/// the 13 MB JavaScript engine) peaks near 400 MiB; a crafted program could
/// ask far more of the compiler than its size suggests.
pub const DEFAULT_COMPILE_MEMORY_MB: u64 = 4096;

/// The limits an extension gets where its manifest sets none (zot's, for a
/// host built with the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitDefaults {
    /// Memory of a wasm guest, MiB. Default [`DEFAULT_MEMORY_MB`].
    pub memory_mb: u64,
    /// Deadline of a tool call or command. Default 60 s.
    pub call_timeout: Duration,
    /// Deadline of an intercept answer. Default 5 s.
    pub intercept_timeout: Duration,
    /// What a missed intercept means. Default [`FailMode::Open`].
    pub intercept_failure: FailMode,
}

impl Default for LimitDefaults {
    fn default() -> Self {
        Self {
            memory_mb: DEFAULT_MEMORY_MB,
            call_timeout: Duration::from_secs(60),
            intercept_timeout: Duration::from_secs(5),
            intercept_failure: FailMode::Open,
        }
    }
}

/// Which rule decided a limit's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitSource {
    /// Nothing set it: the default.
    Default,
    /// The manifest's `limits`.
    Manifest,
    /// A policy ceiling lowered it: the file that did.
    Policy(PathBuf),
    /// zotbox's own ceiling lowered it, no policy file setting one
    /// ([`BUILT_IN_MAX_MEMORY_MB`], [`BUILT_IN_MAX_TOOL_TIMEOUT_MS`]).
    BuiltIn,
}

impl fmt::Display for LimitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("the default"),
            Self::Manifest => f.write_str("the manifest's `limits`"),
            Self::Policy(path) => write!(f, "the ceiling of policy `{}`", path.display()),
            Self::BuiltIn => {
                f.write_str("zotbox's built-in ceiling, which a ceiling in a policy file replaces")
            }
        }
    }
}

/// One limit's value and the rule that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit<T> {
    /// The value in force.
    pub value: T,
    /// Who decided it.
    pub source: LimitSource,
}

/// What one extension runs with: its manifest's limits, the defaults where
/// it sets none, each lowered to the policy's ceiling. Decided by
/// [`Policy::limits`] alone, for the host, `zotbox run` and `policy explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Memory of a wasm guest (all its memories and tables), MiB.
    pub memory_mb: Limit<u64>,
    /// Deadline of a tool call or command.
    pub call_timeout: Limit<Duration>,
    /// Deadline of an intercept answer.
    pub intercept_timeout: Limit<Duration>,
    /// What a missed intercept means (a closed policy wins).
    pub intercept_failure: FailMode,
}

impl EffectiveLimits {
    /// The memory ceiling in bytes.
    pub fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mb.value.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }
}

/// One loaded policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Whose file it is.
    pub scope: Scope,
    /// Where it came from.
    pub path: PathBuf,
    /// What it says.
    pub file: PolicyFile,
}

/// Every policy layer in force, system first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    layers: Vec<Layer>,
}

impl Policy {
    /// No ceilings at all.
    pub fn permissive() -> Self {
        Self::default()
    }

    /// A policy of the given layers, system first.
    pub fn from_layers(layers: Vec<Layer>) -> Self {
        Self { layers }
    }

    /// Loads the system policy (if `system` exists) and then the user's.
    /// Missing files are no layer; unreadable or invalid ones are errors.
    ///
    /// # Errors
    ///
    /// [`FileError`] naming the file and field at fault.
    pub fn load(system: &Path, user: &Path) -> Result<Self, FileError> {
        let mut layers = Vec::new();
        for (scope, path) in [(Scope::System, system), (Scope::User, user)] {
            let text = match crate::user_file::read_text(path, MAX_POLICY_BYTES) {
                Ok(text) => text,
                Err(FileError::Read { error, .. })
                    if error.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(err) => return Err(err),
            };
            layers.push(Layer {
                scope,
                path: path.to_owned(),
                file: parse(&text, path)?,
            });
        }
        Ok(Self { layers })
    }

    /// [`Policy::load`] of the system file and the user file of `home`.
    ///
    /// # Errors
    ///
    /// As [`Policy::load`].
    pub fn load_for(home: &ZotHome) -> Result<Self, FileError> {
        Self::load(&Self::system_path(), &home.user_policy())
    }

    /// The system policy path: `$ZOTBOX_SYSTEM_POLICY` or [`SYSTEM_POLICY`].
    pub fn system_path() -> PathBuf {
        std::env::var_os("ZOTBOX_SYSTEM_POLICY")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(SYSTEM_POLICY), PathBuf::from)
    }

    /// The layers in force, system first.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The first layer that refuses native extensions, if any.
    pub fn native_refused_by(&self) -> Option<&Path> {
        self.layers
            .iter()
            .find(|layer| layer.file.native_extensions == Some(false))
            .map(|layer| layer.path.as_path())
    }

    /// The intercept failure mode the policy imposes (closed wins).
    pub fn intercept_failure(&self) -> Option<FailMode> {
        let modes = self.layers.iter().filter_map(|l| l.file.intercept_failure);
        modes.fold(None, |mode, next| match (mode, next) {
            (Some(FailMode::Closed), _) | (_, FailMode::Closed) => Some(FailMode::Closed),
            _ => Some(FailMode::Open),
        })
    }

    /// Whether every data tool needs approval.
    pub fn require_approval(&self) -> bool {
        self.layers
            .iter()
            .any(|l| l.file.require_approval == Some(true))
    }

    /// Extra root certificate files in force: the system layer's, and the
    /// user layer's only where the system allows them (see
    /// [`PolicyFile::user_root_certificates`]).
    pub fn extra_root_certificates(&self) -> Vec<PathBuf> {
        let user_allowed = self.user_roots_allowed();
        self.layers
            .iter()
            .filter(|l| l.scope == Scope::System || user_allowed)
            .flat_map(|l| l.file.extra_root_certificates.iter().cloned())
            .collect()
    }

    /// Whether the user file's root certificates apply.
    pub fn user_roots_allowed(&self) -> bool {
        let mut system = self.layers.iter().filter(|l| l.scope == Scope::System);
        match system.next() {
            None => true,
            Some(layer) => layer.file.user_root_certificates == Some(true),
        }
    }

    /// The user file's root certificates that the system policy set aside,
    /// for `doctor` and `policy show`.
    pub fn ignored_root_certificates(&self) -> Vec<PathBuf> {
        if self.user_roots_allowed() {
            return Vec::new();
        }
        self.layers
            .iter()
            .filter(|l| l.scope == Scope::User)
            .flat_map(|l| l.file.extra_root_certificates.iter().cloned())
            .collect()
    }

    /// Whether workspace extensions and data tools may run, and which file
    /// decided (`None`: the default, `ask`). The stricter setting wins; a
    /// user file below the system's setting (or below the default, when the
    /// system sets none) has no effect.
    pub fn workspace_trust(&self) -> (WorkspaceTrust, Option<&Path>) {
        let mut decided: (WorkspaceTrust, Option<&Path>) = (WorkspaceTrust::Ask, None);
        let system = self
            .layers
            .iter()
            .find(|l| l.scope == Scope::System)
            .and_then(|l| l.file.workspace_trust.map(|t| (t, l.path.as_path())));
        if let Some((trust, path)) = system {
            decided = (trust, Some(path));
        }
        for layer in self.layers.iter().filter(|l| l.scope == Scope::User) {
            if let Some(trust) = layer.file.workspace_trust
                && trust > decided.0
            {
                decided = (trust, Some(layer.path.as_path()));
            }
        }
        decided
    }

    /// Whether native extensions run under kernel confinement (any layer
    /// saying so is enough).
    pub fn confine_native(&self) -> bool {
        self.layers
            .iter()
            .any(|l| l.file.confine_native == Some(true))
    }

    /// The first layer that requires kernel confinement, if any.
    pub fn confinement_required_by(&self) -> Option<&Path> {
        self.layers
            .iter()
            .find(|l| l.file.require_confinement == Some(true))
            .map(|l| l.path.as_path())
    }

    /// Whether shell commands may use the network: one layer grants it and
    /// none refuses it.
    pub fn shell_network(&self) -> bool {
        self.layers
            .iter()
            .any(|l| l.file.shell_network == Some(true))
            && !self
                .layers
                .iter()
                .any(|l| l.file.shell_network == Some(false))
    }

    /// The registries in force: every layer's, system first; for a URL
    /// the system layer lists, its keys alone.
    pub fn registries(&self) -> Vec<Registry> {
        let mut merged: Vec<Registry> = Vec::new();
        let mut ordered: Vec<&Layer> = self.layers.iter().collect();
        ordered.sort_by_key(|l| l.scope != Scope::System);
        for layer in ordered {
            for config in layer.file.registries.iter().flatten() {
                if merged.iter().any(|r| r.url == config.url) {
                    continue;
                }
                merged.push(Registry {
                    url: config.url.clone(),
                    keys: config.keys.iter().map(|k| k.trim().to_owned()).collect(),
                    path: layer.path.clone(),
                });
            }
        }
        merged
    }

    /// Who may publish: the merged `publishers` (system ∩ user when both
    /// set it), `require_signature` (any layer's `true`) and
    /// `native_extensions: false`.
    pub fn publisher_rules(&self) -> PublisherRules {
        let mut rules = PublisherRules {
            signature_required_by: self
                .layers
                .iter()
                .find(|l| l.file.require_signature == Some(true))
                .map(|l| l.path.clone()),
            native_forbidden_by: self.native_refused_by().map(Path::to_owned),
            ..PublisherRules::default()
        };
        let mut in_force: Option<Vec<String>> = None;
        for layer in &self.layers {
            let Some(keys) = &layer.file.publishers else {
                continue;
            };
            let keys: Vec<String> = keys.iter().map(|k| k.trim().to_owned()).collect();
            for key in &keys {
                if !rules.listed.contains(key) {
                    rules.listed.push(key.clone());
                }
            }
            if layer.scope == Scope::System {
                rules.restricted_by = Some(layer.path.clone());
            }
            in_force = Some(match in_force {
                None => keys,
                Some(before) => before.into_iter().filter(|k| keys.contains(k)).collect(),
            });
        }
        rules.trusted = in_force.unwrap_or_default();
        rules
    }

    /// The HTTP client settings the policy implies: the defaults, plus its
    /// extra root certificates (an unreadable file is warned about and skipped).
    pub fn http_config(&self) -> crate::capability::http::HttpConfig {
        let mut config = crate::capability::http::HttpConfig::default();
        for path in self.extra_root_certificates() {
            match std::fs::read(&path) {
                Ok(pem) => config.extra_roots.push(pem),
                Err(err) => tracing::warn!(
                    "policy: cannot read root certificate `{}`: {err}",
                    path.display()
                ),
            }
        }
        config
    }

    fn min_of(&self, field: impl Fn(&PolicyFile) -> Option<u64>) -> Option<u64> {
        self.ceiling(field).map(|(value, _)| value)
    }

    /// The lowest ceiling the layers set on `field`, with the file that set it.
    fn ceiling(&self, field: impl Fn(&PolicyFile) -> Option<u64>) -> Option<(u64, &Path)> {
        self.layers
            .iter()
            .filter_map(|l| field(&l.file).map(|value| (value, l.path.as_path())))
            .min_by_key(|(value, _)| *value)
    }

    /// What an extension whose manifest sets `declared` runs with: the one
    /// place effective limits are decided (see [`EffectiveLimits`]).
    pub fn limits(
        &self,
        declared: &crate::manifest::Limits,
        defaults: &LimitDefaults,
    ) -> EffectiveLimits {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        // A layer's ceiling, else, over what a manifest asks, the built-in
        // one (which a user's own file may so raise, as for the compile's
        // memory); the host's own defaults are its embedder's choice.
        let decide = |declared: Option<u64>,
                      default: u64,
                      field: fn(&PolicyFile) -> Option<u64>,
                      built_in: Option<u64>|
         -> Limit<u64> {
            let (value, source) = match declared {
                Some(value) => (value, LimitSource::Manifest),
                None => (default, LimitSource::Default),
            };
            let ceiling = match self.ceiling(field) {
                Some((cap, path)) => Some((cap, LimitSource::Policy(path.to_owned()))),
                None if source == LimitSource::Manifest => {
                    built_in.map(|cap| (cap, LimitSource::BuiltIn))
                }
                None => None,
            };
            match ceiling {
                Some((cap, source)) if cap < value => Limit { value: cap, source },
                _ => Limit { value, source },
            }
        };
        let duration = |limit: Limit<u64>| Limit {
            value: Duration::from_millis(limit.value),
            source: limit.source,
        };
        let closed = self.intercept_failure() == Some(FailMode::Closed)
            || defaults.intercept_failure == FailMode::Closed;
        EffectiveLimits {
            memory_mb: decide(
                declared.memory_mb,
                defaults.memory_mb,
                |f| f.max_memory_mb,
                Some(BUILT_IN_MAX_MEMORY_MB),
            ),
            call_timeout: duration(decide(
                declared.tool_timeout_ms,
                millis(defaults.call_timeout),
                |f| f.max_tool_timeout_ms,
                Some(BUILT_IN_MAX_TOOL_TIMEOUT_MS),
            )),
            intercept_timeout: duration(decide(
                declared.intercept_timeout_ms,
                millis(defaults.intercept_timeout),
                |f| f.max_intercept_timeout_ms,
                None,
            )),
            intercept_failure: if closed {
                FailMode::Closed
            } else {
                FailMode::Open
            },
        }
    }

    /// `value` lowered to the policy's ceiling on registrations per extension.
    pub fn cap_registrations(&self, value: u64) -> u64 {
        self.min_of(|f| f.max_registrations)
            .map_or(value, |cap| value.min(cap))
    }

    /// `value` lowered to the policy's ceiling on a description, bytes.
    pub fn cap_description_bytes(&self, value: u64) -> u64 {
        self.min_of(|f| f.max_description_bytes)
            .map_or(value, |cap| value.min(cap))
    }

    /// `value` lowered to the policy's ceiling on a tool schema, bytes.
    pub fn cap_schema_bytes(&self, value: u64) -> u64 {
        self.min_of(|f| f.max_schema_bytes)
            .map_or(value, |cap| value.min(cap))
    }

    /// The most data memory, MiB, the process compiling a wasm program for
    /// the first time may use: the smallest value a layer sets, else
    /// [`DEFAULT_COMPILE_MEMORY_MB`]. No manifest has a say: the program's
    /// author is who the cap is against. A user file may raise it for the
    /// user's own machine where the system policy sets none.
    pub fn compile_memory_mb(&self) -> u64 {
        self.min_of(|f| f.max_compile_memory_mb)
            .unwrap_or(DEFAULT_COMPILE_MEMORY_MB)
    }

    /// What an extension that `declared` these capabilities is granted,
    /// capability by capability, with why.
    pub fn grant(&self, declared: &Capabilities) -> Grant {
        let mut rows = Vec::new();
        let mut keep = |capability: &'static str,
                        declared: &[String],
                        refuse: &dyn Fn(&str) -> Option<String>|
         -> Vec<String> {
            let mut granted = Vec::new();
            let mut refused = Vec::new();
            for item in declared {
                match refuse(item) {
                    None => granted.push(item.clone()),
                    Some(rule) => refused.push(Refusal {
                        item: item.clone(),
                        rule,
                    }),
                }
            }
            rows.push(GrantRow {
                capability,
                declared: declared.to_vec(),
                granted: granted.clone(),
                refused,
            });
            granted
        };
        let http = keep("http", &declared.http, &|origin| self.refuse_origin(origin));
        let read = keep("fs-read", &declared.read, &|_| None);
        let write = keep("fs-write", &declared.write, &|_| {
            self.refuse_switch("fs_write", |f| f.fs_write)
        });
        let shell = keep("shell", &declared.shell, &|_| {
            self.refuse_switch("shell", |f| f.shell)
        });
        let env = keep("env", &declared.env, &|name| {
            self.refuse_unlisted("env", |f| f.env.as_ref(), name)
        });
        let events = keep("events", &declared.events, &|name| {
            self.refuse_unlisted("events", |f| f.events.as_ref(), name)
        });
        // A rewrite needs its event seen: one the policy took from
        // `events` goes from `rewrite` too.
        let rewrite = keep("rewrite", &declared.rewrite, &|name| {
            self.refuse_unlisted("rewrite", |f| f.rewrite.as_ref(), name)
                .or_else(|| {
                    (!events.iter().any(|event| event == name))
                        .then(|| format!("`{name}` is not granted among `events`"))
                })
        });
        let items: Vec<String> = declared
            .secrets
            .iter()
            .map(|(name, spec)| secret_item(name, spec))
            .collect();
        let granted_items = keep("secrets", &items, &|item| {
            self.refuse_secret(item.split(' ').next().unwrap_or_default())
        });
        let secrets = declared
            .secrets
            .iter()
            .filter(|(name, spec)| granted_items.contains(&secret_item(name, spec)))
            .map(|(name, spec)| (name.clone(), spec.clone()))
            .collect();
        Grant {
            http,
            read,
            write,
            shell,
            env,
            events,
            rewrite,
            secrets,
            rows,
        }
    }

    /// What the policy allows for `capability`, in words, for `policy explain`.
    pub fn describe(&self, capability: &str) -> String {
        let lists = |field: fn(&PolicyFile) -> Option<&Vec<String>>| {
            let layers: Vec<String> = self
                .layers
                .iter()
                .filter_map(|l| {
                    field(&l.file)
                        .map(|list| format!("{} (`{}`)", list_or_none(list), l.path.display()))
                })
                .collect();
            if layers.is_empty() {
                "anything declared".to_owned()
            } else {
                layers.join(" and ")
            }
        };
        let switch = |key: &str, field: fn(&PolicyFile) -> Option<bool>| match self
            .refuse_switch(key, field)
        {
            Some(rule) => format!("nothing: {rule}"),
            None => "anything declared".to_owned(),
        };
        match capability {
            "http" => lists(|f| f.http.as_ref()),
            "env" => lists(|f| f.env.as_ref()),
            "events" => lists(|f| f.events.as_ref()),
            "rewrite" => lists(|f| f.rewrite.as_ref()),
            "secrets" => {
                let layers: Vec<String> = self
                    .layers
                    .iter()
                    .filter_map(|l| match l.file.secrets.as_ref()? {
                        SecretsCeiling::Allowed(true) => None,
                        SecretsCeiling::Allowed(false) => {
                            Some(format!("none (`{}`)", l.path.display()))
                        }
                        SecretsCeiling::Names(names) => {
                            Some(format!("{} (`{}`)", list_or_none(names), l.path.display()))
                        }
                    })
                    .collect();
                if layers.is_empty() {
                    "anything declared".to_owned()
                } else {
                    layers.join(" and ")
                }
            }
            "fs-write" => switch("fs_write", |f| f.fs_write),
            "shell" => switch("shell", |f| f.shell),
            _ => "anything declared".to_owned(),
        }
    }

    fn refuse_switch(
        &self,
        key: &str,
        field: impl Fn(&PolicyFile) -> Option<bool>,
    ) -> Option<String> {
        self.layers
            .iter()
            .find(|layer| field(&layer.file) == Some(false))
            .map(|layer| format!("`{key}: false` in `{}`", layer.path.display()))
    }

    fn refuse_origin(&self, origin: &str) -> Option<String> {
        self.layers.iter().find_map(|layer| {
            let allowed = layer.file.http.as_ref()?;
            if allowed.iter().any(|ceiling| origin_covers(ceiling, origin)) {
                None
            } else {
                Some(format!(
                    "not among the `http` origins of `{}`",
                    layer.path.display()
                ))
            }
        })
    }

    /// The rule that takes secret `name` away, if any.
    pub fn refuse_secret(&self, name: &str) -> Option<String> {
        self.layers
            .iter()
            .find_map(|layer| match layer.file.secrets.as_ref()? {
                SecretsCeiling::Allowed(true) => None,
                SecretsCeiling::Allowed(false) => {
                    Some(format!("`secrets: false` in `{}`", layer.path.display()))
                }
                SecretsCeiling::Names(names) if names.iter().any(|n| n == name) => None,
                SecretsCeiling::Names(_) => Some(format!(
                    "not among the `secrets` names of `{}`",
                    layer.path.display()
                )),
            })
    }

    /// The rule that takes `name` away when a layer lists the names of
    /// `key` (`field`) and not this one.
    fn refuse_unlisted(
        &self,
        key: &str,
        field: impl Fn(&PolicyFile) -> Option<&Vec<String>>,
        name: &str,
    ) -> Option<String> {
        self.layers.iter().find_map(|layer| {
            let allowed = field(&layer.file)?;
            if allowed.iter().any(|n| n == name) {
                None
            } else {
                Some(format!(
                    "not among the `{key}` names of `{}`",
                    layer.path.display()
                ))
            }
        })
    }
}

fn list_or_none(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

fn parse(text: &str, path: &Path) -> Result<PolicyFile, FileError> {
    // Unknown keys are refused by the type itself (`deny_unknown_fields`):
    // an unknown key in a policy may be a ceiling someone meant to set.
    let parsed =
        crate::user_file::parse::<PolicyFile>(text).map_err(|detail| FileError::Parse {
            path: path.to_owned(),
            detail,
        })?;
    no_nulls(text, path)?;
    validate_publishing(&parsed.value, path)?;
    validate_ceilings(&parsed.value, path)?;
    Ok(parsed.value)
}

/// A key set to `null` is refused: read as absent it means "no ceiling",
/// which `"http": null` may well have been written to say the opposite of.
fn no_nulls(text: &str, path: &Path) -> Result<(), FileError> {
    let Ok(keys) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text) else {
        return Ok(());
    };
    match keys.iter().find(|(_, value)| value.is_null()) {
        Some((key, _)) => Err(FileError::Invalid {
            path: path.to_owned(),
            field: key.clone(),
            problem: "is `null`, which could mean none or no ceiling: leave the key out for no \
                      ceiling, or give it a value (`[]` allows nothing)"
                .to_owned(),
        }),
        None => Ok(()),
    }
}

/// Ceilings that could hold nothing are refused rather than applied: a
/// `max_memory_mb` of 0 would fail every guest with an out-of-memory that
/// names no policy, an origin that does not parse would silently grant
/// nothing, a variable name that cannot be one would silently match none.
fn validate_ceilings(file: &PolicyFile, path: &Path) -> Result<(), FileError> {
    let invalid = |field: String, problem: String| FileError::Invalid {
        path: path.to_owned(),
        field,
        problem,
    };
    let limits = [
        ("max_memory_mb", file.max_memory_mb),
        ("max_tool_timeout_ms", file.max_tool_timeout_ms),
        ("max_intercept_timeout_ms", file.max_intercept_timeout_ms),
        ("max_registrations", file.max_registrations),
        ("max_description_bytes", file.max_description_bytes),
        ("max_schema_bytes", file.max_schema_bytes),
        ("max_compile_memory_mb", file.max_compile_memory_mb),
    ];
    for (field, value) in limits {
        if value == Some(0) {
            return Err(invalid(
                field.to_owned(),
                "is 0, which no extension could run within; the least is 1".to_owned(),
            ));
        }
    }
    for (index, origin) in file.http.iter().flatten().enumerate() {
        if let Err(err) = Origin::parse(origin) {
            return Err(invalid(format!("http[{index}]"), err.of_field()));
        }
    }
    for (key, names, rewrite) in [
        ("events", &file.events, false),
        ("rewrite", &file.rewrite, true),
    ] {
        if let Some((index, problem)) =
            crate::manifest::event_list_problem(names.as_deref().unwrap_or_default(), rewrite)
        {
            return Err(invalid(format!("{key}[{index}]"), problem));
        }
    }
    for (index, name) in file.env.iter().flatten().enumerate() {
        if !crate::capability::is_variable_name(name) {
            return Err(invalid(
                format!("env[{index}]"),
                format!(
                    "`{}` is not a variable name; use `A-Z a-z 0-9 _`, not starting with a digit",
                    crate::text::Shown(name)
                ),
            ));
        }
    }
    Ok(())
}

/// Registry URLs are `https://`; every key is a minisign public key.
fn validate_publishing(file: &PolicyFile, path: &Path) -> Result<(), FileError> {
    let invalid = |field: String, problem: String| FileError::Invalid {
        path: path.to_owned(),
        field,
        problem,
    };
    let check_key = |field: String, key: &str| -> Result<(), FileError> {
        match minisign::PublicKey::from_base64(key.trim()) {
            Ok(_) => Ok(()),
            Err(_) => Err(invalid(
                field,
                format!(
                    "`{}` is not a minisign public key; list the 56-character base64 line \
                     `zotbox keygen` or `minisign -G` prints",
                    crate::text::Shown(key)
                ),
            )),
        }
    };
    for (index, registry) in file.registries.iter().flatten().enumerate() {
        let url = &registry.url;
        let https = url.starts_with("https://")
            && reqwest::Url::parse(url).is_ok_and(|u| u.host_str().is_some_and(|h| !h.is_empty()));
        if !https {
            return Err(invalid(
                format!("registries[{index}].url"),
                format!(
                    "`{}` is refused: a registry URL must be `https://` (its index is fetched \
                     over TLS as well as signed)",
                    crate::text::Shown(url)
                ),
            ));
        }
        if registry.keys.is_empty() {
            return Err(invalid(
                format!("registries[{index}].keys"),
                "is empty; list the public key(s) that sign the registry's index".to_owned(),
            ));
        }
        for (k, key) in registry.keys.iter().enumerate() {
            check_key(format!("registries[{index}].keys[{k}]"), key)?;
        }
    }
    for (index, key) in file.publishers.iter().flatten().enumerate() {
        check_key(format!("publishers[{index}]"), key)?;
    }
    Ok(())
}

/// Whether a policy ceiling origin covers a declared origin: one rule for
/// both, [`Origin::covers`] (a missing port means 443 on either side). An
/// origin that does not parse covers nothing and is covered by nothing.
pub fn origin_covers(ceiling: &str, declared: &str) -> bool {
    match (Origin::parse(ceiling), Origin::parse(declared)) {
        (Ok(ceiling), Ok(declared)) => ceiling.covers(&declared),
        _ => false,
    }
}

/// How a declared secret reads in a grant row: `NAME → destinations`
/// (see [`crate::manifest::SecretSpec::destinations`]).
pub fn secret_item(name: &str, spec: &crate::manifest::SecretSpec) -> String {
    format!("{name} → {}", spec.destinations())
}

/// One declared item the policy took away, with the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The declared item.
    pub item: String,
    /// The policy rule that refused it.
    pub rule: String,
}

/// One capability of a grant, for `policy explain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GrantRow {
    /// `http`, `fs-read`, `fs-write`, `shell`, `env`, `events`, `rewrite`
    /// or `secrets`.
    pub capability: &'static str,
    /// What the manifest declared.
    pub declared: Vec<String>,
    /// What is granted.
    pub granted: Vec<String>,
    /// What the policy refused, and by which rule.
    pub refused: Vec<Refusal>,
}

/// An extension's effective grant: declared ∩ policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    /// HTTPS origins.
    pub http: Vec<String>,
    /// Workspace globs readable.
    pub read: Vec<String>,
    /// Workspace globs writable.
    pub write: Vec<String>,
    /// Command patterns.
    pub shell: Vec<String>,
    /// Environment variable names.
    pub env: Vec<String>,
    /// Events it may see and intercept, past those any extension sees.
    pub events: Vec<String>,
    /// Intercepted events whose content it may change.
    pub rewrite: Vec<String>,
    /// Secrets, by name, with where each may travel.
    pub secrets: std::collections::BTreeMap<String, crate::manifest::SecretSpec>,
    /// The reasoning, per capability.
    pub rows: Vec<GrantRow>,
}

impl Grant {
    /// The refusal rule for `item` of `capability` if the policy took it
    /// away (so a refusal can say "declared, but the policy …").
    pub fn policy_refusal(&self, capability: &str, item: &str) -> Option<&str> {
        self.rows
            .iter()
            .find(|row| row.capability == capability)?
            .refused
            .iter()
            .find(|refusal| refusal.item == item)
            .map(|refusal| refusal.rule.as_str())
    }
}

/// The events every extension sees, granted or not: the start and end of a
/// session and of a turn, which carry no word of the user's or the model's.
pub const LIFECYCLE_EVENTS: &[&str] = &[
    zotbox_protocol::event_name::SESSION_START,
    zotbox_protocol::event_name::TURN_START,
    zotbox_protocol::event_name::TURN_END,
];

/// Which events one extension may see, intercept and rewrite.
///
/// A `tool_call` carries every argument of the agent's tool calls (a file
/// written, a command run), an `assistant_message` the model's words, and
/// an interceptor's answer may change either before zot acts on it: a
/// rewritten `bash` call runs in zot, outside any sandbox. So a sandboxed
/// extension gets what its grant says ([`EventRights::granted`]): the
/// [`LIFECYCLE_EVENTS`] always; any other event, and any intercept, only
/// when `capabilities.events` names it; a rewrite only when
/// `capabilities.rewrite` does. A native one runs with the user's
/// permissions, so binding it would guard nothing ([`EventRights::all`]).
/// The default holds the lifecycle events only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventRights {
    unbound: bool,
    events: BTreeSet<String>,
    rewrite: BTreeSet<String>,
}

impl EventRights {
    /// Every event, intercept and rewrite: a native extension's.
    pub fn all() -> Self {
        Self {
            unbound: true,
            ..Self::default()
        }
    }

    /// What `grant` allows: a sandboxed extension's.
    pub fn granted(grant: &Grant) -> Self {
        Self {
            unbound: false,
            events: grant.events.iter().cloned().collect(),
            rewrite: grant.rewrite.iter().cloned().collect(),
        }
    }

    /// Whether `event` may be delivered to it.
    pub fn may_see(&self, event: &str) -> bool {
        self.unbound || LIFECYCLE_EVENTS.contains(&event) || self.events.contains(event)
    }

    /// Whether it may be asked about `event`, and block it.
    pub fn may_intercept(&self, event: &str) -> bool {
        self.unbound || self.events.contains(event)
    }

    /// Whether its answer to an intercept of `event` may change it.
    pub fn may_rewrite(&self, event: &str) -> bool {
        self.unbound || self.rewrite.contains(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(path: &str, json: &str) -> Layer {
        Layer {
            scope: if path.starts_with("/etc") || path == "/s" {
                Scope::System
            } else {
                Scope::User
            },
            path: PathBuf::from(path),
            file: parse(json, Path::new(path)).unwrap_or_else(|e| panic!("{e}")),
        }
    }

    fn capabilities(json: &str) -> Capabilities {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn policy_files_are_read_capped_and_only_when_regular() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let system = tmp.path().join("system.json");
        let user = tmp.path().join("user.json");
        // Neither exists: no layer, no error.
        let none = Policy::load(&system, &user).unwrap_or_else(|e| panic!("{e}"));
        assert!(none.layers.is_empty());
        std::fs::File::create(&user)
            .and_then(|file| file.set_len(MAX_POLICY_BYTES + 1))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = Policy::load(&system, &user).err().map(|e| e.to_string());
        assert_eq!(
            err,
            Some(format!(
                "`{}`: file is larger than 1048576 bytes",
                user.display()
            ))
        );
        std::fs::remove_file(&user).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::mkfifo(&user, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        let paths = (system.clone(), user.clone());
        let err = crate::user_file::without_waiting(move || {
            Policy::load(&paths.0, &paths.1)
                .err()
                .map(|e| e.to_string())
        });
        assert_eq!(
            err,
            Some(format!(
                "cannot read `{}`: not a regular file",
                user.display()
            ))
        );
    }

    #[test]
    fn origins_are_covered_by_exact_and_wildcard_ceilings() {
        let cases = [
            ("https://api.x.com", "https://api.x.com", true),
            ("https://api.x.com", "https://API.x.com", true),
            ("https://*.x.com", "https://api.x.com", true),
            ("https://*.x.com", "https://*.api.x.com", true),
            // The bare domain is not a subdomain of itself.
            ("https://*.x.com", "https://x.com", false),
            // A suffix that is not a label boundary.
            ("https://*.x.com", "https://evilx.com", false),
            // No port means 443 on both sides, as in a grant: a ceiling
            // names the ports it allows.
            ("https://api.x.com", "https://api.x.com:8443", false),
            ("https://api.x.com:443", "https://api.x.com", true),
            ("https://api.x.com", "https://api.x.com:443", true),
            ("https://api.x.com:443", "https://api.x.com:8443", false),
            ("https://*.x.com:8443", "https://a.x.com:8443", true),
            // Only https origins exist.
            ("https://api.x.com", "http://api.x.com", false),
            ("http://api.x.com", "http://api.x.com", false),
            // IP literals, v4 and v6.
            ("https://[::1]:9000", "https://[::1]:9000", true),
            ("https://[::1]:9000", "https://[::2]:9000", false),
            ("https://127.0.0.1:9000", "https://127.0.0.1:9000", true),
            ("not an origin", "https://api.x.com", false),
        ];
        for (ceiling, declared, covered) in cases {
            assert_eq!(
                origin_covers(ceiling, declared),
                covered,
                "{ceiling} ⊇ {declared}"
            );
        }
    }

    #[test]
    fn the_grant_is_declared_intersected_with_every_layer() {
        let policy = Policy::from_layers(vec![
            layer(
                "/etc/zotbox/policy.json",
                r#"{"http":["https://*.x.com"],"shell":false}"#,
            ),
            layer(
                "/home/u/policy.json",
                r#"{"http":["https://api.x.com","https://evil.com"],"env":["LANG"]}"#,
            ),
        ]);
        let grant = policy.grant(&capabilities(
            r#"{"http":["https://api.x.com","https://other.x.com","https://evil.com"],
                "shell":["git status"],"env":["LANG","AWS_SECRET_ACCESS_KEY"],"read":["docs/**"],"write":["out/**"]}"#,
        ));
        assert_eq!(grant.http, vec!["https://api.x.com"]);
        assert!(grant.shell.is_empty());
        assert_eq!(grant.env, vec!["LANG"]);
        assert_eq!(grant.read, vec!["docs/**"]);
        assert_eq!(grant.write, vec!["out/**"]);
        // The user layer cannot widen the system one: evil.com stays refused.
        assert_eq!(
            grant.policy_refusal("http", "https://evil.com"),
            Some("not among the `http` origins of `/etc/zotbox/policy.json`")
        );
        assert_eq!(
            grant.policy_refusal("shell", "git status"),
            Some("`shell: false` in `/etc/zotbox/policy.json`")
        );
        assert_eq!(
            grant.policy_refusal("env", "AWS_SECRET_ACCESS_KEY"),
            Some("not among the `env` names of `/home/u/policy.json`")
        );
    }

    #[test]
    fn secrets_are_declared_intersected_with_every_layer() {
        let declared = capabilities(
            r#"{"secrets":{"WEATHER_KEY":{"http":["https://api.x.com"]},
                "TRACKER":{"http":["https://t.x.com"],"query":true}}}"#,
        );
        let item = |name: &str| secret_item(name, &declared.secrets[name]);
        let cases: [(&str, &[&str], Option<&str>); 4] = [
            // No key: whatever is declared.
            (r#"{}"#, &["TRACKER", "WEATHER_KEY"], None),
            // `true` sets no ceiling.
            (r#"{"secrets":true}"#, &["TRACKER", "WEATHER_KEY"], None),
            // A team's list narrows to its names.
            (
                r#"{"secrets":["WEATHER_KEY"]}"#,
                &["WEATHER_KEY"],
                Some("not among the `secrets` names of `/etc/zotbox/policy.json`"),
            ),
            // `false` forbids them all.
            (
                r#"{"secrets":false}"#,
                &[],
                Some("`secrets: false` in `/etc/zotbox/policy.json`"),
            ),
        ];
        for (json, granted, tracker_refused) in cases {
            let policy = Policy::from_layers(vec![layer("/etc/zotbox/policy.json", json)]);
            let grant = policy.grant(&declared);
            let names: Vec<&str> = grant.secrets.keys().map(String::as_str).collect();
            assert_eq!(names, granted, "{json}");
            assert_eq!(
                grant.policy_refusal("secrets", &item("TRACKER")),
                tracker_refused,
                "{json}"
            );
        }
        // The row shows each secret with where it may go.
        assert_eq!(
            item("TRACKER"),
            "TRACKER → https://t.x.com (header or query)"
        );
        // A user layer cannot widen the team's list.
        let policy = Policy::from_layers(vec![
            layer("/etc/zotbox/policy.json", r#"{"secrets":["WEATHER_KEY"]}"#),
            layer("/home/u/policy.json", r#"{"secrets":true}"#),
        ]);
        assert!(!policy.grant(&declared).secrets.contains_key("TRACKER"));
        // A misspelt value fails to load rather than fail open.
        assert!(parse(r#"{"secrets":"no"}"#, Path::new("/p")).is_err());
    }

    #[test]
    fn limits_take_the_smaller_value_and_closed_wins() {
        let policy = Policy::from_layers(vec![
            layer(
                "/s",
                r#"{"max_memory_mb":256,"intercept_failure":"closed"}"#,
            ),
            layer(
                "/u",
                r#"{"max_memory_mb":512,"intercept_failure":"open","native_extensions":false}"#,
            ),
        ]);
        let memory = |declared: Option<u64>| {
            let declared = crate::manifest::Limits {
                memory_mb: declared,
                ..crate::manifest::Limits::default()
            };
            let limits = policy.limits(&declared, &LimitDefaults::default());
            (limits.memory_mb.value, limits.memory_mb.source)
        };
        assert_eq!(memory(Some(1024)), (256, LimitSource::Policy("/s".into())));
        assert_eq!(memory(Some(64)), (64, LimitSource::Manifest));
        assert_eq!(memory(None), (128, LimitSource::Default));
        // Without a policy's ceiling, the built-in one; a user's file may
        // raise it.
        let asks_much = crate::manifest::Limits {
            memory_mb: Some(4096),
            tool_timeout_ms: Some(3_600_000),
            ..crate::manifest::Limits::default()
        };
        let limits = Policy::permissive().limits(&asks_much, &LimitDefaults::default());
        assert_eq!(
            (limits.memory_mb, limits.call_timeout),
            (
                Limit {
                    value: BUILT_IN_MAX_MEMORY_MB,
                    source: LimitSource::BuiltIn
                },
                Limit {
                    value: Duration::from_millis(BUILT_IN_MAX_TOOL_TIMEOUT_MS),
                    source: LimitSource::BuiltIn
                }
            )
        );
        // A host's own default is its embedder's choice, not capped.
        let generous = LimitDefaults {
            memory_mb: 2048,
            ..LimitDefaults::default()
        };
        let limits = Policy::permissive().limits(&crate::manifest::Limits::default(), &generous);
        assert_eq!(
            (limits.memory_mb.value, limits.memory_mb.source),
            (2048, LimitSource::Default)
        );
        let raised = Policy::from_layers(vec![layer(
            "/u",
            r#"{"max_memory_mb":2048,"max_tool_timeout_ms":3600000}"#,
        )])
        .limits(&asks_much, &LimitDefaults::default());
        assert_eq!(
            (raised.memory_mb.value, raised.memory_mb.source),
            (2048, LimitSource::Policy("/u".into()))
        );
        assert_eq!(
            (raised.call_timeout.value, raised.call_timeout.source),
            (Duration::from_secs(3600), LimitSource::Manifest)
        );
        // Absent keys set no ceiling.
        assert_eq!(policy.cap_registrations(256), 256);
        assert_eq!(policy.cap_schema_bytes(65_536), 65_536);
        assert_eq!(policy.intercept_failure(), Some(FailMode::Closed));
        assert_eq!(policy.native_refused_by(), Some(Path::new("/u")));
        assert!(Policy::permissive().intercept_failure().is_none());
    }

    #[test]
    fn the_compile_memory_cap_is_the_smallest_a_layer_sets() {
        let compile = |layers: &[(&str, &str)]| {
            Policy::from_layers(layers.iter().map(|(p, j)| layer(p, j)).collect())
                .compile_memory_mb()
        };
        assert_eq!(compile(&[]), DEFAULT_COMPILE_MEMORY_MB);
        assert_eq!(
            compile(&[
                ("/s", r#"{"max_compile_memory_mb":1024}"#),
                ("/u", r#"{"max_compile_memory_mb":512}"#),
            ]),
            512
        );
        assert_eq!(
            compile(&[
                ("/s", r#"{"max_compile_memory_mb":256}"#),
                ("/u", r#"{"max_compile_memory_mb":512}"#),
            ]),
            256
        );
        // Without a system ceiling, the user may raise it for a large guest.
        assert_eq!(
            compile(&[("/u", r#"{"max_compile_memory_mb":16384}"#)]),
            16384
        );
        assert!(parse(r#"{"max_compile_memory_mb":-1}"#, Path::new("/p")).is_err());
    }

    #[test]
    fn registration_ceilings_take_the_smaller_value_of_every_layer() {
        let policy = Policy::from_layers(vec![
            layer(
                "/s",
                r#"{"max_registrations":64,"max_description_bytes":8192}"#,
            ),
            layer(
                "/u",
                r#"{"max_registrations":128,"max_description_bytes":1024,"max_schema_bytes":2048}"#,
            ),
        ]);
        // (ceiling, the host's value, what applies)
        let cases = [
            (
                Policy::cap_registrations as fn(&Policy, u64) -> u64,
                256,
                64,
            ),
            (Policy::cap_registrations, 10, 10),
            (Policy::cap_description_bytes, 4096, 1024),
            (Policy::cap_schema_bytes, 65_536, 2048),
        ];
        for (cap, value, expected) in cases {
            assert_eq!(cap(&policy, value), expected);
        }
        let limits = crate::session::RegistrationLimits::default().within(&policy);
        assert_eq!(
            limits,
            crate::session::RegistrationLimits {
                max_registrations: 64,
                max_description_bytes: 1024,
                max_schema_bytes: 2048,
                ..crate::session::RegistrationLimits::default()
            }
        );
        assert!(parse(r#"{"max_registrations":"many"}"#, Path::new("/p")).is_err());
    }

    #[test]
    fn bad_policies_name_the_field() {
        let cases = [
            (r#"{"fs_write":"no"}"#, "field `fs_write`"),
            (
                r#"{"intercept_failure":"ajar"}"#,
                "field `intercept_failure`: unknown variant `ajar`",
            ),
            (r#"{"max_memory_mb":-1}"#, "field `max_memory_mb`"),
            ("{", "EOF while parsing"),
            // An array is not read by position as the fields.
            (r#"[true]"#, "is a JSON array; the file is one object"),
            // A misspelt ceiling fails closed, naming the key and the known ones.
            (
                r#"{"Shell":false}"#,
                "unknown field `Shell`, expected one of",
            ),
            (
                r#"{"native-extensions":false}"#,
                "unknown field `native-extensions`, expected one of `native_extensions`",
            ),
            (
                r#"{"workspace_trust":"sometimes"}"#,
                "unknown variant `sometimes`",
            ),
            // Ceilings that could hold nothing.
            (
                r#"{"max_memory_mb":0}"#,
                "field `max_memory_mb` is 0, which no extension could run within; the least is 1",
            ),
            (
                r#"{"max_tool_timeout_ms":0}"#,
                "field `max_tool_timeout_ms` is 0",
            ),
            (
                r#"{"max_registrations":0}"#,
                "field `max_registrations` is 0",
            ),
            (
                r#"{"http":["http://x.com"]}"#,
                "field `http[0]` is `http://x.com`, which must start with `https://`; only https \
                 is allowed",
            ),
            (
                r#"{"http":["https://a.dev","https://\u001b[31m.com"]}"#,
                "field `http[1]` is `https://\\u{1b}[31m.com`, which has an invalid host",
            ),
            (
                r#"{"env":["LANG",""]}"#,
                "field `env[1]` `` is not a variable name",
            ),
            (
                r#"{"env":["A=B"]}"#,
                "field `env[0]` `A=B` is not a variable name",
            ),
            // `null` could mean none or no ceiling: neither is guessed.
            (
                r#"{"shell":false,"http":null}"#,
                "field `http` is `null`, which could mean none or no ceiling",
            ),
            (
                r#"{"max_memory_mb":null}"#,
                "field `max_memory_mb` is `null`",
            ),
            // Anything after the object is refused, not ignored.
            (r#"{"shell":true} {"shell":false}"#, "trailing characters"),
            (r#"{"shell":true}x"#, "trailing characters"),
        ];
        for (json, expected) in cases {
            let err = parse(json, Path::new("/p.json"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(expected) && err.contains("/p.json"),
                "{json}: {err}"
            );
        }
    }

    #[test]
    fn workspace_trust_only_tightens_below_the_system_setting() {
        let trust = |layers: Vec<Layer>| {
            let policy = Policy::from_layers(layers);
            let (trust, by) = policy.workspace_trust();
            (trust, by.map(|p| p.display().to_string()))
        };
        // Nothing set: the default, decided by no file.
        assert_eq!(trust(vec![]), (WorkspaceTrust::Ask, None));
        // The user may tighten the default…
        assert_eq!(
            trust(vec![layer("/u", r#"{"workspace_trust":"never"}"#)]),
            (WorkspaceTrust::Never, Some("/u".to_owned()))
        );
        // …but not loosen it on their own, nor below the system's setting.
        assert_eq!(
            trust(vec![layer("/u", r#"{"workspace_trust":"always"}"#)]),
            (WorkspaceTrust::Ask, None)
        );
        assert_eq!(
            trust(vec![
                layer("/s", r#"{"workspace_trust":"never"}"#),
                layer("/u", r#"{"workspace_trust":"always"}"#),
            ]),
            (WorkspaceTrust::Never, Some("/s".to_owned()))
        );
        // A team may decide `always`; the user may still tighten it.
        assert_eq!(
            trust(vec![layer("/s", r#"{"workspace_trust":"always"}"#)]),
            (WorkspaceTrust::Always, Some("/s".to_owned()))
        );
        assert_eq!(
            trust(vec![
                layer("/s", r#"{"workspace_trust":"always"}"#),
                layer("/u", r#"{"workspace_trust":"ask"}"#),
            ]),
            (WorkspaceTrust::Ask, Some("/u".to_owned()))
        );
    }

    #[test]
    fn user_root_certificates_need_the_system_policy_to_allow_them() {
        let roots = |layers: Vec<Layer>| Policy::from_layers(layers).extra_root_certificates();
        let user = || layer("/u", r#"{"extra_root_certificates":["/u.pem"]}"#);
        // No system policy: the user decides.
        assert_eq!(roots(vec![user()]), vec![PathBuf::from("/u.pem")]);
        // A system policy that says nothing about it: the user's roots are set aside.
        let narrower = layer("/s", r#"{"http":["https://api.x.com"]}"#);
        let policy = Policy::from_layers(vec![narrower.clone(), user()]);
        assert!(policy.extra_root_certificates().is_empty());
        assert_eq!(
            policy.ignored_root_certificates(),
            vec![PathBuf::from("/u.pem")]
        );
        // The system's own roots always apply; the user's once allowed.
        let allowing = layer(
            "/s",
            r#"{"extra_root_certificates":["/s.pem"],"user_root_certificates":true}"#,
        );
        assert_eq!(
            roots(vec![allowing, user()]),
            vec![PathBuf::from("/s.pem"), PathBuf::from("/u.pem")]
        );
    }

    #[test]
    fn confinement_switches_hold_from_either_layer() {
        let policy = |json_s: &str, json_u: &str| {
            Policy::from_layers(vec![layer("/s", json_s), layer("/u", json_u)])
        };
        let p = policy(
            r#"{}"#,
            r#"{"confine_native":true,"require_confinement":true}"#,
        );
        assert!(p.confine_native());
        assert_eq!(p.confinement_required_by(), Some(Path::new("/u")));
        let p = policy(
            r#"{"require_confinement":true}"#,
            r#"{"require_confinement":false}"#,
        );
        assert_eq!(p.confinement_required_by(), Some(Path::new("/s")));
        // Network for the shell: granted by one, refused by none.
        assert!(!policy("{}", "{}").shell_network());
        assert!(policy("{}", r#"{"shell_network":true}"#).shell_network());
        assert!(!policy(r#"{"shell_network":false}"#, r#"{"shell_network":true}"#).shell_network());
    }

    fn new_key() -> String {
        minisign::KeyPair::generate_unencrypted_keypair()
            .unwrap_or_else(|e| panic!("{e}"))
            .pk
            .to_base64()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn publishers_are_the_intersection_and_require_signature_only_tightens() {
        let (a, b, c) = (new_key(), new_key(), new_key());
        let policy = |system: String, user: String| {
            Policy::from_layers(vec![layer("/s", &system), layer("/u", &user)])
        };
        let list = |keys: &[&String]| {
            serde_json::to_string(&keys.iter().map(|k| k.as_str()).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        // (system, user, trusted, listed, restricted by the system file)
        let cases: Vec<(String, String, Vec<&String>, Vec<&String>, bool)> = vec![
            ("{}".into(), "{}".into(), vec![], vec![], false),
            // The user's list alone: the user's keys.
            (
                "{}".into(),
                format!(r#"{{"publishers":{}}}"#, list(&[&a, &b])),
                vec![&a, &b],
                vec![&a, &b],
                false,
            ),
            // The system's alone: a ceiling in force.
            (
                format!(r#"{{"publishers":{}}}"#, list(&[&a])),
                "{}".into(),
                vec![&a],
                vec![&a],
                true,
            ),
            // Attack: the user adds a key outside the system's ceiling;
            // only the keys both list are trusted.
            (
                format!(r#"{{"publishers":{}}}"#, list(&[&a, &b])),
                format!(r#"{{"publishers":{}}}"#, list(&[&b, &c])),
                vec![&b],
                vec![&a, &b, &c],
                true,
            ),
        ];
        for (system, user, trusted, listed, restricted) in cases {
            let rules = policy(system.clone(), user.clone()).publisher_rules();
            let owned = |keys: Vec<&String>| keys.into_iter().cloned().collect::<Vec<_>>();
            assert_eq!(rules.trusted, owned(trusted), "{system} {user}");
            assert_eq!(rules.listed, owned(listed), "{system} {user}");
            assert_eq!(
                rules.restricted_by.as_deref(),
                restricted.then_some(Path::new("/s")),
                "{system} {user}"
            );
        }
        // Attack: the user file turns `require_signature` off.
        let rules = policy(
            r#"{"require_signature":true,"native_extensions":false}"#.into(),
            r#"{"require_signature":false,"native_extensions":true}"#.into(),
        )
        .publisher_rules();
        assert_eq!(
            rules.signature_required_by.as_deref(),
            Some(Path::new("/s"))
        );
        assert_eq!(rules.native_forbidden_by.as_deref(), Some(Path::new("/s")));
        let rules = policy("{}".into(), r#"{"require_signature":true}"#.into()).publisher_rules();
        assert_eq!(
            rules.signature_required_by.as_deref(),
            Some(Path::new("/u"))
        );
        assert_eq!(
            policy("{}".into(), "{}".into()).publisher_rules(),
            PublisherRules::default()
        );
    }

    #[test]
    fn registries_add_up_and_the_system_keys_hold_for_its_urls() {
        let (a, b) = (new_key(), new_key());
        let system = format!(
            r#"{{"registries":[{{"url":"https://team.example.com/index.json","keys":["{a}"]}}]}}"#
        );
        // Attack: the user file adds its own key to the team's registry.
        let user = format!(
            r#"{{"registries":[{{"url":"https://team.example.com/index.json","keys":["{b}"]}},
                {{"url":"https://mine.example.com/index.json","keys":["{b}"]}}]}}"#
        );
        let policy = Policy::from_layers(vec![layer("/u", &user), layer("/s", &system)]);
        let merged: Vec<(String, Vec<String>, PathBuf)> = policy
            .registries()
            .into_iter()
            .map(|r| (r.url, r.keys, r.path))
            .collect();
        assert_eq!(
            merged,
            vec![
                (
                    "https://team.example.com/index.json".to_owned(),
                    vec![a.clone()],
                    PathBuf::from("/s")
                ),
                (
                    "https://mine.example.com/index.json".to_owned(),
                    vec![b.clone()],
                    PathBuf::from("/u")
                ),
            ]
        );
    }

    #[test]
    fn registry_urls_must_be_https_and_keys_must_parse() {
        let key = new_key();
        let path = Path::new("/etc/zotbox/policy.json");
        let cases = [
            (
                format!(r#"{{"registries":[{{"url":"http://x.example.com/index.json","keys":["{key}"]}}]}}"#),
                "`/etc/zotbox/policy.json`: field `registries[0].url` `http://x.example.com/index.json` \
                 is refused: a registry URL must be `https://` (its index is fetched over TLS as \
                 well as signed)",
            ),
            (
                format!(r#"{{"registries":[{{"url":"file:///srv/index.json","keys":["{key}"]}}]}}"#),
                "`/etc/zotbox/policy.json`: field `registries[0].url` `file:///srv/index.json` is \
                 refused: a registry URL must be `https://` (its index is fetched over TLS as well \
                 as signed)",
            ),
            (
                r#"{"registries":[{"url":"https://x.example.com/index.json","keys":[]}]}"#.to_owned(),
                "`/etc/zotbox/policy.json`: field `registries[0].keys` is empty; list the public \
                 key(s) that sign the registry's index",
            ),
            (
                r#"{"publishers":["RWQnot-a-key"]}"#.to_owned(),
                "`/etc/zotbox/policy.json`: field `publishers[0]` `RWQnot-a-key` is not a minisign \
                 public key; list the 56-character base64 line `zotbox keygen` or `minisign -G` \
                 prints",
            ),
            (
                r#"{"registries":[{"url":"https://x.example.com/i.json","keys":["k"],"mirror":"x"}]}"#
                    .to_owned(),
                "`/etc/zotbox/policy.json`: field `registries[0].mirror`: unknown field `mirror`",
            ),
        ];
        for (json, expected) in cases {
            let err = match parse(&json, path) {
                Err(err) => err.to_string(),
                Ok(_) => panic!("{json}: accepted"),
            };
            assert!(err.starts_with(expected), "{json}: {err}");
        }
    }
}
