//! `zotbox ext …`: manage installed extensions with zot's semantics.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::output::{json_line, quiet_if_gone, table};
use super::{Context, EXIT_OK};
use zotbox::discovery::{Origin, SearchPath};
use zotbox::manifest::{MANIFEST_FILE, Manifest, Program};
use zotbox::store::source::Source;
use zotbox::store::{install, installer, lock};
use zotbox::text::{Shown, shown, shown_path};

/// `zotbox ext` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Install the extension from SOURCE into $ZOT_HOME/extensions/<name>/.
    ///
    /// SOURCE is a folder (holding extension.json); a git repository
    /// (`https://…/x.git`, `git+https://…`, `file://…` or `git+/local/path`,
    /// with `#REV` to pin a commit, tag or branch); an `https://…/x.tar.gz`
    /// archive (with `#sha256=HEX` to pin its digest); or a registry entry
    /// `NAME[@VERSION]`. Git and archives are fetched into a private folder
    /// first (HTTPS only, size and time capped, archives unpacked refusing
    /// links, `..`, devices and bombs), then installed like a folder. What
    /// was installed, from where (the commit, the archive's digest) and the
    /// digest of its files are recorded in $ZOT_HOME/zotbox.lock, and
    /// checked at every start.
    ///
    /// What lands is what the extension is: its manifest, its program (the
    /// `wasm` file; a native `exec` inside the folder and the `args` naming
    /// files there) and the files its manifest's `files` globs select.
    /// Sources, build folders (`target/`) and VCS folders stay behind; an
    /// install over 100 MiB is refused. A wasm file not built yet is named,
    /// with the `zotbox ext build` to run.
    ///
    /// Exactly what the folder held when it was read lands: symlinks leaving
    /// the folder, FIFOs, sockets and devices are refused, a link to a file
    /// inside it is copied as that file, and a file changed after it was
    /// read stops the install. The copy is validated, and an existing
    /// install is replaced only once the new copy is in place (it is back
    /// as it was on any failure).
    ///
    /// A sandboxed (wasm) extension first shows its files, the capabilities
    /// it declares and what the policy grants, and asks to go on (`--yes`
    /// accepts; without a terminal and without `--yes` the install is
    /// refused). Its copy then gets `exec`/`args` that make zot start it
    /// through `zotbox-relay` (or `zotbox run`, where no relay lies beside
    /// zotbox), and it is precompiled into the cache.
    Install {
        /// A folder, a git URL (`#REV`), an https `.tar.gz` (`#sha256=`), or NAME[@VERSION].
        source: String,
        /// Install into <workspace>/.zot/extensions/ instead of $ZOT_HOME.
        #[arg(long)]
        project: bool,
        /// Accept the capabilities without asking.
        #[arg(long, short)]
        yes: bool,
    },
    /// List the registries' extensions whose name or description holds TEXT.
    ///
    /// Registries come from the policy (`registries: [{url, keys}]`); each
    /// index is verified against its keys, its expiry and the last version
    /// seen before anything is listed.
    Search {
        /// The text to look for ("" lists everything).
        text: String,
    },
    /// Show what installing NAME[@VERSION] from a registry would do,
    /// without installing it.
    ///
    /// Downloads and checks the archive (digest, signature, publishers,
    /// revocation, that it holds the listed extension), then shows its
    /// files, the capabilities it declares against what the policy grants,
    /// and who signed it.
    Info {
        /// NAME or NAME@VERSION.
        name: String,
    },
    /// Update extensions installed from a registry to its newest version.
    ///
    /// Shows each update and what it adds to or drops from the grant; an
    /// update that asks for more than was granted shows the full grant and
    /// asks again (`--yes` accepts; without a terminal and without `--yes`
    /// it is refused). Nothing is ever updated without this command.
    Update {
        /// Only this extension.
        name: Option<String>,
        /// Accept added capabilities without asking.
        #[arg(long, short)]
        yes: bool,
    },
    /// Check every installed extension against $ZOT_HOME/zotbox.lock.
    ///
    /// Lists each one as ok, changed (naming the first file that differs),
    /// not locked (installed before the lock, or by hand) or missing (locked,
    /// but its folder is gone). Exits 1 when anything changed or is missing.
    Verify,
    /// Delete an installed extension's folder (and its lock entry).
    Remove {
        /// The extension's name.
        name: String,
    },
    /// Set `enabled: true` in an extension's manifest.
    Enable {
        /// The extension's name.
        name: String,
    },
    /// Set `enabled: false` in an extension's manifest (it stays installed).
    Disable {
        /// The extension's name.
        name: String,
    },
    /// Build the guest in DIR and put the wasm where its manifest's `wasm`
    /// field points.
    ///
    /// The language comes from the manifest's `language`, else from the
    /// folder: `Cargo.toml` (Rust, a wasm32-wasip2 component), `go.mod` (Go),
    /// `app.py` (Python, with componentize-py), `package.json` (JavaScript,
    /// with componentize-js) or a Makefile with a `wasm` target (C). A missing
    /// toolchain is named with the command that installs it; the rustup
    /// target a Rust build needs is installed when it is missing, and a
    /// crate builds in release mode without debug info. The result is
    /// precompiled into the cache. The wasm is written only inside DIR (a missing folder on its
    /// path is created; a symlinked one is refused). The toolchain's progress
    /// shows on a terminal; piped or with --json, only errors.
    ///
    /// Building runs code with your permissions, outside any sandbox: a
    /// crate's build scripts and proc macros (and its dependencies'), a
    /// Makefile's commands, a folder's own componentize-js. The first build
    /// of a folder says so.
    Build {
        /// The extension folder: its extension.json and its sources.
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    // The help of these two is their Args' doc comment.
    Pack(super::publish::PackArgs),
    Sign(super::publish::SignArgs),
    /// Print an extension's stderr log ($ZOT_HOME/logs/ext-<name>.log), every character a
    /// terminal would act on (but line breaks and tabs) escaped.
    Logs {
        /// The extension's name.
        name: String,
        /// Keep printing as the log grows.
        #[arg(short, long)]
        follow: bool,
    },
}

