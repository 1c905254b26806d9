//! How zot's own tools read their arguments, so that a guard sees what runs.
//!
//! zot decodes the arguments of its built-in tools with Go's
//! `encoding/json`: a key matches a field whatever its case (`COMMAND`,
//! `Command`, Unicode's simple folding: `ſ` is an `s`, the Kelvin sign a
//! `k`), and of several keys that match, the last one wins. A guard that
//! looked `command` up as written saw `ls` in
//! `{"command":"ls","COMMAND":"rm -rf /"}` while bash ran `rm -rf /`, and
//! saw nothing at all in `{"Command":"rm -rf /"}`.
//!
//! Rules:
//!
//! 1. Two keys are the same key when they are equal character by character
//!    after folding ([`same_key`]); this admits a few pairs Go does not
//!    (`ı` and `i`), never fewer, so a check reads at least what runs.
//! 2. zotbox's deny rules check every argument that is the same key as the
//!    one they read (`command`, `path`…), for every tool: a match on any
//!    blocks.
//! 3. A guard is handed the arguments of zot's built-in tools
//!    ([`ZOT_TOOLS`]) as Go reads them ([`as_zot_reads`]): keys that are the
//!    same key become one, under its lowercase spelling, with the last one's
//!    value that is not `null` (rule 4); a lone key in another case keeps
//!    its spelling and has the lowercase one beside it. Other tools are
//!    left as zot sent them: an extension's tool may read its arguments by
//!    their exact case, and a guard must not be shown a value that tool
//!    never reads. zotbox does this for the guards it hosts, and the guest
//!    SDK for a guard built natively, which zot hands the arguments as the
//!    model wrote them.
//! 4. "The last key" is the last as written. A JSON parser that keeps a
//!    repeated key where it first stood (serde_json's ordered map, Python's
//!    `dict`, JavaScript's objects) puts `COMMAND` after `command` in
//!    `{"command":"ls","COMMAND":"ls","command":"rm -rf /"}`, where Go
//!    reads `rm -rf /`. Arguments are read with [`InReadOrder`] (the
//!    `tool_args` of the protocol's frames are), which moves a repeated key
//!    to where it was last written. A `null` is no writing: Go leaves a
//!    string field as it was, so `{"command":"rm -rf /","COMMAND":null}`
//!    runs `rm -rf /`, and the last value that is not `null` wins.

use std::collections::HashMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// zot's built-in tools: a tool an extension registers under one of these
/// names is shadowed by zot's own. The five of the protocol reference and
/// the two later zot releases added (`glob`, and `powershell` on Windows),
/// whose arguments Go reads the same way.
pub const ZOT_TOOLS: &[&str] = &[
    "bash",
    "read",
    "write",
    "edit",
    "skill",
    "glob",
    "powershell",
];

/// Whether `a` and `b` name the same field to Go's `encoding/json`.
pub fn same_key(a: &str, b: &str) -> bool {
    a.chars().map(fold).eq(b.chars().map(fold))
}

/// `key` folded: each character as the lowercase of its uppercase, when
/// both are single characters (`ſ` → `S` → `s`, `K` → `k`). Two keys are
/// [`same_key`] when their folded spellings are equal.
pub fn folded(key: &str) -> String {
    key.chars().map(fold).collect()
}

fn fold(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut upper = c.to_uppercase();
    let (Some(upper), None) = (upper.next(), upper.next()) else {
        return c;
    };
    let mut lower = upper.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(lower), None) => lower,
        _ => upper,
    }
}

/// Every value of `args` under a key that is the same key as `name`, in
/// order (the last is the one Go reads).
pub fn values_read_as<'a>(
    args: &'a Map<String, Value>,
    name: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    args.iter()
        .filter(move |(key, _)| same_key(key, name))
        .map(|(_, value)| value)
}

