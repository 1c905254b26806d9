//! The control paths a workspace's jail keeps from every grant, beside the
//! workspace's own `.git`, `.zot` and `.shiro`: where extensions and the
//! files that decide grants live (THREATS.md rule 3).

use std::path::{Path, PathBuf};

use crate::capability::confine::{Census, CensusError};
use crate::capability::fs::ControlPaths;

/// Where the files that decide grants and what runs live, beside the
/// workspace's own `.git`, `.zot` and `.shiro`: the jail refuses writes to
/// those that lie inside the workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlSources {
    /// `$ZOT_HOME`: extensions, policy, approvals, trust records, the
    /// compile cache, logs.
    pub home: Option<PathBuf>,
    /// Extension folders named explicitly (`--ext`, `zotbox run`'s folder);
    /// a manifest file stands for its folder.
    pub extension_dirs: Vec<PathBuf>,
}

/// What an extension's folder is, in refusals.
const EXTENSION_FOLDER: &str = "an extension's folder: it decides grants and what runs";

impl ControlSources {
    /// The sources of a host with `$ZOT_HOME` at `home` and explicit
    /// extension folders `extension_dirs`.
    pub fn new(home: &Path, extension_dirs: &[PathBuf]) -> Self {
        Self {
            home: Some(home.to_owned()),
            extension_dirs: extension_dirs.to_vec(),
        }
    }

    /// Every folder and file that decides grants or what runs, absolute,
    /// as `(path, is a folder, what it is)`: `$ZOT_HOME`, every extension
    /// folder (explicit, installed for the user, installed in `workspace`
    /// and linked from elsewhere), a native extension's program named by
    /// path, the repository a `.git` file at the workspace's root names,
    /// a repository folder the workspace lies in, the hooks folders,
    /// included files and programs git's configuration names and the
    /// files its hooks run, the system policy and `~/.shiro-neko`.
    pub fn outside(&self, workspace: &Path) -> Vec<(PathBuf, bool, String)> {
        let mut found: Vec<(PathBuf, bool, String)> = Vec::new();
        let mut folders: Vec<PathBuf> = Vec::new();
        for dir in &self.extension_dirs {
            let is_manifest = dir
                .file_name()
                .is_some_and(|name| name == crate::manifest::MANIFEST_FILE);
            folders.push(match dir.parent() {
                Some(parent) if is_manifest => parent.to_owned(),
                _ => dir.clone(),
            });
        }
        if let Some(home) = &self.home {
            found.push((
                home.clone(),
                true,
                "$ZOT_HOME: it decides grants and what runs".to_owned(),
            ));
            let installed = home.join("extensions");
            found.push((installed.clone(), true, EXTENSION_FOLDER.to_owned()));
            folders.extend(entries(&installed));
        }
        // A project's extension may be a link to a folder elsewhere in the
        // workspace, which `.zot/` alone would not cover.
        folders.extend(entries(&workspace.join(".zot").join("extensions")));
        for folder in folders {
            for program in native_programs(&folder) {
                found.push((
                    program,
                    false,
                    "an extension's program: it runs outside the sandbox".to_owned(),
                ));
            }
            found.push((folder, true, EXTENSION_FOLDER.to_owned()));
        }
        // A `.git` file (`--separate-git-dir`, a worktree's) makes the
        // folder it names the repository, config and hooks included.
        let dot_git = workspace.join(".git");
        for repository in crate::capability::repository::pointed_to(&dot_git) {
            found.push((
                repository,
                true,
                "the repository the workspace's `.git` file names: it decides what runs".to_owned(),
            ));
        }
        // A workspace inside a repository's own folder, whatever its name
        // (zot started in `site.git/hooks/`): git runs what lies there.
        if let Some(repository) = workspace
            .ancestors()
            .skip(1)
            .find(|folder| crate::capability::repository::Signs::at(folder).repository())
        {
            found.push((
                repository.to_owned(),
                true,
                "a repository: git runs what its config and hooks name".to_owned(),
            ));
        }
        // What git's configuration moves into the working tree: hooks
        // (`core.hooksPath = .githooks`, husky's `.husky`), more
        // configuration (`include.path = ../.gitconfig`), and programs it
        // runs by path (`filter.<name>.smudge = ./scripts/decrypt.sh`), and
        // what its hooks run there (`./scripts/check.sh`).
        let user_home = crate::home::user_home();
        found.extend(
            crate::capability::repository::configured(workspace, user_home.as_deref())
                .into_control_paths(),
        );
        found.push((
            crate::policy::Policy::system_path(),
            false,
            "the system policy".to_owned(),
        ));
        if let Some(user) = user_home {
            found.push((
                user.join(".shiro-neko"),
                true,
                "`~/.shiro-neko`: the user's tools and plugins".to_owned(),
            ));
        }
        found
    }

