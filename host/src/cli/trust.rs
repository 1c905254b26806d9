//! `zotbox trust [--revoke] [--list]`: review what the workspace brings and
//! trust it as it is now.
//!
//! The review shows every extension of `<ws>/.zot/extensions` (its kind,
//! what zot itself launches for it, what it declares against what the
//! policy grants), every data tool's template, every refusal plugin and
//! skill, and every file the trust record covers; then it asks (`--yes`
//! accepts; without a terminal and without `--yes` it refuses). The record
//! goes to `$ZOT_HOME/trust.json` (see [`zotbox::store::trust`]); it binds
//! the workspace's canonical path and the hash of what was shown, so any
//! change makes the workspace untrusted again. Reviewing reads files only:
//! nothing of the workspace starts.
//!
//! `--json` writes one JSON object per line: `{"extension": …}`,
//! `{"tool": …}`, `{"plugin": …}`, `{"skill": …}`, `{"workspace": …}` (the
//! hash and files; a link with `target_covered`), then `{"action": …}`;
//! with `--list`, one
//! `{"workspace": …, "status": …}` per record.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::json;

use super::output::{a_few, a_few_of, json_line, table};
use super::{Context, EXIT_OK};
use zotbox::data::{DataOrigin, DataSearch, DataSet};
use zotbox::discovery::{SearchPath, ZotLaunch, ZotShadow, zot_launch};
use zotbox::manifest::{Manifest, Program};
use zotbox::policy::{Policy, WorkspaceTrust};
use zotbox::store::trust::{Contents, EntryKind, TrustStore};
use zotbox::text::{clipped, shown, shown_path};

/// How many covered files the review lists before it summarises the rest.
const FILES_SHOWN: usize = 50;

/// Arguments of `zotbox trust`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Forget the trust in this workspace: its extensions and data tools
    /// stay off again.
    #[arg(long, conflicts_with = "list")]
    revoke: bool,
    /// List the trusted workspaces: trusted, changed since, or missing.
    #[arg(long)]
    list: bool,
    /// Trust what is shown without asking.
    #[arg(long, short)]
    yes: bool,
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let home = context.home()?;
        if self.list {
            return list(context, &home);
        }
        let given = context.workspace()?;
        let workspace = std::fs::canonicalize(&given)
            .with_context(|| format!("workspace `{}`", shown_path(&given)))?;
        let shown_ws = shown_path(&workspace);
        let mut store = TrustStore::load(&home)?;
        if self.revoke {
            if !store.revoke(&workspace) {
                bail!("workspace `{shown_ws}` was not trusted");
            }
            store.save()?;
            return say(context, "revoked", &workspace, None);
        }
        let policy = Policy::load_for(&home)?;
        let contents = Contents::scan(&workspace)
            .with_context(|| format!("workspace `{shown_ws}` cannot be trusted"))?;
        // A manifest zot cannot read as a file runs nothing under zotbox
        // and is not trusted, but is worth a word: zot reads it as it is,
        // and waits forever on a FIFO.
        for (manifest, what) in unreadable_manifests(&workspace, &home) {
            eprintln!(
                "warning: `{}` is {what}, not a file: zotbox refuses it, and zot may hang \
                 reading it; remove it",
                shown_path(&manifest)
            );
        }
        if contents.is_empty() {
            return say(context, "nothing to trust in", &workspace, None);
        }
        let review = Review::of(&workspace, &home);
        review.print(context, &policy, &contents)?;
        let (setting, by) = policy.workspace_trust();
        if setting == WorkspaceTrust::Never {
            bail!(
                "not trusting `{shown_ws}`: `workspace_trust` is `never` in `{}`, so no \
                 workspace's extensions or data tools run, trusted or not",
                by.map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
        let earlier = store.record(&workspace).cloned();
        if earlier
            .as_ref()
            .is_some_and(|r| r.sha256 == contents.sha256)
        {
            return say(context, "already trusted", &workspace, Some(&contents));
        }
        if let Some(earlier) = &earlier
            && !context.json
        {
            println!(
                "this workspace changed since you trusted it on {}",
                shown(&earlier.trusted_at)
            );
        }
        consent(&shown_ws, self.yes)?;
        // What is recorded must be what was shown.
        let now = Contents::scan(&workspace)
            .with_context(|| format!("workspace `{shown_ws}` cannot be trusted"))?;
        if now.sha256 != contents.sha256 {
            bail!(
                "not trusting `{shown_ws}`: its files changed while they were shown; run \
                 `zotbox trust` again to review them"
            );
        }
        store.trust(&contents)?;
        store.save()?;
        if setting == WorkspaceTrust::Always && !context.json {
            println!(
                "(the policy `{}` already trusts every workspace; this record outlasts it)",
                by.map(|p| p.display().to_string()).unwrap_or_default()
            );
        }
        say(context, "trusted", &workspace, Some(&contents))
    }
}

