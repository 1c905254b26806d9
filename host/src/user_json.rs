//! Parsing JSON that people write (manifests, policies, data files).
//!
//! One way for all of them: a wrong type names the field it is in
//! (`field `limits.memory_mb`: invalid type …`), anything after the JSON
//! value is refused, and unknown keys are collected for warnings rather than
//! refused (unless the type denies them, as policies do), so a manifest
//! written for a newer version still loads.

use serde::de::DeserializeOwned;

/// A value with the unknown keys found beside it (as `a.b` paths).
pub(crate) struct WithUnknown<T> {
    pub(crate) value: T,
    pub(crate) unknown_keys: Vec<String>,
}

/// Parses `text`; on failure, a phrase naming the field at fault.
pub(crate) fn parse<T: DeserializeOwned>(text: &str) -> Result<WithUnknown<T>, String> {
    let mut unknown_keys = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    // serde_ignored marks an `Option` layer as `?`; people think `inner.x`.
    let mut record = |key: serde_ignored::Path<'_>| {
        let key = key.to_string();
        let key = key
            .split('.')
            .filter(|part| *part != "?")
            .collect::<Vec<_>>()
            .join(".");
        unknown_keys.push(key);
    };
    let tracked = serde_ignored::Deserializer::new(&mut deserializer, &mut record);
    let value = serde_path_to_error::deserialize(tracked).map_err(|err| {
        let field = err.path().to_string();
        // serde_path_to_error says `.` or `?` when the fault is in no field.
        if matches!(field.as_str(), "." | "?" | "") {
            err.inner().to_string()
        } else {
            format!("field `{field}`: {}", err.inner())
        }
    })?;
    // A second object after the first is not "ignored": it is a file that
    // does not say what its author may think it says.
    deserializer.end().map_err(|err| err.to_string())?;
    Ok(WithUnknown {
        value,
        unknown_keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Sample {
        #[allow(dead_code)]
        name: String,
        #[serde(default)]
        #[allow(dead_code)]
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    struct Inner {
        #[allow(dead_code)]
        size: u32,
    }

    #[test]
    fn errors_name_the_field_and_unknown_keys_are_collected() {
        let cases = [
            (r#"{"name":3}"#, "field `name`: invalid type: integer `3`"),
            (r#"{"name":"a","inner":{"size":-1}}"#, "field `inner.size`"),
            // Cut short at the top level: no made-up field.
            (r#"{"name":"a""#, "EOF while parsing an object"),
            ("[", "EOF while parsing a list"),
            // Trailing content is an error, whatever it is.
            (r#"{"name":"a"} {"name":"b"}"#, "trailing characters"),
            (r#"{"name":"a"}]"#, "trailing characters"),
        ];
        for (text, expected) in cases {
            let err = parse::<Sample>(text).err().unwrap_or_default();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
        let parsed = parse::<Sample>(r#"{"name":"a","colour":1,"inner":{"size":1,"x":2}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.unknown_keys, vec!["colour", "inner.x"]);
    }
}
