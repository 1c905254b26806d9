//! `extension.json`: parsing and validation, with errors that name the file and field.
//!
//! The format is zot's (`name`, `version`, `exec`, `args`, `language`,
//! `description`, `enabled`) plus zotbox's additions (`wasm`, `capabilities`,
//! `limits`, `files`). Unknown keys are reported as warnings, never fatal, so a
//! manifest written for a newer zot still loads.

use crate::user_file::FileError;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's file name inside an extension's folder.
pub const MANIFEST_FILE: &str = "extension.json";

/// The longest accepted extension name.
const MAX_NAME_LEN: usize = 64;

/// An `extension.json` as written on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct RawManifest {
    /// The extension's unique name.
    pub name: String,
    /// Informational version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// What the extension is. Optional for a program (`wasm` or `exec`
    /// says it); `"data"` for a data package, which has no program and
    /// brings the tools, plugins and skills of its `tools/`, `plugins/` and
    /// `skills/` folders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<DeclaredKind>,
    /// The executable zot launches (for a wasm extension, zot's launcher).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    /// Extra arguments for `exec`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Informational: the language the extension is written in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// One line about the extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `false` keeps the extension installed but not started. Default `true`.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A WebAssembly program zotbox runs in its sandbox, relative to the folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<String>,
    /// Files an install copies besides the manifest and the program: globs
    /// relative to the folder (`assets/**`, `prompts/*.md`, `README.md`); a
    /// pattern naming a folder takes everything under it. Default: none.
    /// Build and VCS folders (`target/`, `.git/`, …) are never copied, and
    /// neither is anything not named here (sources stay where they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// What the extension asks to be allowed. Absent means nothing.
    #[serde(default, skip_serializing_if = "Capabilities::is_empty")]
    pub capabilities: Capabilities,
    /// Resource limits; absent fields take safe defaults.
    #[serde(default, skip_serializing_if = "Limits::is_default")]
    pub limits: Limits,
}

fn default_true() -> bool {
    true
}

/// A manifest's `kind` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeclaredKind {
    /// A WebAssembly program (`wasm`).
    Wasm,
    /// A native program (`exec`).
    Native,
    /// No program: a data package.
    Data,
}

impl DeclaredKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Wasm => "wasm",
            Self::Native => "native",
            Self::Data => "data",
        }
    }
}

/// The capabilities an extension declares. Each list empty means none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Capabilities {
    /// HTTPS origins (`https://host[:port]`, `*.domain` allowed) it may fetch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<String>,
    /// Workspace globs it may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Workspace globs it may write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
    /// Command patterns (program and argument globs) it may run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shell: Vec<String>,
    /// Environment variables it may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Events it may see and intercept past the start and end of a session
    /// and a turn, which any extension sees: `tool_call` (every tool call
    /// of the agent, with its arguments), `assistant_message` (the model's
    /// words). See [`crate::policy::EventRights`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// Events of `events` whose content its intercept may change:
    /// `tool_call` (the arguments, zot's own shell commands included),
    /// `assistant_message` (the text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrite: Vec<String>,
    /// Secrets it may use without reading them, by name (`zotbox secret
    /// set NAME`), each with where it may travel. A wasm guest writes
    /// `{{secret:NAME}}` and the host puts the value in just before sending;
    /// a native extension gets the value as the variable its `env` names.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secrets: std::collections::BTreeMap<String, SecretSpec>,
}

/// Where one declared secret may travel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct SecretSpec {
    /// The origins (`https://host[:port]`, as in `http`) whose requests may
    /// carry it, in a header. Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<String>,
    /// Whether the query string of such a request may carry it too (a URL
    /// ends up in server logs and proxies, so default no).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub query: bool,
    /// For a native extension only: the environment variable it receives
    /// the value in. A native extension gets no secret without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
}

