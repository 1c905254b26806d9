//! An install end to end, from any source, and updates from registries.
//!
//! [`prepare`] fetches a git, archive or registry source into a private
//! folder (a folder is read where it is) and plans the install from it
//! ([`install::plan`]): nothing is written yet. The caller shows the plan
//! and asks; [`Pending::commit`] then copies exactly that plan into place
//! ([`install::commit`]) and records it in the lock ([`lock`]), with what
//! the policy granted. [`check_update`] finds a newer version of a locked
//! install in the registry it came from (only there: another registry
//! listing the same name is not its update) and works out what it adds to
//! and drops from the grant, turning native included, so that an update
//! asking for more is asked about again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::home::ZotHome;
use crate::manifest::{MANIFEST_FILE, Manifest, Program};
use crate::policy::Policy;
use crate::store::fetch::Limits;
use crate::store::install::{self, InstallError, LaunchCommand, Plan};
use crate::store::lock::{self, LockEntry, LockError, Scope};
use crate::store::registry::client::{Client, ClientError, Found, Obtained};
use crate::store::registry::compare_versions;
use crate::store::source::{self, Fetched, Provenance, Source, SourceError};

/// The grant line of an update from a sandboxed version to a native one.
pub const TURNS_NATIVE: &str =
    "native: the new version runs unsandboxed, with your permissions (it was sandboxed)";

/// Why an install or an update did not happen. After any of these,
/// nothing was installed and a previous install is as it was (except
/// [`InstallerError::Lock`], after which the install is in place but not
/// recorded).
#[derive(Debug, thiserror::Error)]
pub enum InstallerError {
    /// The source could not be read or fetched.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A registry refused or could not answer.
    #[error(transparent)]
    Registry(#[from] ClientError),
    /// The install itself was refused or failed.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// Installed, but not recorded in the lock.
    #[error("installed `{name}`, but it could not be recorded in the lock")]
    Lock {
        /// The extension.
        name: String,
        /// Why.
        #[source]
        source: LockError,
    },
    /// The lock could not be read.
    #[error(transparent)]
    ReadLock(LockError),
    /// A native extension where the policy forbids them (`native_extensions:
    /// false`), whatever its source: zot would start it outside zotbox.
    #[error(
        "`{}` is a native extension, refused by `native_extensions: false` in `{}`; choose \
         a wasm build",
        crate::text::Shown(name),
        policy.display()
    )]
    NativeRefused {
        /// The extension.
        name: String,
        /// The policy file that refuses native extensions.
        policy: PathBuf,
    },
    /// An update would turn an extension into a data package or back: it
    /// would land in another folder, beside the install it replaces.
    #[error(
        "the new version of `{name}` is of kind `{to}`, which installs elsewhere; remove it \
         (`zotbox ext remove {name}`) and install the new version"
    )]
    KindChanged {
        /// The install.
        name: String,
        /// The new version's kind.
        to: &'static str,
    },
}

/// Where a pending install's folder came from; a fetched one lives in a
/// private folder kept until the install is done.
#[derive(Debug)]
enum Origin {
    Folder,
    /// Held only to keep its private folder until the install is done.
    Fetched {
        _kept: Fetched,
    },
    Registry(Box<Obtained>),
}

/// A planned install, waiting for the user's consent.
#[derive(Debug)]
pub struct Pending {
    plan: Plan,
    provenance: Provenance,
    origin: Origin,
}

/// Fetches `source` if it is not a folder and plans its install into
/// `extensions`.
///
/// # Errors
///
/// [`InstallerError`] naming what refused it; nothing is left behind.
pub async fn prepare(
    source: &Source,
    home: &ZotHome,
    policy: &Policy,
    extensions: &Path,
) -> Result<Pending, InstallerError> {
    let (folder, provenance, origin) = match source {
        Source::Folder(path) => {
            let recorded = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            let provenance = Provenance::of_source(recorded.display().to_string());
            (path.clone(), provenance, Origin::Folder)
        }
        Source::Registry { name, version } => {
            let found = Client::new(home, policy)
                .find(name, version.as_deref())
                .await?;
            return prepare_found(found, home, policy, extensions).await;
        }
        Source::Git { .. } | Source::Archive { .. } => {
            let fetched =
                source::fetch_source(source, &Limits::default(), &policy.http_config()).await?;
            let provenance = fetched.recorded.clone();
            (
                fetched.folder.clone(),
                provenance,
                Origin::Fetched { _kept: fetched },
            )
        }
    };
    let plan = allowed(install::plan(&folder, extensions)?, policy)?;
    Ok(Pending {
        plan,
        provenance,
        origin,
    })
}

