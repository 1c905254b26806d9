//! Capability calls: workspace files, HTTPS and shell, as plain Rust functions.
//!
//! Built for `wasm32-wasip2`, each function is a call into zotbox's
//! capability layer (the `zot:host` WIT imports): the host checks it against
//! what the manifest declared and the policy allows, audits it, and answers
//! with the result or a typed [`Error`]. A refusal is an answer, not a crash:
//! the extension keeps running.
//!
//! Built natively, the extension runs with the user's permissions as any zot
//! extension does: files and commands go straight to the OS, relative to the
//! workspace zot named in `hello_ack` (the current directory until then);
//! HTTP is not available natively (use an HTTP client crate there).

use std::fmt;

/// Why a capability call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Refused: not declared, not allowed by policy, outside the jail, or
    /// blocked by the guard.
    Denied {
        /// `fs-read`, `fs-write`, `http`, `shell` or `env`.
        capability: String,
        /// The path, URL or command.
        subject: String,
        /// Why, naming the rule.
        reason: String,
    },
    /// The path or resource does not exist.
    NotFound(String),
    /// A size cap was hit (the cap, bytes).
    TooLarge(u64),
    /// A time cap was hit (the cap, ms).
    Timeout(u64),
    /// The request is malformed.
    Invalid(String),
    /// Allowed, but it failed.
    Failed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied {
                capability,
                subject,
                reason,
            } => write!(f, "{capability} `{subject}` refused: {reason}"),
            Self::NotFound(what) => write!(f, "`{what}` not found"),
            Self::TooLarge(cap) => write!(f, "larger than the {cap}-byte cap"),
            Self::Timeout(ms) => write!(f, "timed out after {ms} ms"),
            Self::Invalid(why) => write!(f, "invalid request: {why}"),
            Self::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

/// Workspace files. Paths are relative to the workspace root, with `/`.
pub mod fs {
    use super::Error;

    /// What a path is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        /// A regular file.
        File,
        /// A directory.
        Directory,
        /// A symbolic link (not followed).
        Symlink,
        /// Anything else.
        Other,
    }

    /// One directory entry.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        /// Its name within the directory.
        pub name: String,
        /// What it is.
        pub kind: Kind,
        /// Its size in bytes.
        pub size: u64,
    }

    /// What `stat` knows.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Metadata {
        /// What it is.
        pub kind: Kind,
        /// Its size in bytes.
        pub size: u64,
        /// Last modification, ms since the Unix epoch.
        pub modified_ms: Option<u64>,
    }

    /// Reads a whole file.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused, missing, or larger than the cap.
    pub fn read(path: &str) -> Result<Vec<u8>, Error> {
        super::imp::fs_read(path)
    }

    /// Reads a whole file as UTF-8 (invalid bytes replaced).
    ///
    /// # Errors
    ///
    /// As [`read`].
    pub fn read_to_string(path: &str) -> Result<String, Error> {
        read(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Creates or replaces a file.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused, or larger than the cap.
    pub fn write(path: &str, contents: impl AsRef<[u8]>) -> Result<(), Error> {
        super::imp::fs_write(path, contents.as_ref())
    }

    /// Lists a directory, sorted by name.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused or missing.
    pub fn list(path: &str) -> Result<Vec<Entry>, Error> {
        super::imp::fs_list(path)
    }

    /// Describes a path without following a final symlink.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused or missing.
    pub fn stat(path: &str) -> Result<Metadata, Error> {
        super::imp::fs_stat(path)
    }
}

/// HTTPS requests to granted hosts.
pub mod http {
    use super::Error;

    /// The request method.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Method {
        /// GET
        Get,
        /// HEAD
        Head,
        /// POST
        Post,
        /// PUT
        Put,
        /// PATCH
        Patch,
        /// DELETE
        Delete,
    }

    /// A request.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Request {
        /// The method.
        pub method: Method,
        /// An absolute `https://` URL.
        pub url: String,
        /// Headers as (name, value).
        pub headers: Vec<(String, String)>,
        /// The body, if any.
        pub body: Option<Vec<u8>>,
    }

    /// A response; any status is a response.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Response {
        /// The status code.
        pub status: u16,
        /// Headers as (name, value).
        pub headers: Vec<(String, String)>,
        /// The body.
        pub body: Vec<u8>,
    }

    impl Response {
        /// The body as UTF-8 (invalid bytes replaced).
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }
    }

    /// `GET url`.
    ///
    /// # Errors
    ///
    /// As [`fetch`].
    pub fn get(url: &str) -> Result<Response, Error> {
        fetch(Request {
            method: Method::Get,
            url: url.to_owned(),
            headers: Vec::new(),
            body: None,
        })
    }

    /// Sends a request and waits for the whole response.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused (scheme, host, address, redirect), too large,
    /// timed out, or failed to connect.
    pub fn fetch(request: Request) -> Result<Response, Error> {
        super::imp::http_fetch(request)
    }
}

