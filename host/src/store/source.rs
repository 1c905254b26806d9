//! Where an install comes from: a folder, a git repository, an `https://`
//! archive or a registry entry, and how the first three are fetched into
//! a private folder that `install::plan` then reads like any folder.
//!
//! # Rules
//!
//! 1. **Parsing** ([`Source::parse`]), in this order:
//!    - a folder that exists is a [`Source::Folder`], whatever it looks like,
//!      but for a bare `NAME[@VERSION]` (no `/`), which is refused as
//!      ambiguous: a repository the user is in would otherwise choose what
//!      `ext install notes` installs (`./notes` names the folder);
//!    - text starting with `-` is refused: it must never become an option
//!      of `git` or anything else;
//!    - `git+URL[#REV]`, an `https://…` URL whose path ends in `.git`, and a
//!      `file://` URL are [`Source::Git`]; the URL after `git+` must be
//!      `https://`, `file://` or a local path (`/…`, `./…`, `../…`);
//!    - an `https://…` URL whose path ends in `.tar.gz` or `.tgz` is a
//!      [`Source::Archive`], with an optional `#sha256=HEX` (64 hex digits);
//!    - any other URL is refused: `http://` (not encrypted), `ssh://`,
//!      `git://`, `ext::` (runs a command), `user@host:path` and unknown schemes;
//!    - text with a `/`, or `.`/`..`, is a [`Source::Folder`] (a missing one
//!      is reported by the install as today);
//!    - `NAME[@VERSION]`, with a valid extension name, is a [`Source::Registry`].
//! 2. **Git** runs the real `git` with no terminal prompt, no hooks
//!    (`core.hooksPath=/dev/null`), no submodules, only the `https` and
//!    `file` transports (`protocol.allow=never` otherwise, also for
//!    redirects and anything a repository's config names), no inherited
//!    `GIT_DIR`-style variables, the URL after `--`, and a time cap. It
//!    clones without checkout, resolves `#REV` (a commit, a tag or a
//!    branch; the remote's `HEAD` without one) to a commit, checks its
//!    tree against an archive's caps (100 MiB of files, 10 000 entries)
//!    before anything is written, checks it out detached with attributes
//!    read from the empty tree (no filter the repository names runs), and
//!    records it.
//! 3. **Archive** downloads through [`super::fetch`], checks `#sha256`
//!    before anything is unpacked (a mismatch unpacks nothing), and
//!    unpacks with [`super::unpack`] into a fresh private folder; its
//!    SHA-256 is recorded either way.
//! 4. **Registry** entries are not fetched here.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::fetch::{FetchError, Limits};
use super::install::MAX_INSTALL_BYTES;
use super::unpack::{Caps, MAX_ENTRIES, UnpackError};
use crate::capability::http::HttpConfig;
use crate::text::Shown;
use crate::text::hex;

/// How long one git command may run.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where an extension comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An extension folder on this machine.
    Folder(PathBuf),
    /// A git repository, at `rev` (a commit, tag or branch) or its `HEAD`.
    Git {
        /// `https://…`, `file://…` or a local path.
        url: String,
        /// What `#REV` pinned.
        rev: Option<String>,
    },
    /// A `.tar.gz` archive over HTTPS.
    Archive {
        /// The `https://` URL, without the fragment.
        url: String,
        /// The expected SHA-256 (lowercase hex), from `#sha256=`.
        sha256: Option<String>,
    },
    /// An entry of a registry.
    Registry {
        /// The extension's name.
        name: String,
        /// The version asked for.
        version: Option<String>,
    },
}

impl std::fmt::Display for Source {
    /// The text that parses back to this source (what the lock records).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Folder(path) => write!(f, "{}", path.display()),
            Self::Git { url, rev } => {
                let prefix = if url.starts_with("file://") || url.ends_with(".git") {
                    ""
                } else {
                    "git+"
                };
                write!(f, "{prefix}{url}")?;
                match rev {
                    Some(rev) => write!(f, "#{rev}"),
                    None => Ok(()),
                }
            }
            Self::Archive { url, sha256 } => {
                write!(f, "{url}")?;
                match sha256 {
                    Some(sha) => write!(f, "#sha256={sha}"),
                    None => Ok(()),
                }
            }
            Self::Registry { name, version } => match version {
                Some(version) => write!(f, "{name}@{version}"),
                None => write!(f, "{name}"),
            },
        }
    }
}