/// Asks whether to trust the workspace shown above.
fn consent(workspace: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        bail!(
            "not trusting `{workspace}` without confirmation: stdin is not a terminal; pass \
             --yes to trust what is shown above"
        );
    }
    eprint!("trust `{workspace}` as it is now? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        bail!("trust in `{workspace}` not given")
    }
}

/// The extension manifests of the workspace, as zot finds them
/// ([`SearchPath::workspace_manifests`]), that are not regular files (a
/// FIFO, a device, a dangling link), with what each is.
fn unreadable_manifests(
    workspace: &Path,
    home: &zotbox::home::ZotHome,
) -> Vec<(PathBuf, &'static str)> {
    use std::os::unix::fs::FileTypeExt as _;
    let search = SearchPath {
        explicit: Vec::new(),
        workspace: workspace.to_owned(),
        home: home.clone(),
    };
    search
        .workspace_manifests()
        .into_iter()
        .filter_map(|manifest| {
            let what = match std::fs::metadata(&manifest) {
                Err(_) => "a link to nothing",
                Ok(meta) if meta.is_file() => return None,
                Ok(meta) if meta.file_type().is_fifo() => "a FIFO",
                Ok(meta) if meta.is_dir() => "a folder",
                Ok(_) => "a device or socket",
            };
            Some((manifest, what))
        })
        .collect()
}

fn say(
    context: &Context,
    action: &str,
    workspace: &Path,
    contents: Option<&Contents>,
) -> Result<u8> {
    if context.json {
        json_line(&json!({
            "action": action,
            "workspace": workspace,
            "sha256": contents.map(|c| c.sha256.as_str()),
        }))?;
        return Ok(EXIT_OK);
    }
    let ws = shown_path(workspace);
    match (action, contents) {
        ("trusted", Some(c)) => println!(
            "trusted `{ws}` ({} files, sha256 {}); any change to them makes it untrusted again",
            c.covered.len(),
            &c.sha256[..12.min(c.sha256.len())]
        ),
        ("nothing to trust in", _) => println!(
            "nothing to trust in `{ws}`: it brings no extensions and no data tools (refusal \
             plugins and skills need no trust)"
        ),
        _ => println!("{action} `{ws}`"),
    }
    Ok(EXIT_OK)
}

/// Everything the workspace brings, read without starting anything.
struct Review {
    workspace: PathBuf,
    extensions: Vec<(PathBuf, Result<Manifest, String>)>,
    data: DataSet,
    shadows: Vec<ZotShadow>,
}

impl Review {
    fn of(workspace: &Path, home: &zotbox::home::ZotHome) -> Self {
        let search = SearchPath {
            explicit: Vec::new(),
            workspace: workspace.to_owned(),
            home: home.clone(),
        };
        let extensions = search
            .workspace_manifests()
            .into_iter()
            .map(|path| {
                let manifest = Manifest::load(&path).map_err(|e| e.to_string());
                (path, manifest)
            })
            .collect();
        Self {
            workspace: workspace.to_owned(),
            extensions,
            data: DataSearch::new(workspace, home.root()).load_holding_project_tools(),
            shadows: search.zot_shadows(),
        }
    }

