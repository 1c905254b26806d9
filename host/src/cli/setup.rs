//! `zotbox setup`: register `zotbox serve` as one of zot's extensions.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde_json::json;

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::discovery::ZotboxProgram;
use zotbox::manifest::MANIFEST_FILE;
use zotbox::serve::SERVE_NAME;
use zotbox::store::install::LaunchCommand;

/// Arguments of `zotbox setup`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Undo it: delete $ZOT_HOME/extensions/zotbox/extension.json (and the
    /// folder, when nothing else is in it).
    #[arg(long)]
    remove: bool,
}

/// This executable, canonical.
fn this_program() -> Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find this program's path")?;
    Ok(std::fs::canonicalize(&me).unwrap_or(me))
}

/// How zot should name the program at `path`, which is zotbox's `name`
/// (`zotbox` or `zotbox-relay`): the bare name when the one on `PATH` is
/// that very file, else its absolute path.
fn exec_for(path: &Path, name: &str) -> String {
    let on_path =
        zotbox::discovery::find_on_path(name).and_then(|found| std::fs::canonicalize(found).ok());
    if on_path.as_deref() == Some(path) {
        name.to_owned()
    } else {
        path.display().to_string()
    }
}

/// The `exec` that makes zot start this zotbox: `zotbox` when the one on
/// `PATH` is this binary, else its absolute path.
pub(crate) fn launcher_exec() -> Result<String> {
    Ok(exec_for(&this_program()?, ZotboxProgram::Cli.file_name()))
}

/// What an installed wasm extension's manifest names so that zot starts it
/// sandboxed: the small `zotbox-relay` beside this binary (started in the
/// extension's folder, it needs no argument), or `zotbox run` when there is
/// no relay beside it.
pub(crate) fn wasm_launcher() -> Result<LaunchCommand> {
    let me = this_program()?;
    let relay = ZotboxProgram::Relay.file_name();
    Ok(match me.parent().map(|folder| folder.join(relay)) {
        Some(path) if path.is_file() => LaunchCommand {
            exec: exec_for(&path, relay),
            args: Vec::new(),
        },
        _ => LaunchCommand {
            exec: exec_for(&me, ZotboxProgram::Cli.file_name()),
            args: vec!["run".to_owned()],
        },
    })
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let dir = context.home()?.extensions_dir().join(SERVE_NAME);
        let manifest_path = dir.join(MANIFEST_FILE);
        refuse_another_extension(&dir, &manifest_path)?;
        if self.remove {
            if !manifest_path.exists() {
                return say(context, "nothing to remove at", &manifest_path);
            }
            std::fs::remove_file(&manifest_path)
                .with_context(|| format!("cannot remove `{}`", manifest_path.display()))?;
            // What else the folder holds is not zotbox's to delete.
            let _ = std::fs::remove_dir(&dir);
            return say(context, "removed", &manifest_path);
        }
        let manifest = json!({
            "name": SERVE_NAME,
            "version": env!("CARGO_PKG_VERSION"),
            "description": "zotbox: data tools, refusal plugins and skills",
            "exec": launcher_exec()?,
            "args": ["serve"],
            "enabled": true,
        });
        let mut text = serde_json::to_string_pretty(&manifest)?;
        text.push('\n');
        if std::fs::read_to_string(&manifest_path).ok().as_deref() == Some(text.as_str()) {
            return say(context, "already set up at", &manifest_path);
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create `{}`", dir.display()))?;
        // A new file renamed into place: never written through a link.
        zotbox::home::write_atomic(&manifest_path, text.as_bytes())
            .with_context(|| format!("cannot write `{}`", manifest_path.display()))?;
        say(context, "wrote", &manifest_path)
    }
}

/// Refuses to replace or remove what `dir` holds unless it is empty or the
/// launcher `zotbox setup` writes: an extension the user installed under
/// the name `zotbox` by other means is theirs.
fn refuse_another_extension(dir: &Path, manifest_path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    let shown = zotbox::text::shown_path(dir);
    if !meta.is_dir() {
        anyhow::bail!(
            "`{shown}` is not a folder zotbox set up (a link or a file); move it away and run \
             this again"
        );
    }
    if !manifest_path.exists() {
        return Ok(());
    }
    match zotbox::manifest::Manifest::load(manifest_path) {
        Ok(manifest) if zotbox::discovery::is_serve_launcher(&manifest) => Ok(()),
        _ => anyhow::bail!(
            "`{shown}` holds an extension that is not zotbox's `serve` launcher; zotbox \
             neither replaces nor removes it: move it away and run this again"
        ),
    }
}

fn say(context: &Context, what: &str, path: &std::path::Path) -> Result<u8> {
    if context.json {
        json_line(&json!({"action": what, "path": path}))?;
    } else {
        println!("{what} {}", path.display());
        if what == "wrote" {
            println!(
                "zot now starts `zotbox serve` with its other extensions; `/reload-ext` picks up new data files"
            );
        }
    }
    Ok(EXIT_OK)
}
