//! `ext install SOURCE`: turning the source text into a folder to install,
//! fetching git and archive sources (the library does the work; this says
//! what was fetched).

use std::path::PathBuf;

use anyhow::Result;
use zotbox::store::fetch::Limits;
use zotbox::store::source::{self, Fetched, Source, SourceError};
use zotbox::text::{Shown, shown};

use super::Context;

/// The folder an install reads.
pub(crate) enum Got {
    /// A folder on this machine, installed as it is.
    Folder(PathBuf),
    /// A fetched source, in a private folder removed when this is dropped.
    Fetched(Fetched),
}

/// Parses `text` and fetches it when it is git or an archive.
pub(crate) async fn fetch(
    context: &Context,
    text: &str,
    policy: &zotbox::policy::Policy,
) -> Result<Got> {
    let parsed = Source::parse(text)?;
    match &parsed {
        Source::Folder(path) => Ok(Got::Folder(path.clone())),
        Source::Registry { .. } => Err(SourceError::Registry(parsed.to_string()).into()),
        Source::Git { .. } | Source::Archive { .. } => {
            if !context.json {
                eprintln!("fetching {}", shown(&parsed.to_string()));
            }
            let fetched =
                source::fetch_source(&parsed, &Limits::default(), &policy.http_config()).await?;
            if !context.json {
                let recorded = &fetched.recorded;
                if let Some(commit) = &recorded.commit {
                    eprintln!("fetched commit {}", Shown(commit));
                }
                if let Some(sha256) = &recorded.sha256 {
                    eprintln!("fetched archive, sha256 {}", Shown(sha256));
                }
            }
            Ok(Got::Fetched(fetched))
        }
    }
}
