//! The newest index version seen from each registry, kept in
//! `$ZOT_HOME/registries.json` (see [`crate::home::ZotHome::registry_state`]).
//!
//! It only grows: [`RegistryState::record`] never lowers a version, so a
//! registry (or whoever serves its URL) cannot replay an older signed index
//! after a newer one was seen.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RegistryError;

/// The largest state file read.
const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;

/// What one registry's state records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
struct Seen {
    /// The newest index version seen.
    version: u64,
}

/// The last-seen index version per registry URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryState {
    path: PathBuf,
    seen: BTreeMap<String, Seen>,
}

impl RegistryState {
    /// Reads the state file at `path` (a missing file is an empty state).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Io`] when it cannot be read, [`RegistryError::Parse`]
    /// when it is not the format (never silently reset: that would let an
    /// old index through).
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        use std::io::Read as _;
        let io = |action: &'static str| {
            let path = path.to_owned();
            move |error| RegistryError::Io {
                action,
                path,
                error,
            }
        };
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    path: path.to_owned(),
                    seen: BTreeMap::new(),
                });
            }
            Err(err) => return Err(io("read")(err)),
        };
        let mut text = String::new();
        file.take(MAX_STATE_BYTES)
            .read_to_string(&mut text)
            .map_err(io("read"))?;
        let seen = serde_json::from_str(&text).map_err(|err| {
            RegistryError::Parse(format!(
                "`{}` (the versions of registry indexes seen): {err}; fix or remove the file",
                path.display()
            ))
        })?;
        Ok(Self {
            path: path.to_owned(),
            seen,
        })
    }

    /// The newest index version seen from the registry at `url`.
    pub fn last_seen(&self, url: &str) -> Option<u64> {
        self.seen.get(url).map(|seen| seen.version)
    }

    /// Records `version` as seen from `url` and writes the file, unless a
    /// newer one was seen already (a version is never lowered). Returns
    /// whether it changed.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Io`] when the file cannot be written.
    pub fn record(&mut self, url: &str, version: u64) -> Result<bool, RegistryError> {
        if self.last_seen(url).is_some_and(|seen| seen >= version) {
            return Ok(false);
        }
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|error| RegistryError::Io {
                action: "create",
                path: parent.to_owned(),
                error,
            })?;
        }
        // Two installs at once: each re-reads the file under a lock and
        // keeps the newest version of every registry, so that neither
        // write lowers what the other recorded.
        let _held = crate::home::lock_beside(&self.path).map_err(|error| RegistryError::Io {
            action: "lock",
            path: self.path.clone(),
            error,
        })?;
        let on_disk = Self::load(&self.path)?;
        for (other, seen) in on_disk.seen {
            let newest = self.seen.entry(other).or_insert(seen);
            newest.version = newest.version.max(seen.version);
        }
        let newest = self.seen.entry(url.to_owned()).or_insert(Seen { version });
        newest.version = newest.version.max(version);
        let mut text = serde_json::to_string_pretty(&self.seen).map_err(|err| {
            RegistryError::Parse(format!("cannot write the registry state: {err}"))
        })?;
        text.push('\n');
        crate::home::write_atomic(&self.path, text.as_bytes()).map_err(|error| {
            RegistryError::Io {
                action: "write",
                path: self.path.clone(),
                error,
            }
        })?;
        Ok(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn two_installs_at_once_keep_both_records_and_never_lower_one() {
        let tmp = tempfile::tempdir().unwrap();
        let path = crate::home::ZotHome::new(tmp.path()).registry_state();
        let (a, b) = (
            "https://a.example/index.json",
            "https://b.example/index.json",
        );
        // Both loaded before either wrote, as two `ext install`s would.
        let mut first = RegistryState::load(&path).unwrap();
        let mut second = RegistryState::load(&path).unwrap();
        assert!(first.record(a, 5).unwrap());
        // Stale: it saw nothing of `a`, and records an older version of it.
        assert!(second.record(a, 3).unwrap());
        assert_eq!(second.last_seen(a), Some(5), "it read the newer one back");
        assert!(second.record(b, 7).unwrap());
        let merged = RegistryState::load(&path).unwrap();
        assert_eq!(
            (merged.last_seen(a), merged.last_seen(b)),
            (Some(5), Some(7))
        );
    }

    #[test]
    fn a_recorded_version_only_grows_and_survives_a_reload() {
        let tmp = tempfile::tempdir().unwrap();
        let home = crate::home::ZotHome::new(tmp.path());
        let path = home.registry_state();
        let url = "https://ext.example.com/index.json";
        let mut state = RegistryState::load(&path).unwrap();
        assert_eq!(state.last_seen(url), None);
        // (version recorded, changed, last seen after)
        let cases = [(5, true, 5), (5, false, 5), (3, false, 5), (9, true, 9)];
        for (version, changed, after) in cases {
            assert_eq!(state.record(url, version).unwrap(), changed, "{version}");
            assert_eq!(state.last_seen(url), Some(after), "{version}");
            assert_eq!(
                RegistryState::load(&path).unwrap().last_seen(url),
                Some(after)
            );
        }
        assert_eq!(
            state.last_seen("https://other.example.com/index.json"),
            None
        );
        // A damaged file is an error, never a silent reset to "nothing seen".
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            RegistryState::load(&path),
            Err(RegistryError::Parse(_))
        ));
    }
}
