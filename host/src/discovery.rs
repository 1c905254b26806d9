//! Finding extensions: explicit paths, then the project's, then the user's.
//!
//! The first manifest found for a name wins; later ones are kept as
//! *shadowed* so that `list` can show them. A manifest that fails to load is
//! reported and the others still load.
//!
//! A workspace the user has not trusted (see [`crate::store::trust`]) brings
//! its manifests as *held* ([`Discovery::held`]): listed, never started, and
//! they take no name from the user's extensions. An explicit `--ext` path
//! inside the workspace's `.zot/` is workspace content too.
//!
//! The end of this module says what zot itself does with the same folders
//! ([`zot_launch`], [`SearchPath::zot_shadows`]): zot starts
//! `<ws>/.zot/extensions/*` natively without asking, and zotbox cannot stop
//! it, only say so.

use std::path::{Path, PathBuf};

mod control;
pub(crate) mod named;

pub use control::ControlSources;

use crate::home::ZotHome;
use crate::manifest::{MANIFEST_FILE, Manifest, Program};
use crate::user_file::FileError;

/// Where a manifest was found, in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// Given with `--ext PATH`.
    Explicit,
    /// `<workspace>/.zot/extensions/<name>/`.
    Project,
    /// `$ZOT_HOME/extensions/<name>/`.
    User,
}

impl Origin {
    /// The origin as shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Explicit => "explicit",
            Self::Project => "project",
            Self::User => "user",
        }
    }
}

/// A manifest found during discovery.
#[derive(Debug, Clone)]
pub struct Found {
    /// The validated manifest.
    pub manifest: Manifest,
    /// Where it was found.
    pub origin: Origin,
    /// It is the workspace's content (in `.zot/extensions`, found there or
    /// given with `--ext`): it runs only while the workspace is trusted.
    pub workspace: bool,
}

/// A manifest that lost to an earlier one of the same name.
#[derive(Debug, Clone)]
pub struct Shadowed {
    /// The losing manifest's path.
    pub path: PathBuf,
    /// Its origin.
    pub origin: Origin,
    /// The winning manifest's path.
    pub by: PathBuf,
}

/// A manifest that could not be loaded.
#[derive(Debug)]
pub struct LoadFailure {
    /// The manifest (or folder) at fault.
    pub path: PathBuf,
    /// Where it was found.
    pub origin: Origin,
    /// Why it failed.
    pub error: FileError,
}

impl LoadFailure {
    /// The name it goes by, its manifest unread: its folder's, from
    /// `…/weather/extension.json`, or from a mistyped `--ext …/weathr` that
    /// holds no manifest at all.
    pub fn name(&self) -> String {
        let folder = if self.path.ends_with(crate::manifest::MANIFEST_FILE) {
            self.path.parent()
        } else {
            Some(self.path.as_path())
        };
        folder
            .and_then(|dir| dir.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Why a manifest found is held back rather than started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// It is the workspace's, and the workspace is not trusted.
    Workspace,
    /// Given with `--ext` inside the workspace's `.zot/` but outside
    /// `.zot/extensions/`, where no trust record reaches.
    Uncovered,
}

impl Held {
    /// Why an [`Held::Uncovered`] extension does not run.
    pub const UNCOVERED: &'static str = "lies inside the workspace's `.zot/` but outside \
        `.zot/extensions/`, where trust does not reach: move it into `.zot/extensions/` or out \
        of `.zot/`";
}

/// Everything discovery found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The winners, in precedence order.
    pub found: Vec<Found>,
    /// Manifests that lost on name.
    pub shadowed: Vec<Shadowed>,
    /// Manifests that failed to load.
    pub failures: Vec<LoadFailure>,
    /// Manifests held back, in the order found: they take no name.
    pub held: Vec<(Found, Held)>,
}

/// Where to look.
#[derive(Debug, Clone)]
pub struct SearchPath {
    /// Paths given explicitly: an extension folder, or its `extension.json`.
    pub explicit: Vec<PathBuf>,
    /// The project (workspace) root.
    pub workspace: PathBuf,
    /// The user's `$ZOT_HOME`.
    pub home: ZotHome,
}

impl SearchPath {
    /// `<workspace>/.zot/extensions`.
    pub fn project_dir(&self) -> PathBuf {
        self.workspace.join(".zot").join("extensions")
    }

    /// The control paths of this search's workspace: what no grant may
    /// write (see [`ControlSources`]).
    pub fn control_paths(&self) -> crate::capability::fs::ControlPaths {
        ControlSources::new(self.home.root(), &self.explicit).control_paths(&self.workspace)
    }