/// Secrets the extension may use but never read.
///
/// A secret the manifest declares (`capabilities.secrets`) and the user set
/// (`zotbox secret set NAME`) is written as a placeholder; the host puts the
/// value in just before sending, only in a header value (or the query string,
/// where the manifest says `"query": true`) of a request to an origin the
/// secret is bound to. Anywhere else (a body, a path, another origin, a
/// redirect elsewhere, a shell command) the request is refused. Responses
/// that echo the value come back with it redacted. Nothing here returns a
/// value.
pub mod secret {
    /// `{{secret:NAME}}`: put it in a header value, e.g.
    /// `("Authorization", format!("Bearer {}", placeholder("WEATHER_KEY")))`.
    pub fn placeholder(name: &str) -> String {
        format!("{{{{secret:{name}}}}}")
    }
}

/// Shell commands, through the host's guard chain.
pub mod shell {
    use super::Error;

    /// What a finished command produced.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Output {
        /// Standard output.
        pub stdout: String,
        /// Standard error.
        pub stderr: String,
        /// Exit status; `None` when ended by a signal.
        pub exit_code: Option<i32>,
        /// Whether output was cut at the cap.
        pub truncated: bool,
    }

    /// Runs `command` with `sh -c` in the workspace and waits for it.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused by the grant or the guard, or timed out.
    pub fn run(command: &str) -> Result<Output, Error> {
        super::imp::shell_run(command)
    }
}

#[cfg(target_arch = "wasm32")]
mod imp {
    //! The sandboxed implementation: the `zot:host` imports.

    use super::{Error, fs, http, shell};

    mod wit {
        wit_bindgen::generate!({
            path: "../wit",
            world: "extension",
        });
    }

    use wit::zot::host::{fs as wfs, http as whttp, shell as wshell, types};

    impl From<types::Error> for Error {
        fn from(error: types::Error) -> Self {
            match error {
                types::Error::Denied(denial) => Self::Denied {
                    capability: denial.capability,
                    subject: denial.subject,
                    reason: denial.reason,
                },
                types::Error::NotFound(what) => Self::NotFound(what),
                types::Error::TooLarge(cap) => Self::TooLarge(cap),
                types::Error::Timeout(ms) => Self::Timeout(ms),
                types::Error::Invalid(why) => Self::Invalid(why),
                types::Error::Failed(why) => Self::Failed(why),
            }
        }
    }

    fn kind(kind: wfs::Kind) -> fs::Kind {
        match kind {
            wfs::Kind::File => fs::Kind::File,
            wfs::Kind::Directory => fs::Kind::Directory,
            wfs::Kind::Symlink => fs::Kind::Symlink,
            wfs::Kind::Other => fs::Kind::Other,
        }
    }

    pub(super) fn fs_read(path: &str) -> Result<Vec<u8>, Error> {
        Ok(wfs::read(path)?)
    }

    pub(super) fn fs_write(path: &str, contents: &[u8]) -> Result<(), Error> {
        Ok(wfs::write(path, contents)?)
    }

    pub(super) fn fs_list(path: &str) -> Result<Vec<fs::Entry>, Error> {
        Ok(wfs::list(path)?
            .into_iter()
            .map(|entry| fs::Entry {
                name: entry.name,
                kind: kind(entry.kind),
                size: entry.size,
            })
            .collect())
    }

    pub(super) fn fs_stat(path: &str) -> Result<fs::Metadata, Error> {
        let meta = wfs::stat(path)?;
        Ok(fs::Metadata {
            kind: kind(meta.kind),
            size: meta.size,
            modified_ms: meta.modified_ms,
        })
    }