    fn print(&self, context: &Context, policy: &Policy, contents: &Contents) -> Result<()> {
        if context.json {
            return self.print_json(policy, contents);
        }
        println!(
            "workspace `{}`: {} files covered ({} bytes), sha256 {}",
            shown_path(&contents.workspace),
            contents.covered.len(),
            contents.bytes,
            &contents.sha256[..12.min(contents.sha256.len())]
        );
        if !self.extensions.is_empty() {
            println!(
                "\nextensions (zot starts these itself; zotbox runs them once you trust the workspace):"
            );
            let rows: Vec<Vec<String>> = self
                .extensions
                .iter()
                .filter_map(|(_, m)| m.as_ref().ok())
                .map(|m| {
                    vec![
                        shown(m.name()).into_owned(),
                        m.kind().to_owned(),
                        launch_cell(m),
                        capabilities_cell(policy, m),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["NAME", "KIND", "ZOT LAUNCHES", "CAPABILITIES"], &rows)
            );
            for (path, manifest) in &self.extensions {
                if let Err(err) = manifest {
                    println!("invalid `{}`: {}", shown_path(path), shown(err));
                }
            }
        }
        for shadow in &self.shadows {
            let what = if shadow.serve_launcher {
                "zotbox's serve launcher (every refusal plugin is off inside zot)".to_owned()
            } else {
                format!("your `{}`", shown_path(&shadow.user))
            };
            println!(
                "inside zot, `{}` replaces {what}",
                shown_path(&shadow.workspace)
            );
        }
        let tools = &self.data.untrusted_tools;
        if !tools.is_empty() {
            println!("\ndata tools (zotbox runs these once you trust the workspace):");
            let rows: Vec<Vec<String>> = tools
                .iter()
                .map(|t| {
                    // An http tool's fixed headers go with every request: shown too.
                    let mut template = t.kind.template().to_owned();
                    if let zotbox::data::ToolKind::Http { headers, .. } = &t.kind
                        && !headers.is_empty()
                    {
                        let list: Vec<String> =
                            headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
                        template.push_str(&format!(" (headers: {})", list.join("; ")));
                    }
                    vec![
                        shown(&t.name).into_owned(),
                        t.kind.as_str().to_owned(),
                        shown(&template).into_owned(),
                        shown(&t.description).into_owned(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["NAME", "KIND", "TEMPLATE", "DESCRIPTION"], &rows)
            );
        }
        for problem in self.project_problems() {
            println!("skipped {}", shown(&problem.error));
        }
        let plugins = self.project_plugins();
        if !plugins.is_empty() {
            println!("\nrefusal plugins (in force, trusted or not: they only block):");
            let rows: Vec<Vec<String>> = plugins
                .iter()
                .map(|p| {
                    vec![
                        shown(&p.name).into_owned(),
                        format!("{} deny rules", p.deny.len()),
                        shown(&p.description).into_owned(),
                    ]
                })
                .collect();
            print!("{}", table(&["NAME", "RULES", "DESCRIPTION"], &rows));
        }
        let skills: Vec<_> = self
            .data
            .skills
            .iter()
            .filter(|s| s.origin == DataOrigin::Project)
            .collect();
        if !skills.is_empty() {
            println!("\nskills (loaded as text, trusted or not, marked `project`):");
            let rows: Vec<Vec<String>> = skills
                .iter()
                .map(|s| {
                    vec![
                        shown(&s.name).into_owned(),
                        shown(&s.description).into_owned(),
                    ]
                })
                .collect();
            print!("{}", table(&["NAME", "DESCRIPTION"], &rows));
        }
        if !contents.covered.is_empty() {
            println!("\nfiles covered (any change to them revokes the trust):");
            for covered in contents.covered.iter().take(FILES_SHOWN) {
                let what = match &covered.kind {
                    EntryKind::File { bytes } => format!("{bytes} bytes"),
                    EntryKind::Symlink { target } => {
                        let target = shown_path(target);
                        if contents.follows_link(&covered.path) {
                            format!("symlink to `{target}`")
                        } else {
                            format!(
                                "symlink to `{target}` (only the link: a change where it \
                                 leads does not revoke the trust)"
                            )
                        }
                    }
                    EntryKind::Special { what } => (*what).to_owned(),
                };
                // A path is the author's, and may be long enough to wrap
                // into rows of its own: clipped to one.
                println!("  {}  {what}", clipped(&shown_path(&covered.path), 120));
            }
            if contents.covered.len() > FILES_SHOWN {
                println!("  … and {} more", contents.covered.len() - FILES_SHOWN);
            }
        }
        println!("\n{}\n", self.summary(policy, contents));
        Ok(())
    }

    /// One line of zotbox's own, last before the question: what the
    /// review comes to, counted, so that nothing an author wrote above
    /// (a description, a path long enough to wrap into rows that look
    /// like the review's own) can stand between it and the answer.
    fn summary(&self, policy: &Policy, contents: &Contents) -> String {
        let (mut native, mut sandboxed, mut idle) = (Vec::new(), Vec::new(), 0);
        for (_, manifest) in &self.extensions {
            let Ok(manifest) = manifest else { continue };
            match zot_launch(manifest) {
                ZotLaunch::Native(_) => native.push(manifest.name()),
                ZotLaunch::Sandboxed => sandboxed.push(manifest),
                ZotLaunch::Nothing => idle += 1,
            }
        }
        let invalid = self.extensions.iter().filter(|(_, m)| m.is_err()).count();
        let tools = &self.data.untrusted_tools;
        let shell = tools
            .iter()
            .filter(|t| matches!(t.kind, zotbox::data::ToolKind::Shell { .. }))
            .count();
        let mut parts = Vec::new();
        if !native.is_empty() {
            parts.push(format!(
                "{} that zot starts natively, with all your permissions ({})",
                counted(native.len(), "extension"),
                a_few(&native)
            ));
        }
        if !sandboxed.is_empty() {
            // Each with what its grant comes to, counted.
            let each = a_few_of(&sandboxed, "; ", |manifest| {
                let grant = policy.grant(&manifest.raw.capabilities);
                let granted: Vec<String> = grant
                    .rows
                    .iter()
                    .filter(|row| !row.granted.is_empty())
                    .map(|row| format!("{} {}", row.capability, row.granted.len()))
                    .collect();
                let granted = if granted.is_empty() {
                    "nothing granted".to_owned()
                } else {
                    granted.join(", ")
                };
                format!("{}: {granted}", a_few(&[manifest.name()]))
            });
            parts.push(format!(
                "{} run in the sandbox ({each})",
                counted(sandboxed.len(), "extension"),
            ));
        }
        if idle + invalid > 0 {
            parts.push(format!(
                "{} zot does not start (disabled, no program, or invalid)",
                counted(idle + invalid, "extension")
            ));
        }
        if !tools.is_empty() {
            parts.push(format!(
                "{} ({shell} run shell commands)",
                counted(tools.len(), "data tool")
            ));
        }
        let plugins = self.project_plugins().len();
        if plugins > 0 {
            parts.push(counted(plugins, "refusal plugin"));
        }
        let skills = self
            .data
            .skills
            .iter()
            .filter(|s| s.origin == DataOrigin::Project)
            .count();
        if skills > 0 {
            parts.push(counted(skills, "skill"));
        }
        parts.push(counted(contents.covered.len(), "file") + " covered");
        format!("in short, this workspace brings: {}", parts.join("; "))
    }

    fn print_json(&self, policy: &Policy, contents: &Contents) -> Result<()> {
        for (path, manifest) in &self.extensions {
            match manifest {
                Ok(m) => {
                    let (launch, command) = match zot_launch(m) {
                        ZotLaunch::Sandboxed => ("sandboxed", None),
                        ZotLaunch::Native(command) => ("native", Some(command)),
                        ZotLaunch::Nothing => ("nothing", None),
                    };
                    let grant = policy.grant(&m.raw.capabilities);
                    json_line(&json!({
                        "extension": m.name(),
                        "kind": m.kind(),
                        "path": path,
                        "zot_launch": launch,
                        "zot_command": command,
                        "capabilities": grant.rows,
                    }))?;
                }
                Err(error) => json_line(&json!({"extension": null, "path": path, "error": error}))?,
            }
        }
        for shadow in &self.shadows {
            json_line(&json!({
                "zot_shadow": shadow.name,
                "workspace": shadow.workspace,
                "user": shadow.user,
                "serve_launcher": shadow.serve_launcher,
            }))?;
        }
        for tool in &self.data.untrusted_tools {
            json_line(&json!({
                "tool": tool.name,
                "kind": tool.kind.as_str(),
                "template": tool.kind.template(),
                "description": tool.description,
                "path": tool.path,
            }))?;
        }
        for plugin in self.project_plugins() {
            json_line(&json!({
                "plugin": plugin.name,
                "deny_rules": plugin.deny.len(),
                "path": plugin.path,
            }))?;
        }
        for skill in self
            .data
            .skills
            .iter()
            .filter(|s| s.origin == DataOrigin::Project)
        {
            json_line(&json!({
                "skill": skill.name,
                "description": skill.description,
                "path": skill.path,
            }))?;
        }
        // A link says whether what it leads to is covered too.
        let covered = contents
            .covered
            .iter()
            .map(|entry| {
                let mut value = serde_json::to_value(entry)?;
                if matches!(entry.kind, EntryKind::Symlink { .. }) {
                    value["target_covered"] = json!(contents.follows_link(&entry.path));
                }
                Ok(value)
            })
            .collect::<serde_json::Result<Vec<_>>>()?;
        json_line(&json!({
            "workspace": contents.workspace,
            "sha256": contents.sha256,
            "bytes": contents.bytes,
            "covered": covered,
        }))
    }

    /// The workspace's plugins, the ones shadowed by name included: all
    /// of their rules are in force.
    fn project_plugins(&self) -> Vec<&zotbox::data::Plugin> {
        self.data
            .plugins
            .iter()
            .chain(&self.data.shadowed_plugins)
            .filter(|p| p.origin == DataOrigin::Project)
            .collect()
    }

    /// Data files of the workspace that failed to load.
    fn project_problems(&self) -> Vec<&zotbox::data::DataProblem> {
        let roots = [self.workspace.join(".zot"), self.workspace.join(".shiro")];
        self.data
            .problems
            .iter()
            .filter(|p| roots.iter().any(|root| p.path.starts_with(root)))
            .collect()
    }
}

/// What zot starts for a manifest, for the table.
/// `1 extension`, `2 extensions`.
fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn launch_cell(manifest: &Manifest) -> String {
    match zot_launch(manifest) {
        ZotLaunch::Sandboxed => "sandboxed: zotbox run".to_owned(),
        ZotLaunch::Native(command) => format!("natively: {}", shown(&command)),
        ZotLaunch::Nothing => "nothing (disabled or no exec)".to_owned(),
    }
}

/// What a manifest declares against what the policy grants.
fn capabilities_cell(policy: &Policy, manifest: &Manifest) -> String {
    if let Program::Native { .. } = manifest.program {
        return match policy.native_refused_by() {
            Some(path) => format!(
                "refused: native extensions are off in `{}`",
                shown_path(path)
            ),
            None => {
                // The one thing its manifest decides: secrets handed over as variables.
                let grant = policy.grant(&manifest.raw.capabilities);
                let held: Vec<String> = grant
                    .secrets
                    .iter()
                    .filter(|(_, spec)| spec.env.is_some())
                    .map(|(name, spec)| {
                        shown(&zotbox::policy::secret_item(name, spec)).into_owned()
                    })
                    .collect();
                if held.is_empty() {
                    "unsandboxed: runs with your permissions".to_owned()
                } else {
                    format!(
                        "unsandboxed: runs with your permissions; gets secrets {}",
                        held.join(", ")
                    )
                }
            }
        };
    }
    let grant = policy.grant(&manifest.raw.capabilities);
    let rows: Vec<String> = grant
        .rows
        .iter()
        .filter(|row| !row.declared.is_empty())
        .map(|row| {
            let list = |items: &[String]| {
                if items.is_empty() {
                    "none".to_owned()
                } else {
                    shown(&items.join(", ")).into_owned()
                }
            };
            if row.capability == "secrets" {
                // Each item already reads `NAME → where it may go`.
                let refused: Vec<&str> = row.refused.iter().map(|r| r.item.as_str()).collect();
                return if refused.is_empty() {
                    format!("secrets {}", list(&row.granted))
                } else {
                    format!(
                        "secrets {}, refused by policy: {}",
                        list(&row.granted),
                        shown(&refused.join(", "))
                    )
                };
            }
            format!(
                "{} {} → {}",
                row.capability,
                list(&row.declared),
                list(&row.granted)
            )
        })
        .chain(
            // What the granted events reach, in words (see `policy explain`).
            super::policy::event_notes(&grant)
                .into_iter()
                .map(str::to_owned),
        )
        .collect();
    if rows.is_empty() {
        "none declared".to_owned()
    } else {
        rows.join("; ")
    }
}

/// `--list`: every record and whether the workspace is still as trusted.
fn list(context: &Context, home: &zotbox::home::ZotHome) -> Result<u8> {
    let store = TrustStore::load(home)?;
    let mut rows = Vec::new();
    for (workspace, record) in store.records() {
        let path = Path::new(workspace);
        let status = if !path.is_dir() {
            "missing".to_owned()
        } else {
            match Contents::scan(path) {
                Ok(now) if now.sha256 == record.sha256 => "trusted".to_owned(),
                Ok(_) => "changed since".to_owned(),
                Err(err) => format!("cannot be hashed: {err}"),
            }
        };
        if context.json {
            json_line(&json!({
                "workspace": workspace,
                "status": status,
                "trusted_at": record.trusted_at,
                "sha256": record.sha256,
            }))?;
        }
        rows.push(vec![
            shown(workspace).into_owned(),
            status,
            shown(&record.trusted_at).into_owned(),
        ]);
    }
    if context.json {
        return Ok(EXIT_OK);
    }
    if rows.is_empty() {
        println!("no trusted workspaces");
    } else {
        print!("{}", table(&["WORKSPACE", "STATUS", "TRUSTED AT"], &rows));
    }
    Ok(EXIT_OK)
}
