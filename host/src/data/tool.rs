//! Declarative tools: one bounded `shell`, `http` or `read` operation.
//!
//! ```json
//! {
//!   "name": "recent-changes",
//!   "description": "List the ten most recently changed files",
//!   "kind": "shell",
//!   "command": "git diff --name-only HEAD~10",
//!   "autoApprove": true
//! }
//! ```
//!
//! The model passes one optional string, `arg`, substituted into every
//! `{arg}` of the template. What it may become is bounded per kind:
//!
//! - `shell`: the template is split into words at load and runs by
//!   `execve`, `{arg}` being part of exactly one argument wherever it
//!   stands; a template that needs pipes, `&&` or redirection declares
//!   `"shell": true` and may then use `{arg}` only as a bare word, which is
//!   single-quoted (see [`crate::capability::shell::template`] for every
//!   rule). A template that breaks a rule is refused at load, naming it.
//! - `http`: it is percent-encoded, and the template must fix the scheme
//!   (`https`), host and port, so the argument can only change the path,
//!   query or fragment. Fixed `headers` may be sent too (never with
//!   `{arg}`). The user's own tools (not a workspace's) may use a secret:
//!   `{{secret:NAME}}` in a header value or in the template's query string,
//!   sent only to the template's origin (see `capability::http`); the
//!   argument, percent-encoded, can never write a placeholder.
//! - `read`: it is inserted as is; the workspace jail checks the result.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{DataOrigin, FileError, Parsed, check_name, check_text, parse_json, read_file};
use crate::capability::shell::template::Template;
use crate::manifest::Capabilities;

/// The placeholder the argument replaces.
pub const ARG_PLACEHOLDER: &str = "{arg}";

/// The longest tool name; tool names become part of model API calls.
pub const MAX_NAME_CHARS: usize = 40;

/// The longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 300;

/// The longest `command`, `url` or `path` template.
pub const MAX_TEMPLATE_CHARS: usize = 500;

/// A tool manifest as written on disk.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTool {
    name: String,
    description: String,
    kind: RawKind,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default = "default_true")]
    auto_approve: bool,
    #[serde(default)]
    shell: bool,
    #[serde(default)]
    headers: Option<std::collections::BTreeMap<String, String>>,
}

fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawKind {
    Shell,
    Http,
    Read,
}

/// What a tool does, with its template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// Runs `command` through the guard chain: by `execve`, or with
    /// `sh -c` when the manifest says `"shell": true`.
    Shell {
        /// The command template.
        command: String,
        /// `"shell": true`: the template uses shell syntax and runs with `sh -c`.
        shell: bool,
    },
    /// Fetches one HTTPS URL.
    Http {
        /// The URL template; scheme, host and port are fixed.
        url: String,
        /// Fixed request headers, by name (values may hold secret placeholders).
        headers: Vec<(String, String)>,
    },
    /// Returns one workspace file.
    Read {
        /// The workspace-relative path template.
        path: String,
    },
}

/// A tool's operation with the argument applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    /// A shell command, not yet rendered: the capability layer quotes `arg`
    /// as one word into each `{arg}` of `template`.
    Shell {
        /// The command template, as written.
        template: String,
        /// The argument, raw.
        arg: Option<String>,
    },
    /// The URL to fetch, with the argument percent-encoded.
    Http {
        /// The URL.
        url: String,
    },
    /// The workspace path to read, with the argument inserted as is.
    Read {
        /// The path, still to be checked by the workspace jail.
        path: String,
    },
}