impl Command {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        match self {
            Self::Install {
                source,
                project,
                yes,
            } => install(context, &source, project, yes).await,
            Self::Verify => verify(context),
            Self::Search { text } => super::catalog::search(context, &text).await,
            Self::Info { name } => super::catalog::info(context, &name).await,
            Self::Update { name, yes } => {
                super::catalog::update(context, name.as_deref(), yes).await
            }
            Self::Remove { name } => remove(context, &name),
            Self::Enable { name } => set_enabled(context, &name, true),
            Self::Disable { name } => set_enabled(context, &name, false),
            Self::Logs { name, follow } => logs(context, &name, follow).await,
            Self::Build { dir } => build(context, &dir).await,
            Self::Pack(args) => args.run(context).await,
            Self::Sign(args) => args.run(context).await,
        }
    }
}

fn report(context: &Context, action: &str, name: &str, path: &Path) -> Result<u8> {
    if context.json {
        json_line(&serde_json::json!({"action": action, "name": name, "path": path}))?;
    } else {
        println!("{action} `{name}` at {}", path.display());
    }
    Ok(EXIT_OK)
}

async fn build(context: &Context, dir: &Path) -> Result<u8> {
    let manifest = Manifest::load(&dir.join(MANIFEST_FILE))?;
    let zotbox::manifest::Program::Wasm { path } = &manifest.program else {
        bail!(
            "`{}` has no `wasm` field; add `\"wasm\": \"./{}.wasm\"` to build a sandboxed extension",
            manifest.path.display(),
            manifest.name()
        );
    };
    // Before anything runs: the output must land inside the folder.
    let relative = manifest.wasm_relative().unwrap_or_default();
    output_folder(&manifest.dir, &relative)?;
    let language = zotbox::build::Language::detect(&manifest.dir, manifest.raw.language.as_deref());
    first_build_notice(context, &manifest.dir, language);
    if language == Some(zotbox::build::Language::Rust) {
        // Every build, not once: such a file may come with any pull.
        for file in zotbox::build::settings_above(&manifest.dir) {
            eprintln!(
                "note: cargo also reads `{}`, from a folder above the crate: what it names (a \
                 `rustc-wrapper`, a `runner`, a toolchain) runs with the build, with your \
                 permissions",
                shown_path(&file)
            );
        }
    }
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // The toolchain's own progress on a terminal; quiet when piped or for --json.
    let verbose = terminal && !context.json;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let (folder, language) = (dir.to_owned(), manifest.raw.language.clone());
    let name = stem.clone().unwrap_or_else(|| manifest.name().to_owned());
    let started = std::time::Instant::now();
    let artifacts = tokio::task::spawn_blocking(move || {
        zotbox::build::build_guest(&folder, language.as_deref(), &name, verbose)
    })
    .await??;
    let built = match artifacts.len() {
        1 => artifacts.values().next(),
        _ => stem.as_ref().and_then(|stem| artifacts.get(stem)),
    }
    .with_context(|| {
        format!(
            "the crate builds several binaries ({}); name the wasm file after one of them",
            artifacts.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })?;
    install_file(built, path)?;
    let home = context.home()?;
    let compile_memory_mb = zotbox::policy::Policy::load_for(&home)?.compile_memory_mb();
    let launcher =
        zotbox::Launcher::new(home).with_compiler_process(super::this_zotbox(), compile_memory_mb);
    let launcher = if context.json {
        launcher
    } else {
        super::output::with_compile_notes(launcher)
    };
    let runtime = launcher.wasm()?;
    let (name, target) = (manifest.name().to_owned(), path.clone());
    tokio::task::spawn_blocking(move || runtime.prepare(&name, &target)).await??;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if context.json {
        json_line(
            &serde_json::json!({"action": "built", "name": manifest.name(), "path": path, "bytes": size}),
        )?;
    } else {
        println!(
            "built `{}` → {} ({} KiB, precompiled) in {:.1} s",
            Shown(manifest.name()),
            shown(&path.display().to_string()),
            size / 1024,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(EXIT_OK)
}

/// Makes sure the folder of the `wasm` file (`relative` to `dir`) is a
/// real folder inside `dir`, creating what is missing. A manifest cannot
/// name a path outside (absolute or with `..`), and a component that is a
/// symlink is refused here: it could lead the component anywhere (over
/// `~/.profile`, say).
fn output_folder(dir: &Path, relative: &str) -> Result<()> {
    let parts: Vec<&str> = relative.split('/').collect();
    let Some((_, folders)) = parts.split_last() else {
        return Ok(());
    };
    let mut current = dir.to_owned();
    for (index, folder) in folders.iter().enumerate() {
        current.push(folder);
        let walked = folders[..=index].join("/");
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.is_symlink() => bail!(
                "build of `{}` refused: `{}` in the `wasm` path is a symlink; the component is \
                 written only inside the extension's folder (make it a real folder)",
                shown(&dir.display().to_string()),
                Shown(&walked)
            ),
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => bail!(
                "build of `{}` refused: `{}` in the `wasm` path is not a folder",
                shown(&dir.display().to_string()),
                Shown(&walked)
            ),
            Err(_) => {
                std::fs::create_dir(&current)
                    .with_context(|| format!("cannot create `{}`", current.display()))?;
                eprintln!("created the folder `{}` for the component", Shown(&walked));
            }
        }
    }
    if std::fs::symlink_metadata(dir.join(relative)).is_ok_and(|meta| meta.is_dir()) {
        bail!(
            "build of `{}` refused: the `wasm` path `{}` is a folder; name the file to write",
            shown(&dir.display().to_string()),
            Shown(relative)
        );
    }
    Ok(())
}

/// Says once per folder (recorded in `$ZOT_HOME/built-folders`) that a
/// build runs the crate's code with the user's permissions.
fn first_build_notice(context: &Context, dir: &Path, language: Option<zotbox::build::Language>) {
    // Cargo and make run an author's code to build, and so does a
    // componentize-js the folder brings itself (`go build` for wasip1,
    // componentize-py and the componentize-js on `PATH` run none of it
    // outside a sandbox).
    let runs = match language {
        Some(zotbox::build::Language::Rust) => {
            "runs its build scripts and proc macros, and those of its dependencies,"
        }
        Some(zotbox::build::Language::C) => "runs the commands of its Makefile",
        Some(zotbox::build::Language::JavaScript)
            if zotbox::build::JsBuild::folders_own_tool(dir).is_some() =>
        {
            "runs the folder's own `node_modules/.bin/componentize-js`"
        }
        _ => return,
    };
    let Ok(home) = context.home() else {
        return;
    };
    let record = home.built_folders();
    let folder = std::fs::canonicalize(dir)
        .unwrap_or_else(|_| dir.to_owned())
        .display()
        .to_string();
    let known = std::fs::read_to_string(&record).unwrap_or_default();
    if known.lines().any(|line| line == folder) {
        return;
    }
    eprintln!(
        "note: building `{}` {runs} with your permissions (not in the sandbox); build only \
         code you trust",
        shown(&folder)
    );
    let _ = std::fs::create_dir_all(home.root());
    let _ = zotbox::home::write_atomic(&record, format!("{known}{folder}\n").as_bytes());
}

/// Puts a copy of `from` at `to` atomically, so a running host never reads
/// half a file.
pub(crate) fn install_file(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read `{}`", from.display()))?;
    zotbox::home::write_atomic(to, &bytes)
        .with_context(|| format!("cannot replace `{}`", to.display()))
}

async fn install(context: &Context, text: &str, project: bool, yes: bool) -> Result<u8> {
    let home = context.home()?;
    let extensions = if project {
        install::project_extensions_dir(&context.workspace()?)?
    } else {
        home.extensions_dir()
    };
    let policy = zotbox::policy::Policy::load_for(&home)?;
    let source = Source::parse(text)?;
    super::source::announce(context, &source);
    // Git, archives and registry entries are fetched into a private folder,
    // removed once the install is done.
    let pending = installer::prepare(&source, &home, &policy, &extensions).await?;
    super::source::fetched(context, &pending);
    let name = pending.plan().manifest().name().to_owned();
    // What is installed is shown and asked about, whatever its kind: a
    // sandboxed extension and a data package run with what is granted
    // here, a native one (which zot starts itself) with all the user's
    // permissions.
    let plan = pending.plan();
    print_plan(plan);
    super::policy::print_grant(&policy, plan.manifest(), &plan.declared());
    consent(&name, yes)?;
    let scope = if project {
        lock::Scope::Project
    } else {
        lock::Scope::User
    };
    let target = commit(&home, &policy, pending, scope).await?;
    report(context, "installed", &name, &target)
}

/// Commits a consented install: a wasm extension gets zot's launcher and
/// is precompiled into the cache.
pub(crate) async fn commit(
    home: &zotbox::home::ZotHome,
    policy: &zotbox::policy::Policy,
    pending: installer::Pending,
    scope: lock::Scope,
) -> Result<PathBuf> {
    let sandboxed = matches!(pending.plan().manifest().program, Program::Wasm { .. });
    // Only a sandboxed extension uses these: its launcher and its precompile.
    let launcher = if sandboxed {
        super::setup::wasm_launcher()?
    } else {
        install::LaunchCommand {
            exec: String::new(),
            args: Vec::new(),
        }
    };
    let runtime = if sandboxed {
        let launcher = super::output::with_compile_notes(
            zotbox::Launcher::new(home.clone())
                .with_compiler_process(super::this_zotbox(), policy.compile_memory_mb()),
        );
        Some(launcher.wasm()?)
    } else {
        None
    };
    let (home, policy) = (home.clone(), policy.clone());
    Ok(tokio::task::spawn_blocking(move || {
        pending.commit(
            &home,
            &policy,
            scope,
            &launcher,
            &|name, wasm| match &runtime {
                Some(runtime) => runtime.prepare(name, wasm).map_err(|err| err.to_string()),
                None => Ok(()),
            },
        )
    })
    .await??)
}

/// `ext verify`: every installed extension against the lock.
fn verify(context: &Context) -> Result<u8> {
    let home = context.home()?;
    let workspace = context.workspace().ok();
    let verdicts = lock::verify(&home, workspace.as_deref())?;
    let failed = verdicts.iter().any(lock::Verdict::failed);
    if context.json {
        for verdict in &verdicts {
            json_line(&serde_json::to_value(verdict)?)?;
        }
    } else if verdicts.is_empty() {
        println!("no installed extensions");
    } else {
        let rows: Vec<Vec<String>> = verdicts
            .iter()
            .map(|verdict| {
                let status = match &verdict.status {
                    lock::Status::Ok => "ok".to_owned(),
                    lock::Status::Changed { file } => format!("changed: `{}` differs", Shown(file)),
                    lock::Status::NotLocked => "not locked".to_owned(),
                    lock::Status::Missing => "missing: locked, but its folder is gone".to_owned(),
                    lock::Status::Unreadable { reason } => {
                        format!("unreadable: {}", shown(reason))
                    }
                };
                vec![
                    shown(&verdict.name).into_owned(),
                    status,
                    shown(&verdict.path.display().to_string()).into_owned(),
                ]
            })
            .collect();
        print!("{}", table(&["NAME", "STATUS", "PATH"], &rows));
    }
    Ok(if failed { super::EXIT_ERROR } else { EXIT_OK })
}

/// How many planned files the consent screen lists before summing up the rest.
const LISTED_FILES: usize = 40;

/// The consent screen's first part: what lands where, file by file.
pub(crate) fn print_plan(plan: &install::Plan) {
    let manifest = plan.manifest();
    let shown_path = |path: &Path| shown(&path.display().to_string()).into_owned();
    let version = if manifest.raw.version.is_empty() {
        String::new()
    } else {
        format!(" {}", Shown(&manifest.raw.version))
    };
    println!(
        "install `{}`{version} ({}) from {} into {}{}",
        Shown(manifest.name()),
        manifest.kind(),
        shown_path(plan.source()),
        shown_path(plan.destination()),
        if plan.replaces() {
            ", replacing the installed copy"
        } else {
            ""
        }
    );
    if let Program::Native { exec, args } = &manifest.program {
        print_program(exec, plan.interpreter().as_deref(), args);
    }
    let files: Vec<&install::PlannedEntry> = plan
        .entries()
        .iter()
        .filter(|entry| entry.kind != install::EntryKind::Folder)
        .collect();
    let launcher = if matches!(manifest.program, Program::Wasm { .. }) {
        "; `extension.json` gets zot's launcher as its `exec`"
    } else {
        ""
    };
    println!(
        "files: {} ({}), and nothing else from the folder (its `files` globs add more){launcher}",
        files.len(),
        size(plan.total_size())
    );
    let rows: Vec<Vec<String>> = files
        .iter()
        .take(LISTED_FILES)
        .map(|entry| {
            let note = match &entry.kind {
                install::EntryKind::Link { target } => {
                    format!("a copy of `{}` (a symlink in the folder)", Shown(target))
                }
                _ if entry.executable => "executable".to_owned(),
                _ => String::new(),
            };
            vec![shown(&entry.path).into_owned(), size(entry.size), note]
        })
        .collect();
    print!("{}", table(&["FILE", "SIZE", "NOTE"], &rows));
    if files.len() > LISTED_FILES {
        println!("… and {} more files", files.len() - LISTED_FILES);
    }
    if let Some(contents) = plan.package() {
        print_package(contents);
    }
}

/// What a native extension runs, word by word, and where its program
/// comes from: what the files below do not show (a program outside the
/// folder is neither copied nor locked).
fn print_program(exec: &str, interpreter: Option<&str>, args: &[String]) {
    let through = interpreter
        .map(|program| format!(", through `{}` (its `#!` line)", Shown(program)))
        .unwrap_or_default();
    let whence = if exec.starts_with('/') {
        "outside the extension's folder, so neither copied nor locked".to_owned()
    } else if exec.contains('/') {
        format!("in the extension's folder{through}")
    } else {
        "a command found on `PATH` when zot starts it".to_owned()
    };
    let arguments = if args.is_empty() {
        String::new()
    } else {
        let words: Vec<String> = args.iter().map(|arg| format!("`{}`", Shown(arg))).collect();
        format!(" with the arguments {}", words.join(" "))
    };
    println!(
        "runs `{}` ({whence}){arguments}, natively, with all your permissions",
        Shown(exec)
    );
    let mut outside = Vec::new();
    for path in args.iter().filter_map(|arg| install::path_outside(arg)) {
        match install::replaceable_by_others(path) {
            // Data, or code: either way, another user's to change.
            Some(why) => println!(
                "its arguments name `{}`, where another user could replace it after you \
                 accept ({why})",
                Shown(path)
            ),
            None => outside.push(format!("`{}`", Shown(path))),
        }
    }
    if !outside.is_empty() {
        println!(
            "its arguments name {} outside the extension's folder: neither copied nor locked",
            outside.join(", ")
        );
    }
}

/// What a data package brings, as the host will load it: each tool with
/// its template, each plugin with its rules, each skill with its line.
fn print_package(contents: &zotbox::data::package::Contents) {
    let rows: Vec<Vec<String>> = contents
        .tools
        .iter()
        .map(|tool| {
            let approval = if tool.auto_approve {
                ""
            } else {
                " (asks `zotbox approve` first)"
            };
            vec![
                format!("tool {}", Shown(&tool.name)),
                tool.kind.as_str().to_owned(),
                format!("{}{approval}", shown(tool.kind.template())),
            ]
        })
        .chain(contents.plugins.iter().map(|plugin| {
            vec![
                format!("plugin {}", Shown(&plugin.name)),
                "refuses".to_owned(),
                format!("{} deny rules", plugin.deny.len()),
            ]
        }))
        .chain(contents.skills.iter().map(|skill| {
            vec![
                format!("skill {}", Shown(&skill.name)),
                "text".to_owned(),
                shown(&skill.description).into_owned(),
            ]
        }))
        .collect();
    print!("{}", table(&["BRINGS", "KIND", "WHAT IT DOES"], &rows));
}

/// A byte count for people: `812 B`, `118.3 KiB`, `4.0 MiB`.
fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    match bytes {
        b if b < KIB => format!("{b} B"),
        b if b < KIB * KIB => format!("{:.1} KiB", b as f64 / KIB as f64),
        b => format!("{:.1} MiB", b as f64 / (KIB * KIB) as f64),
    }
}

/// Asks whether to install `name` with the capabilities shown above.
pub(crate) fn consent(name: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    let name = Shown(name);
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        bail!(
            "not installing `{name}` without confirmation: stdin is not a terminal; \
             pass --yes to accept the capabilities shown above"
        );
    }
    eprint!("install `{name}` with the grant above? [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        bail!("install of `{name}` cancelled")
    }
}

