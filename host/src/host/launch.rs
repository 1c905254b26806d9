//! The one launch step: what every start of an extension checks and
//! derives before its program runs, whether the host's supervisor starts it
//! or `zotbox run` (standalone, or an instance of the shared host) does.
//!
//! In order: a wasm file that is not built yet is named with what to run;
//! the installed files must be the locked ones and meet the trusted
//! workspace's pins ([`crate::store::lock::check_at_load`]); the policy may
//! refuse the extension, and otherwise gives its grant as a sandbox
//! ([`crate::sandbox::confine`]); its limits are the manifest's within the
//! policy's ceilings, over the caller's defaults. Trust is the caller's:
//! the host assesses its one workspace once, `zotbox run` the folder of
//! the extension it runs.

use std::path::Path;
use std::sync::Arc;

use crate::home::ZotHome;
use crate::manifest::Manifest;
use crate::policy::{EffectiveLimits, LimitDefaults, Policy};
use crate::runtime::wasm::GuestLimits;
use crate::sandbox::{Sandbox, Services};

/// Why an extension may not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    /// Its wasm file is not built: what to run.
    #[error("{0}")]
    NotBuilt(String),
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
}

/// Checks that `manifest` may start (see the module) and derives its
/// sandbox, on `services`, and its limits over `defaults`. `workspace` is
/// the one whose lock may pin it.
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
    defaults: &LimitDefaults,
) -> Result<Admitted, LaunchError> {
    if let Some(problem) = manifest.missing_wasm() {
        return Err(LaunchError::NotBuilt(problem));
    }
    crate::store::lock::check_at_load(manifest, home, policy, workspace)?;
    let sandbox =
        crate::sandbox::confine(policy, services, manifest).map_err(LaunchError::Refused)?;
    let limits = policy.limits(&manifest.raw.limits, defaults);
    let guest = GuestLimits::from_effective(&limits);
    Ok(Admitted {
        sandbox,
        limits,
        guest,
    })
}