impl ToolKind {
    /// The kind as written in manifests: `shell`, `http` or `read`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Shell { .. } => "shell",
            Self::Http { .. } => "http",
            Self::Read { .. } => "read",
        }
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        match self {
            Self::Shell { command, .. } => command,
            Self::Http { url, .. } => url,
            Self::Read { path } => path,
        }
    }

    /// Whether the template uses the argument at all.
    pub fn takes_arg(&self) -> bool {
        self.template().contains(ARG_PLACEHOLDER)
    }

    /// The parsed command template of a `shell` tool (checked at load).
    ///
    /// # Errors
    ///
    /// Why the template is refused (see [`Template::parse`]).
    pub fn shell_template(&self) -> Option<Result<Template, String>> {
        match self {
            Self::Shell { command, shell } => Some(Template::parse(command, *shell)),
            _ => None,
        }
    }

    /// The secrets an `http` template uses, by name, each with whether it
    /// stands in the query string (else in a header). Empty for other kinds.
    pub fn secrets(&self) -> Vec<(String, bool)> {
        let Self::Http { url, headers } = self else {
            return Vec::new();
        };
        let mut used: Vec<(String, bool)> = Vec::new();
        let query = url.split_once('?').map_or("", |(_, query)| query);
        let names =
            |text: &str| crate::capability::http::placeholder_names(text).unwrap_or_default();
        for (name, in_query) in names(query).into_iter().map(|name| (name, true)).chain(
            headers
                .iter()
                .flat_map(|(_, value)| names(value))
                .map(|name| (name, false)),
        ) {
            match used.iter_mut().find(|(known, _)| *known == name) {
                Some((_, query)) => *query |= in_query,
                None => used.push((name, in_query)),
            }
        }
        used
    }

    /// Applies `arg` (absent means empty) to the template: percent-encoded
    /// for `http`, raw for `read`, and left to the capability layer for
    /// `shell`.
    pub fn render(&self, arg: Option<&str>) -> Rendered {
        match self {
            Self::Shell { command, .. } => Rendered::Shell {
                template: command.clone(),
                arg: arg.map(str::to_owned),
            },
            Self::Http { url, .. } => Rendered::Http {
                url: url.replace(ARG_PLACEHOLDER, &percent_encode(arg.unwrap_or(""))),
            },
            Self::Read { path } => Rendered::Read {
                path: path.replace(ARG_PLACEHOLDER, arg.unwrap_or("")),
            },
        }
    }
}

/// A validated tool manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTool {
    /// The name the model calls.
    pub name: String,
    /// What the model reads to decide when to use it.
    pub description: String,
    /// What it does.
    pub kind: ToolKind,
    /// `false`: refused until the user approves this exact manifest
    /// (see [`super::Approvals`]). Default `true`.
    pub auto_approve: bool,
    /// The manifest file.
    pub path: PathBuf,
    /// Where the manifest was found.
    pub origin: DataOrigin,
    /// SHA-256 of the text it was parsed from: a workspace's tool is
    /// checked against what its trust hashed, not against the file later.
    pub sha256: [u8; 32],
}

impl DataTool {
    /// Reads and validates the manifest at `path`.
    ///
    /// # Errors
    ///
    /// [`FileError`] naming the file and, where one is at fault, the field.
    pub fn load(path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        Self::parse(&read_file(path)?, path, origin)
    }

