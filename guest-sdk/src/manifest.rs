//! The extension's name and version, read from its `extension.json` at
//! build time, so that the manifest is their one source.

/// What the manifest says the extension is called, and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestInfo {
    /// `name` in `extension.json`.
    pub name: String,
    /// `version` in `extension.json` (empty when absent).
    pub version: String,
}

impl ManifestInfo {
    /// Reads `name` and `version` from manifest text. A manifest that is not
    /// JSON or has no `name` gives the fallbacks (the crate's name and
    /// version): the extension still starts, and `zotbox doctor` reports
    /// the mismatch with the manifest the host reads.
    #[doc(hidden)]
    pub fn from_json(text: &str, fallback_name: &str, fallback_version: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        let field = |key: &str| value.get(key).and_then(serde_json::Value::as_str);
        match field("name") {
            Some(name) => Self {
                name: name.to_owned(),
                version: field("version").unwrap_or_default().to_owned(),
            },
            None => Self {
                name: fallback_name.to_owned(),
                version: fallback_version.to_owned(),
            },
        }
    }
}

/// The name and version in the crate's `extension.json` (beside its
/// `Cargo.toml`), read at build time: `Extension::from_manifest(manifest!())`.
#[macro_export]
macro_rules! manifest {
    () => {
        $crate::ManifestInfo::from_json(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/extension.json")),
            env!("CARGO_PKG_NAME"),
            env!("CARGO_PKG_VERSION"),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_and_version_come_from_the_manifest_or_the_fallbacks() {
        // (manifest text, name, version)
        let cases = [
            (
                r#"{"name":"wc","version":"1.2.0","wasm":"./wc.wasm"}"#,
                "wc",
                "1.2.0",
            ),
            // No version: empty, as the host reads it.
            (r#"{"name":"wc"}"#, "wc", ""),
            // Not JSON, or no name: the crate's.
            ("{", "crate", "0.1.0"),
            (r#"{"version":"9"}"#, "crate", "0.1.0"),
        ];
        for (text, name, version) in cases {
            let info = ManifestInfo::from_json(text, "crate", "0.1.0");
            assert_eq!(
                (info.name.as_str(), info.version.as_str()),
                (name, version),
                "{text}"
            );
        }
    }
}