impl SecretSpec {
    /// Where the secret may travel, in words: `https://a, https://b (header
    /// or query); env KEY`, or `nowhere`.
    pub fn destinations(&self) -> String {
        let mut parts = Vec::new();
        if !self.http.is_empty() {
            let place = if self.query {
                "header or query"
            } else {
                "header"
            };
            parts.push(format!("{} ({place})", self.http.join(", ")));
        }
        if let Some(env) = &self.env {
            parts.push(format!("env {env}"));
        }
        if parts.is_empty() {
            "nowhere".to_owned()
        } else {
            parts.join("; ")
        }
    }
}

impl Capabilities {
    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.http.is_empty()
            && self.read.is_empty()
            && self.write.is_empty()
            && self.shell.is_empty()
            && self.env.is_empty()
            && self.events.is_empty()
            && self.rewrite.is_empty()
            && self.secrets.is_empty()
    }

    fn validate_events(&self, path: &Path) -> Result<(), FileError> {
        let invalid = |field: String, problem: String| FileError::Invalid {
            path: path.to_owned(),
            field,
            problem,
        };
        if let Some((index, problem)) = event_list_problem(&self.events, false) {
            return Err(invalid(format!("capabilities.events[{index}]"), problem));
        }
        if let Some((index, problem)) = event_list_problem(&self.rewrite, true) {
            return Err(invalid(format!("capabilities.rewrite[{index}]"), problem));
        }
        for (index, event) in self.rewrite.iter().enumerate() {
            if !self.events.contains(event) {
                return Err(invalid(
                    format!("capabilities.rewrite[{index}]"),
                    format!(
                        "`{event}` is not among `capabilities.events`; an extension rewrites \
                         only what it intercepts"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn validate_secrets(&self, path: &Path) -> Result<(), FileError> {
        for (name, spec) in &self.secrets {
            let invalid = |field: String, problem: String| FileError::Invalid {
                path: path.to_owned(),
                field,
                problem,
            };
            if !crate::capability::http::valid_secret_name(name) {
                return Err(invalid(
                    "capabilities.secrets".to_owned(),
                    format!(
                        "names `{}`; a secret name is 1 to 64 of `A-Z a-z 0-9 _ . -`",
                        crate::text::Shown(name)
                    ),
                ));
            }
            for (index, origin) in spec.http.iter().enumerate() {
                if let Err(err) = crate::capability::http::Origin::parse(origin) {
                    return Err(invalid(
                        format!("capabilities.secrets.{name}.http[{index}]"),
                        err.of_field(),
                    ));
                }
            }
            if let Some(env) = &spec.env
                && !crate::capability::is_variable_name(env)
            {
                return Err(invalid(
                    format!("capabilities.secrets.{name}.env"),
                    "is not a variable name; use `A-Z a-z 0-9 _`, not starting with a digit"
                        .to_owned(),
                ));
            }
        }
        Ok(())
    }
}

/// The first name of an `events` list (a `rewrite` one: `rewrite`) that
/// cannot be one, with its index and why: an event name is 1 to 64 plain
/// characters (a name no frame can carry would grant nothing, silently),
/// and only `tool_call` and `assistant_message` can be rewritten.
pub fn event_list_problem(names: &[String], rewrite: bool) -> Option<(usize, String)> {
    names.iter().enumerate().find_map(|(index, name)| {
        let plain = !name.is_empty()
            && name.chars().count() <= MAX_NAME_LEN
            && !crate::text::has_unsafe(name);
        let problem = if !plain {
            format!(
                "`{}` is not an event name (1 to {MAX_NAME_LEN} plain characters)",
                crate::text::Shown(name)
            )
        } else if rewrite && !zotbox_protocol::event_name::REWRITABLE.contains(&name.as_str()) {
            format!(
                "`{}` cannot be rewritten; only `tool_call` and `assistant_message` can",
                crate::text::Shown(name)
            )
        } else {
            return None;
        };
        Some((index, problem))
    })
}

/// Resource limits from the manifest. `None` takes the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Limits {
    /// Linear memory ceiling of a wasm guest, MiB. Default 128; 1..=4096.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Deadline of one tool call or command, ms. Default 60 000; 1..=3 600 000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// Deadline of one intercept answer, ms. Default 5 000; 1..=60 000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intercept_timeout_ms: Option<u64>,
}

impl Limits {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    fn validate(&self, path: &Path) -> Result<(), FileError> {
        let checks: [(&'static str, Option<u64>, u64, u64); 3] = [
            ("limits.memory_mb", self.memory_mb, 1, 4096),
            ("limits.tool_timeout_ms", self.tool_timeout_ms, 1, 3_600_000),
            (
                "limits.intercept_timeout_ms",
                self.intercept_timeout_ms,
                1,
                60_000,
            ),
        ];
        for (field, value, min, max) in checks {
            if let Some(value) = value
                && !(min..=max).contains(&value)
            {
                return Err(FileError::Invalid {
                    path: path.to_owned(),
                    field: field.to_owned(),
                    problem: format!("is {value}; it must be between {min} and {max}"),
                });
            }
        }
        Ok(())
    }
}

/// How an extension runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A subprocess speaking the protocol on its pipes.
    Native {
        /// `exec` as written.
        exec: String,
        /// `args` as written.
        args: Vec<String>,
    },
    /// A WebAssembly program run in the sandbox.
    Wasm {
        /// The resolved path of the `.wasm` file.
        path: PathBuf,
    },
    /// No program: a data package (`"kind": "data"`), whose tools, plugins
    /// and skills the host loads. It is installed under `packages/`, never
    /// started.
    Data,
}

/// A validated manifest, with the folder it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest as written.
    pub raw: RawManifest,
    /// The manifest file.
    pub path: PathBuf,
    /// The extension's folder (the manifest's parent).
    pub dir: PathBuf,
    /// How it runs.
    pub program: Program,
    /// Unknown keys found in the file (`a.b` paths), for warnings.
    pub unknown_keys: Vec<String>,
    /// SHA-256 of the text it was parsed from: a workspace's trust is
    /// checked against what was parsed, not against the file later.
    pub sha256: [u8; 32],
}

impl Manifest {
    /// The extension's name.
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    /// The extension's kind as shown to users: `wasm`, `native` or `data`.
    pub fn kind(&self) -> &'static str {
        match self.program {
            Program::Native { .. } => "native",
            Program::Wasm { .. } => "wasm",
            Program::Data => "data",
        }
    }

    /// Whether it is a data package (no program).
    pub fn is_data(&self) -> bool {
        matches!(self.program, Program::Data)
    }

    /// Reads and validates `path` (an `extension.json`).
    ///
    /// # Errors
    ///
    /// [`FileError`] naming the file and, where one is at fault, the field.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        // A workspace's manifest is its author's: capped, like every file
        // someone else wrote.
        let text = crate::user_file::read_text(path, crate::user_file::MAX_MANIFEST_BYTES)?;
        Self::parse(&text, path)
    }

    /// Validates manifest text as if read from `path`.
    ///
    /// # Errors
    ///
    /// As [`Manifest::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, FileError> {
        let crate::user_file::WithUnknown {
            value: raw,
            unknown_keys,
        } = crate::user_file::parse::<RawManifest>(text).map_err(|detail| FileError::Parse {
            path: path.to_owned(),
            detail,
        })?;
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        validate_name(&raw.name).map_err(|problem| FileError::Invalid {
            path: path.to_owned(),
            field: "name".to_owned(),
            problem,
        })?;
        validate_version(&raw.version).map_err(|problem| FileError::Invalid {
            path: path.to_owned(),
            field: "version".to_owned(),
            problem,
        })?;
        raw.limits.validate(path)?;
        raw.capabilities.validate_secrets(path)?;
        raw.capabilities.validate_events(path)?;
        for (index, pattern) in raw.files.iter().enumerate() {
            validate_files_pattern(pattern).map_err(|problem| FileError::Invalid {
                path: path.to_owned(),
                field: format!("files[{index}]"),
                problem,
            })?;
        }
        let program = program_of(&raw, path, &dir)?;
        Ok(Self {
            raw,
            path: path.to_owned(),
            dir,
            program,
            unknown_keys,
            sha256: <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()).into(),
        })
    }
}