    /// Validates manifest text as if read from `path`.
    ///
    /// # Errors
    ///
    /// As [`DataTool::load`].
    pub fn parse(text: &str, path: &Path, origin: DataOrigin) -> Result<Parsed<Self>, FileError> {
        let Parsed {
            value: raw,
            mut warnings,
        } = parse_json::<RawTool>(text, path)?;
        check_name(&raw.name, MAX_NAME_CHARS).map_err(|p| FileError::invalid(path, "name", p))?;
        check_text(&raw.description, MAX_DESCRIPTION_CHARS)
            .map_err(|p| FileError::invalid(path, "description", p))?;
        let (field, kind_name) = match raw.kind {
            RawKind::Shell => ("command", "shell"),
            RawKind::Http => ("url", "http"),
            RawKind::Read => ("path", "read"),
        };
        let mut template = None;
        for (name, value) in [
            ("command", raw.command),
            ("url", raw.url),
            ("path", raw.path),
        ] {
            if name == field {
                template = value;
            } else if value.is_some() {
                warnings.push(format!(
                    "field `{name}` is ignored for a `{kind_name}` tool; it uses `{field}`"
                ));
            }
        }
        let template = template.ok_or_else(|| {
            FileError::invalid(
                path,
                field,
                format!("is missing; a `{kind_name}` tool needs it"),
            )
        })?;
        check_text(&template, MAX_TEMPLATE_CHARS)
            .map_err(|p| FileError::invalid(path, field, p))?;
        if raw.headers.is_some() && !matches!(raw.kind, RawKind::Http) {
            warnings.push(format!(
                "field `headers` is ignored for a `{kind_name}` tool; only `http` tools send them"
            ));
        }
        if raw.shell && !matches!(raw.kind, RawKind::Shell) {
            warnings.push(format!(
                "field `shell` is ignored for a `{kind_name}` tool; only `shell` tools run commands"
            ));
        }
        let kind = match raw.kind {
            RawKind::Shell => {
                if template.contains(crate::capability::http::PLACEHOLDER_OPEN) {
                    return Err(FileError::invalid(
                        path,
                        field,
                        format!(
                            "`{}` is refused: a shell tool never gets a secret (a command can \
                             print it); use an `http` tool with the placeholder in a header",
                            crate::text::Shown(&template)
                        ),
                    ));
                }
                Template::parse(&template, raw.shell).map_err(|reason| {
                    FileError::invalid(
                        path,
                        field,
                        format!("`{}` is refused: {reason}", crate::text::Shown(&template)),
                    )
                })?;
                ToolKind::Shell {
                    command: template,
                    shell: raw.shell,
                }
            }
            RawKind::Http => {
                check_url_template(&template).map_err(|p| FileError::invalid(path, field, p))?;
                let headers: Vec<(String, String)> =
                    raw.headers.unwrap_or_default().into_iter().collect();
                for (name, value) in &headers {
                    check_header(name, value).map_err(|p| {
                        FileError::invalid(path, format!("headers.{}", crate::text::Shown(name)), p)
                    })?;
                }
                ToolKind::Http {
                    url: template,
                    headers,
                }
            }
            RawKind::Read => {
                if template.contains('\0') {
                    return Err(FileError::invalid(path, field, "contains a NUL byte"));
                }
                // A template whose fixed part leaves the workspace could
                // never be read: refused here, not listed as ready to fail
                // at every call.
                if let Err(err) = crate::capability::fs::FsGrant::new(&[read_grant(&template)], &[])
                {
                    let problem = match err {
                        crate::capability::CapabilityError::Invalid(problem) => problem,
                        other => other.to_string(),
                    };
                    return Err(FileError::invalid(
                        path,
                        field,
                        format!(
                            "`{}` is refused: it reaches no workspace file ({problem})",
                            crate::text::Shown(&template)
                        ),
                    ));
                }
                ToolKind::Read { path: template }
            }
        };
        Ok(Parsed {
            value: Self {
                name: raw.name,
                description: raw.description,
                kind,
                auto_approve: raw.auto_approve,
                path: path.to_owned(),
                origin,
                sha256: <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()).into(),
            },
            warnings,
        })
    }

    /// What this tool must be allowed to do, read from its template (an
    /// `http` template fixes its origin): what an install of a data package
    /// shows and locks.
    pub fn declared(&self) -> Capabilities {
        let url = match self.kind.render(None) {
            Rendered::Http { url } => Some(url),
            Rendered::Shell { .. } | Rendered::Read { .. } => None,
        };
        declared(&self.kind, url.as_deref())
    }

    /// The JSON schema of the tool's input, as zot registers it: one optional
    /// string, `arg`.
    pub fn schema(&self) -> Value {
        let template = self.kind.template();
        let description = if !self.kind.takes_arg() {
            "Ignored: this tool takes no argument.".to_owned()
        } else {
            match &self.kind {
                ToolKind::Shell { .. } => {
                    format!("Inserted as one quoted word into the command `{template}`.")
                }
                ToolKind::Http { .. } => {
                    format!("Percent-encoded into the URL `{template}`.")
                }
                ToolKind::Read { .. } => {
                    format!("Inserted into the workspace path `{template}`.")
                }
            }
        };
        json!({
            "type": "object",
            "properties": {
                "arg": { "type": "string", "description": description }
            }
        })
    }
}