/// Why a source was not parsed or fetched; nothing was installed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Rule 1: the text is not a source.
    #[error("source `{}` refused: {reason}", Shown(.text))]
    Invalid {
        /// The text, as given.
        text: String,
        /// Which rule refused it, and what to write instead.
        reason: String,
    },
    /// Rule 4: registries are resolved by the caller.
    #[error("registry sources are not configured yet: cannot install `{}`", Shown(.0))]
    Registry(String),
    /// Rule 2: git failed.
    #[error("git source `{}`: {reason}", Shown(.url))]
    Git {
        /// The URL.
        url: String,
        /// What failed (git's own message, shown).
        reason: String,
    },
    /// Rule 3: the archive's digest is not the pinned one.
    #[error(
        "archive `{}` refused: its sha256 is {actual}, not the {expected} pinned by `#sha256=`; \
         nothing was unpacked",
        Shown(.url)
    )]
    Digest {
        /// The URL.
        url: String,
        /// What `#sha256=` said.
        expected: String,
        /// What was downloaded.
        actual: String,
    },
    /// Rule 3: the download failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Rule 3: the archive was refused.
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    /// A private folder could not be made.
    #[error("cannot make a private folder for the download: {0}")]
    Io(std::io::Error),
}

fn invalid(text: &str, reason: impl Into<String>) -> SourceError {
    SourceError::Invalid {
        text: text.to_owned(),
        reason: reason.into(),
    }
}

impl Source {
    /// Reads `text` by the rules in the module docs.
    ///
    /// # Errors
    ///
    /// [`SourceError::Invalid`] naming the rule.
    pub fn parse(text: &str) -> Result<Self, SourceError> {
        if !text.is_empty() && Path::new(text).is_dir() {
            // A bare word names a registry entry as well: the folder of
            // that name in a repository the user is in must not stand in
            // for it unannounced.
            let bare = !text.contains('/') && text != "." && text != "..";
            if bare && registry_entry(text, text).is_ok() {
                return Err(invalid(
                    text,
                    format!(
                        "it is both a folder here and a registry entry's name; write `./{}` to \
                         install the folder, or run this elsewhere for the registry's",
                        Shown(text)
                    ),
                ));
            }
            return Ok(Self::Folder(PathBuf::from(text)));
        }
        if text.is_empty() {
            return Err(invalid(
                text,
                "it is empty; name a folder, a URL or NAME[@VERSION]",
            ));
        }
        if text.starts_with('-') {
            return Err(invalid(
                text,
                "it starts with `-`; a source is never an option (write `./` before a folder)",
            ));
        }
        let (base, fragment) = match text.split_once('#') {
            Some((base, fragment)) => (base, Some(fragment)),
            None => (text, None),
        };
        if let Some(url) = base.strip_prefix("git+") {
            return git(text, url, fragment);
        }
        let lower = base.to_ascii_lowercase();
        if lower.starts_with("file://") {
            return git(text, base, fragment);
        }
        if lower.starts_with("https://") {
            let path = reqwest::Url::parse(base)
                .map_err(|err| invalid(text, format!("it is not a valid URL ({err})")))?
                .path()
                .to_ascii_lowercase();
            if path.ends_with(".git") {
                return git(text, base, fragment);
            }
            if path.ends_with(".tar.gz") || path.ends_with(".tgz") {
                return archive(text, base, fragment);
            }
            return Err(invalid(
                text,
                "an `https://` source is a `.tar.gz` archive or a git repository; end the URL \
                 with `.tar.gz`, or write `git+` before a git URL",
            ));
        }
        if lower.starts_with("http://") {
            return Err(invalid(
                text,
                "`http://` is not encrypted; only `https://` URLs are fetched",
            ));
        }
        if text.contains("::") || text.contains("://") || looks_like_scp(base) {
            return Err(invalid(
                text,
                "only `https://` and `file://` URLs and local folders are fetched (no `ssh`, \
                 `git://` or `ext::` transports)",
            ));
        }
        if base.contains('/') || base == "." || base == ".." || fragment.is_some() {
            // A folder path, as `ext install` always took (a missing one is
            // reported by the install).
            return Ok(Self::Folder(PathBuf::from(text)));
        }
        registry_entry(text, base)
    }
}