    /// As [`SearchPath::control_paths`], with what the configuration of
    /// each repository nested in the workspace names
    /// ([`ControlSources::nested`]).
    ///
    /// # Errors
    ///
    /// [`CensusError`](crate::capability::confine::CensusError) when the
    /// workspace cannot be walked to find the nested repositories.
    pub fn control_paths_with_nested(
        &self,
    ) -> Result<crate::capability::fs::ControlPaths, crate::capability::confine::CensusError> {
        ControlSources::new(self.home.root(), &self.explicit)
            .control_paths_with_nested(&self.workspace)
    }

    /// Finds every extension, applying precedence, for a trusted workspace.
    /// Reads manifests only; starts nothing.
    pub fn discover(&self) -> Discovery {
        self.discover_trusting(true)
    }

    /// Finds every extension, applying precedence. When `workspace_trusted`
    /// is false, the workspace's manifests (and `--ext` paths into its
    /// `.zot/`) are [held](Discovery::held) instead.
    pub fn discover_trusting(&self, workspace_trusted: bool) -> Discovery {
        let mut discovery = Discovery::default();
        for path in &self.explicit {
            // Absolute, so that a relative `exec` still resolves once the
            // extension runs in its own folder.
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let manifest_path = if path.is_dir() {
                path.join(MANIFEST_FILE)
            } else {
                path
            };
            let part = self.workspace_part(&manifest_path);
            let held = match part {
                Some(Held::Uncovered) => Some(Held::Uncovered),
                Some(Held::Workspace) if !workspace_trusted => Some(Held::Workspace),
                _ => None,
            };
            discovery.offer(&manifest_path, Origin::Explicit, held, part.is_some());
        }
        let project_held = (!workspace_trusted).then_some(Held::Workspace);
        for (dir, origin, held) in [
            (self.project_dir(), Origin::Project, project_held),
            (self.home.extensions_dir(), Origin::User, None),
        ] {
            for manifest_path in manifests_in(&dir) {
                discovery.offer(&manifest_path, origin, held, origin == Origin::Project);
            }
        }
        discovery
    }

    /// The `extension.json` of every folder in `<workspace>/.zot/extensions`,
    /// sorted: what zot itself would start.
    pub fn workspace_manifests(&self) -> Vec<PathBuf> {
        manifests_in(&self.project_dir())
    }

    /// Whether the manifest at `path` is workspace content: its folder lies
    /// in the workspace's `.zot/` (by its real path). `Workspace` when the
    /// folder is one of `.zot/extensions/*` (which trust covers),
    /// `Uncovered` elsewhere in `.zot/`.
    fn workspace_part(&self, path: &Path) -> Option<Held> {
        let folder = std::fs::canonicalize(path.parent()?).ok()?;
        let dot_zot = self.workspace.join(".zot");
        let real_dot_zot = std::fs::canonicalize(&dot_zot).ok();
        let inside = folder.starts_with(&dot_zot)
            || real_dot_zot.as_ref().is_some_and(|d| folder.starts_with(d));
        if !inside {
            return None;
        }
        let extensions = std::fs::canonicalize(self.project_dir()).ok();
        Some(if folder.parent() == extensions.as_deref() {
            Held::Workspace
        } else {
            Held::Uncovered
        })
    }
}

/// A data package among extensions is a failure, never a program to
/// start: its files load from `packages/`, where `zotbox ext install` puts it.
fn not_a_package(manifest: Manifest, path: &Path) -> Result<Manifest, FileError> {
    if !manifest.is_data() {
        return Ok(manifest);
    }
    Err(FileError::Invalid {
        path: path.to_owned(),
        field: "kind".to_owned(),
        problem: "is `data`: a data package has no program to start; install it with `zotbox ext \
                  install`, which puts it under `packages/`"
            .to_owned(),
    })
}

impl Discovery {
    /// The extension called `name` that a host with this discovery runs,
    /// or else, with why it does not run, the held one of that name. An
    /// untrusted workspace's manifest named like one of the user's is held,
    /// so the user's, the one that runs, comes first.
    pub fn named(&self, name: &str) -> Option<(&Found, Option<Held>)> {
        let found = self.found.iter().find(|f| f.manifest.name() == name);
        found.map(|found| (found, None)).or_else(|| {
            self.held
                .iter()
                .find(|(found, _)| found.manifest.name() == name)
                .map(|(found, held)| (found, Some(*held)))
        })
    }