/// The arguments of a call of zot's built-in `tool` as its guards must see
/// them (rule 3); `None` when the tool is not zot's or nothing changes.
pub fn as_zot_reads(tool: &str, args: &Value) -> Option<Value> {
    if !ZOT_TOOLS.contains(&tool) {
        return None;
    }
    let args = args.as_object()?;
    // Nothing to do when every key is already its own folded spelling (and
    // so no two fold alike: a map's keys differ): the usual call, checked
    // in one pass without allocating. The model writes the arguments, so
    // nothing here may cost more than a pass per key.
    if args.keys().all(|key| key.chars().all(|c| fold(c) == c)) {
        return None;
    }
    // Each folded spelling: how many keys have it, and the last one's value
    // that is not `null`.
    let spellings: Vec<String> = args.keys().map(|key| folded(key)).collect();
    let mut groups: HashMap<&str, (usize, &Value)> = HashMap::new();
    for (spelling, value) in spellings.iter().zip(args.values()) {
        let group = groups.entry(spelling).or_insert((0, value));
        // A later `null` leaves Go's field as it was (rule 4).
        let value = if value.is_null() { group.1 } else { value };
        *group = (group.0 + 1, value);
    }
    // Every value is copied at most twice, whatever the keys: the model
    // could write 128 spellings of `command`, and a copy of the last value
    // for each would be 128 of the frame. A group goes in where its first
    // key stood; its later keys find it gone.
    let mut seen = Map::new();
    for (key, spelling) in args.keys().zip(&spellings) {
        match groups.remove(spelling.as_str()) {
            Some((1, only)) => {
                seen.insert(key.clone(), only.clone());
                if key != spelling {
                    seen.insert(spelling.clone(), only.clone());
                }
            }
            Some((_, last)) => {
                seen.insert(spelling.clone(), last.clone());
            }
            None => {}
        }
    }
    Some(Value::Object(seen))
}

/// A JSON value whose objects hold each key where it was last written, with
/// the value written there (rule 4): iterating an object meets its keys in
/// the order Go's decoder settles them.
#[derive(Debug, Clone, PartialEq)]
pub struct InReadOrder(pub Value);

impl<'de> Deserialize<'de> for InReadOrder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InReadOrderVisitor).map(Self)
    }
}

/// For `#[serde(deserialize_with)]` on an optional field of arguments.
pub fn deserialize_in_read_order<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Value>, D::Error> {
    Option::<InReadOrder>::deserialize(deserializer).map(|value| value.map(|value| value.0))
}

struct InReadOrderVisitor;