/// `base` (of the source `text`) as `NAME[@VERSION]`.
fn registry_entry(text: &str, base: &str) -> Result<Source, SourceError> {
    let (name, version) = match base.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (base, None),
    };
    crate::manifest::validate_name(name).map_err(|problem| {
        invalid(
            text,
            format!("it is no folder here, and not a registry entry: extension name {problem}"),
        )
    })?;
    if let Some(version) = version
        && (version.is_empty()
            || !version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
    {
        return Err(invalid(
            text,
            "the version after `@` may hold only letters, digits, `.`, `-` and `+`",
        ));
    }
    Ok(Source::Registry {
        name: name.to_owned(),
        version: version.map(str::to_owned),
    })
}

/// `user@host:path`, git's scp-like ssh syntax.
fn looks_like_scp(text: &str) -> bool {
    match text.split_once(':') {
        Some((before, _)) => before.contains('@') || (!before.contains('/') && before.len() > 1),
        None => false,
    }
}

fn git(text: &str, url: &str, fragment: Option<&str>) -> Result<Source, SourceError> {
    let lower = url.to_ascii_lowercase();
    let local = url.starts_with('/') || url.starts_with("./") || url.starts_with("../");
    if !(lower.starts_with("https://") || lower.starts_with("file://") || local) {
        return Err(invalid(
            text,
            "a git URL must be `https://…`, `file://…` or a local path (no `http://`, `ssh`, \
             `git://` or `ext::`)",
        ));
    }
    let rev = match fragment {
        None => None,
        Some(rev) if valid_rev(rev) => Some(rev.to_owned()),
        Some(rev) => {
            return Err(invalid(
                text,
                format!(
                    "`#{}` is not a commit, tag or branch name (letters, digits, `.`, `_`, `-` \
                     and `/`, not starting with `-`)",
                    Shown(rev)
                ),
            ));
        }
    };
    Ok(Source::Git {
        url: url.to_owned(),
        rev,
    })
}

/// A rev git cannot read as an option or a range.
fn valid_rev(rev: &str) -> bool {
    !rev.is_empty()
        && !rev.starts_with('-')
        && !rev.contains("..")
        && rev
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
}

fn archive(text: &str, url: &str, fragment: Option<&str>) -> Result<Source, SourceError> {
    let sha256 = match fragment {
        None => None,
        Some(fragment) => {
            let hex = fragment.strip_prefix("sha256=").ok_or_else(|| {
                invalid(
                    text,
                    "an archive URL's fragment is `#sha256=` and 64 hex digits",
                )
            })?;
            if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(invalid(text, "`#sha256=` takes 64 hex digits"));
            }
            Some(hex.to_ascii_lowercase())
        }
    };
    Ok(Source::Archive {
        url: url.to_owned(),
        sha256,
    })
}

/// What was fetched, and from where.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Provenance {
    /// The source, as text that parses back to it.
    pub source: String,
    /// The archive's SHA-256 (lowercase hex).
    pub sha256: Option<String>,
    /// The git commit checked out.
    pub commit: Option<String>,
    /// The publisher key (its id) that signed a registry archive.
    pub publisher_key: Option<String>,
    /// That key itself, in base64.
    pub publisher: Option<String>,
    /// The index URL of the registry it came from.
    pub registry: Option<String>,
}