    fn offer(&mut self, path: &Path, origin: Origin, held: Option<Held>, workspace: bool) {
        let manifest = match Manifest::load(path).and_then(|m| not_a_package(m, path)) {
            Ok(manifest) => manifest,
            Err(error) => {
                tracing::warn!("{error}");
                self.failures.push(LoadFailure {
                    path: path.to_owned(),
                    origin,
                    error,
                });
                return;
            }
        };
        for key in &manifest.unknown_keys {
            tracing::warn!("`{}`: unknown key `{key}` ignored", path.display());
        }
        if let Some(held) = held {
            // `--ext` into `.zot/extensions` names a folder found there too.
            let real = std::fs::canonicalize(path).ok();
            let seen = self.held.iter().any(|(found, _)| {
                real.is_some() && std::fs::canonicalize(&found.manifest.path).ok() == real
            });
            if !seen {
                let found = Found {
                    manifest,
                    origin,
                    workspace,
                };
                self.held.push((found, held));
            }
            return;
        }
        if let Some(winner) = self
            .found
            .iter()
            .find(|f| f.manifest.name() == manifest.name())
        {
            tracing::info!(
                "extension `{}` at `{}` is shadowed by `{}`",
                manifest.name(),
                path.display(),
                winner.manifest.path.display()
            );
            self.shadowed.push(Shadowed {
                path: path.to_owned(),
                origin,
                by: winner.manifest.path.clone(),
            });
            return;
        }
        self.found.push(Found {
            manifest,
            origin,
            workspace,
        });
    }
}

/// The `extension.json` of every sub-folder of `dir`, sorted by folder name
/// so that discovery is deterministic.
fn manifests_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut manifests: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        // Hidden folders are work in progress (an install's staging, the
        // copy it replaces), never an extension.
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .map(|path| path.join(MANIFEST_FILE))
        // Whatever is there: a manifest that is a FIFO, a device or a
        // dangling link is refused by the reader (never waited on) and
        // shown as a load error, not skipped; zot reads it as it is, and
        // hangs on a FIFO or `/dev/zero`.
        .filter(|path| std::fs::symlink_metadata(path).is_ok())
        .collect();
    manifests.sort();
    manifests
}

// ---------------------------------------------------------------------------
// What zot itself does with the same folders.

/// The name `zotbox setup` gives the manifest that makes zot start `zotbox
/// serve` (the same as `crate::serve::SERVE_NAME`, which sits above this
/// layer).
pub const SERVE_LAUNCHER: &str = "zotbox";

/// Whether `manifest` is the one `zotbox setup` writes so that zot starts
/// `zotbox serve`.
pub fn is_serve_launcher(manifest: &Manifest) -> bool {
    manifest.name() == SERVE_LAUNCHER
        && matches!(&manifest.program, Program::Native { args, .. } if args.first().is_some_and(|a| a == "serve"))
}

/// What zot itself starts for a manifest it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZotLaunch {
    /// `zotbox run`: the extension runs in zotbox's sandbox.
    Sandboxed,
    /// A program, outside any sandbox, with the user's permissions: its
    /// command line as written.
    Native(String),
    /// Nothing: the manifest is disabled or names no `exec`.
    Nothing,
}

/// The relay zot starts for an installed sandboxed extension: it hands
/// zot's stdio to the shared host (see `crate::shared`).
pub const RELAY: &str = "zotbox-relay";

/// One of zotbox's two programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZotboxProgram {
    /// `zotbox`, the command line.
    Cli,
    /// `zotbox-relay`, which takes the extension folder (default `.`) as its
    /// only argument.
    Relay,
}

impl ZotboxProgram {
    /// The program's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Cli => SERVE_LAUNCHER,
            Self::Relay => RELAY,
        }
    }

    /// Which of zotbox's programs the file at `program` is, by device and
    /// inode (any name or link to it counts): this executable, or one of
    /// the pair lying beside it.
    pub fn of_file(program: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let target = std::fs::metadata(program).ok()?;
        let me = std::env::current_exe().ok()?;
        let mine = if me.file_name().is_some_and(|name| name == RELAY) {
            Self::Relay
        } else {
            Self::Cli
        };
        let folder = me.parent()?;
        let candidates = [
            (me.clone(), mine),
            (folder.join(SERVE_LAUNCHER), Self::Cli),
            (folder.join(RELAY), Self::Relay),
        ];
        candidates
            .into_iter()
            .find(|(path, _)| {
                std::fs::metadata(path)
                    .is_ok_and(|it| it.dev() == target.dev() && it.ino() == target.ino())
            })
            .map(|(_, which)| which)
    }

    /// Which of zotbox's programs zot starts for `exec` as written: a bare
    /// `zotbox` or `zotbox-relay` (found on `PATH`, as zotbox writes them when
    /// those are its own), or an absolute path to one of them. A `./zotbox`
    /// inside a folder is the folder's program.
    pub fn of_exec(exec: &str) -> Option<Self> {
        match exec {
            SERVE_LAUNCHER => Some(Self::Cli),
            RELAY => Some(Self::Relay),
            _ if Path::new(exec).is_absolute() => Self::of_file(Path::new(exec)),
            _ => None,
        }
    }
}

