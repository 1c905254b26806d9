//! Layers below the host, for the benchmark report and the fuzz targets
//! (feature `internals`): they measure and attack these parts one by one.
//! No stability promise; an embedder uses the [`Host`](crate::Host).

pub use crate::guard::DenyRules;
pub use crate::runtime::wasm::{GuestLimits, WasmRuntime};
pub use crate::session::{Session, SessionConfig};
