//! What `ext install|info|update` say about where an install comes from:
//! what is fetched, the commit or digest recorded, and who signed a
//! registry archive (the library fetches and checks; this renders).

use zotbox::store::installer::Pending;
use zotbox::store::registry::client::Obtained;
use zotbox::store::source::Source;
use zotbox::text::{Shown, shown};

use super::Context;

/// Says on stderr what is about to be fetched (nothing for a folder).
pub(crate) fn announce(context: &Context, source: &Source) {
    if context.json || matches!(source, Source::Folder(_)) {
        return;
    }
    eprintln!("fetching {}", shown(&source.to_string()));
}

/// Says on stderr what was fetched: the commit, the archive's digest, the
/// registry and who signed it.
pub(crate) fn fetched(context: &Context, pending: &Pending) {
    if context.json {
        return;
    }
    if let Some(obtained) = pending.obtained() {
        eprintln!(
            "from {}: {}",
            shown(&obtained.found.registry.url),
            signature_status(obtained)
        );
        return;
    }
    let recorded = pending.provenance();
    if let Some(commit) = &recorded.commit {
        eprintln!("fetched commit {}", Shown(commit));
    }
    if let Some(sha256) = &recorded.sha256 {
        eprintln!("fetched archive, sha256 {}", Shown(sha256));
    }
}

/// One line on who signed an obtained archive.
pub(crate) fn signature_status(obtained: &Obtained) -> String {
    let sha256 = &obtained.found.entry.sha256;
    match obtained.verified.key {
        Some(key) => format!("archive sha256 {sha256}, signed by publisher key {key} (trusted)"),
        None => {
            format!("archive sha256 {sha256}, unsigned (the policy does not require a signature)")
        }
    }
}