impl Provenance {
    /// A source recorded by its text alone (a folder, say).
    pub fn of_source(source: String) -> Self {
        Self {
            source,
            sha256: None,
            commit: None,
            publisher_key: None,
            publisher: None,
            registry: None,
        }
    }
}

/// A fetched source: a private folder, removed when this is dropped.
#[derive(Debug)]
pub struct Fetched {
    /// The extension folder to plan an install from.
    pub folder: PathBuf,
    /// What to record in the lock.
    pub recorded: Provenance,
    _temp: tempfile::TempDir,
}

impl Fetched {
    /// `folder` (inside `temp`, which it keeps alive) fetched as `recorded`.
    pub(crate) fn new(folder: PathBuf, recorded: Provenance, temp: tempfile::TempDir) -> Self {
        Self {
            folder,
            recorded,
            _temp: temp,
        }
    }
}

/// Fetches a git or archive source into a private folder (rules 2 and 3).
///
/// # Errors
///
/// [`SourceError::Registry`] for a registry entry, and for a folder
/// (nothing to fetch) [`SourceError::Invalid`]; otherwise
/// [`SourceError`] naming what failed. Nothing is left behind.
pub async fn fetch_source(
    source: &Source,
    limits: &Limits,
    http: &HttpConfig,
) -> Result<Fetched, SourceError> {
    match source {
        Source::Folder(path) => Err(invalid(
            &path.display().to_string(),
            "a folder is installed as it is, not fetched",
        )),
        Source::Registry { .. } => Err(SourceError::Registry(source.to_string())),
        Source::Git { url, rev } => {
            let (url, rev) = (url.clone(), rev.clone());
            let shown = source.to_string();
            tokio::task::spawn_blocking(move || fetch_git(&url, rev.as_deref(), &shown))
                .await
                .map_err(|err| SourceError::Io(std::io::Error::other(err.to_string())))?
        }
        Source::Archive { url, sha256 } => {
            let bytes = super::fetch::download(url, limits, http).await?;
            let actual = hex(&Sha256::digest(&bytes));
            if let Some(expected) = sha256
                && *expected != actual
            {
                return Err(SourceError::Digest {
                    url: url.clone(),
                    expected: expected.clone(),
                    actual,
                });
            }
            let temp = private_folder()?;
            let into = temp.path().to_owned();
            let top = tokio::task::spawn_blocking(move || {
                super::unpack::unpack(&bytes, &into, Caps::default())
            })
            .await
            .map_err(|err| SourceError::Io(std::io::Error::other(err.to_string())))??;
            Ok(Fetched {
                folder: top,
                recorded: Provenance {
                    source: source.to_string(),
                    sha256: Some(actual),
                    commit: None,
                    publisher_key: None,
                    publisher: None,
                    registry: None,
                },
                _temp: temp,
            })
        }
    }
}

/// A fresh folder only the user can enter.
pub(crate) fn private_folder() -> Result<tempfile::TempDir, SourceError> {
    tempfile::Builder::new()
        .prefix("zotbox-fetch-")
        .tempdir()
        .map_err(SourceError::Io)
}

/// Rule 2.
fn fetch_git(url: &str, rev: Option<&str>, shown: &str) -> Result<Fetched, SourceError> {
    let failed = |reason: String| SourceError::Git {
        url: url.to_owned(),
        reason,
    };
    let temp = private_folder()?;
    let repo = temp.path().join("repo");
    // A relative local path is the user's, from where zotbox was started.
    let url_arg = if url.starts_with("./") || url.starts_with("../") {
        std::path::absolute(url)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| url.to_owned())
    } else {
        url.to_owned()
    };
    run_git(
        None,
        &[
            "clone",
            "--no-checkout",
            "--quiet",
            "--no-recurse-submodules",
            "--",
            &url_arg,
        ],
        Some(&repo),
    )
    .map_err(|err| failed(format!("clone failed: {err}")))?;
    let commit = match rev {
        None => resolve(&repo, "HEAD"),
        Some(rev) => resolve_pin(&repo, rev),
    }
    .map_err(failed)?;
    within_install_caps(&repo, &commit).map_err(failed)?;
    // The repository's `.gitattributes` would choose filters (`filter=`,
    // git-lfs) from the user's own config to run at checkout: attributes
    // are read from the empty tree instead (git 2.42 on; an older git
    // ignores the variable).
    let empty_tree = run_git(
        Some(&repo),
        &["hash-object", "-t", "tree", "/dev/null"],
        None,
    )
    .map_err(failed)?;
    run_git_with(
        Some(&repo),
        &["checkout", "--quiet", "--detach", &commit],
        None,
        &[("GIT_ATTR_SOURCE", empty_tree.trim())],
    )
    .map_err(|err| failed(format!("checkout of {commit} failed: {err}")))?;
    let head = resolve(&repo, "HEAD").map_err(failed)?;
    Ok(Fetched {
        folder: repo,
        recorded: Provenance {
            source: shown.to_owned(),
            sha256: None,
            commit: Some(head),
            publisher_key: None,
            publisher: None,
            registry: None,
        },
        _temp: temp,
    })
}

