//! `$ZOT_HOME`: where zot (and zotbox) keep extensions, logs and caches.

use std::path::{Path, PathBuf};

/// The folder layout under `$ZOT_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZotHome {
    root: PathBuf,
}

impl ZotHome {
    /// A home rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// zot's default: `$ZOT_HOME`, else `$XDG_STATE_HOME/zot`, else
    /// `~/.local/state/zot`; `None` when none of these can be known.
    pub fn from_env() -> Option<Self> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(home) = var("ZOT_HOME") {
            return Some(Self::new(home));
        }
        if let Some(state) = var("XDG_STATE_HOME") {
            return Some(Self::new(PathBuf::from(state).join("zot")));
        }
        var("HOME").map(|home| Self::new(PathBuf::from(home).join(".local/state/zot")))
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `extensions/`: one folder per installed extension.
    pub fn extensions_dir(&self) -> PathBuf {
        self.root.join("extensions")
    }

    /// `logs/`: extension stderr logs and the audit log.
    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `logs/ext-<name>.log`: one extension's stderr.
    pub fn extension_log(&self, name: &str) -> PathBuf {
        self.logs_dir().join(format!("ext-{name}.log"))
    }

    /// `logs/audit.jsonl`: every capability use and guard decision.
    pub fn audit_log(&self) -> PathBuf {
        self.logs_dir().join("audit.jsonl")
    }

    /// `policy.json`: the user's policy, which can only narrow the system one.
    pub fn user_policy(&self) -> PathBuf {
        self.root.join("policy.json")
    }

    /// `trust.json`: the workspaces the user trusted, each bound to its
    /// canonical path and a hash of the files that can run.
    pub fn trust_file(&self) -> PathBuf {
        self.root.join("trust.json")
    }

    /// `cache/`: compiled wasm artifacts.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache")
    }
}

/// Opens `path` for appending, creating it and its folder: how every log
/// under `$ZOT_HOME/logs` is written.
pub(crate) fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}
