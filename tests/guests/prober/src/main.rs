//! A test guest that uses every capability on request, one tool each.
//!
//! Each tool answers with what the capability returned, or with the typed
//! error exactly as the SDK renders it (`is_error`), so the attack suite can
//! assert the refusal the guest saw, and that the guest kept running.

use serde::Deserialize;
use zotbox_guest::{CapabilityError, Extension, ToolOutput, fs, http, schema, shell};

#[derive(Deserialize)]
struct Path {
    path: String,
}

#[derive(Deserialize)]
struct Write {
    path: String,
    text: String,
}

#[derive(Deserialize)]
struct Url {
    url: String,
}

/// A full request: `{"method": "post", "url": …, "headers": [[name,
/// value]], "body": "…"}`; a header value or body may hold
/// `{{secret:NAME}}` placeholders, or `secret` names one to put in the
/// `Authorization` header with the SDK's helper.
#[derive(Deserialize)]
struct Fetch {
    #[serde(default)]
    method: Option<String>,
    url: String,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    secret: Option<String>,
}

#[derive(Deserialize)]
struct Command {
    command: String,
}

#[derive(Deserialize)]
struct Name {
    name: String,
}

fn answer<T>(result: Result<T, CapabilityError>, show: impl FnOnce(T) -> String) -> ToolOutput {
    match result {
        Ok(value) => ToolOutput::text(show(value)),
        Err(err) => ToolOutput::error(err.to_string()),
    }
}

fn main() -> std::io::Result<()> {
    Extension::new("prober", "0.1.0")
        .tool(
            "fs_read",
            "Read a workspace file.",
            schema::object(),
            |_ctx, a: Path| answer(fs::read_to_string(&a.path), |text| text),
        )
        .tool(
            "fs_write",
            "Write a workspace file.",
            schema::object(),
            |_ctx, a: Write| {
                answer(fs::write(&a.path, a.text.as_bytes()), |()| {
                    "written".to_owned()
                })
            },
        )
        .tool(
            "fs_list",
            "List a workspace folder.",
            schema::object(),
            |_ctx, a: Path| {
                answer(fs::list(&a.path), |entries| {
                    entries
                        .into_iter()
                        .map(|e| e.name)
                        .collect::<Vec<_>>()
                        .join(",")
                })
            },
        )
        .tool(
            "fs_stat",
            "Describe a workspace path.",
            schema::object(),
            |_ctx, a: Path| {
                answer(fs::stat(&a.path), |meta| {
                    format!("{:?} {}", meta.kind, meta.size)
                })
            },
        )
        .tool(
            "http_get",
            "Fetch a URL.",
            schema::object(),
            |_ctx, a: Url| {
                answer(http::get(&a.url), |response| {
                    format!("{} {}", response.status, response.text())
                })
            },
        )
        .tool(
            "http",
            "Send a request; answers the status, the `x-echo-*` headers and the body.",
            schema::object(),
            |_ctx, a: Fetch| {
                let method = match a.method.as_deref() {
                    Some("post") => http::Method::Post,
                    Some("put") => http::Method::Put,
                    _ => http::Method::Get,
                };
                let mut headers = a.headers;
                if let Some(name) = &a.secret {
                    headers.push((
                        "Authorization".to_owned(),
                        format!("Bearer {}", zotbox_guest::secret::placeholder(name)),
                    ));
                }
                let request = http::Request {
                    method,
                    url: a.url,
                    headers,
                    body: a.body.map(String::into_bytes),
                };
                answer(http::fetch(request), |response| {
                    let echoed: Vec<String> = response
                        .headers
                        .iter()
                        .filter(|(name, _)| name.starts_with("x-echo"))
                        .map(|(name, value)| format!("[{name}: {value}]"))
                        .collect();
                    format!(
                        "{} {} {}",
                        response.status,
                        echoed.join(""),
                        response.text()
                    )
                })
            },
        )
        .tool(
            "shell",
            "Run a command.",
            schema::object(),
            |_ctx, a: Command| {
                answer(shell::run(&a.command), |out| {
                    format!(
                        "exit={:?} stdout={} stderr={}",
                        out.exit_code, out.stdout, out.stderr
                    )
                })
            },
        )
        .tool(
            "env",
            "Read an environment variable.",
            schema::object(),
            |_ctx, a: Name| match std::env::var(&a.name) {
                Ok(value) => ToolOutput::text(value),
                Err(err) => ToolOutput::error(format!("`{}`: {err}", a.name)),
            },
        )
        .tool(
            "ping",
            "Answer pong: proves the guest still runs.",
            schema::object(),
            |_ctx, _a: serde::de::IgnoredAny| ToolOutput::text("pong"),
        )
        .run()
}