/// Rule 2: the tree of `commit` within what an archive may unpack to
/// ([`MAX_INSTALL_BYTES`], [`MAX_ENTRIES`]), checked before checkout
/// writes it: a pack stores a blob once however many paths name it, so a
/// small repository can check out to any size.
fn within_install_caps(repo: &Path, commit: &str) -> Result<(), String> {
    let listing = run_git(
        Some(repo),
        &["ls-tree", "-r", "-l", "-z", "--full-tree", commit],
        None,
    )?;
    let (mut entries, mut bytes) = (0usize, 0u64);
    for record in listing.split('\0').filter(|record| !record.is_empty()) {
        entries += 1;
        // `<mode> <type> <object> <size>\t<path>`; a submodule's size is `-`.
        let size = record
            .split('\t')
            .next()
            .and_then(|meta| meta.split_whitespace().nth(3))
            .and_then(|size| size.parse::<u64>().ok())
            .unwrap_or(0);
        bytes = bytes.saturating_add(size);
        if entries > MAX_ENTRIES {
            return Err(format!(
                "commit {commit} holds more than {MAX_ENTRIES} files; nothing was checked out"
            ));
        }
        if bytes > MAX_INSTALL_BYTES {
            return Err(format!(
                "commit {commit} holds more than {MAX_INSTALL_BYTES} bytes of files; nothing \
                 was checked out"
            ));
        }
    }
    Ok(())
}

/// The commit the pin `#rev` names in the clone `repo`: a branch or a tag
/// of that name, else a commit. A full commit hash is that commit only,
/// or a branch named like it (the repository's to choose) would be
/// checked out instead; a shorter one that is also a branch or tag name
/// is refused as ambiguous.
fn resolve_pin(repo: &Path, rev: &str) -> Result<String, String> {
    let none = || {
        format!(
            "`#{}` names no commit, tag or branch of the repository",
            Shown(rev)
        )
    };
    let hex = rev.len() >= 4 && rev.bytes().all(|b| b.is_ascii_hexdigit());
    if hex && matches!(rev.len(), 40 | 64) {
        return match resolve(repo, rev) {
            Ok(commit) if commit.eq_ignore_ascii_case(rev) => Ok(commit),
            _ => Err(none()),
        };
    }
    let named = [
        format!("refs/remotes/origin/{rev}"),
        format!("refs/tags/{rev}"),
    ]
    .iter()
    .find_map(|reference| resolve(repo, reference).ok());
    let also_a_hash = || {
        run_git(
            Some(repo),
            &["rev-parse", &format!("--disambiguate={rev}")],
            None,
        )
        .is_ok_and(|objects| !objects.trim().is_empty())
    };
    match named {
        Some(_) if hex && also_a_hash() => Err(format!(
            "`#{}` is both a branch or tag of the repository and the start of a commit hash; \
             pin the full commit hash",
            Shown(rev)
        )),
        Some(commit) => Ok(commit),
        None => resolve(repo, rev).map_err(|_| none()),
    }
}