impl<'de> Visitor<'de> for InReadOrderVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity, so this is always a number.
        Ok(Value::from(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        InReadOrder::deserialize(deserializer).map(|value| value.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(InReadOrder(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut written = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        while let Some(entry) = map.next_entry::<String, InReadOrder>()? {
            written.push(entry);
        }
        // Each key's last writing, found from the end: one pass. (Moving a
        // repeated key with the map's `shift_remove` costs a pass over the
        // keys after it, each time: a key repeated through a long object
        // would cost its length squared.)
        // A key's last writing that is not `null`, else its last: Go leaves
        // a string field as it was for a `null`, so in
        // `{"command":"rm -rf /","command":null}` bash runs `rm -rf /`.
        let mut kept: std::collections::HashMap<&str, (usize, bool)> =
            std::collections::HashMap::with_capacity(written.len());
        for (at, (key, InReadOrder(value))) in written.iter().enumerate().rev() {
            let null = value.is_null();
            match kept.entry(key.as_str()) {
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert((at, null));
                }
                std::collections::hash_map::Entry::Occupied(mut slot) => {
                    if slot.get().1 && !null {
                        slot.insert((at, false));
                    }
                }
            }
        }
        let mut is_last = vec![false; written.len()];
        for (at, _) in kept.into_values() {
            is_last[at] = true;
        }
        Ok(Value::Object(
            written
                .into_iter()
                .zip(is_last)
                .filter_map(|((key, InReadOrder(value)), last)| last.then_some((key, value)))
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_later_null_leaves_the_value_go_runs() {
        // Attack: Go ignores a `null` for a string field; reading the last
        // key as `null` hid the command from the deny rules and the guards.
        for line in [
            r#"{"command":"rm -rf /","command":null}"#,
            r#"{"command":"rm -rf /","COMMAND":null}"#,
            r#"{"command":null,"Command":"rm -rf /","command":null}"#,
        ] {
            let Ok(InReadOrder(args)) = serde_json::from_str(line) else {
                panic!("parses");
            };
            let shown = as_zot_reads("bash", &args).unwrap_or(args);
            assert_eq!(shown["command"], "rm -rf /", "{line}");
        }
        let Ok(InReadOrder(args)) = serde_json::from_str(r#"{"command":null,"command":null}"#)
        else {
            panic!("parses");
        };
        assert_eq!(args, json!({"command": null}));
    }

    #[test]
    fn a_repeated_key_stands_where_it_was_last_written() {
        // Attack: serde's ordered map keeps the first `command` first, so
        // `COMMAND` looked like the last key and a guard was shown `ls`.
        let line = r#"{"command":"ls","COMMAND":"ls","command":"rm -rf /"}"#;
        let Ok(InReadOrder(args)) = serde_json::from_str(line) else {
            panic!("parses");
        };
        assert_eq!(
            as_zot_reads("bash", &args),
            Some(json!({"command": "rm -rf /"}))
        );
        let keys: Vec<&String> = args.as_object().into_iter().flat_map(Map::keys).collect();
        assert_eq!(keys, ["COMMAND", "command"]);
        // At any depth, and every other value as serde reads it.
        let line = r#"{"a":[{"x":1,"y":2,"x":3}],"b":null,"c":-1.5,"d":true,"e":18446744073709551615,"a":{"k":"v"}}"#;
        let Ok(InReadOrder(value)) = serde_json::from_str(line) else {
            panic!("parses");
        };
        assert_eq!(
            serde_json::to_string(&value).ok().as_deref(),
            Some(r#"{"b":null,"c":-1.5,"d":true,"e":18446744073709551615,"a":{"k":"v"}}"#)
        );
        let Ok(InReadOrder(value)) = serde_json::from_str(r#"[{"x":1,"y":2,"x":3}]"#) else {
            panic!("parses");
        };
        assert_eq!(
            serde_json::to_string(&value).ok().as_deref(),
            Some(r#"[{"y":2,"x":3}]"#)
        );
        // serde_json's depth limit still holds.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(serde_json::from_str::<InReadOrder>(&deep).is_err());
    }

    #[test]
    fn keys_are_the_same_as_go_folds_them() {
        for (a, b) in [
            ("command", "COMMAND"),
            ("command", "Command"),
            ("path", "PaTh"),
            // Unicode's simple folding: the long s and the Kelvin sign.
            ("s", "\u{17F}"),
            ("k", "\u{212A}"),
            ("filePath", "FILEPATH"),
        ] {
            assert!(same_key(a, b), "{a} ~ {b}");
        }
        for (a, b) in [
            ("command", "commands"),
            ("file_path", "filePath"),
            ("path", "pαth"),
        ] {
            assert!(!same_key(a, b), "{a} !~ {b}");
        }
    }

    #[test]
    fn a_guard_sees_what_zots_tools_read() {
        let cases = [
            // The last key Go matches wins, and `command` holds it.
            (
                json!({"command": "ls", "COMMAND": "rm -rf /"}),
                json!({"command": "rm -rf /"}),
            ),
            (
                json!({"COMMAND": "rm -rf /", "x": 1, "Command": "ls"}),
                json!({"command": "ls", "x": 1}),
            ),
            // A key in another case only: the lowercase spelling is added.
            (
                json!({"Command": "rm -rf /"}),
                json!({"Command": "rm -rf /", "command": "rm -rf /"}),
            ),
            (
                json!({"\u{17F}ource": "x", "PATH": "/etc/passwd"}),
                json!({"\u{17F}ource": "x", "PATH": "/etc/passwd", "source": "x", "path": "/etc/passwd"}),
            ),
        ];
        for (sent, seen) in cases {
            assert_eq!(as_zot_reads("bash", &sent), Some(seen), "{sent}");
        }
        // Nothing to change: the frame goes on as zot wrote it.
        assert_eq!(as_zot_reads("bash", &json!({"command": "ls"})), None);
        // An extension's tool may read keys by their case: left alone.
        assert_eq!(
            as_zot_reads("deploy", &json!({"command": "ls", "COMMAND": "rm"})),
            None
        );
        // Newer zot's `glob` and `powershell` read theirs as Go does too.
        assert_eq!(
            as_zot_reads("glob", &json!({"PATH": "../../secrets"})),
            Some(json!({"PATH": "../../secrets", "path": "../../secrets"}))
        );
        assert_eq!(
            as_zot_reads("powershell", &json!({"command": "ls", "Command": "rm"})),
            Some(json!({"command": "rm"}))
        );
    }

    #[test]
    fn many_spellings_of_one_key_are_not_a_copy_each() {
        // Attack: the 128 spellings of `command`, the last a megabyte: a
        // copy of it under each spelling would be 128 MiB.
        let mut args = Map::new();
        for bits in 0u32..128 {
            let spelling: String = "command"
                .chars()
                .enumerate()
                .map(|(at, c)| {
                    if bits & (1 << at) == 0 {
                        c
                    } else {
                        c.to_ascii_uppercase()
                    }
                })
                .collect();
            args.insert(spelling, json!("ls"));
        }
        args.insert("COMMAND".to_owned(), json!("x".repeat(1 << 20)));
        let sent = Value::Object(args);
        let Some(seen) = as_zot_reads("bash", &sent) else {
            panic!("rewritten");
        };
        assert_eq!(seen, json!({"command": "x".repeat(1 << 20)}));
    }

    #[test]
    fn every_value_of_the_same_key_is_read_in_order() {
        let args = json!({"command": "ls", "x": 1, "Command": "rm", "COMMAND": "dd"});
        let Some(args) = args.as_object() else {
            panic!("an object");
        };
        let values: Vec<&Value> = values_read_as(args, "command").collect();
        assert_eq!(values, [&json!("ls"), &json!("rm"), &json!("dd")]);
    }
}
