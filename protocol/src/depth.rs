//! How deep a line's JSON nests, found without decoding it.
//!
//! Hosts read frames with serde_json, which stops at [`MAX_DEPTH`] levels.
//! Other readers go further and fail otherwise: zot's Go decoder reads
//! 10 000 levels, and a Python guest built with componentize-py ran out of
//! wasm stack between 1 000 and 1 200 and trapped, ending the extension (a
//! guard among them, whose checks zot then let through). The model writes
//! a tool call's arguments, so a peer that passes a request on unread
//! ([`nested_deeper_than`]) answers one nested past [`MAX_DEPTH`] itself.

/// The deepest nesting of arrays and objects a frame may have: serde_json's
/// own limit (its 128th level is an error), so a guest built on it reads
/// every frame a host passes on.
pub const MAX_DEPTH: usize = 127;

/// Whether `line` nests arrays and objects more than `limit` levels deep.
///
/// Brackets inside strings do not count. A line with no more than `limit`
/// opening brackets in all cannot be deeper, which one count tells: the
/// usual frame costs that pass only.
pub fn nested_deeper_than(line: &[u8], limit: usize) -> bool {
    if memchr::memchr2_iter(b'[', b'{', line).count() <= limit {
        return false;
    }
    let mut depth = 0usize;
    let mut rest = line;
    while let Some(at) = rest
        .iter()
        .position(|&byte| matches!(byte, b'"' | b'[' | b'{' | b']' | b'}'))
    {
        match rest[at] {
            b'"' => {
                // Past the string: its closing quote is the first one not
                // escaped.
                let mut after = &rest[at + 1..];
                loop {
                    let Some(end) = memchr::memchr2(b'"', b'\\', after) else {
                        return false;
                    };
                    if after[end] == b'"' {
                        rest = &after[end + 1..];
                        break;
                    }
                    after = after.get(end + 2..).unwrap_or_default();
                }
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            _ => depth = depth.saturating_sub(1),
        }
        rest = &rest[at + 1..];
    }
    false
}

/// Whether `value` nests arrays and objects more than `limit` levels deep
/// (a top-level array or object is one level). Walked without recursion:
/// a value an embedder built may be deeper than a thread's stack.
pub fn value_nested_deeper_than(value: &serde_json::Value, limit: usize) -> bool {
    use serde_json::Value;
    let mut stack = vec![(value, 1usize)];
    while let Some((value, depth)) = stack.pop() {
        let inside = |item| (item, depth + 1);
        match value {
            Value::Array(_) | Value::Object(_) if depth > limit => return true,
            Value::Array(items) => stack.extend(items.iter().map(inside)),
            Value::Object(map) => stack.extend(map.values().map(inside)),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!(
            r#"{{"type":"tool_call","id":"1","args":{{"a":{}{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        )
    }

    #[test]
    fn depth_is_counted_as_serde_counts_it() {
        // The frame and its arguments are two levels.
        for (depth, deeper) in [(125, false), (126, true), (5000, true)] {
            let line = nested(depth);
            assert_eq!(
                nested_deeper_than(line.as_bytes(), MAX_DEPTH),
                deeper,
                "{depth}"
            );
            // serde_json agrees.
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&line).is_err(),
                deeper,
                "{depth}"
            );
        }
    }

    #[test]
    fn a_value_is_measured_as_its_text_would_be() {
        for depth in [1, 126, 127, 128, 300] {
            // Built in place: `json!` copies a value through serde.
            let mut value = serde_json::Value::Array(Vec::new());
            for _ in 1..depth {
                value = serde_json::Value::Array(vec![serde_json::Value::from(1), value]);
            }
            let text = value.to_string();
            assert_eq!(
                value_nested_deeper_than(&value, MAX_DEPTH),
                nested_deeper_than(text.as_bytes(), MAX_DEPTH),
                "{depth}"
            );
            assert_eq!(
                value_nested_deeper_than(&value, MAX_DEPTH),
                depth > MAX_DEPTH
            );
        }
        let object = serde_json::json!({"a": {"b": [1, {"c": []}]}, "d": 1});
        // The object, `a`, `b`, `{"c"}` and `c`: five levels.
        assert!(!value_nested_deeper_than(&object, 5));
        assert!(value_nested_deeper_than(&object, 4));
        assert!(!value_nested_deeper_than(&serde_json::json!("x"), 0));
    }

    #[test]
    fn brackets_in_strings_and_siblings_do_not_count() {
        let quoted = format!(
            r#"{{"a":"{}\"{}","b":"\\"}}"#,
            "[".repeat(300),
            "{".repeat(300)
        );
        assert!(!nested_deeper_than(quoted.as_bytes(), MAX_DEPTH));
        let wide = format!(r#"{{"a":[{}]}}"#, vec!["{}"; 500].join(","));
        assert!(!nested_deeper_than(wide.as_bytes(), MAX_DEPTH));
        // Cut lines and stray closers neither panic nor count.
        for line in [&br#"{"a":"\"#[..], br#"{"a":"x\\"#, b"]]]]}}}", b""] {
            assert!(!nested_deeper_than(line, 1));
        }
        assert!(nested_deeper_than(b"[[", 1));
    }
}