/// `plan`, unless the policy refuses what it would install.
fn allowed(plan: Plan, policy: &Policy) -> Result<Plan, InstallerError> {
    if let Program::Native { .. } = plan.manifest().program
        && let Some(path) = policy.native_refused_by()
    {
        return Err(InstallerError::NativeRefused {
            name: plan.manifest().name().to_owned(),
            policy: path.to_owned(),
        });
    }
    Ok(plan)
}

/// [`prepare`] for the registry entry `found`.
async fn prepare_found(
    found: Found,
    home: &ZotHome,
    policy: &Policy,
    extensions: &Path,
) -> Result<Pending, InstallerError> {
    let obtained = Client::new(home, policy).obtain(found).await?;
    let plan = allowed(install::plan(&obtained.fetched.folder, extensions)?, policy)?;
    Ok(Pending {
        plan,
        provenance: obtained.fetched.recorded.clone(),
        origin: Origin::Registry(Box::new(obtained)),
    })
}

impl Pending {
    /// What would be installed (show it before [`Pending::commit`]).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// What the lock will record about where it came from.
    pub fn provenance(&self) -> &Provenance {
        &self.provenance
    }

    /// The registry entry and who signed it, for a registry source.
    pub fn obtained(&self) -> Option<&Obtained> {
        match &self.origin {
            Origin::Registry(obtained) => Some(obtained),
            Origin::Folder | Origin::Fetched { .. } => None,
        }
    }

    /// Installs exactly the plan with `launcher` (for a wasm extension),
    /// checks its guest with `prepare`, and records it in the lock under
    /// `scope` with what `policy` grants. Blocking: file copies and a
    /// compile. Returns the installed folder.
    ///
    /// # Errors
    ///
    /// [`InstallerError::Install`]; [`InstallerError::Lock`] when it is
    /// installed but could not be recorded.
    pub fn commit(
        self,
        home: &ZotHome,
        policy: &Policy,
        scope: Scope,
        launcher: &LaunchCommand,
        prepare: &dyn Fn(&str, &Path) -> Result<(), String>,
    ) -> Result<PathBuf, InstallerError> {
        let name = self.plan.manifest().name().to_owned();
        let granted = granted(policy, &self.plan);
        let target = install::commit(&self.plan, launcher, prepare)?;
        // What landed is what was planned; the lock reads it from disk.
        let recorded = Manifest::load(&target.join(crate::manifest::MANIFEST_FILE))
            .map_err(InstallError::Invalid)?;
        lock::record_install(home, &target, &recorded, &self.provenance, scope, granted)
            .map_err(|source| InstallerError::Lock { name, source })?;
        // Only now may a fetched folder go.
        drop(self.origin);
        Ok(target)
    }
}

/// The key under which the lock records a data package's tools.
pub const TOOLS_KEY: &str = "tools";

/// What `policy` grants of the capabilities `plan` declares, by capability:
/// what the lock records and an update is compared with. A data package's
/// tools are recorded too, under [`TOOLS_KEY`] (`name (kind): template`),
/// so that an update changing a command or a URL is asked about again even
/// where the grant stays the same (a shell tool's grant is `**`).
pub fn granted(policy: &Policy, plan: &Plan) -> BTreeMap<String, Vec<String>> {
    let mut granted: BTreeMap<String, Vec<String>> = policy
        .grant(&plan.declared())
        .rows
        .into_iter()
        .filter(|row| !row.granted.is_empty())
        .map(|row| (row.capability.to_owned(), row.granted))
        .collect();
    if let Some(contents) = plan.package() {
        let tools = contents.tool_lines();
        if !tools.is_empty() {
            granted.insert(TOOLS_KEY.to_owned(), tools);
        }
    }
    granted
}

/// What `new` grants that `old` did not, and what it no longer grants, as
/// `capability value` lines.
pub fn grant_diff(
    old: &BTreeMap<String, Vec<String>>,
    new: &BTreeMap<String, Vec<String>>,
) -> (Vec<String>, Vec<String>) {
    let lines = |from: &BTreeMap<String, Vec<String>>, to: &BTreeMap<String, Vec<String>>| {
        let mut lines = Vec::new();
        for (capability, values) in to {
            let before = from.get(capability);
            for value in values {
                if !before.is_some_and(|before| before.contains(value)) {
                    lines.push(format!("{capability} {value}"));
                }
            }
        }
        lines
    };
    (lines(old, new), lines(new, old))
}

/// The installs the lock says came from a registry (only `name`, when
/// given), with their folders.
///
/// # Errors
///
/// [`InstallerError::ReadLock`].
pub fn from_registries(
    home: &ZotHome,
    name: Option<&str>,
) -> Result<Vec<(PathBuf, LockEntry)>, InstallerError> {
    Ok(lock::Lock::load(home)
        .map_err(InstallerError::ReadLock)?
        .entries()
        .filter(|(_, entry)| entry.registry.is_some())
        .filter(|(_, entry)| name.is_none_or(|name| entry.name == name))
        .map(|(dir, entry)| (PathBuf::from(dir), entry.clone()))
        .collect())
}

