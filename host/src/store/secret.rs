//! The user's secrets: `$ZOT_HOME/secrets.json`, values an extension may
//! use (through a placeholder) but never read.
//!
//! Rules:
//!
//! - **Only the user can read the file.** It is written atomically with
//!   mode `0600` from the first byte (never a moment readable by others);
//!   a file another user could read, or a symlink in its place, is refused
//!   on load, with the command that fixes it.
//! - **Values never leave this module but to a request.** Nothing here
//!   prints, logs or formats a value: `Debug` shows names only, errors
//!   name the file and the line, never the text, and [`SecretStore::list`]
//!   returns names and the extensions allowed. The one way out is the
//!   sandbox's `SecretSource::value`, called the moment a request is sent
//!   (or a native extension that declared the secret as a variable starts).
//! - **The user decides who may use one.** A secret set with
//!   `--extension` names the extensions that may use it; without, any
//!   extension whose grant (declared ∩ policy) holds it. The workspace
//!   never writes or reads this file.
//!
//! ```json
//! {"secrets": {"WEATHER_KEY": {"value": "…", "extensions": ["weather"]}}}
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::ZotHome;
use crate::sandbox::{SecretSource, SecretUnavailable};

/// The shortest value accepted: a shorter one would be redacted from every
/// response it happens to appear in, and guessed quickly.
pub const MIN_VALUE_BYTES: usize = 8;
/// The longest value accepted.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;

/// Why the secret store failed. No variant holds a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read or written.
    #[error("cannot {action} the secrets file `{}`: {error}", path.display())]
    Io {
        /// What was being done: `read`, `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not what this module writes.
    #[error(
        "the secrets file `{}` is not valid (line {line}, column {column}): fix it or remove it \
         and set the secrets again",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where parsing stopped.
        line: usize,
        /// Where parsing stopped.
        column: usize,
    },
    /// Others could read the file, or it is not a plain file of the user's.
    #[error("the secrets file `{}` is refused: {problem}", path.display())]
    Exposed {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// A name that is not a secret name.
    #[error("`{0}` is not a secret name: use 1 to 64 of `A-Z a-z 0-9 _ . -`")]
    InvalidName(String),
    /// A value refused before it was stored.
    #[error("the value of secret `{name}` is refused: {problem}")]
    InvalidValue {
        /// The secret.
        name: String,
        /// Why (never the value).
        problem: String,
    },
    /// An extension name that is not one (the phrase names it and why).
    #[error("{0}")]
    InvalidExtension(String),
    /// The file (edited by hand) holds an entry `set` would have refused.
    #[error(
        "the secrets file `{}` is refused: {error}; fix the entry or remove it from the file",
        path.display()
    )]
    Refused {
        /// The file.
        path: PathBuf,
        /// What `set` would have said of the entry (never its value).
        error: Box<SecretError>,
    },
}

/// One stored secret.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
struct Entry {
    value: String,
    /// Extensions that may use it; empty: any whose grant holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    extensions: Vec<String>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
struct File {
    #[serde(default)]
    secrets: BTreeMap<String, Entry>,
}

/// A secret as [`SecretStore::list`] shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretInfo {
    /// The name.
    pub name: String,
    /// The extensions that may use it; empty: any whose grant holds it.
    pub extensions: Vec<String>,
}

/// The secrets file of one `$ZOT_HOME`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretStore {
    path: PathBuf,
}

impl fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretStore")
            .field("path", &self.path)
            .finish()
    }
}

