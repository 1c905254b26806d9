//! zotbox: a sandboxed plugin host for zot extensions.
//!
//! zotbox speaks zot's extension protocol to three kinds of extension —
//! WebAssembly guests run in-process under wasmtime, native subprocesses
//! (today's zot extensions), and declarative data files — and puts all of
//! them behind one capability layer.
//!
//! The front door is [`Host`]:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let host = zotbox::Host::builder()
//!     .workspace("/path/to/project")
//!     .extension("/path/to/weather")
//!     .build()
//!     .await?;
//! let result = host.call_tool("weather", serde_json::json!({"city": "Berlin"})).await?;
//! println!("{}", result.text());
//! host.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The public modules are what an embedder works with: the [`host`] and
//! its builder, [`manifest`]s, the [`policy`] and the grants it makes, the
//! [`capability`] types, [`data`] files, [`discovery`] of extensions, the
//! [`store`] (install, trust), `$ZOT_HOME` ([`home`]), the two zot front
//! ends ([`bridge`] for `zotbox run`, [`serve`]), events ([`HostEvent`]) and
//! the [`protocol`]. The layers below the host (sandbox, runtime, session,
//! guard chain, audit log) are the crate's own; what of them a caller
//! meets is re-exported here.
//!
//! Modules are layered, each using only those below it (a test enforces
//! it): text, files, home and events; audit; capability; manifest; policy;
//! data; guard; discovery; sandbox; runtime; session; store; host; serve
//! and bridge. The CLI is the binary's own, on top.

pub mod bridge;
pub mod build;
pub mod capability;
pub mod data;
pub mod discovery;
pub mod home;
pub mod host;
pub mod instance_log;
pub mod manifest;
pub mod policy;
pub mod serve;
pub mod shared;
pub mod store;
pub mod text;

pub(crate) mod audit;
pub(crate) mod event;
pub(crate) mod guard;
pub(crate) mod runtime;
pub(crate) mod sandbox;
pub(crate) mod session;
pub(crate) mod user_file;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;

pub use event::HostEvent;
pub use host::{Decision, Host, HostBuilder, HostError};
pub use runtime::{Exit, Launcher};
pub use session::{CallError, Closed, FailMode, Interceptable, SessionConfig};
pub use user_file::FileError;
pub use zotbox_protocol as protocol;
pub use zotbox_protocol::Verdict;
