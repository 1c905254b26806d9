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
//! Data flows top to bottom through the modules: [`manifest`] and
//! [`discovery`] find extensions; [`runtime`] starts them and moves bytes;
//! [`session`] speaks the protocol with one extension; [`host`] routes
//! between all of them.

pub mod audit;
pub mod bridge;
pub mod build;
pub mod capability;
pub mod data;
pub mod discovery;
pub mod event;
pub mod guard;
pub mod home;
pub mod host;
pub mod manifest;
pub mod policy;
pub mod runtime;
pub mod sandbox;
pub mod serve;
pub mod session;
pub mod store;
pub mod text;
pub mod user_file;

pub use event::HostEvent;
pub use host::{Decision, Host, HostBuilder, HostError};
pub use session::{CallError, FailMode, Interceptable, SessionConfig};
pub use zotbox_protocol as protocol;
pub use zotbox_protocol::Verdict;