/// A newer version of a locked install, fetched, checked and planned.
#[derive(Debug)]
pub struct Update {
    /// The version installed.
    pub from: String,
    /// The version offered.
    pub to: String,
    /// What the update grants that the install did not.
    pub added: Vec<String>,
    /// What it no longer grants.
    pub removed: Vec<String>,
    /// The install, waiting for consent (asked again when `added` is not
    /// empty).
    pub pending: Pending,
}

/// The newest version, in the registry it came from, of the install at
/// `dir` locked as `locked`, if it is newer than the installed one.
///
/// # Errors
///
/// [`InstallerError`] naming what refused the new version.
pub async fn check_update(
    home: &ZotHome,
    policy: &Policy,
    dir: &Path,
    locked: &LockEntry,
) -> Result<Option<Update>, InstallerError> {
    // The registry it came from, and only that one: another registry
    // listing the same name (or answering while its own is down) is not
    // an update of it.
    let Some(url) = locked.registry.as_deref() else {
        return Ok(None);
    };
    let found = Client::new(home, policy)
        .find_in(url, &locked.name, &locked.version)
        .await?;
    if compare_versions(&found.entry.version, &locked.version) != std::cmp::Ordering::Greater {
        return Ok(None);
    }
    let to = found.entry.version.clone();
    // A project install lies in a workspace whose author may have made
    // `.zot/extensions` a link since (to a folder of the user's, whose
    // `<name>` the update would replace): refused as `--project` is.
    if locked.scope == lock::Scope::Project
        && let Some(workspace) = dir.ancestors().nth(3)
    {
        install::project_extensions_dir(workspace)?;
    }
    // `<root>/extensions/<name>` or `<root>/packages/<name>`: the plan
    // puts each kind in its own folder of the same root.
    let extensions = dir
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| home.extensions_dir(), |root| root.join("extensions"));
    let pending = prepare_found(found, home, policy, &extensions).await?;
    if pending.plan().destination() != dir {
        return Err(InstallerError::KindChanged {
            name: locked.name.clone(),
            to: pending.plan().manifest().kind(),
        });
    }
    let (mut added, removed) = grant_diff(&locked.capabilities, &granted(policy, pending.plan()));
    // A native program runs unsandboxed: wider than any capability row,
    // so turning native is an addition that is asked about. What is
    // installed now is read from its (locked) folder; unreadable counts as
    // sandboxed, so the question is asked rather than skipped.
    let native = |manifest: &Manifest| matches!(manifest.program, Program::Native { .. });
    let installed = Manifest::load(&dir.join(MANIFEST_FILE)).ok();
    let was_native = installed.as_ref().is_some_and(native);
    if native(pending.plan().manifest()) && !was_native {
        added.insert(0, TURNS_NATIVE.to_owned());
    }
    added.extend(newly_declared_refused(
        policy,
        installed.as_ref(),
        pending.plan(),
    ));
    added.extend(raised_limits(policy, installed.as_ref(), pending.plan()));
    // The user's `ext disable` is theirs: the new manifest's `enabled`
    // (or its absence) does not turn the extension back on.
    let mut pending = pending;
    if installed
        .as_ref()
        .is_some_and(|manifest| !manifest.raw.enabled)
    {
        pending.plan.keep_disabled();
    }
    // Another signer is another author, whatever the grant: asked about.
    let signer = pending.provenance().publisher_key.as_deref();
    if !same_publisher(locked, pending.provenance()) {
        let key =
            |key: Option<&str>| key.map_or_else(|| "unsigned".to_owned(), |k| format!("key {k}"));
        let now = match (signer, &pending.provenance().publisher) {
            // The same id, another key: named by the key itself.
            (Some(id), Some(public)) if signer == locked.publisher_key.as_deref() => {
                format!("another key with the same id {id}, {public}")
            }
            _ => key(signer),
        };
        added.push(format!(
            "publisher: signed by {now} (was {})",
            key(locked.publisher_key.as_deref())
        ));
    }
    Ok(Some(Update {
        from: locked.version.clone(),
        to,
        added,
        removed,
        pending,
    }))
}

