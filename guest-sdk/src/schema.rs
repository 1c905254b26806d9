//! A small builder for the JSON Schemas of tool arguments.
//!
//! ```
//! use zotbox_guest::schema;
//!
//! let args = schema::object()
//!     .property("city", schema::string("the city"))
//!     .property("days", schema::integer("how many days ahead").with("minimum", 0))
//!     .property("units", schema::string("").enumeration(["metric", "imperial"]))
//!     .required(["city"]);
//! assert_eq!(
//!     serde_json::Value::from(args),
//!     serde_json::json!({
//!         "type": "object",
//!         "properties": {
//!             "city": {"type": "string", "description": "the city"},
//!             "days": {"type": "integer", "description": "how many days ahead", "minimum": 0},
//!             "units": {"type": "string", "enum": ["metric", "imperial"]}
//!         },
//!         "required": ["city"]
//!     })
//! );
//! ```
//!
//! Anything the builder lacks can be set with [`Schema::with`], or the whole
//! schema written as a [`serde_json::Value`], which converts into a
//! [`Schema`].
//!
//! With the default `derive-schema` feature, the schema can instead be
//! derived from the argument type itself ([`of`], or
//! [`Extension::typed_tool`](crate::Extension::typed_tool)), so it is
//! written once: field doc comments become descriptions, `Option` fields
//! are not required, serde's renames apply.
//!
//! ```
//! # #[cfg(feature = "derive-schema")] {
//! use serde::Deserialize;
//! use zotbox_guest::{JsonSchema, schema};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Forecast {
//!     /// the city
//!     city: String,
//!     /// how many days ahead
//!     days: Option<u32>,
//! }
//!
//! let derived = serde_json::Value::from(schema::of::<Forecast>());
//! assert_eq!(derived["type"], "object");
//! assert_eq!(derived["properties"]["city"]["description"], "the city");
//! assert_eq!(derived["required"], serde_json::json!(["city"]));
//! # }
//! ```

use serde_json::{Map, Value};

/// A JSON Schema, as a JSON value.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(Value);

/// `{"type":"object","properties":{}}`: an object, to which
/// [`Schema::property`] adds properties.
pub fn object() -> Schema {
    let mut schema = typed("object", "");
    schema.0["properties"] = Value::Object(Map::new());
    schema
}

/// `{"type":"string"}` with a description (left out when empty).
pub fn string(description: &str) -> Schema {
    typed("string", description)
}

/// `{"type":"integer"}` with a description (left out when empty).
pub fn integer(description: &str) -> Schema {
    typed("integer", description)
}

/// `{"type":"number"}` with a description (left out when empty).
pub fn number(description: &str) -> Schema {
    typed("number", description)
}

/// `{"type":"boolean"}` with a description (left out when empty).
pub fn boolean(description: &str) -> Schema {
    typed("boolean", description)
}

/// `{"type":"array","items":…}` with a description (left out when empty).
pub fn array(items: impl Into<Schema>, description: &str) -> Schema {
    typed("array", description).with("items", items.into())
}

fn typed(kind: &str, description: &str) -> Schema {
    let mut map = Map::new();
    map.insert("type".to_owned(), Value::from(kind));
    if !description.is_empty() {
        map.insert("description".to_owned(), Value::from(description));
    }
    Schema(Value::Object(map))
}

impl Schema {
    /// Adds (or replaces) a property of an object schema.
    #[must_use]
    pub fn property(mut self, name: impl Into<String>, schema: impl Into<Schema>) -> Self {
        let (name, schema) = (name.into(), schema.into().0);
        edit_object(&mut self.0, |object| {
            let properties = object.entry("properties").or_insert(Value::Null);
            edit_object(properties, |properties| {
                properties.insert(name, schema);
            });
        });
        self
    }

    /// Marks properties as required, after those already required.
    #[must_use]
    pub fn required<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        let names = names.into_iter().map(|name| Value::String(name.into()));
        edit_object(&mut self.0, |object| {
            let required = object.entry("required").or_insert(Value::Null);
            if !required.is_array() {
                *required = Value::Array(Vec::new());
            }
            if let Value::Array(list) = required {
                for name in names {
                    if !list.contains(&name) {
                        list.push(name);
                    }
                }
            }
        });
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn description(self, description: impl Into<String>) -> Self {
        self.with("description", description.into())
    }

    /// Restricts the value to one of `values` (JSON Schema `enum`).
    #[must_use]
    pub fn enumeration<V: Into<Value>>(self, values: impl IntoIterator<Item = V>) -> Self {
        let values: Vec<Value> = values.into_iter().map(Into::into).collect();
        self.with("enum", values)
    }

    /// Sets any other keyword, e.g. `minimum` or `default`.
    #[must_use]
    pub fn with(mut self, keyword: impl Into<String>, value: impl Into<Value>) -> Self {
        let (keyword, value) = (keyword.into(), value.into());
        edit_object(&mut self.0, |object| {
            object.insert(keyword, value);
        });
        self
    }

    /// The schema as a JSON value.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The schema as a JSON value.
    pub fn into_value(self) -> Value {
        self.0
    }
}

/// The schema of the arguments type `T`, derived from its definition
/// (`#[derive(JsonSchema)]`), without the keys a tool schema does not use
/// (`$schema`, `title`).
#[cfg(feature = "derive-schema")]
pub fn of<T: schemars::JsonSchema>() -> Schema {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    schema.remove("$schema");
    schema.remove("title");
    let mut value = schema.to_value();
    // Providers want `properties` on every object, even an empty one.
    if value["type"] == "object" && value.get("properties").is_none() {
        value["properties"] = Value::Object(Map::new());
    }
    Schema(value)
}

// A schema built from an arbitrary value may not be an object; keywords make
// it one rather than being lost.
fn edit_object(value: &mut Value, edit: impl FnOnce(&mut Map<String, Value>)) {
    if let Value::Object(object) = value {
        edit(object);
        return;
    }
    let mut object = Map::new();
    edit(&mut object);
    *value = Value::Object(object);
}

impl From<Value> for Schema {
    fn from(value: Value) -> Self {
        Self(value)
    }
}

impl From<Schema> for Value {
    fn from(schema: Schema) -> Self {
        schema.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn builders_produce_the_expected_schemas() {
        let cases = [
            // An object starts with empty properties, as providers require.
            (object(), json!({"type":"object","properties":{}})),
            // An empty description is left out.
            (string(""), json!({"type":"string"})),
            (
                number("n").description("m"),
                json!({"type":"number","description":"m"}),
            ),
            (boolean("b"), json!({"type":"boolean","description":"b"})),
            (
                array(integer(""), "ids"),
                json!({"type":"array","description":"ids","items":{"type":"integer"}}),
            ),
            // `required` appends without duplicates.
            (
                object()
                    .property("a", string(""))
                    .required(["a"])
                    .required(["a", "b"]),
                json!({"type":"object","properties":{"a":{"type":"string"}},"required":["a","b"]}),
            ),
            // A property of the same name is replaced.
            (
                object()
                    .property("a", string(""))
                    .property("a", integer("")),
                json!({"type":"object","properties":{"a":{"type":"integer"}}}),
            ),
            // Keywords on a non-object value turn it into an object.
            (
                Schema::from(Value::Null).property("a", json!({"type":"string"})),
                json!({"properties":{"a":{"type":"string"}}}),
            ),
        ];
        for (schema, expected) in cases {
            assert_eq!(schema.into_value(), expected);
        }
    }
}