/// What zot would start for `manifest`: its `exec` and `args`, natively,
/// unless they are exactly `zotbox run` or `zotbox-relay` (the bare names,
/// or paths to this zotbox's programs). A `wasm` field changes nothing for
/// zot: a manifest whose `exec` is anything else runs natively, however
/// sandboxed zotbox runs it.
pub fn zot_launch(manifest: &Manifest) -> ZotLaunch {
    let raw = &manifest.raw;
    let Some(exec) = raw.exec.as_deref().filter(|e| !e.trim().is_empty()) else {
        return ZotLaunch::Nothing;
    };
    if !raw.enabled {
        return ZotLaunch::Nothing;
    }
    let args: Vec<&str> = raw.args.iter().map(String::as_str).collect();
    let sandboxed = match ZotboxProgram::of_exec(exec) {
        Some(ZotboxProgram::Cli) => matches!(args.as_slice(), ["run"] | ["run", "."]),
        Some(ZotboxProgram::Relay) => matches!(args.as_slice(), [] | ["."]),
        None => false,
    };
    if sandboxed {
        return ZotLaunch::Sandboxed;
    }
    let mut words = vec![exec.to_owned()];
    words.extend(raw.args.iter().cloned());
    ZotLaunch::Native(shell_words::join(words))
}

/// A workspace manifest that takes the place of one of the user's inside
/// zot (zot prefers the workspace's folder of the same name, then the first
/// manifest of a name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZotShadow {
    /// The workspace's manifest.
    pub workspace: PathBuf,
    /// The user's manifest it replaces.
    pub user: PathBuf,
    /// The user's extension's name.
    pub name: String,
    /// The user's manifest is zotbox's `serve` launcher: inside zot, every
    /// refusal plugin is switched off and the workspace's `exec` runs instead.
    pub serve_launcher: bool,
}

impl SearchPath {
    /// Every user manifest that a workspace manifest replaces inside zot,
    /// by zot's rules: a workspace folder of the same folder name (enabled
    /// or not), else an enabled workspace manifest with an `exec` and the
    /// same `name`.
    pub fn zot_shadows(&self) -> Vec<ZotShadow> {
        let workspace: Vec<(PathBuf, Option<Manifest>)> = self
            .workspace_manifests()
            .into_iter()
            .map(|path| {
                let manifest = Manifest::load(&path).ok();
                (path, manifest)
            })
            .collect();
        let folder = |path: &Path| {
            path.parent()
                .and_then(Path::file_name)
                .map(|n| n.to_owned())
        };
        let mut shadows = Vec::new();
        for user_path in manifests_in(&self.home.extensions_dir()) {
            let Ok(user) = Manifest::load(&user_path) else {
                continue;
            };
            let by_folder = workspace
                .iter()
                .find(|(path, _)| folder(path) == folder(&user_path));
            let by_name = || {
                workspace.iter().find(|(_, manifest)| {
                    manifest.as_ref().is_some_and(|m| {
                        m.name() == user.name()
                            && m.raw.enabled
                            && m.raw.exec.as_deref().is_some_and(|e| !e.trim().is_empty())
                    })
                })
            };
            if let Some((path, _)) = by_folder.or_else(by_name) {
                shadows.push(ZotShadow {
                    workspace: path.clone(),
                    user: user_path.clone(),
                    name: user.name().to_owned(),
                    serve_launcher: is_serve_launcher(&user),
                });
            }
        }
        shadows
    }
}

/// Where zot finds a native extension's program `exec`: absolute as-is;
/// `./x`, `../x` or any path with a separator relative to the manifest's
/// folder `dir`; a bare name on `PATH` (`None` when it is nowhere there).
pub fn locate_program(exec: &str, dir: &Path) -> Option<PathBuf> {
    let path = Path::new(exec);
    if path.is_absolute() {
        return Some(path.to_owned());
    }
    if exec.contains(std::path::MAIN_SEPARATOR) || exec.contains('/') {
        return Some(dir.join(path));
    }
    find_on_path(exec)
}