/// Checks that an `http` template is `https://` and that no placeholder can
/// reach the scheme, host or port: the argument must never choose where the
/// request goes.
fn check_url_template(url: &str) -> Result<(), String> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "`{url}` contains whitespace or a control character"
        ));
    }
    let scheme = "https://";
    let rest = match url.get(..scheme.len()) {
        Some(prefix) if prefix.eq_ignore_ascii_case(scheme) => &url[scheme.len()..],
        _ => {
            return Err(format!("`{url}` is refused: only https URLs are allowed"));
        }
    };
    // A URL parser ends the authority at `/`, `?` or `#` (and, for https,
    // `\`, which the host check below refuses outright).
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let query_start = url.find('?').unwrap_or(url.len());
    let fragment = url.find('#').unwrap_or(url.len());
    if url[..query_start.min(fragment)].contains(crate::capability::http::PLACEHOLDER_OPEN)
        || url[fragment..].contains(crate::capability::http::PLACEHOLDER_OPEN)
    {
        return Err(format!(
            "`{url}` is refused: a secret placeholder may only stand in the query string or in \
             `headers`"
        ));
    }
    if let Err(problem) = crate::capability::http::placeholder_names(url) {
        return Err(format!("`{url}` is refused: {problem}"));
    }
    if authority.contains('{') || authority.contains('}') {
        return Err(format!(
            "`{url}` is refused: `{{arg}}` may appear only in the path, query or fragment, \
             after `https://host/`"
        ));
    }
    if authority.contains('@') {
        return Err(format!(
            "`{url}` is refused: credentials in the URL are not allowed"
        ));
    }
    let (host_ok, port) = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8443`.
        Some(v6) => {
            let Some((addr, tail)) = v6.split_once(']') else {
                return Err(format!("`{url}` has an invalid IPv6 host"));
            };
            let port = match tail {
                "" => None,
                tail => Some(tail.strip_prefix(':').unwrap_or(tail)),
            };
            let ok = !addr.is_empty()
                && addr
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.'));
            (ok, port)
        }
        None => {
            let (host, port) = match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let ok = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
            (ok, port)
        }
    };
    if !host_ok {
        return Err(format!("`{url}` has no valid host"));
    }
    if let Some(port) = port
        && !(port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0))
    {
        return Err(format!("`{url}` has an invalid port"));
    }
    Ok(())
}

/// A fixed header: a token name, a value without control characters or
/// `{arg}` (the model never chooses a header), placeholders well formed.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err("is not a valid header name".to_owned());
    }
    if value.chars().any(char::is_control) {
        return Err("holds a control character".to_owned());
    }
    if value.contains(ARG_PLACEHOLDER) {
        return Err(format!(
            "uses `{ARG_PLACEHOLDER}`; the argument may only go into the URL"
        ));
    }
    crate::capability::http::placeholder_names(value).map(|_| ())
}

/// Percent-encodes `text` as one URL component: the RFC 3986 unreserved set
/// (`A-Z a-z 0-9 - . _ ~`) is kept, every other byte of its UTF-8 becomes
/// `%XX`, so the argument can never add a `/`, `?`, `#` or `&`.
pub fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// What a data tool of this kind must be allowed to do, its URL (an
/// `http` tool's) rendered: the grant its sandbox asks for.
pub fn declared(kind: &ToolKind, rendered_url: Option<&str>) -> Capabilities {
    let mut declared = Capabilities::default();
    match kind {
        // Whatever the template becomes, the policy's shell rules and the
        // guard chain still apply to it.
        ToolKind::Shell { .. } => declared.shell = vec!["**".to_owned()],
        ToolKind::Http { .. } => {
            if let Some(origin) = rendered_url.and_then(origin_of) {
                // Its secrets go to the one origin the template fixes.
                declared.secrets = kind
                    .secrets()
                    .into_iter()
                    .map(|(name, query)| {
                        let spec = crate::manifest::SecretSpec {
                            http: vec![origin.clone()],
                            query,
                            env: None,
                        };
                        (name, spec)
                    })
                    .collect();
                declared.http = vec![origin];
            }
        }
        ToolKind::Read { path } => declared.read = vec![read_grant(path)],
    }
    declared
}

