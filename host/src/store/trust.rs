//! Workspace trust records.
