//! Finding extensions: explicit paths, then the project's, then the user's.
//!
//! The first manifest found for a name wins; later ones are kept as
//! *shadowed* so that `list` can show them. A manifest that fails to load is
//! reported and the others still load.

use std::path::{Path, PathBuf};

use crate::home::ZotHome;
use crate::manifest::{MANIFEST_FILE, Manifest, ManifestError};

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
    pub error: ManifestError,
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

    /// Finds every extension, applying precedence.
    pub fn discover(&self) -> Discovery {
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
            discovery.offer(&manifest_path, Origin::Explicit);
        }
        for (dir, origin) in [
            (self.project_dir(), Origin::Project),
            (self.home.extensions_dir(), Origin::User),
        ] {
            for manifest_path in manifests_in(&dir) {
                discovery.offer(&manifest_path, origin);
            }
        }
        discovery
    }
}

impl Discovery {
    fn offer(&mut self, path: &Path, origin: Origin) {
        let manifest = match Manifest::load(path) {
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
        self.found.push(Found { manifest, origin });
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
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .map(|path| path.join(MANIFEST_FILE))
        .filter(|path| path.is_file())
        .collect();
    manifests.sort();
    manifests
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
}