/// How the manifest at `path` runs: its `kind` (when written) must agree
/// with its `wasm` and `exec`; a data package has neither, and declares
/// no capabilities or limits of its own (its tools' are derived from them).
fn program_of(raw: &RawManifest, path: &Path, dir: &Path) -> Result<Program, FileError> {
    let invalid = |field: &str, problem: String| FileError::Invalid {
        path: path.to_owned(),
        field: field.to_owned(),
        problem,
    };
    match raw.kind {
        Some(DeclaredKind::Data) => {
            for (field, present) in [("wasm", raw.wasm.is_some()), ("exec", raw.exec.is_some())] {
                if present {
                    return Err(invalid(
                        field,
                        "is set, but `kind` is `data`: a data package has no program".to_owned(),
                    ));
                }
            }
            if !raw.capabilities.is_empty() {
                return Err(invalid(
                    "capabilities",
                    "is set, but `kind` is `data`: a data package's capabilities are those of \
                     its tools, derived from them"
                        .to_owned(),
                ));
            }
            if !raw.limits.is_default() {
                return Err(invalid(
                    "limits",
                    "is set, but `kind` is `data`: a data package runs no program to limit"
                        .to_owned(),
                ));
            }
            return Ok(Program::Data);
        }
        Some(kind @ DeclaredKind::Wasm) if raw.wasm.is_none() => {
            return Err(invalid(
                "kind",
                format!("is `{}`, but there is no `wasm` field", kind.as_str()),
            ));
        }
        Some(kind @ DeclaredKind::Native) if raw.wasm.is_some() || raw.exec.is_none() => {
            return Err(invalid(
                "kind",
                format!("is `{}`, which needs `exec` and no `wasm`", kind.as_str()),
            ));
        }
        _ => {}
    }
    {
        let program = match (&raw.wasm, &raw.exec) {
            (Some(wasm), _) => {
                if wasm.trim().is_empty() {
                    return Err(FileError::Invalid {
                        path: path.to_owned(),
                        field: "wasm".to_owned(),
                        problem: "is empty".to_owned(),
                    });
                }
                validate_wasm_path(wasm).map_err(|problem| FileError::Invalid {
                    path: path.to_owned(),
                    field: "wasm".to_owned(),
                    problem,
                })?;
                // `./x.wasm` and `x.wasm` name the same file; keep paths tidy.
                let relative: PathBuf = Path::new(wasm)
                    .components()
                    .filter(|c| !matches!(c, std::path::Component::CurDir))
                    .collect();
                Program::Wasm {
                    path: dir.join(relative),
                }
            }
            (None, Some(exec)) if !exec.trim().is_empty() => Program::Native {
                exec: exec.clone(),
                args: raw.args.clone(),
            },
            (None, Some(_)) => {
                return Err(FileError::Invalid {
                    path: path.to_owned(),
                    field: "exec".to_owned(),
                    problem: "is empty".to_owned(),
                });
            }
            (None, None) => {
                return Err(FileError::Invalid {
                    path: path.to_owned(),
                    field: "exec".to_owned(),
                    problem: "is missing; a manifest needs `exec` (a native extension), \
                              `wasm` (a sandboxed one) or `\"kind\": \"data\"` (a data package)"
                        .to_owned(),
                });
            }
        };
        Ok(program)
    }
}

