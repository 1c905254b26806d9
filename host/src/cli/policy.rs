//! `zotbox policy explain NAME` and `zotbox policy show`.
//!
//! `explain` also lists the control paths of the workspace: what no write
//! grant reaches, whatever the extension declared (`THREATS.md` rule 3).

use anyhow::{Result, bail};

use super::output::{json_line, table};
use super::{Context, EXIT_OK};
use zotbox::capability::fs::{CONTROL_NAMES, ControlPaths};
use zotbox::discovery::{Held, SearchPath};
use zotbox::manifest::Program;
use zotbox::policy::Policy;
use zotbox::text::{Shown, shown};

/// `zotbox policy` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// For one extension, per capability: what it declared, what the policy
    /// allows, what is granted, and which rule decided.
    Explain {
        /// The extension's name.
        name: String,
    },
    /// The policy files in force and what each says.
    Show,
}

fn load(context: &Context) -> Result<Policy> {
    Ok(Policy::load_for(&context.home()?)?)
}

impl Command {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let policy = load(context)?;
        match self {
            Self::Show => show(context, &policy),
            Self::Explain { name } => explain(context, &policy, &name),
        }
    }
}

fn show(context: &Context, policy: &Policy) -> Result<u8> {
    if context.json {
        for layer in policy.layers() {
            json_line(&serde_json::json!({"path": layer.path, "policy": layer.file}))?;
        }
        return Ok(EXIT_OK);
    }
    println!("system policy: {}", Policy::system_path().display());
    println!("user policy:   {}", context.home()?.user_policy().display());
    if policy.layers().is_empty() {
        println!(
            "no policy file exists: a sandboxed extension gets what its manifest asks, within \
             zotbox's built-in ceilings ({} MiB of memory, {} s a call)",
            zotbox::policy::BUILT_IN_MAX_MEMORY_MB,
            zotbox::policy::BUILT_IN_MAX_TOOL_TIMEOUT_MS / 1000
        );
    }
    for layer in policy.layers() {
        println!(
            "\n{}:\n{}",
            layer.path.display(),
            serde_json::to_string_pretty(&layer.file)?
        );
    }
    Ok(EXIT_OK)
}

/// Explains the extension called `name` that a host started here would
/// run: found under the workspace's trust as the host finds it, so that an
/// untrusted clone's manifest of the same name (held, never run) does not
/// stand in for the user's. Without one that runs, the held one is
/// explained, saying why it does not run.
fn explain(context: &Context, policy: &Policy, name: &str) -> Result<u8> {
    let search = SearchPath {
        explicit: context.ext.clone(),
        workspace: context.workspace()?,
        home: context.home()?,
    };
    let assessment = zotbox::store::trust::assess(policy, &search.home, &search.workspace);
    let discovery = search.discover_trusting(assessment.standing.allows());
    let Some((found, held)) = discovery.named(name) else {
        if let Some(failure) = discovery.failures.iter().find(|f| f.name() == name) {
            bail!(
                "extension `{}` does not load, so it is granted nothing: {}",
                Shown(name),
                failure.error
            );
        }
        bail!("no extension `{}` (see `zotbox list`)", Shown(name));
    };
    let manifest = &found.manifest;
    let not_run = held.map(|held| match held {
        Held::Workspace => assessment.refusal().unwrap_or_default(),
        Held::Uncovered => Held::UNCOVERED.to_owned(),
    });
    let grant = policy.grant(&manifest.raw.capabilities);
    let control = search.control_paths_with_nested().unwrap_or_else(|err| {
        eprintln!(
            "warning: what repositories nested in the workspace name is not listed: {}",
            zotbox::text::chain(&err)
        );
        search.control_paths()
    });
    if context.json {
        for row in &grant.rows {
            let mut line = serde_json::json!({
                "capability": row.capability,
                "manifest": manifest.path,
                "declared": row.declared,
                "policy": policy.describe(row.capability),
                "granted": row.granted,
                "refused": row.refused,
            });
            if let (Some(reason), Some(object)) = (&not_run, line.as_object_mut()) {
                object.insert("held".to_owned(), reason.as_str().into());
            }
            json_line(&line)?;
        }
        for (path, what) in control_rows(&control) {
            json_line(&serde_json::json!({"control_path": path, "what": what}))?;
        }
        return Ok(EXIT_OK);
    }
    if let Some(reason) = &not_run {
        println!(
            "`{}` does not run here: it {reason}; what it would be granted:",
            Shown(name)
        );
    }
    print_grant(policy, manifest, &manifest.raw.capabilities);
    print_control(&control);
    Ok(EXIT_OK)
}

/// The control paths as `(path, what it is)`: the names refused at any
/// depth, then the workspace's own.
fn control_rows(control: &ControlPaths) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = CONTROL_NAMES
        .iter()
        .map(|name| {
            (
                format!("{name}/"),
                "at any depth, in any case: it decides what runs".to_owned(),
            )
        })
        .collect();
    rows.extend(control.paths().iter().map(|path| {
        let what = if path.secret {
            format!("{}; nor any read grant", path.what)
        } else {
            path.what.clone()
        };
        (path.shown(), what)
    }));
    rows
}

/// Prints what no write grant reaches in this workspace.
fn print_control(control: &ControlPaths) {
    println!("control paths: no write grant reaches them, whatever was declared");
    let rows: Vec<Vec<String>> = control_rows(control)
        .into_iter()
        .map(|(path, what)| vec![shown(&path).into_owned(), shown(&what).into_owned()])
        .collect();
    print!("{}", table(&["CONTROL PATH", "WHAT"], &rows));
}