/// What a read template may reach: the folder it fixes before `{arg}`, at
/// any depth (`docs/{arg}` → `docs/**`), or exactly its path when it takes
/// no argument. The jail still refuses `..`, absolute paths and symlinks
/// leading out; a symlink staying inside that folder is followed.
fn read_grant(template: &str) -> String {
    match template.split_once("{arg}") {
        None => globset::escape(template),
        Some((fixed, _)) => match fixed.rsplit_once('/') {
            Some((folder, _)) if !folder.is_empty() => format!("{}/**", globset::escape(folder)),
            _ => "**".to_owned(),
        },
    }
}

/// `https://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    Some(match parsed.port() {
        Some(port) => format!("{}://{host}:{port}", parsed.scheme()),
        None => format!("{}://{host}", parsed.scheme()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/p/.zot/tools/t.json";

    fn parse(text: &str) -> Result<Parsed<DataTool>, String> {
        DataTool::parse(text, Path::new(FILE), DataOrigin::Project).map_err(|e| e.to_string())
    }

    fn tool(text: &str) -> DataTool {
        parse(text).unwrap_or_else(|e| panic!("{e}")).value
    }

    #[test]
    fn accepts_the_three_kinds_and_defaults_auto_approve() {
        let shell = tool(
            r#"{"name":"recent-changes","description":"List","kind":"shell",
                "command":"git diff --name-only HEAD~10"}"#,
        );
        assert!(shell.auto_approve);
        assert_eq!(
            shell.kind,
            ToolKind::Shell {
                command: "git diff --name-only HEAD~10".to_owned(),
                shell: false
            }
        );
        assert_eq!(shell.path, Path::new(FILE));
        let http = tool(
            r#"{"name":"w","description":"d","kind":"http","url":"https://api.x.dev/v1?q={arg}",
                "autoApprove":false}"#,
        );
        assert!(!http.auto_approve);
        assert_eq!(http.kind.as_str(), "http");
        let read = tool(r#"{"name":"r","description":"d","kind":"read","path":"docs/{arg}.md"}"#);
        assert_eq!(read.kind.template(), "docs/{arg}.md");
    }

    #[test]
    fn secret_placeholders_stand_only_where_a_secret_may_go() {
        let http = |url: &str, headers: &str| {
            parse(&format!(
                r#"{{"name":"w","description":"d","kind":"http","url":"{url}","headers":{headers}}}"#
            ))
            .map(|parsed| parsed.value.kind)
        };
        // A header value and the query string may name one.
        let kind = http(
            "https://api.x.dev/v1/{arg}?key={{secret:Q}}",
            r#"{"Authorization":"Bearer {{secret:K}}"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            kind.secrets(),
            [("Q".to_owned(), true), ("K".to_owned(), false)]
        );
        let cases = [
            // Attack: the placeholder in the path, where any server log keeps it.
            (
                http("https://api.x.dev/{{secret:K}}", "{}"),
                "may only stand in the query string or in `headers`",
            ),
            // Attack: the argument choosing a header.
            (
                http("https://api.x.dev/", r#"{"X-K":"{arg}"}"#),
                "field `headers.X-K` uses `{arg}`",
            ),
            // Attack: a line break splitting a header.
            (
                http("https://api.x.dev/", r#"{"X-K":"a\r\nX-Evil: 1"}"#),
                "field `headers.X-K` holds a control character",
            ),
            // A placeholder the host would not recognise.
            (
                http("https://api.x.dev/?k={{secret:{arg}}}", "{}"),
                "a secret placeholder is malformed",
            ),
            // A shell tool never gets one.
            (
                parse(
                    r#"{"name":"s","description":"d","kind":"shell","command":"echo '{{secret:K}}'"}"#,
                )
                .map(|parsed| parsed.value.kind),
                "a shell tool never gets a secret",
            ),
        ];
        for (result, words) in cases {
            match result {
                Err(message) => assert!(message.contains(words), "{message}"),
                Ok(kind) => panic!("accepted {kind:?}, expected `{words}`"),
            }
        }
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let cases = [
            // Required fields.
            (
                r#"{"description":"d","kind":"read","path":"a"}"#,
                "missing field `name`",
            ),
            (
                r#"{"name":"a","kind":"read","path":"a"}"#,
                "missing field `description`",
            ),
            (
                r#"{"name":"a","description":"d","kind":"read"}"#,
                "field `path` is missing; a `read` tool needs it",
            ),
            // A read the jail would refuse at every call.
            (
                r#"{"name":"a","description":"d","kind":"read","path":"../../etc/passwd"}"#,
                "field `path` `../../etc/passwd` is refused: it reaches no workspace file (read \
                 glob `../../etc/passwd` contains `..`; globs stay inside the workspace)",
            ),
            (
                r#"{"name":"a","description":"d","kind":"read","path":"/etc/{arg}"}"#,
                "field `path` `/etc/{arg}` is refused: it reaches no workspace file (read glob \
                 `/etc/**` is absolute; globs are relative to the workspace root)",
            ),
            (
                r#"{"name":"a","description":"d","kind":"shell","url":"https://x"}"#,
                "field `command` is missing",
            ),
            (
                r#"{"name":"a","description":"d","kind":"http"}"#,
                "field `url` is missing",
            ),
            // Wrong types and values.
            (
                r#"{"name":"a","description":"d","kind":"exec","command":"x"}"#,
                "field `kind`: unknown variant `exec`",
            ),
            (
                r#"{"name":"a","description":"d","kind":"shell","command":1}"#,
                "field `command`: invalid type",
            ),
            (
                r#"{"name":"a","description":"d","kind":"shell","command":"x","autoApprove":"no"}"#,
                "field `autoApprove`",
            ),
            (
                r#"{"name":"a b","description":"d","kind":"shell","command":"x"}"#,
                "field `name` `a b` contains ` `",
            ),
            (
                r#"{"name":"a","description":" ","kind":"shell","command":"x"}"#,
                "field `description` is empty",
            ),
            (
                r#"{"name":"a","description":"d","kind":"shell","command":""}"#,
                "field `command` is empty",
            ),
            ("{", "EOF while parsing"),
            // An array is not read by position as the fields.
            (r#"[true]"#, "is a JSON array; the file is one object"),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(expected), "{text}: `{err}` lacks `{expected}`");
            assert!(err.contains(FILE), "{err}");
        }
    }

    #[test]
    fn lengths_are_capped() {
        let long = |field: &str, n: usize| {
            let mut value =
                serde_json::json!({"name":"a","description":"d","kind":"shell","command":"x"});
            value[field] = Value::String("x".repeat(n));
            value.to_string()
        };
        // At the limit: fine.
        assert!(parse(&long("name", 40)).is_ok());
        assert!(parse(&long("description", 300)).is_ok());
        assert!(parse(&long("command", 500)).is_ok());
        // One over: refused, naming the field.
        let cases = [
            (long("name", 41), "field `name`"),
            (
                long("description", 301),
                "field `description` is 301 characters long; the limit is 300",
            ),
            (
                long("command", 501),
                "field `command` is 501 characters long; the limit is 500",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text).err().unwrap_or_default();
            assert!(err.contains(expected), "`{err}` lacks `{expected}`");
        }
    }

    #[test]
    fn other_kinds_fields_and_unknown_keys_are_warnings() {
        let parsed = parse(
            r#"{"name":"a","description":"d","kind":"read","path":"a","command":"rm -rf /","icon":"x"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            parsed.warnings,
            vec![
                "unknown key `icon` ignored".to_owned(),
                "field `command` is ignored for a `read` tool; it uses `path`".to_owned(),
            ]
        );
    }

    #[test]
    fn http_templates_fix_scheme_host_and_port() {
        let cases = [
            // Fine: the argument lands in the path, query or fragment.
            ("https://api.x.dev/v1/{arg}", None),
            ("https://api.x.dev?q={arg}", None),
            ("https://api.x.dev#{arg}", None),
            ("https://api.x.dev:8443/{arg}", None),
            ("HTTPS://api.x.dev/", None),
            ("https://[::1]:8443/{arg}", None),
            ("https://api.x.dev", None),
            // Plain http is refused.
            (
                "http://api.x.dev/{arg}",
                Some("only https URLs are allowed"),
            ),
            ("ftp://x/{arg}", Some("only https URLs are allowed")),
            // Attack: the argument picks the host.
            ("https://{arg}/v1", Some("may appear only in the path")),
            ("https://{arg}", Some("may appear only in the path")),
            (
                "https://api.{arg}.dev/",
                Some("may appear only in the path"),
            ),
            (
                "https://api.x.dev{arg}",
                Some("may appear only in the path"),
            ),
            // Attack: the argument picks the port.
            (
                "https://api.x.dev:{arg}/",
                Some("may appear only in the path"),
            ),
            // Attack: the argument picks the scheme.
            ("{arg}://api.x.dev/", Some("only https URLs are allowed")),
            ("{arg}", Some("only https URLs are allowed")),
            // Attack: userinfo that hides the real host.
            ("https://api.x.dev@evil.dev/", Some("credentials")),
            ("https://api.x.dev\\@evil.dev/", Some("is refused")),
            // Malformed.
            ("https:///path", Some("no valid host")),
            ("https://x.dev:99999/", Some("invalid port")),
            ("https://x.dev:/", Some("invalid port")),
            ("https://x.dev:+80/", Some("invalid port")),
            ("https://x.dev/a b", Some("whitespace")),
            ("https://[::1/", Some("invalid IPv6")),
        ];
        for (url, expected) in cases {
            let got = check_url_template(url).err();
            match expected {
                None => assert_eq!(got, None, "{url}"),
                Some(expected) => {
                    let got = got.unwrap_or_default();
                    assert!(got.contains(expected), "{url}: `{got}` lacks `{expected}`");
                }
            }
        }
        // And through the manifest, naming the field.
        let err = parse(r#"{"name":"a","description":"d","kind":"http","url":"https://{arg}/"}"#)
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("field `url` `https://{arg}/` is refused"),
            "{err}"
        );
    }

    #[test]
    fn render_encodes_http_and_keeps_read_raw() {
        let http = ToolKind::Http {
            url: "https://api.x.dev/search/{arg}?q={arg}".to_owned(),
            headers: Vec::new(),
        };
        let cases = [
            // Unreserved characters pass.
            (
                Some("Berlin-1.0_~"),
                "https://api.x.dev/search/Berlin-1.0_~?q=Berlin-1.0_~",
            ),
            // Separators cannot start a new segment, query or fragment.
            (
                Some("a/b?c#d&e=f"),
                "https://api.x.dev/search/a%2Fb%3Fc%23d%26e%3Df?q=a%2Fb%3Fc%23d%26e%3Df",
            ),
            // Spaces, percent signs and non-ASCII are encoded byte by byte.
            (
                Some("50% ü"),
                "https://api.x.dev/search/50%25%20%C3%BC?q=50%25%20%C3%BC",
            ),
            // Absent means empty.
            (None, "https://api.x.dev/search/?q="),
        ];
        for (arg, expected) in cases {
            assert_eq!(
                http.render(arg),
                Rendered::Http {
                    url: expected.to_owned()
                },
                "{arg:?}"
            );
        }
        let read = ToolKind::Read {
            path: "docs/{arg}.md".to_owned(),
        };
        // Raw: the workspace jail, not this layer, refuses `..`.
        assert_eq!(
            read.render(Some("../secret")),
            Rendered::Read {
                path: "docs/../secret.md".to_owned()
            }
        );
        let shell = ToolKind::Shell {
            command: "git log {arg}".to_owned(),
            shell: false,
        };
        assert_eq!(
            shell.render(Some("; rm -rf /")),
            Rendered::Shell {
                template: "git log {arg}".to_owned(),
                arg: Some("; rm -rf /".to_owned())
            }
        );
    }

    #[test]
    fn shell_templates_are_checked_at_load_naming_the_rule() {
        // Plain words load and run by `execve`; shell syntax must be declared.
        let plain = tool(
            r#"{"name":"a","description":"d","kind":"shell","command":"git log --grep={arg}"}"#,
        );
        assert_eq!(
            plain.kind.shell_template().map(|t| t.map(|t| t.is_shell())),
            Some(Ok(false))
        );
        let piped = tool(
            r#"{"name":"a","description":"d","kind":"shell","command":"git log {arg} | head","shell":true}"#,
        );
        assert_eq!(
            piped.kind.shell_template().map(|t| t.map(|t| t.is_shell())),
            Some(Ok(true))
        );
        let cases = [
            // Attack: shell syntax in a template that did not declare it.
            (
                r#"{"name":"a","description":"d","kind":"shell","command":"git log {arg} | head"}"#,
                "field `command` `git log {arg} | head` is refused: `|` is a shell operator, which \
                 only a shell understands; add `\"shell\": true` to run it with `sh`, or quote it",
            ),
            // Attack: a quoted placeholder in a shell template.
            (
                r#"{"name":"a","description":"d","kind":"shell","command":"grep -rn '{arg}' .","shell":true}"#,
                "field `command` `grep -rn '{arg}' .` is refused: puts `{arg}` inside single quotes; \
                 in a shell template `{arg}` must be a bare word, which is quoted for you",
            ),
            // Attack: the argument as shell code.
            (
                r#"{"name":"a","description":"d","kind":"shell","command":"sh -c 'wc -l {arg}'"}"#,
                "field `command` `sh -c 'wc -l {arg}'` is refused: puts `{arg}` in the code `sh` runs",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).err().unwrap_or_default();
            assert!(err.contains(expected), "`{err}` lacks `{expected}`");
        }
        // `shell` on another kind is a warning, not an error.
        let parsed =
            parse(r#"{"name":"a","description":"d","kind":"read","path":"a","shell":true}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            parsed.warnings,
            ["field `shell` is ignored for a `read` tool; only `shell` tools run commands"]
        );
    }

    #[test]
    fn schema_is_one_optional_string() {
        let t = tool(r#"{"name":"a","description":"d","kind":"read","path":"docs/{arg}.md"}"#);
        let schema = t.schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["arg"]["type"], "string");
        assert!(schema.get("required").is_none());
        let none = tool(r#"{"name":"a","description":"d","kind":"read","path":"README.md"}"#);
        let description = none.schema()["properties"]["arg"]["description"].clone();
        assert_eq!(description, "Ignored: this tool takes no argument.");
    }

    #[test]
    fn read_grants_cover_the_folder_a_template_fixes() {
        let cases = [
            ("docs/{arg}", "docs/**"),
            ("docs/api/{arg}.md", "docs/api/**"),
            ("notes-{arg}.md", "**"),
            ("{arg}", "**"),
            ("README.md", "README.md"),
            ("a[1]/{arg}", "a[[]1[]]/**"),
        ];
        for (template, grant) in cases {
            assert_eq!(read_grant(template), grant, "{template}");
        }
    }

    #[test]
    fn origins_are_taken_from_rendered_urls() {
        assert_eq!(
            origin_of("https://api.x.com/a?b=c").as_deref(),
            Some("https://api.x.com")
        );
        assert_eq!(
            origin_of("https://127.0.0.1:8443/x").as_deref(),
            Some("https://127.0.0.1:8443")
        );
        assert_eq!(origin_of("not a url"), None);
    }
}