impl Manifest {
    /// The `wasm` field as a folder-relative path (`./x.wasm` → `x.wasm`),
    /// or `None` for a native extension.
    pub fn wasm_relative(&self) -> Option<String> {
        let written = self.raw.wasm.as_deref()?;
        Some(relative_path(written))
    }

    /// When the wasm file this manifest names does not exist: what to do
    /// about it, as a phrase (`` `x.wasm` is not built yet: run `zotbox ext
    /// build DIR` ``). `None` when it exists or the extension is native.
    pub fn missing_wasm(&self) -> Option<String> {
        let Program::Wasm { path } = &self.program else {
            return None;
        };
        if std::fs::symlink_metadata(path).is_ok() {
            return None;
        }
        let relative = self.wasm_relative().unwrap_or_default();
        let shown = crate::text::Shown(&relative);
        let dir = self.dir.display().to_string();
        let dir = crate::text::Shown(&dir);
        let folder_missing = match Path::new(&relative).parent() {
            Some(parent) if !parent.as_os_str().is_empty() && !self.dir.join(parent).is_dir() => {
                Some(parent.display().to_string())
            }
            _ => None,
        };
        Some(if self.dir.join("Cargo.toml").is_file() {
            match folder_missing {
                Some(folder) => format!(
                    "`{shown}` is not built yet (its folder `{}` does not exist either): run \
                     `zotbox ext build {dir}`, which creates it",
                    crate::text::Shown(&folder)
                ),
                None => format!("`{shown}` is not built yet: run `zotbox ext build {dir}`"),
            }
        } else {
            match folder_missing {
                Some(folder) => format!(
                    "`{shown}` does not exist: its folder `{}` is missing from `{dir}`; build the \
                     wasm file there, or fix the `wasm` field",
                    crate::text::Shown(&folder)
                ),
                None => format!(
                    "`{shown}` does not exist in `{dir}`: build the wasm file there, or fix the \
                     `wasm` field"
                ),
            }
        })
    }
}