/// Prints, per capability, what `manifest` declared, what the policy allows,
/// what is granted and which rule decided; then its limits.
/// The grant of `declared` (the manifest's capabilities, or a data
/// package's, derived from its tools) under `policy`, and the limits.
pub(crate) fn print_grant(
    policy: &Policy,
    manifest: &zotbox::manifest::Manifest,
    declared: &zotbox::manifest::Capabilities,
) {
    let name = manifest.name();
    let grant = policy.grant(declared);
    println!(
        "extension `{}` ({}, {})",
        Shown(name),
        manifest.kind(),
        Shown(&manifest.path.display().to_string())
    );
    if let Program::Native { .. } = manifest.program {
        match policy.native_refused_by() {
            Some(path) => println!(
                "native extensions are refused by `{}`: it will not run at all",
                path.display()
            ),
            None => println!(
                "native: it runs unsandboxed, with the user's permissions; grants below do not \
                 bind it, except `secrets`: it gets each granted one that names an `env` variable"
            ),
        }
    }
    // Globs, origins and patterns are the author's: escaped, so a
    // backspace or a line break cannot hide what is granted.
    let list = |items: &[String]| {
        if items.is_empty() {
            "-".to_owned()
        } else {
            items
                .iter()
                .map(|item| shown(item).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let rows: Vec<Vec<String>> = grant
        .rows
        .iter()
        .map(|row| {
            let decided = if row.refused.is_empty() {
                if row.declared.is_empty() {
                    "not declared".to_owned()
                } else {
                    "declared, allowed".to_owned()
                }
            } else {
                row.refused
                    .iter()
                    .map(refused)
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            vec![
                row.capability.to_owned(),
                list(&row.declared),
                shown(&policy.describe(row.capability)).into_owned(),
                list(&row.granted),
                decided,
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "CAPABILITY",
                "DECLARED",
                "POLICY ALLOWS",
                "GRANTED",
                "DECIDED BY"
            ],
            &rows
        )
    );
    let narrowed = grant.rows.iter().any(|row| !row.refused.is_empty());
    if manifest.is_data() {
        // No program, so no limits: each tool runs with the host's.
        if narrowed {
            println!("its tools need more than the policy allows; they run with the smaller grant");
        }
        return;
    }
    let limits = policy.limits(
        &manifest.raw.limits,
        &zotbox::policy::LimitDefaults::default(),
    );
    println!(
        "memory: {} MiB ({})",
        limits.memory_mb.value, limits.memory_mb.source
    );
    println!(
        "tool timeout: {} ms ({})",
        limits.call_timeout.value.as_millis(),
        limits.call_timeout.source
    );
    println!(
        "intercept timeout: {} ms ({})",
        limits.intercept_timeout.value.as_millis(),
        limits.intercept_timeout.source
    );
    if narrowed {
        println!(
            "the extension declared more than the policy allows; it runs with the smaller grant"
        );
    }
    if !matches!(manifest.program, Program::Native { .. }) {
        for note in event_notes(&grant) {
            println!("{note}");
        }
    }
    println!("{}", grant_summary(policy, manifest, &grant));
}

/// What the granted events and rewrites let an extension do, in words:
/// the rows above name them, these lines say what they reach.
pub(crate) fn event_notes(grant: &zotbox::policy::Grant) -> Vec<&'static str> {
    use zotbox::protocol::event_name::{ASSISTANT_MESSAGE, TOOL_CALL};
    let has = |list: &[String], event: &str| list.iter().any(|e| e == event);
    let mut notes = Vec::new();
    if has(&grant.events, TOOL_CALL) {
        notes.push(
            "events tool_call: it sees every tool call of the agent with its arguments (the \
             files written, the commands run), and may block any",
        );
    }
    if has(&grant.events, ASSISTANT_MESSAGE) {
        notes.push("events assistant_message: it sees everything the model writes to you");
    }
    if has(&grant.rewrite, TOOL_CALL) {
        notes.push(
            "rewrite tool_call: it may change any tool call of the agent before it runs, zot's \
             own `bash` included, which runs with all your permissions, outside any sandbox",
        );
    }
    if has(&grant.rewrite, ASSISTANT_MESSAGE) {
        notes.push("rewrite assistant_message: it may change what the model says to you");
    }
    notes
}

/// One refusal of a grant as people read it: the declared item and the
/// rule that took it away, both escaped.
pub(crate) fn refused(refusal: &zotbox::policy::Refusal) -> String {
    format!(
        "`{}` refused: {}",
        Shown(&refusal.item),
        Shown(&refusal.rule)
    )
}

/// One line of zotbox's own, last before a consent question: what the
/// grant comes to, counted per capability with its broadest items first,
/// so that no long field of the author's above (a list of hundreds of
/// harmless globs, say) can hide a part of it off screen.
fn grant_summary(
    policy: &Policy,
    manifest: &zotbox::manifest::Manifest,
    grant: &zotbox::policy::Grant,
) -> String {
    if let Program::Native { .. } = manifest.program {
        return if policy.native_refused_by().is_some() {
            "in short: refused, as the policy refuses native extensions".to_owned()
        } else {
            "in short: it runs natively, with all your permissions".to_owned()
        };
    }
    let parts: Vec<String> = grant
        .rows
        .iter()
        .filter(|row| !row.granted.is_empty())
        .map(|row| {
            let mut items: Vec<&str> = row.granted.iter().map(String::as_str).collect();
            // Wildcards, then the shortest: `**` before `docs/page0001.md`.
            items.sort_by_key(|item| (!item.contains('*'), item.len()));
            format!(
                "{} {} ({})",
                row.capability,
                items.len(),
                super::output::a_few(&items)
            )
        })
        .collect();
    if parts.is_empty() {
        "in short: nothing is granted".to_owned()
    } else {
        format!("in short, granted: {}", parts.join("; "))
    }
}