/// The manifest of the installed (user or project) extension or data
/// package called `name`: the user's first. A workspace's folder may give
/// itself any name, so an untrusted clone's decoy must not take a command
/// meant for the user's install (`ext remove` of an extension found
/// wanting would leave it enabled and in place); the workspace's is found
/// when the user has none of that name.
fn find_installed(context: &Context, name: &str) -> Result<Manifest> {
    let search = SearchPath {
        explicit: Vec::new(),
        workspace: context.workspace()?,
        home: context.home()?,
    };
    let discovery = search.discover();
    // The user's may have lost on name to the workspace's (`shadowed`).
    let users = discovery
        .shadowed
        .iter()
        .filter(|lost| lost.origin == Origin::User)
        .filter_map(|lost| Manifest::load(&lost.path).ok())
        .map(|manifest| (Origin::User, manifest));
    let mut found: Vec<(Origin, Manifest)> = discovery
        .found
        .into_iter()
        .filter(|found| found.origin != Origin::Explicit)
        .map(|found| (found.origin, found.manifest))
        .chain(users)
        .filter(|(_, manifest)| manifest.name() == name)
        .collect();
    found.sort_by_key(|(origin, _)| *origin != Origin::User);
    if let Some((_, manifest)) = found.into_iter().next() {
        return Ok(manifest);
    }
    // Data packages: the user's first, as above.
    let packages = zotbox::data::DataSearch::new(&search.workspace, search.home.root()).packages();
    packages
        .into_iter()
        .map(|(manifest, _)| manifest)
        .find(|manifest| manifest.name() == name)
        .with_context(|| {
            format!(
                "no installed extension `{}` in `{}` or `{}`, and no data package of that name",
                Shown(name),
                search.project_dir().display(),
                search.home.extensions_dir().display()
            )
        })
}