impl SecretStore {
    /// The store of `home` (`$ZOT_HOME/secrets.json`).
    pub fn new(home: &ZotHome) -> Self {
        Self {
            path: home.secrets_file(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every secret's name and who may use it, by name.
    ///
    /// # Errors
    ///
    /// [`SecretError`] when the file cannot be read, is exposed or corrupt.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        Ok(self
            .load()?
            .secrets
            .into_iter()
            .map(|(name, entry)| SecretInfo {
                name,
                extensions: entry.extensions,
            })
            .collect())
    }

    /// Sets (or replaces) secret `name`, for `extensions` only (empty: any
    /// extension whose grant holds it). A single trailing line break of
    /// `value` (from a pipe) is dropped.
    ///
    /// # Errors
    ///
    /// [`SecretError`]: a bad name or value, or the file cannot be read or
    /// written.
    pub fn set(&self, name: &str, value: &str, extensions: &[String]) -> Result<(), SecretError> {
        if !crate::capability::http::valid_secret_name(name) {
            return Err(SecretError::InvalidName(name.to_owned()));
        }
        let value = value
            .strip_suffix('\n')
            .map(|v| v.strip_suffix('\r').unwrap_or(v))
            .unwrap_or(value);
        check_value(name, value)?;
        for extension in extensions {
            check_extension(extension)?;
        }
        let _held = self.lock()?;
        let mut file = self.load()?;
        let mut extensions = extensions.to_vec();
        extensions.sort();
        extensions.dedup();
        file.secrets.insert(
            name.to_owned(),
            Entry {
                value: value.to_owned(),
                extensions,
            },
        );
        self.save(&file)
    }

    /// Removes secret `name`; whether it was there.
    ///
    /// # Errors
    ///
    /// [`SecretError`] when the file cannot be read or written.
    pub fn remove(&self, name: &str) -> Result<bool, SecretError> {
        let _held = self.lock()?;
        let mut file = self.load()?;
        if file.secrets.remove(name).is_none() {
            return Ok(false);
        }
        self.save(&file)?;
        Ok(true)
    }

    /// Whether secret `name` is set and `who` may use it (never the value).
    pub fn is_set_for(&self, who: &str, name: &str) -> bool {
        self.value(who, name).is_ok()
    }

    /// Two `secret set` at once: each reads, changes and writes the file
    /// under this lock, so neither loses the other's secret.
    fn lock(&self) -> Result<nix::fcntl::Flock<std::fs::File>, SecretError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|error| self.io("lock", error))?;
        }
        crate::home::lock_beside(&self.path).map_err(|error| self.io("lock", error))
    }

    fn load(&self) -> Result<File, SecretError> {
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
            Err(error) => return Err(self.io("read", error)),
        };
        let shown = self.path.display();
        let exposed = |problem: String| SecretError::Exposed {
            path: self.path.clone(),
            problem,
        };
        if !meta.file_type().is_file() {
            return Err(exposed(format!(
                "it is not a plain file (a link or something else); remove it: `rm {shown}`"
            )));
        }
        if meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(exposed(format!(
                "it belongs to another user (uid {}); remove it and set the secrets again",
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(exposed(format!(
                "others can read or write it (mode {:o}); run `chmod 600 {shown}`",
                meta.mode() & 0o777
            )));
        }
        let text = std::fs::read_to_string(&self.path).map_err(|error| self.io("read", error))?;
        let corrupt = |line, column| SecretError::Corrupt {
            path: self.path.clone(),
            line,
            column,
        };
        // An array would be read by position as the fields.
        crate::user_file::not_an_object(&text).map_err(|_| corrupt(1, 1))?;
        // serde_json's messages may quote the text; only the place is kept.
        let file: File =
            serde_json::from_str(&text).map_err(|err| corrupt(err.line(), err.column()))?;
        check_entries(&file).map_err(|error| SecretError::Refused {
            path: self.path.clone(),
            error: Box::new(error),
        })?;
        Ok(file)
    }

    fn save(&self, file: &File) -> Result<(), SecretError> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|error| self.io("write", error))?;
        }
        let mut text =
            serde_json::to_string_pretty(file).map_err(|err| self.io("write", err.into()))?;
        text.push('\n');
        crate::home::write_atomic_with_mode(&self.path, text.as_bytes(), 0o600)
            .map_err(|error| self.io("write", error))
    }

    fn io(&self, action: &'static str, error: std::io::Error) -> SecretError {
        SecretError::Io {
            action,
            path: self.path.clone(),
            error,
        }
    }
}

/// An extension's name, or `data:<tool>` for a data tool: under the rule
/// each is installed or loaded by, so that a secret is never set for a
/// name nothing can bear.
fn check_extension(extension: &str) -> Result<(), SecretError> {
    let problem = match extension.strip_prefix("data:") {
        Some(tool) => crate::data::check_name(tool, crate::data::tool::MAX_NAME_CHARS)
            .map_err(|problem| format!("data tool name {problem}")),
        None => crate::manifest::validate_name(extension)
            .map_err(|problem| format!("extension name {problem}")),
    };
    problem.map_err(SecretError::InvalidExtension)
}