impl Manifest {
    /// For a native extension that sent no `hello` in time: the likely
    /// cause when it is built as it starts (`cargo run`), as a phrase.
    pub fn hello_hint(&self) -> Option<String> {
        let Program::Native { exec, args } = &self.program else {
            return None;
        };
        let program = exec.rsplit('/').next().unwrap_or(exec);
        if program == "cargo" {
            let dir = self.dir.display().to_string();
            return Some(format!(
                "it is started with `{}{}`, which builds it first: build it before (`cargo build \
                 --release` in `{}`) and make `exec` the built binary",
                crate::text::Shown(exec),
                args.iter()
                    .map(|arg| format!(" {}", crate::text::Shown(arg)))
                    .collect::<String>(),
                crate::text::Shown(&dir)
            ));
        }
        self.dir.join("Cargo.toml").is_file().then(|| {
            "if it is built as it starts (`cargo run`), build it first and make `exec` the built \
             binary"
                .to_owned()
        })
    }
}

/// A path as written in a manifest, folder-relative and tidy
/// (`./a//b` → `a/b`).
pub fn relative_path(written: &str) -> String {
    written
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Checks one `files` pattern: a glob relative to the folder that cannot
/// leave it, since what it selects is copied by an install.
fn validate_files_pattern(pattern: &str) -> Result<(), String> {
    let shown = crate::text::Shown(pattern);
    if relative_path(pattern).is_empty() {
        return Err(format!(
            "`{shown}` names no file; write a glob relative to the extension's folder, such as \
             `assets/**`"
        ));
    }
    if pattern.starts_with('/') {
        return Err(format!(
            "`{shown}` is absolute; write a glob relative to the extension's folder"
        ));
    }
    if pattern.split('/').any(|part| part == "..") {
        return Err(format!(
            "`{shown}` contains `..`; an install copies only files inside the extension's folder"
        ));
    }
    globset::Glob::new(pattern)
        .map(|_| ())
        .map_err(|err| format!("`{shown}` is not a glob: {}", err.kind()))
}

/// Checks an extension name: it becomes part of file names (`ext-<name>.log`)
/// and folder names, so it must be a plain word.
///
/// # Errors
///
/// A phrase saying what is wrong.
pub fn validate_name(name: &str) -> Result<(), String> {
    validate_name_shape(name)?;
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "`{}` contains `{}`; use letters, digits, `-`, `_` and `.`",
            crate::text::Shown(name),
            crate::text::Shown(&bad.to_string())
        ));
    }
    Ok(())
}

