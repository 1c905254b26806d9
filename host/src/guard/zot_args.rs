//! How zot's own tools read their arguments, which the deny rules and the
//! guards zotbox hosts check by: the rules are with the code, in the
//! protocol crate, which the guest SDK shares for guards built natively.

pub use zotbox_protocol::zot_args::*;