/// A file edited by hand holds only what `set` would have stored: the
/// same names, values and extensions.
fn check_entries(file: &File) -> Result<(), SecretError> {
    for (name, entry) in &file.secrets {
        if !crate::capability::http::valid_secret_name(name) {
            return Err(SecretError::InvalidName(name.clone()));
        }
        check_value(name, &entry.value)?;
        for extension in &entry.extensions {
            check_extension(extension)?;
        }
    }
    Ok(())
}

/// A value goes into HTTP headers and must be told apart in responses.
fn check_value(name: &str, value: &str) -> Result<(), SecretError> {
    let refuse = |problem: &str| {
        Err(SecretError::InvalidValue {
            name: name.to_owned(),
            problem: problem.to_owned(),
        })
    };
    if value.len() < MIN_VALUE_BYTES {
        return refuse("it is shorter than 8 bytes");
    }
    if value.len() > MAX_VALUE_BYTES {
        return refuse("it is longer than 8 KiB");
    }
    if value.chars().any(char::is_control) {
        return refuse(
            "it holds a control character (a line break, a tab); it must fit in one header value",
        );
    }
    if value.contains(crate::capability::http::PLACEHOLDER_OPEN) {
        return refuse("it holds a secret placeholder");
    }
    if value.trim() != value {
        // A header's value is read without them: an echo would match
        // nothing, and pass redaction.
        return refuse("it begins or ends with a space; a pasted one is not part of the value");
    }
    Ok(())
}