/// The part of [`validate_name`] that is not about which characters a
/// name holds: not empty, not too long, not starting with `.` or `-`. For
/// a caller whose names allow fewer characters (`zotbox new`: a crate name
/// has no `.`), so that its refusal names its own rule.
///
/// # Errors
///
/// A phrase saying what is wrong.
pub fn validate_name_shape(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("is longer than {MAX_NAME_LEN} characters"));
    }
    let shown = crate::text::Shown(name);
    if name.starts_with('.') {
        return Err(format!("`{shown}` must not start with a dot"));
    }
    // `zotbox ext remove -rf` would read the name as options.
    if name.starts_with('-') {
        return Err(format!(
            "`{shown}` must not start with `-` (a command line would read it as an option)"
        ));
    }
    Ok(())
}

/// Checks a `wasm` path: relative, and without `..`, so it names a file
/// inside the extension's folder. What was approved at install is that
/// folder's content; a path leading elsewhere would let the code change
/// after approval (`THREATS.md` rule 3).
fn validate_wasm_path(wasm: &str) -> Result<(), String> {
    let shown = crate::text::Shown(wasm);
    if Path::new(wasm).is_absolute() {
        return Err(format!(
            "`{shown}` is absolute; name a file inside the extension's folder, relative to it"
        ));
    }
    if Path::new(wasm)
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(format!(
            "`{shown}` contains `..`; name a file inside the extension's folder"
        ));
    }
    Ok(())
}