/// The commit `rev` names in `repo`.
fn resolve(repo: &Path, rev: &str) -> Result<String, String> {
    let spec = format!("{rev}^{{commit}}");
    let out = run_git(
        Some(repo),
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &spec,
        ],
        None,
    )?;
    let commit = out.trim().to_owned();
    if commit.len() >= 40 && commit.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(commit)
    } else {
        Err(format!("`{}` is not a commit", Shown(rev)))
    }
}

/// Runs `git` with the rule-2 settings, in `dir`, with `last` as a final
/// path argument; returns its stdout.
fn run_git(dir: Option<&Path>, args: &[&str], last: Option<&Path>) -> Result<String, String> {
    run_git_with(dir, args, last, &[])
}

/// [`run_git`] with `env` set besides.
fn run_git_with(
    dir: Option<&Path>,
    args: &[&str],
    last: Option<&Path>,
    env: &[(&str, &str)],
) -> Result<String, String> {
    let mut command = Command::new("git");
    command
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "protocol.allow=never",
            "-c",
            "protocol.https.allow=always",
            "-c",
            "protocol.file.allow=always",
            "-c",
            "submodule.recurse=false",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "advice.detachedHead=false",
        ])
        .args(args);
    if let Some(last) = last {
        command.arg(last);
    }
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    for variable in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_EXEC_PATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_PROXY_COMMAND",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
    ] {
        command.env_remove(variable);
    }
    command.envs(env.iter().copied());
    command
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ALLOW_PROTOCOL", "https:file")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|err| format!("cannot run `git`: {err} (is git installed?)"))?;
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Drained on threads so that a chatty git never blocks on a full pipe.
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.take(16 * 1024 * 1024).read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.take(64 * 1024).read_to_string(&mut text);
        }
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > GIT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("git took longer than {} s", GIT_TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot wait for git: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        let message = stderr.trim();
        Err(crate::text::shown(if message.is_empty() {
            "git failed"
        } else {
            message
        })
        .into_owned())
    }
}