impl SecretSource for SecretStore {
    fn value(&self, who: &str, name: &str) -> Result<String, SecretUnavailable> {
        let mut file = self
            .load()
            .map_err(|err| SecretUnavailable::Unreadable(err.to_string()))?;
        let entry = file.secrets.remove(name).ok_or(SecretUnavailable::NotSet)?;
        if !entry.extensions.is_empty() && !entry.extensions.iter().any(|e| e == who) {
            return Err(SecretUnavailable::NotFor(entry.extensions));
        }
        Ok(entry.value)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    const VALUE: &str = "sk-test-0123456789";

    fn store() -> (tempfile::TempDir, SecretStore) {
        let tmp = tempfile::tempdir().unwrap();
        let store = SecretStore::new(&ZotHome::new(tmp.path().join("home")));
        (tmp, store)
    }

    #[test]
    fn two_secret_sets_at_once_lose_nothing() {
        let (tmp, _) = store();
        let home = ZotHome::new(tmp.path().join("home"));
        let writers: Vec<_> = ["A", "B"]
            .into_iter()
            .map(|prefix| {
                let store = SecretStore::new(&home);
                std::thread::spawn(move || {
                    for n in 0..40 {
                        store.set(&format!("{prefix}_{n}"), VALUE, &[]).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(SecretStore::new(&home).list().unwrap().len(), 80);
    }

    #[test]
    fn a_set_secret_is_a_0600_file_and_listed_without_its_value() {
        let (_tmp, store) = store();
        store
            .set("WEATHER_KEY", &format!("{VALUE}\n"), &[])
            .unwrap();
        store
            .set("TRACKER", "tracker-token-xyz", &["issues".to_owned()])
            .unwrap();
        let meta = std::fs::metadata(store.path()).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let list = store.list().unwrap();
        assert_eq!(
            list,
            [
                SecretInfo {
                    name: "TRACKER".to_owned(),
                    extensions: vec!["issues".to_owned()]
                },
                SecretInfo {
                    name: "WEATHER_KEY".to_owned(),
                    extensions: vec![]
                },
            ]
        );
        // The trailing line break of a pipe is not part of the value.
        assert_eq!(store.value("any", "WEATHER_KEY").unwrap(), VALUE);
        // Neither the store's nor its errors' `Debug` shows a value.
        assert!(!format!("{store:?}{list:?}").contains(VALUE));
    }

    #[test]
    fn a_secret_set_for_one_extension_is_not_for_another() {
        let (_tmp, store) = store();
        store.set("K", VALUE, &["weather".to_owned()]).unwrap();
        assert_eq!(store.value("weather", "K").unwrap(), VALUE);
        assert_eq!(
            store.value("other", "K"),
            Err(SecretUnavailable::NotFor(vec!["weather".to_owned()]))
        );
        assert_eq!(
            store.value("weather", "NOPE"),
            Err(SecretUnavailable::NotSet)
        );
        assert!(store.remove("K").unwrap());
        assert!(!store.remove("K").unwrap());
        assert_eq!(store.value("weather", "K"), Err(SecretUnavailable::NotSet));
    }

    #[test]
    fn bad_names_and_values_are_refused_without_quoting_the_value() {
        let (_tmp, store) = store();
        let cases: [(&str, &str, &str); 5] = [
            // A name that could not be a placeholder.
            ("A B", VALUE, "`A B` is not a secret name"),
            // Too short to tell apart in a response.
            ("K", "k3y", "shorter than 8 bytes"),
            // Attack: a line break would split a header.
            ("K", "sk-abc\r\nX-Evil: 1", "control character"),
            // A value that is itself a placeholder.
            ("K", "{{secret:OTHER}}", "holds a secret placeholder"),
            ("K", &"x".repeat(MAX_VALUE_BYTES + 1), "longer than 8 KiB"),
        ];
        for (name, value, words) in cases {
            let message = store.set(name, value, &[]).unwrap_err().to_string();
            assert!(message.contains(words), "{name}: {message}");
            assert!(!message.contains(value), "{message}");
        }
        assert!(!store.path().exists());
    }

    #[test]
    fn an_exposed_or_linked_file_is_refused() {
        let (tmp, store) = store();
        store.set("K", VALUE, &[]).unwrap();
        // Others can read it: refused, with the fix.
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let message = store.list().unwrap_err().to_string();
        assert!(
            message.contains("others can read or write it (mode 644); run `chmod 600"),
            "{message}"
        );
        assert!(matches!(
            store.value("x", "K"),
            Err(SecretUnavailable::Unreadable(_))
        ));
        // Attack: the file replaced by a link to one elsewhere.
        std::fs::remove_file(store.path()).unwrap();
        let elsewhere = tmp.path().join("elsewhere.json");
        std::fs::write(&elsewhere, r#"{"secrets":{}}"#).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, store.path()).unwrap();
        let message = store.list().unwrap_err().to_string();
        assert!(message.contains("it is not a plain file"), "{message}");
    }

    #[test]
    fn a_corrupt_file_is_named_by_place_never_by_content() {
        let (_tmp, store) = store();
        std::fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        // A value of the wrong type: serde would quote it.
        std::fs::write(store.path(), r#"{"secrets":{"K":{"value":12345678}}}"#).unwrap();
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        let message = store.list().unwrap_err().to_string();
        assert!(
            message.contains("is not valid (line 1, column"),
            "{message}"
        );
        assert!(!message.contains("12345678"), "{message}");
    }

    #[test]
    fn a_file_edited_by_hand_holds_only_what_set_would_store() {
        let (_tmp, store) = store();
        std::fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        let write = |text: &str| {
            std::fs::write(store.path(), text).unwrap();
            std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        // An array is not an empty store (serde would read it by position).
        write("[]");
        let message = store.list().unwrap_err().to_string();
        assert!(
            message.contains("is not valid (line 1, column 1)"),
            "{message}"
        );
        let refused = |entry: &str| {
            write(&format!(r#"{{"secrets":{{{entry}}}}}"#));
            let message = store.list().unwrap_err().to_string();
            assert!(message.contains("the secrets file `"), "{message}");
            assert!(
                message.ends_with("; fix the entry or remove it from the file"),
                "{message}"
            );
            assert!(store.value("any", "K").is_err());
            message
        };
        let message = refused(r#""../K\u001b[2J":{"value":"sk-test-0123456789"}"#);
        assert!(message.contains("is not a secret name"), "{message}");
        let message = refused(r#""K":{"value":"k3y"}"#);
        assert!(
            message.contains("the value of secret `K` is refused: it is shorter than 8 bytes"),
            "{message}"
        );
        assert!(!message.contains("k3y"), "{message}");
        let message = refused(r#""K":{"value":"sk-abc\r\nX-Evil: 1"}"#);
        assert!(message.contains("control character"), "{message}");
        assert!(!message.contains("X-Evil"), "{message}");
        let message = refused(r#""K":{"value":"sk-test-0123456789","extensions":["a/b"]}"#);
        assert!(
            message.contains(
                "extension name `a/b` contains `/`; use letters, digits, `-`, `_` and `.`"
            ),
            "{message}"
        );
        // What `set` writes still reads.
        write(r#"{"secrets":{"K":{"value":"sk-test-0123456789","extensions":["data:t"]}}}"#);
        assert_eq!(store.value("data:t", "K").unwrap(), VALUE);
    }
}