    pub(super) fn http_fetch(request: http::Request) -> Result<http::Response, Error> {
        let method = match request.method {
            http::Method::Get => whttp::Method::Get,
            http::Method::Head => whttp::Method::Head,
            http::Method::Post => whttp::Method::Post,
            http::Method::Put => whttp::Method::Put,
            http::Method::Patch => whttp::Method::Patch,
            http::Method::Delete => whttp::Method::Delete,
        };
        let response = whttp::fetch(&whttp::Request {
            method,
            url: request.url,
            headers: request
                .headers
                .into_iter()
                .map(|(name, value)| whttp::Header { name, value })
                .collect(),
            body: request.body,
        })?;
        Ok(http::Response {
            status: response.status,
            headers: response
                .headers
                .into_iter()
                .map(|h| (h.name, h.value))
                .collect(),
            body: response.body,
        })
    }

    pub(super) fn shell_run(command: &str) -> Result<shell::Output, Error> {
        let output = wshell::run(command)?;
        Ok(shell::Output {
            stdout: output.stdout,
            stderr: output.stderr,
            exit_code: output.exit_code,
            truncated: output.truncated,
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    //! The native implementation: the OS, relative to the workspace.

    use std::path::{Component, Path, PathBuf};

    use super::{Error, fs, http, shell};

    /// The workspace root: `cwd` from `hello_ack`, else the current directory.
    fn workspace() -> PathBuf {
        crate::context::workspace().unwrap_or_else(|| PathBuf::from("."))
    }

    /// The same lexical rules the sandbox applies, so code behaves alike.
    fn resolve(capability: &str, path: &str) -> Result<PathBuf, Error> {
        let denied = |reason: &str| Error::Denied {
            capability: capability.to_owned(),
            subject: path.to_owned(),
            reason: reason.to_owned(),
        };
        let relative = Path::new(path);
        if path.is_empty() || relative.is_absolute() {
            return Err(denied("paths are relative to the workspace"));
        }
        if relative
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(denied("`..` may not leave the workspace"));
        }
        Ok(workspace().join(relative))
    }

    fn io(path: &str, err: &std::io::Error) -> Error {
        if err.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(path.to_owned())
        } else {
            Error::Failed(format!("`{path}`: {err}"))
        }
    }

    fn kind(file_type: std::fs::FileType) -> fs::Kind {
        if file_type.is_symlink() {
            fs::Kind::Symlink
        } else if file_type.is_dir() {
            fs::Kind::Directory
        } else if file_type.is_file() {
            fs::Kind::File
        } else {
            fs::Kind::Other
        }
    }

    pub(super) fn fs_read(path: &str) -> Result<Vec<u8>, Error> {
        std::fs::read(resolve("fs-read", path)?).map_err(|e| io(path, &e))
    }

    pub(super) fn fs_write(path: &str, contents: &[u8]) -> Result<(), Error> {
        std::fs::write(resolve("fs-write", path)?, contents).map_err(|e| io(path, &e))
    }

    pub(super) fn fs_list(path: &str) -> Result<Vec<fs::Entry>, Error> {
        let dir = if path.is_empty() || path == "." {
            workspace()
        } else {
            resolve("fs-read", path)?
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(path, &e))? {
            let entry = entry.map_err(|e| io(path, &e))?;
            let meta = entry.metadata().map_err(|e| io(path, &e))?;
            entries.push(fs::Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind: kind(entry.file_type().map_err(|e| io(path, &e))?),
                size: if meta.is_dir() { 0 } else { meta.len() },
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    pub(super) fn fs_stat(path: &str) -> Result<fs::Metadata, Error> {
        let meta =
            std::fs::symlink_metadata(resolve("fs-read", path)?).map_err(|e| io(path, &e))?;
        let modified_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u64::try_from(d.as_millis()).ok());
        Ok(fs::Metadata {
            kind: kind(meta.file_type()),
            size: meta.len(),
            modified_ms,
        })
    }

    pub(super) fn http_fetch(request: http::Request) -> Result<http::Response, Error> {
        Err(Error::Failed(format!(
            "fetch of `{}`: the http capability exists only in zotbox's sandbox; a native build needs an HTTP client crate",
            request.url
        )))
    }

    pub(super) fn shell_run(command: &str) -> Result<shell::Output, Error> {
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(workspace())
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| Error::Failed(format!("cannot run `sh`: {e}")))?;
        Ok(shell::Output {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            exit_code: output.status.code(),
            truncated: false,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_placeholder_is_the_name_in_the_hosts_syntax() {
        assert_eq!(
            super::secret::placeholder("WEATHER_KEY"),
            "{{secret:WEATHER_KEY}}"
        );
    }
}