fn remove(context: &Context, name: &str) -> Result<u8> {
    let dir = match find_installed(context, name) {
        Ok(manifest) => manifest.dir,
        // A broken install has no valid manifest to find it by: fall back
        // to its folder, so it can still be removed by name.
        Err(err) => {
            zotbox::manifest::validate_name(name)
                .map_err(|problem| anyhow::anyhow!("extension name {problem}"))?;
            let (workspace, home) = (context.workspace()?, context.home()?);
            let candidates = [
                home.extensions_dir().join(name),
                home.packages_dir().join(name),
                workspace.join(".zot/extensions").join(name),
                workspace.join(".zot/packages").join(name),
            ];
            match candidates.into_iter().find(|dir| dir.is_dir()) {
                Some(dir) => dir,
                None => return Err(err),
            }
        }
    };
    refuse_linked_project_folders(context, &dir, false)?;
    lock::forget(&context.home()?, &dir)?;
    std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove `{}`", dir.display()))?;
    report(context, "removed", name, &dir)
}

/// Refuses to remove or rewrite `dir` in the workspace's `.zot/` when the
/// workspace's author made `.zot`, `.zot/extensions` or `.zot/packages` a
/// link: it would reach a folder of the user's, elsewhere. To rewrite
/// (`writes`), the extension's folder may not be a link either (removing
/// one removes the link).
fn refuse_linked_project_folders(context: &Context, dir: &Path, writes: bool) -> Result<()> {
    let workspace = context.workspace()?;
    if dir.starts_with(workspace.join(".zot")) {
        zotbox::store::install::project_extensions_dir(&workspace)?;
        if writes && dir.symlink_metadata().is_ok_and(|meta| meta.is_symlink()) {
            bail!(
                "`{}` is a link to a folder elsewhere, which the workspace chose; zotbox \
                 writes only into the workspace's own `.zot/extensions/`",
                Shown(&dir.display().to_string())
            );
        }
    }
    Ok(())
}

