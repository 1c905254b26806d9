//! The `zot:host` imports a component guest may call: the wasm front end of
//! the capability layer. Each function hands the request to the guest's
//! [`Sandbox`] and turns its answer into the WIT types; a refusal comes back
//! as `error::denied` and the guest keeps running.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::guest::ComponentState;
use crate::capability::{CapabilityError, fs, http, shell};
use crate::sandbox::Sandbox;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "extension",
    imports: { default: async },
});

use zot::host::{fs as wfs, http as whttp, shell as wshell, types};

/// Adds the `zot:host` interfaces to a component linker.
pub(crate) fn add_to_linker(linker: &mut Linker<ComponentState>) -> wasmtime::Result<()> {
    Extension::add_to_linker::<ComponentState, HasSelf<ComponentState>>(linker, |state| state)
}

impl From<CapabilityError> for types::Error {
    fn from(error: CapabilityError) -> Self {
        match error {
            CapabilityError::Denied {
                capability,
                subject,
                reason,
            } => Self::Denied(types::Denial {
                capability: capability.as_str().to_owned(),
                subject,
                reason,
            }),
            CapabilityError::NotFound(what) => Self::NotFound(what),
            CapabilityError::TooLarge { limit, .. } => Self::TooLarge(limit),
            CapabilityError::Timeout { ms, .. } => Self::Timeout(ms),
            CapabilityError::Invalid(why) => Self::Invalid(why),
            CapabilityError::Failed(why) => Self::Failed(why),
        }
    }
}

impl ComponentState {
    /// The guest's sandbox, or a refusal naming the capability when the
    /// host gave it none.
    fn sandbox(
        &self,
        capability: crate::capability::Capability,
        subject: &str,
    ) -> Result<Arc<Sandbox>, types::Error> {
        self.sandbox.clone().ok_or_else(|| {
            CapabilityError::denied(
                capability,
                subject,
                "this host grants no capabilities to wasm guests",
            )
            .into()
        })
    }
}

fn kind(kind: fs::Kind) -> wfs::Kind {
    match kind {
        fs::Kind::File => wfs::Kind::File,
        fs::Kind::Directory => wfs::Kind::Directory,
        fs::Kind::Symlink => wfs::Kind::Symlink,
        fs::Kind::Other => wfs::Kind::Other,
    }
}

impl types::Host for ComponentState {}

impl wfs::Host for ComponentState {
    async fn read(&mut self, path: String) -> Result<Vec<u8>, types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::FsRead, &path)?;
        Ok(sandbox.read(&path).await?)
    }

    async fn write(&mut self, path: String, contents: Vec<u8>) -> Result<(), types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::FsWrite, &path)?;
        Ok(sandbox.write(&path, contents).await?)
    }

    async fn list(&mut self, path: String) -> Result<Vec<wfs::Entry>, types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::FsRead, &path)?;
        Ok(sandbox
            .list(&path)
            .await?
            .into_iter()
            .map(|entry| wfs::Entry {
                name: entry.name,
                kind: kind(entry.kind),
                size: entry.size,
            })
            .collect())
    }

    async fn stat(&mut self, path: String) -> Result<wfs::Metadata, types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::FsRead, &path)?;
        let meta = sandbox.stat(&path).await?;
        Ok(wfs::Metadata {
            kind: kind(meta.kind),
            size: meta.size,
            modified_ms: meta.modified_ms,
        })
    }
}

impl whttp::Host for ComponentState {
    async fn fetch(&mut self, request: whttp::Request) -> Result<whttp::Response, types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::Http, &request.url)?;
        let method = match request.method {
            whttp::Method::Get => http::Method::Get,
            whttp::Method::Head => http::Method::Head,
            whttp::Method::Post => http::Method::Post,
            whttp::Method::Put => http::Method::Put,
            whttp::Method::Patch => http::Method::Patch,
            whttp::Method::Delete => http::Method::Delete,
        };
        let response = sandbox
            .fetch(http::Request {
                method,
                url: request.url,
                headers: request
                    .headers
                    .into_iter()
                    .map(|h| (h.name, h.value))
                    .collect(),
                body: request.body,
            })
            .await?;
        Ok(whttp::Response {
            status: response.status,
            headers: response
                .headers
                .into_iter()
                .map(|(name, value)| whttp::Header { name, value })
                .collect(),
            body: response.body,
        })
    }
}

impl wshell::Host for ComponentState {
    async fn run(&mut self, command: String) -> Result<wshell::Output, types::Error> {
        let sandbox = self.sandbox(crate::capability::Capability::Shell, &command)?;
        let shell::Output {
            stdout,
            stderr,
            exit_code,
            truncated,
        } = sandbox.run_shell(&command).await?;
        Ok(wshell::Output {
            stdout,
            stderr,
            exit_code,
            truncated,
        })
    }
}