/// The SHA-256 of `bytes`, lowercase hex (what `#sha256=` pins).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_source_text_parses_by_the_rules() {
        let folder = tempfile::tempdir().unwrap();
        let existing = folder.path().display().to_string();
        let sha = "ab".repeat(32);
        let git = |url: &str, rev: Option<&str>| Source::Git {
            url: url.into(),
            rev: rev.map(Into::into),
        };
        let cases: Vec<(String, Source)> = vec![
            (existing.clone(), Source::Folder(existing.clone().into())),
            ("./ext".into(), Source::Folder("./ext".into())),
            ("missing/ext".into(), Source::Folder("missing/ext".into())),
            (".".into(), Source::Folder(".".into())),
            (
                "https://github.com/a/b.git".into(),
                git("https://github.com/a/b.git", None),
            ),
            (
                "https://github.com/a/b.git#v1.2".into(),
                git("https://github.com/a/b.git", Some("v1.2")),
            ),
            (
                "git+https://example.com/a/b#main".into(),
                git("https://example.com/a/b", Some("main")),
            ),
            ("file:///srv/repo".into(), git("file:///srv/repo", None)),
            (
                "git+/srv/repo#feature/x".into(),
                git("/srv/repo", Some("feature/x")),
            ),
            (
                "https://example.com/x-1.0.tar.gz".into(),
                Source::Archive {
                    url: "https://example.com/x-1.0.tar.gz".into(),
                    sha256: None,
                },
            ),
            (
                format!("https://example.com/x.tgz#sha256={}", sha.to_uppercase()),
                Source::Archive {
                    url: "https://example.com/x.tgz".into(),
                    sha256: Some(sha.clone()),
                },
            ),
            (
                "weather".into(),
                Source::Registry {
                    name: "weather".into(),
                    version: None,
                },
            ),
            (
                "weather@1.2.0".into(),
                Source::Registry {
                    name: "weather".into(),
                    version: Some("1.2.0".into()),
                },
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(Source::parse(&text).unwrap(), expected, "{text}");
        }
    }

    #[test]
    fn a_source_that_could_become_an_option_or_an_unsafe_transport_is_refused() {
        let cases = [
            ("--upload-pack=touch /tmp/x", "it starts with `-`"),
            ("-oProxyCommand=x", "it starts with `-`"),
            ("http://example.com/x.tar.gz", "`http://` is not encrypted"),
            ("git+http://example.com/x", "a git URL must be"),
            ("git+ssh://example.com/x", "a git URL must be"),
            ("git+ext::sh -c touch% /tmp/x", "a git URL must be"),
            ("ext::sh -c touch% /tmp/x", "only `https://` and `file://`"),
            ("ssh://example.com/x.git", "only `https://` and `file://`"),
            ("git://example.com/x.git", "only `https://` and `file://`"),
            ("git@github.com:a/b.git", "only `https://` and `file://`"),
            (
                "git+https://example.com/x#--force",
                "is not a commit, tag or branch",
            ),
            (
                "https://example.com/x.tar.gz#sha256=12",
                "takes 64 hex digits",
            ),
            (
                "https://example.com/x.tar.gz#md5=12",
                "fragment is `#sha256=`",
            ),
            ("https://example.com/x.zip", "end the URL with `.tar.gz`"),
            ("Bad Name", "not a registry entry"),
            ("weather@", "the version after `@`"),
        ];
        for (text, expected) in cases {
            let err = Source::parse(text).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("source `{}` refused: ", Shown(text)))
                    && err.contains(expected),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn a_source_prints_as_text_that_parses_back_to_it() {
        for text in [
            "git+/srv/repo#main",
            "https://example.com/a.git#v1",
            "file:///srv/repo",
            "https://example.com/x.tar.gz",
            "weather@1.0.0",
        ] {
            let source = Source::parse(text).unwrap();
            assert_eq!(source.to_string(), text);
            assert_eq!(Source::parse(&source.to_string()).unwrap(), source);
        }
    }

    fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[tokio::test]
    async fn a_git_source_is_checked_out_at_the_pinned_commit_and_the_commit_is_recorded() {
        let upstream = tempfile::tempdir().unwrap();
        let dir = upstream.path();
        git_in(dir, &["init", "-q"]);
        std::fs::write(dir.join("file"), "one").unwrap();
        git_in(dir, &["add", "."]);
        git_in(dir, &["commit", "-qm", "one"]);
        let first = git_in(dir, &["rev-parse", "HEAD"]);
        git_in(dir, &["tag", "v1"]);
        std::fs::write(dir.join("file"), "two").unwrap();
        // A hook in the clone would run on checkout: hooks are off.
        git_in(dir, &["commit", "-qam", "two"]);
        let second = git_in(dir, &["rev-parse", "HEAD"]);
        let url = format!("git+{}", dir.display());
        let limits = Limits::default();
        let http = HttpConfig::default();
        for (rev, commit, content) in [
            ("", &second, "two"),
            ("#v1", &first, "one"),
            ("#main", &second, "two"),
        ] {
            let source = Source::parse(&format!("{url}{rev}")).unwrap();
            let fetched = fetch_source(&source, &limits, &http).await.unwrap();
            assert_eq!(fetched.recorded.commit.as_ref(), Some(commit), "{rev}");
            assert_eq!(
                std::fs::read_to_string(fetched.folder.join("file")).unwrap(),
                content
            );
        }
        let pinned = Source::parse(&format!("{url}#{first}")).unwrap();
        let fetched = fetch_source(&pinned, &limits, &http).await.unwrap();
        assert_eq!(fetched.recorded.commit.as_ref(), Some(&first));
        let temp = fetched.folder.parent().unwrap().to_owned();
        drop(fetched);
        assert!(!temp.exists(), "the private folder is removed");
        let missing = Source::parse(&format!("{url}#nope")).unwrap();
        let err = fetch_source(&missing, &limits, &http).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "git source `{}`: `#nope` names no commit, tag or branch of the repository",
                dir.display()
            )
        );
    }
}