/// The first executable file named `name` in a folder of `PATH`, as a
/// shell would find it.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let search = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&search)
        .map(|entry| entry.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, json: &str) {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(folder.join(MANIFEST_FILE), json).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn explicit_beats_project_beats_user_and_bad_files_do_not_stop_the_rest() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let workspace = tmp.path().join("ws");
        let home = ZotHome::new(tmp.path().join("home"));
        let project = workspace.join(".zot/extensions");
        let user = home.extensions_dir();
        let explicit = tmp.path().join("dev");
        write(&explicit, "a", r#"{"name":"a","exec":"./explicit"}"#);
        write(&project, "a", r#"{"name":"a","exec":"./project"}"#);
        write(&project, "b", r#"{"name":"b","exec":"./project"}"#);
        write(&project, "broken", r#"{"name":3}"#);
        write(&user, "b", r#"{"name":"b","exec":"./user"}"#);
        write(&user, "c", r#"{"name":"c","exec":"./user"}"#);
        // An install in progress (or the copy it replaces) is no extension.
        write(
            &user,
            ".installing-d-x1",
            r#"{"name":"d","exec":"./staging"}"#,
        );
        let search = SearchPath {
            explicit: vec![explicit.join("a")],
            workspace,
            home,
        };
        let discovery = search.discover();
        let winners: Vec<(String, Origin)> = discovery
            .found
            .iter()
            .map(|f| (f.manifest.name().to_owned(), f.origin))
            .collect();
        assert_eq!(
            winners,
            vec![
                ("a".to_owned(), Origin::Explicit),
                ("b".to_owned(), Origin::Project),
                ("c".to_owned(), Origin::User),
            ]
        );
        assert_eq!(discovery.shadowed.len(), 2);
        assert_eq!(discovery.failures.len(), 1);
        assert!(
            discovery.failures[0]
                .error
                .to_string()
                .contains("field `name`")
        );
    }

    #[test]
    fn an_untrusted_workspace_is_held_and_replaces_nothing_of_the_users() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let workspace = root.join("ws");
        let home = ZotHome::new(root.join("home"));
        let project = workspace.join(".zot/extensions");
        write(&project, "a", r#"{"name":"a","exec":"./project"}"#);
        write(&project, "b", r#"{"name":"b","exec":"./project"}"#);
        write(
            &home.extensions_dir(),
            "b",
            r#"{"name":"b","exec":"./user"}"#,
        );
        write(
            &workspace.join(".zot/other"),
            "c",
            r#"{"name":"c","exec":"./x"}"#,
        );
        write(&root.join("dev"), "d", r#"{"name":"d","exec":"./x"}"#);
        let search = SearchPath {
            // `--ext` into the workspace's extensions, elsewhere in `.zot/`,
            // and outside the workspace.
            explicit: vec![
                project.join("a"),
                workspace.join(".zot/other/c"),
                root.join("dev/d"),
            ],
            workspace,
            home,
        };
        let names = |found: &[Found]| -> Vec<(String, Origin)> {
            found
                .iter()
                .map(|f| (f.manifest.name().to_owned(), f.origin))
                .collect()
        };
        let held = |d: &Discovery| -> Vec<(String, Held)> {
            d.held
                .iter()
                .map(|(f, why)| (f.manifest.name().to_owned(), *why))
                .collect()
        };
        let untrusted = search.discover_trusting(false);
        assert_eq!(
            names(&untrusted.found),
            vec![
                ("d".to_owned(), Origin::Explicit),
                ("b".to_owned(), Origin::User)
            ]
        );
        assert_eq!(
            held(&untrusted),
            vec![
                ("a".to_owned(), Held::Workspace),
                ("c".to_owned(), Held::Uncovered),
                ("b".to_owned(), Held::Workspace),
            ]
        );
        assert!(untrusted.shadowed.is_empty());
        // Trusted: the workspace takes part; `c` is still outside coverage.
        let trusted = search.discover_trusting(true);
        assert_eq!(
            names(&trusted.found),
            vec![
                ("a".to_owned(), Origin::Explicit),
                ("d".to_owned(), Origin::Explicit),
                ("b".to_owned(), Origin::Project),
            ]
        );
        assert_eq!(held(&trusted), vec![("c".to_owned(), Held::Uncovered)]);
    }

    #[test]
    fn zot_runs_every_exec_natively_except_zotbox_run() {
        let me = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .unwrap_or_else(|e| panic!("{e}"));
        let me = me.display().to_string();
        let cases = [
            (
                r#""exec":"zotbox","args":["run"]"#.to_owned(),
                ZotLaunch::Sandboxed,
            ),
            (
                format!(r#""exec":"{me}","args":["run","."]"#),
                ZotLaunch::Sandboxed,
            ),
            (r#""exec":"zotbox-relay""#.to_owned(), ZotLaunch::Sandboxed),
            (
                r#""exec":"zotbox-relay","args":["."]"#.to_owned(),
                ZotLaunch::Sandboxed,
            ),
            // The relay takes a folder, not a subcommand.
            (
                r#""exec":"zotbox-relay","args":["run"]"#.to_owned(),
                ZotLaunch::Native("zotbox-relay run".to_owned()),
            ),
            (
                r#""exec":"zotbox-relay","args":["/tmp/evil"]"#.to_owned(),
                ZotLaunch::Native("zotbox-relay /tmp/evil".to_owned()),
            ),
            (
                r#""exec":"./zotbox-relay""#.to_owned(),
                ZotLaunch::Native("./zotbox-relay".to_owned()),
            ),
            // A `zotbox` of the folder's own is the folder's program.
            (
                r#""exec":"./zotbox","args":["run"]"#.to_owned(),
                ZotLaunch::Native("./zotbox run".to_owned()),
            ),
            // zotbox, but told to run something else, or with other flags.
            (
                r#""exec":"zotbox","args":["run","/tmp/evil"]"#.to_owned(),
                ZotLaunch::Native("zotbox run /tmp/evil".to_owned()),
            ),
            (
                r#""exec":"zotbox","args":["--zot-home","/tmp/h","run"]"#.to_owned(),
                ZotLaunch::Native("zotbox --zot-home /tmp/h run".to_owned()),
            ),
            (
                r#""exec":"sh","args":["-c","touch marker; zotbox run"]"#.to_owned(),
                ZotLaunch::Native("sh -c 'touch marker; zotbox run'".to_owned()),
            ),
            (
                r#""enabled":false,"exec":"sh""#.to_owned(),
                ZotLaunch::Nothing,
            ),
            (String::new(), ZotLaunch::Nothing),
        ];
        for (fields, expected) in cases {
            let sep = if fields.is_empty() { "" } else { "," };
            let json = format!(r#"{{"name":"x","wasm":"x.wasm"{sep}{fields}}}"#);
            let manifest =
                Manifest::parse(&json, Path::new("/ws/.zot/extensions/x/extension.json"))
                    .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(zot_launch(&manifest), expected, "{json}");
        }
        assert_eq!(SERVE_LAUNCHER, crate::serve::SERVE_NAME);
    }

    #[test]
    fn workspace_manifests_shadow_the_users_in_zot_by_folder_or_name() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let workspace = tmp.path().join("ws");
        let home = ZotHome::new(tmp.path().join("home"));
        let project = workspace.join(".zot/extensions");
        let user = home.extensions_dir();
        write(
            &user,
            "zotbox",
            r#"{"name":"zotbox","exec":"zotbox","args":["serve"]}"#,
        );
        write(&user, "weather", r#"{"name":"weather","exec":"./w"}"#);
        write(&user, "notes", r#"{"name":"notes","exec":"./n"}"#);
        // The same folder name, even disabled and under another name.
        write(
            &project,
            "zotbox",
            r#"{"name":"helper","exec":"sh","enabled":false}"#,
        );
        // The same name in another folder, enabled.
        write(&project, "w2", r#"{"name":"weather","exec":"./evil"}"#);
        // The same name, disabled: zot skips it, so `notes` stays the user's.
        write(
            &project,
            "n2",
            r#"{"name":"notes","exec":"./n","enabled":false}"#,
        );
        let search = SearchPath {
            explicit: Vec::new(),
            workspace,
            home,
        };
        let shadows: Vec<(String, PathBuf, bool)> = search
            .zot_shadows()
            .into_iter()
            .map(|s| (s.name, s.workspace, s.serve_launcher))
            .collect();
        assert_eq!(
            shadows,
            vec![
                (
                    "weather".to_owned(),
                    project.join("w2/extension.json"),
                    false
                ),
                (
                    "zotbox".to_owned(),
                    project.join("zotbox/extension.json"),
                    true
                ),
            ]
        );
    }
}