fn set_enabled(context: &Context, name: &str, enabled: bool) -> Result<u8> {
    let manifest = find_installed(context, name)?;
    refuse_linked_project_folders(context, &manifest.dir, true)?;
    let path = &manifest.path;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let mut value: Value =
        serde_json::from_str(&text).with_context(|| format!("`{}` is not JSON", path.display()))?;
    let Some(object) = value.as_object_mut() else {
        bail!("`{}` is not a JSON object", path.display());
    };
    object.insert("enabled".to_owned(), Value::Bool(enabled));
    let mut out = serde_json::to_string_pretty(&value)?;
    out.push('\n');
    // A new file renamed over the old: never half a manifest, and never a
    // write through a link to some other file. The lock follows the
    // user's own edit (only of an install that matched it).
    lock::edit_locked(&context.home()?, &manifest.dir, || {
        zotbox::home::write_atomic(path, out.as_bytes())
            .with_context(|| format!("cannot write `{}`", path.display()))
    })?;
    report(
        context,
        if enabled { "enabled" } else { "disabled" },
        name,
        path,
    )
}

async fn logs(context: &Context, name: &str, follow: bool) -> Result<u8> {
    zotbox::manifest::validate_name(name)
        .map_err(|problem| anyhow::anyhow!("extension name {problem}"))?;
    let path = context.home()?.extension_log(name);
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && !follow => {
            bail!(
                "no log for `{name}` at `{}` (it has not run yet)",
                path.display()
            )
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Ok(file) = std::fs::File::open(&path) {
                break file;
            }
        },
        Err(err) => return Err(err).with_context(|| format!("cannot open `{}`", path.display())),
    };
    // The log holds what the extension wrote: a screen clear, a title or a
    // clipboard write (OSC 52) of its author's must reach the terminal as
    // text. The file keeps the bytes as written.
    let mut stdout = zotbox::text::ShownStream::new(std::io::stdout());
    let mut position = quiet_if_gone(std::io::copy(&mut file, &mut stdout))?;
    if !follow {
        quiet_if_gone(stdout.finish())?;
        return Ok(EXIT_OK);
    }
    quiet_if_gone(stdout.flush())?;
    use std::os::unix::fs::MetadataExt as _;
    let cannot_read = |err: std::io::Error| {
        anyhow::Error::new(err).context(format!("cannot read `{}`", path.display()))
    };
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        // What the log we follow gained.
        file.seek(SeekFrom::Start(position)).map_err(cannot_read)?;
        let mut chunk = Vec::new();
        position += file.read_to_end(&mut chunk).map_err(cannot_read)? as u64;
        quiet_if_gone(stdout.write_all(&chunk))?;
        quiet_if_gone(stdout.flush())?;
        // Removed (wait for the next), replaced by a new file or cut
        // short: the log at PATH is followed from its top.
        let now = match std::fs::metadata(&path) {
            Ok(now) => now,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(cannot_read(err)),
        };
        let ours = file.metadata().map_err(cannot_read)?;
        let replaced = (now.dev(), now.ino()) != (ours.dev(), ours.ino());
        if replaced || now.len() < position {
            match std::fs::File::open(&path) {
                Ok(reopened) => {
                    // A character the old log ended inside is shown as
                    // its bytes, not completed by the new log's first.
                    quiet_if_gone(stdout.finish())?;
                    (file, position) = (reopened, 0);
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(cannot_read(err)),
            }
        }
    }
}
