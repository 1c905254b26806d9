//! `zotbox setup`: register `zotbox serve` as one of zot's extensions.

use anyhow::{Context as _, Result};
use serde_json::json;

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::manifest::MANIFEST_FILE;
use zotbox::serve::SERVE_NAME;

/// Arguments of `zotbox setup`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Undo it: delete $ZOT_HOME/extensions/zotbox/.
    #[arg(long)]
    remove: bool,
}

/// How zot should start this binary: by name when `zotbox` on PATH is this
/// very binary, else by absolute path.
pub(crate) fn launcher_exec() -> Result<String> {
    let me = std::env::current_exe().context("cannot find this program's path")?;
    let me = std::fs::canonicalize(&me).unwrap_or(me);
    let on_path = zotbox::discovery::find_on_path("zotbox")
        .and_then(|found| std::fs::canonicalize(found).ok());
    Ok(if on_path.as_deref() == Some(me.as_path()) {
        "zotbox".to_owned()
    } else {
        me.display().to_string()
    })
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        let dir = context.home()?.extensions_dir().join(SERVE_NAME);
        let manifest_path = dir.join(MANIFEST_FILE);
        if self.remove {
            let existed = dir.exists();
            if existed {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot remove `{}`", dir.display()))?;
            }
            let message = if existed {
                "removed"
            } else {
                "nothing to remove at"
            };
            return say(context, message, &manifest_path);
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