/// What an update newly declares that the policy refuses now, as
/// `capability value (…)` lines: granted the day the policy allows it,
/// with no install asking again, so asked about now (rule 2 of
/// `THREATS.md`: an update that asks for more asks again). What the
/// installed version declared already was shown when it was installed; an
/// installed manifest that cannot be read counts as declaring nothing. A
/// data package declares through its tools, whose every new or changed
/// line is asked about already (see [`granted`]).
fn newly_declared_refused(
    policy: &Policy,
    installed: Option<&Manifest>,
    plan: &crate::store::install::Plan,
) -> Vec<String> {
    if plan.package().is_some() {
        return Vec::new();
    }
    let before = installed
        .map(|manifest| policy.grant(&manifest.raw.capabilities).rows)
        .unwrap_or_default();
    let mut lines = Vec::new();
    for row in policy.grant(&plan.declared()).rows {
        let was = before.iter().find(|old| old.capability == row.capability);
        for refusal in &row.refused {
            if !was.is_some_and(|was| was.declared.contains(&refusal.item)) {
                lines.push(format!(
                    "{} {} (declared, refused by the policy now: granted if it allows it later)",
                    row.capability, refusal.item
                ));
            }
        }
    }
    lines
}

/// The limits an update raises past what the installed manifest ran with
/// under `policy` (memory, a call's or an intercept's deadline): shown
/// with the grant at install, so asked about again (a longer intercept
/// deadline holds every tool call of zot's that long).
fn raised_limits(
    policy: &Policy,
    installed: Option<&Manifest>,
    plan: &crate::store::install::Plan,
) -> Vec<String> {
    if plan.package().is_some() {
        return Vec::new();
    }
    let defaults = crate::policy::LimitDefaults::default();
    let limits = |manifest: Option<&Manifest>| {
        let declared = manifest.map(|m| m.raw.limits).unwrap_or_default();
        let limits = policy.limits(&declared, &defaults);
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        [
            ("memory", limits.memory_mb.value, "MiB"),
            ("tool timeout", millis(limits.call_timeout.value), "ms"),
            (
                "intercept timeout",
                millis(limits.intercept_timeout.value),
                "ms",
            ),
        ]
    };
    limits(installed)
        .into_iter()
        .zip(limits(Some(plan.manifest())))
        .filter(|((_, was, _), (_, is, _))| is > was)
        .map(|((what, was, unit), (_, is, _))| format!("limits {what} {was} {unit} → {is} {unit}"))
        .collect()
}

/// Whether `now` is signed by the publisher `locked` was: by key where the
/// lock has it (a second trusted publisher can make a key with the first
/// one's id), by id for a lock written before keys were recorded.
fn same_publisher(locked: &LockEntry, now: &Provenance) -> bool {
    match (&locked.publisher, &now.publisher) {
        (Some(was), Some(is)) => was == is,
        _ => locked.publisher_key == now.publisher_key,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Attack: a second trusted publisher makes a key with the first one's
    /// id (an id is 8 bytes its maker chooses) and signs an update of the
    /// first one's extension. By key, that is another publisher.
    #[test]
    fn a_publisher_is_its_key_not_its_id() {
        let provenance = |id: Option<&str>, key: Option<&str>| Provenance {
            publisher_key: id.map(str::to_owned),
            publisher: key.map(str::to_owned),
            ..Provenance::of_source("notes".to_owned())
        };
        let locked = |id: Option<&str>, key: Option<&str>| {
            let recorded = provenance(id, key);
            LockEntry {
                publisher_key: recorded.publisher_key,
                publisher: recorded.publisher,
                ..serde_json::from_value(serde_json::json!({
                    "name": "notes", "version": "1.0.0", "scope": "user", "source": "notes",
                    "tree": "", "files": {}, "capabilities": {}, "installed_at": ""
                }))
                .unwrap()
            }
        };
        let first = locked(Some("DA4438FF43319A39"), Some("RWQ-first"));
        assert!(same_publisher(
            &first,
            &provenance(Some("DA4438FF43319A39"), Some("RWQ-first"))
        ));
        assert!(!same_publisher(
            &first,
            &provenance(Some("DA4438FF43319A39"), Some("RWQ-forged"))
        ));
        assert!(!same_publisher(&first, &provenance(None, None)));
        // A lock written before keys were recorded: by id, as it was.
        let old = locked(Some("DA4438FF43319A39"), None);
        assert!(same_publisher(
            &old,
            &provenance(Some("DA4438FF43319A39"), Some("RWQ-any"))
        ));
        assert!(!same_publisher(
            &old,
            &provenance(Some("0000000000000000"), Some("RWQ-any"))
        ));
    }

    #[test]
    fn a_grant_diff_lists_what_is_added_and_what_is_dropped() {
        let map = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.iter().map(|s| (*s).to_owned()).collect()))
                .collect()
        };
        let old = map(&[("http", &["https://a.example"]), ("fs-read", &["docs/**"])]);
        let new = map(&[
            ("http", &["https://a.example", "https://b.example"]),
            ("shell", &["git status"]),
        ]);
        let (added, removed) = grant_diff(&old, &new);
        assert_eq!(added, ["http https://b.example", "shell git status"]);
        assert_eq!(removed, ["fs-read docs/**"]);
        assert_eq!(grant_diff(&old, &old), (Vec::new(), Vec::new()));
    }
}