/// Checks a version string: shown in every listing, so it must not carry
/// characters a terminal acts on.
fn validate_version(version: &str) -> Result<(), String> {
    if crate::text::has_unsafe(version) {
        return Err(format!(
            "`{}` contains control or invisible formatting characters",
            crate::text::Shown(version)
        ));
    }
    if version.chars().count() > MAX_NAME_LEN {
        return Err(format!("is longer than {MAX_NAME_LEN} characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, String> {
        Manifest::parse(text, Path::new("/x/ext/extension.json")).map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_zot_manifests_and_defaults_enabled() {
        let manifest = parse(
            r#"{"name":"weather","version":"1.0.0","exec":"./weather","args":["-v"],
                "language":"go","description":"d"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(manifest.raw.enabled);
        assert_eq!(manifest.kind(), "native");
        assert_eq!(manifest.dir, Path::new("/x/ext"));
        assert!(manifest.unknown_keys.is_empty());
    }

    #[test]
    fn wasm_wins_over_exec_and_resolves_against_the_folder() {
        let manifest = parse(r#"{"name":"w","wasm":"./w.wasm","exec":"zotbox","args":["run"]}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            manifest.program,
            Program::Wasm {
                path: PathBuf::from("/x/ext/w.wasm")
            }
        );
    }

    #[test]
    fn a_declared_kind_must_agree_with_the_program() {
        let data = parse(r#"{"name":"kit","version":"1.0.0","kind":"data"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((data.kind(), data.is_data()), ("data", true));
        assert_eq!(data.program, Program::Data);
        let wasm = parse(r#"{"name":"w","kind":"wasm","wasm":"w.wasm"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wasm.kind(), "wasm");
        let cases = [
            (
                r#"{"name":"k","kind":"data","exec":"./run"}"#,
                "field `exec` is set, but `kind` is `data`: a data package has no program",
            ),
            (
                r#"{"name":"k","kind":"data","wasm":"k.wasm"}"#,
                "field `wasm` is set, but `kind` is `data`",
            ),
            (
                r#"{"name":"k","kind":"data","capabilities":{"http":["https://a.example"]}}"#,
                "field `capabilities` is set, but `kind` is `data`: a data package's \
                 capabilities are those of its tools",
            ),
            (
                r#"{"name":"k","kind":"data","limits":{"memory_mb":8}}"#,
                "field `limits` is set, but `kind` is `data`",
            ),
            (
                r#"{"name":"k","kind":"wasm","exec":"./run"}"#,
                "field `kind` is `wasm`, but there is no `wasm` field",
            ),
            (
                r#"{"name":"k","kind":"native","wasm":"k.wasm","exec":"./run"}"#,
                "field `kind` is `native`, which needs `exec` and no `wasm`",
            ),
            (r#"{"name":"k","kind":"python","exec":"x"}"#, "field `kind`"),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    /// Attack: an author's event names reach every consent screen, and a
    /// rewrite is the widest grant there is: one that could not be read
    /// as it is, or asks to change what cannot be changed or intercepted,
    /// is refused naming the field.
    #[test]
    fn event_and_rewrite_lists_are_checked_naming_the_field() {
        let with = |capabilities: &str| {
            format!(r#"{{"name":"g","wasm":"g.wasm","capabilities":{capabilities}}}"#)
        };
        let granted = parse(&with(
            r#"{"events":["tool_call","assistant_message","custom"],"rewrite":["tool_call"]}"#,
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(granted.raw.capabilities.rewrite, ["tool_call"]);
        let cases = [
            (
                r#"{"events":["tool_call\u001b[2J"]}"#,
                "field `capabilities.events[0]` `tool_call\\u{1b}[2J` is not an event name \
                 (1 to 64 plain characters)",
            ),
            (
                r#"{"events":["tool_call",""]}"#,
                "field `capabilities.events[1]` `` is not an event name",
            ),
            (
                r#"{"events":["turn_start"],"rewrite":["turn_start"]}"#,
                "field `capabilities.rewrite[0]` `turn_start` cannot be rewritten; only \
                 `tool_call` and `assistant_message` can",
            ),
            (
                r#"{"rewrite":["tool_call"]}"#,
                "field `capabilities.rewrite[0]` `tool_call` is not among \
                 `capabilities.events`; an extension rewrites only what it intercepts",
            ),
        ];
        for (capabilities, expected) in cases {
            let err = parse(&with(capabilities)).err().unwrap_or_default();
            assert!(err.contains(expected), "{capabilities}: {err}");
        }
        // The policy's ceilings are read by the same rule.
        let policy = |text: &str| {
            crate::policy::Policy::load(Path::new("/nonexistent/system.json"), &write_policy(text))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            policy(r#"{"rewrite":["turn_start"]}"#).contains(
                "field `rewrite[0]` `turn_start` cannot be rewritten; only `tool_call` and \
                 `assistant_message` can"
            ),
            "{}",
            policy(r#"{"rewrite":["turn_start"]}"#)
        );
        assert!(policy(r#"{"events":["a\nb"]}"#).contains("field `events[0]`"));
    }

    /// A user policy file holding `text`, kept for the test's run.
    fn write_policy(text: &str) -> PathBuf {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.keep().join("policy.json");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        path
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let cases = [
            // Required field missing.
            (r#"{"exec":"./a"}"#, "missing field `name`"),
            // Wrong type, with the field path.
            (
                r#"{"name":"a","exec":3}"#,
                "field `exec`: invalid type: integer `3`",
            ),
            (
                r#"{"name":"a","exec":"x","args":"-v"}"#,
                "field `args`: invalid type",
            ),
            (
                r#"{"name":"a","exec":"x","enabled":"yes"}"#,
                "field `enabled`",
            ),
            // Neither exec nor wasm.
            (r#"{"name":"a"}"#, "field `exec` is missing"),
            (r#"{"name":"a","exec":"  "}"#, "field `exec` is empty"),
            // Names that would escape the logs folder.
            (
                r#"{"name":"../evil","exec":"x"}"#,
                "field `name` `../evil` must not start",
            ),
            (r#"{"name":"a/b","exec":"x"}"#, "contains `/`"),
            (
                r#"{"name":"-rf","exec":"x"}"#,
                "field `name` `-rf` must not start with `-` (a command line would read it as an option)",
            ),
            (
                r#"{"name":"Ünï","exec":"x"}"#,
                "field `name` `Ünï` contains `Ü`",
            ),
            (r#"{"name":"","exec":"x"}"#, "field `name` is empty"),
            // Attack: code outside the folder, which can change after approval.
            (
                r#"{"name":"a","wasm":"/tmp/x.wasm"}"#,
                "field `wasm` `/tmp/x.wasm` is absolute; name a file inside the extension's folder",
            ),
            (
                r#"{"name":"a","wasm":"../x.wasm"}"#,
                "field `wasm` `../x.wasm` contains `..`; name a file inside the extension's folder",
            ),
            (
                r#"{"name":"a","wasm":"./sub/../../x.wasm"}"#,
                "field `wasm` `./sub/../../x.wasm` contains `..`",
            ),
            // Attack: `files` selecting what lies outside the folder.
            (
                r#"{"name":"a","wasm":"a.wasm","files":["../secret/**"]}"#,
                "field `files[0]` `../secret/**` contains `..`; an install copies only files \
                 inside the extension's folder",
            ),
            (
                r#"{"name":"a","wasm":"a.wasm","files":["ok/**","/etc/**"]}"#,
                "field `files[1]` `/etc/**` is absolute",
            ),
            (
                r#"{"name":"a","wasm":"a.wasm","files":["./"]}"#,
                "field `files[0]` `./` names no file",
            ),
            (
                r#"{"name":"a","wasm":"a.wasm","files":["a[b"]}"#,
                "field `files[0]` `a[b` is not a glob: unclosed character class",
            ),
            // Limits out of range.
            (
                r#"{"name":"a","wasm":"a.wasm","limits":{"memory_mb":0}}"#,
                "limits.memory_mb` is 0",
            ),
            (
                r#"{"name":"a","wasm":"a.wasm","limits":{"memory_mb":-1}}"#,
                "field `limits.memory_mb`",
            ),
            // Not JSON at all.
            ("{", "EOF while parsing"),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(expected), "{text}: `{err}` lacks `{expected}`");
            assert!(err.contains("/x/ext/extension.json"), "{err}");
        }
    }

    #[test]
    fn a_missing_wasm_file_and_a_silent_cargo_run_name_the_next_step() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path();
        let load = |text: &str| {
            Manifest::parse(text, &dir.join(MANIFEST_FILE)).unwrap_or_else(|e| panic!("{e}"))
        };
        let shown = dir.display();
        // (manifest, whether a Cargo.toml is there, the phrase)
        let cases = [
            (
                r#"{"name":"a","wasm":"a.wasm"}"#,
                false,
                format!(
                    "`a.wasm` does not exist in `{shown}`: build the wasm file there, or fix the \
                     `wasm` field"
                ),
            ),
            (
                r#"{"name":"a","wasm":"./out/a.wasm"}"#,
                true,
                format!(
                    "`out/a.wasm` is not built yet (its folder `out` does not exist either): run \
                     `zotbox ext build {shown}`, which creates it"
                ),
            ),
        ];
        for (text, cargo, expected) in cases {
            if cargo {
                std::fs::write(dir.join("Cargo.toml"), "").unwrap_or_else(|e| panic!("{e}"));
            }
            assert_eq!(load(text).missing_wasm(), Some(expected), "{text}");
        }
        std::fs::create_dir_all(dir.join("out")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("out/a.wasm"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            load(r#"{"name":"a","wasm":"out/a.wasm"}"#).missing_wasm(),
            None
        );
        // Native: `cargo run` is named with its arguments; any other crate
        // gets the general hint; a wasm guest none.
        assert_eq!(
            load(r#"{"name":"a","exec":"cargo","args":["run","-q"]}"#).hello_hint(),
            Some(format!(
                "it is started with `cargo run -q`, which builds it first: build it before \
                 (`cargo build --release` in `{shown}`) and make `exec` the built binary"
            ))
        );
        assert_eq!(
            load(r#"{"name":"a","exec":"./run.sh"}"#).hello_hint(),
            Some(
                "if it is built as it starts (`cargo run`), build it first and make `exec` the \
                 built binary"
                    .to_owned()
            )
        );
        assert_eq!(
            load(r#"{"name":"a","wasm":"out/a.wasm"}"#).hello_hint(),
            None
        );
    }

    #[test]
    fn unknown_keys_are_collected_not_fatal() {
        let manifest = parse(r#"{"name":"a","exec":"x","colour":"blue","limits":{"cpu":1}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(manifest.unknown_keys, vec!["colour", "limits.cpu"]);
    }
}