    /// What no grant reads, as `(path, is a folder, what it is)`, even when
    /// it lies in the workspace: all of `$ZOT_HOME`. Beside the user's
    /// secrets and signing keys it holds zot's own credentials and
    /// sessions, and whatever zot keeps there later: covering the folder
    /// also covers a file made or replaced while a guest or a command runs.
    pub fn secrets(&self) -> Vec<(PathBuf, bool, String)> {
        let Some(home) = &self.home else {
            return Vec::new();
        };
        vec![(
            home.clone(),
            true,
            "$ZOT_HOME: it decides grants and what runs, and holds the user's secrets and \
             zot's credentials"
                .to_owned(),
        )]
    }

    /// The control paths of `workspace`.
    pub fn control_paths(&self, workspace: &Path) -> ControlPaths {
        ControlPaths::new(workspace, &self.outside(workspace))
            .with_secrets(workspace, &self.secrets())
    }

    /// What the configuration of each repository nested in `workspace` (a
    /// submodule, a clone in `vendor/lib/`) names there, as
    /// [`ControlSources::outside`] gives the workspace's own repository's,
    /// each saying which repository names it: the fs capability refuses
    /// them to writes from a session's first write on, and a confined
    /// command finds them read-only.
    ///
    /// # Errors
    ///
    /// [`CensusError`] when the workspace cannot be walked to find the
    /// nested repositories (it is unreadable or too large).
    pub fn nested(&self, workspace: &Path) -> Result<Vec<(PathBuf, bool, String)>, CensusError> {
        let census = Census::take(workspace)?;
        let user_home = crate::home::user_home();
        let mut found = Vec::new();
        for worktree in census.nested_repositories() {
            let named = crate::capability::repository::configured(
                &census.workspace().join(worktree),
                user_home.as_deref(),
            );
            let by = worktree.to_string_lossy();
            found.extend(
                named
                    .into_control_paths()
                    .into_iter()
                    .map(|(path, folder, what)| {
                        (
                            path,
                            folder,
                            format!("{what} (named by `{by}/`'s git configuration)"),
                        )
                    }),
            );
        }
        Ok(found)
    }

    /// The control paths of `workspace` ([`ControlSources::control_paths`])
    /// with what its nested repositories' configurations name
    /// ([`ControlSources::nested`]).
    ///
    /// # Errors
    ///
    /// As [`ControlSources::nested`].
    pub fn control_paths_with_nested(&self, workspace: &Path) -> Result<ControlPaths, CensusError> {
        let mut outside = self.outside(workspace);
        outside.extend(self.nested(workspace)?);
        Ok(ControlPaths::new(workspace, &outside).with_secrets(workspace, &self.secrets()))
    }
}

/// The entries of folder `dir` (none when it cannot be read).
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|read| read.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The files a native extension in `folder` runs that it names by path:
/// its program (a bare name is found on `PATH`, outside any workspace it
/// could write; zot's rule: a path with a separator is relative to the
/// folder) and the scripts and files its arguments name, as trust covers
/// them ([`super::named::named_paths`]): `sh -c "sh
/// ../../../scripts/run.sh"` runs that script as the user, so no grant
/// may write it.
fn native_programs(folder: &Path) -> Vec<PathBuf> {
    let Ok(manifest) =
        crate::manifest::Manifest::load(&folder.join(crate::manifest::MANIFEST_FILE))
    else {
        return Vec::new();
    };
    if !matches!(manifest.program, crate::manifest::Program::Native { .. }) {
        return Vec::new();
    }
    // The program named by path even before it exists: no grant may
    // make it. An argument that names no file now is most often data.
    let program = manifest
        .raw
        .exec
        .as_ref()
        .filter(|exec| exec.contains('/'))
        .map(|exec| folder.join(exec));
    let mut programs: Vec<PathBuf> = super::named::named_paths(&manifest)
        .into_iter()
        .filter(|path| path.is_file() && Some(path) != program.as_ref())
        .collect();
    programs.extend(program);
    programs
}
