//! JSON Schema to GBNF, the grammar format llama.cpp's sampler enforces: the embedded model's
//! structured output.
//!
//! The grammar constrains what the model may generate; the answer is still validated against
//! the schema afterwards (`validate_answer`), so a keyword the grammar does not express (a
//! `pattern`, a `maxItems`) only loosens the constraint, never lets a wrong answer through. The
//! grammar never refuses an answer the schema accepts for the keywords it does express, except
//! that an object's keys come in the schema's order and keys it does not declare are not
//! generated when it declares any.
//!
//! Expressed: `type` (one or a list), `enum`, `const`, `properties` with `required`, `items`,
//! `minItems` of 0 or more, `anyOf` and `oneOf` (as alternatives), and the empty schema (any
//! JSON value). A schema with `$ref` or `allOf` is refused with [`GrammarError`]; the caller then
//! generates unconstrained and validates the same way.
//!
//! This was llama.cpp's `common` library's job; that library is about 65 C++ files and an HTTP
//! library, compiled on every cold build for this one function.
use serde_json::{Map, Value};

/// A schema this converter cannot express.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JSON Schema at {path}: {reason}")]
pub struct GrammarError {
    /// Where in the schema, as a JSON pointer (`""` is the root).
    pub path: String,
    pub reason: String,
}

/// The primitives every grammar may use; a rule is only written when it is referenced.
const PRIMITIVES: [(&str, &str); 9] = [
    ("space", r#"| " " | "\n" [ \t]{0,20}"#),
    ("boolean", r#"("true" | "false") space"#),
    ("null", r#""null" space"#),
    ("integral-part", r#"[0] | [1-9] [0-9]{0,15}"#),
    ("decimal-part", r#"[0-9]{1,16}"#),
    (
        "number",
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space"#,
    ),
    ("integer", r#"("-"? integral-part) space"#),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
    ),
    ("string", r#""\"" char* "\"" space"#),
];

/// Any JSON value, for the empty schema and untyped items.
const ANY_VALUE: [(&str, &str); 3] = [
    ("value", "object | array | string | number | boolean | null"),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? "]" space"#,
    ),
];

/// The GBNF grammar (root rule `root`) of the JSON values `schema` describes.
pub fn json_schema_to_gbnf(schema: &Value) -> Result<String, GrammarError> {
    let mut builder = Builder::default();
    let root = builder.visit(schema, "")?;
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &builder.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    let uses_any = builder.uses_any;
    for (name, body) in ANY_VALUE.iter().filter(|_| uses_any) {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    for (name, body) in PRIMITIVES {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    Ok(out)
}

#[derive(Default)]
struct Builder {
    /// Rules made for parts of the schema, in the order they were made.
    rules: Vec<(String, String)>,
    /// Whether any part accepts any JSON value (`value`, `object`, `array`).
    uses_any: bool,
}

impl Builder {
    /// A GBNF expression for `schema`, at JSON pointer `path`.
    fn visit(&mut self, schema: &Value, path: &str) -> Result<String, GrammarError> {
        let object = match schema {
            Value::Bool(true) => return Ok(self.any()),
            Value::Object(object) => object,
            other => {
                return Err(refused(
                    path,
                    format!("expected a schema object, saw {other}"),
                ));
            }
        };
        for keyword in ["$ref", "allOf"] {
            if object.contains_key(keyword) {
                return Err(refused(path, format!("`{keyword}` is not supported")));
            }
        }
        if let Some(value) = object.get("const") {
            return Ok(literal_value(value));
        }
        if let Some(values) = object.get("enum") {
            let Value::Array(values) = values else {
                return Err(refused(path, "`enum` is not a list".into()));
            };
            if values.is_empty() {
                return Err(refused(path, "`enum` is empty".into()));
            }
            let choices: Vec<String> = values.iter().map(literal_value).collect();
            return Ok(self.rule(format!("({})", choices.join(" | "))));
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(options) = object.get(keyword) {
                let Some(options) = options.as_array().filter(|o| !o.is_empty()) else {
                    return Err(refused(
                        path,
                        format!("`{keyword}` is not a non-empty list"),
                    ));
                };
                let choices = options
                    .iter()
                    .enumerate()
                    .map(|(i, option)| self.visit(option, &format!("{path}/{keyword}/{i}")))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(self.rule(choices.join(" | ")));
            }
        }
        match object.get("type") {
            None if object.contains_key("properties") => self.object(object, path),
            None if object.contains_key("items") => self.array(object, path),
            None => Ok(self.any()),
            Some(Value::String(kind)) => self.typed(kind, object, path),
            Some(Value::Array(kinds)) if !kinds.is_empty() => {
                let choices = kinds
                    .iter()
                    .map(|kind| match kind {
                        Value::String(kind) => self.typed(kind, object, path),
                        other => Err(refused(path, format!("a `type` of {other}"))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(self.rule(choices.join(" | ")))
            }
            Some(other) => Err(refused(path, format!("a `type` of {other}"))),
        }
    }

    fn typed(
        &mut self,
        kind: &str,
        object: &Map<String, Value>,
        path: &str,
    ) -> Result<String, GrammarError> {
        match kind {
            "object" => self.object(object, path),
            "array" => self.array(object, path),
            "string" | "number" | "integer" | "boolean" | "null" => Ok(kind.to_owned()),
            other => Err(refused(path, format!("unknown `type` {other:?}"))),
        }
    }

    /// An object: the declared properties in the schema's order, the required ones always.
    fn object(&mut self, object: &Map<String, Value>, path: &str) -> Result<String, GrammarError> {
        let Some(properties) = object.get("properties").and_then(Value::as_object) else {
            self.uses_any = true;
            return Ok("object".into());
        };
        let required: Vec<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut fixed = Vec::new();
        let mut optional = Vec::new();
        for (key, schema) in properties {
            let value = self.visit(schema, &format!("{path}/properties/{key}"))?;
            let pair = format!(
                r#"{} space ":" space {value}"#,
                gbnf_literal(&Value::String(key.clone()).to_string())
            );
            if required.contains(&key.as_str()) {
                fixed.push(pair);
            } else {
                optional.push(self.rule(pair));
            }
        }
        let rest = self.optional_pairs(&optional);
        let body = match (fixed.is_empty(), rest) {
            (true, None) => String::new(),
            (true, Some(rest)) => format!("({rest})?"),
            (false, None) => fixed.join(r#" "," space "#),
            (false, Some(rest)) => {
                format!(r#"{} ("," space ({rest}))?"#, fixed.join(r#" "," space "#))
            }
        };
        Ok(self.rule(format!(r#""{{" space {body} "}}" space"#)))
    }

    /// Optional pairs in order, any subset of them, at least one: a rule per starting point,
    /// `pair_i ("," space rest_{i+1})? | rest_{i+1}`.
    fn optional_pairs(&mut self, pairs: &[String]) -> Option<String> {
        let mut rest: Option<String> = None;
        for pair in pairs.iter().rev() {
            let body = match &rest {
                None => pair.clone(),
                Some(rest) => format!(r#"{pair} ("," space {rest})? | {rest}"#),
            };
            rest = Some(self.rule(body));
        }
        rest
    }

    /// An array of `items` (any value when absent), at least `minItems` of them.
    fn array(&mut self, object: &Map<String, Value>, path: &str) -> Result<String, GrammarError> {
        let item = match object.get("items") {
            None => self.any(),
            Some(items) => self.visit(items, &format!("{path}/items"))?,
        };
        let min_items = object.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let more = format!(r#"("," space {item})*"#);
        let body = if min_items == 0 {
            format!(r#""[" space ({item} {more})? "]" space"#)
        } else {
            let first: Vec<String> = (0..min_items.min(64)).map(|_| item.clone()).collect();
            format!(
                r#""[" space {} {more} "]" space"#,
                first.join(r#" "," space "#)
            )
        };
        Ok(self.rule(body))
    }

    /// The rule for any JSON value.
    fn any(&mut self) -> String {
        self.uses_any = true;
        "value".into()
    }

    /// A new rule with `body`; its name.
    fn rule(&mut self, body: String) -> String {
        let name = format!("r{}", self.rules.len() + 1);
        self.rules.push((name.clone(), body));
        name
    }
}

fn refused(path: &str, reason: String) -> GrammarError {
    GrammarError {
        path: if path.is_empty() {
            "/".into()
        } else {
            path.into()
        },
        reason,
    }
}

/// The exact JSON text of `value` followed by optional space.
fn literal_value(value: &Value) -> String {
    format!("{} space", gbnf_literal(&value.to_string()))
}

/// `text` as a GBNF string literal.
fn gbnf_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_lists_its_required_keys_in_order_and_the_rest_as_optional() {
        let grammar = json_schema_to_gbnf(&json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "emails": {"type": "array", "items": {"type": "string"}},
                "age": {"type": "integer"}
            },
            "required": ["name", "emails"]
        }))
        .unwrap();
        assert!(grammar.starts_with("root ::= r"), "{grammar}");
        assert!(
            grammar.contains(r#""\"name\"" space ":" space string"#),
            "{grammar}"
        );
        assert!(grammar.contains(r#""[" space (string ("," space string)*)? "]" space"#));
        // `age` is optional: one rule for it, reached through `("," space (...))?`.
        assert!(
            grammar.contains(r#""\"age\"" space ":" space integer"#),
            "{grammar}"
        );
        assert!(grammar.contains(r#"("," space (r"#), "{grammar}");
        assert!(
            !grammar.contains("value ::="),
            "no rule for any value: {grammar}"
        );
    }

    #[test]
    fn enums_consts_and_type_lists_become_alternatives() {
        let grammar = json_schema_to_gbnf(&json!({
            "type": "object",
            "properties": {
                "label": {"enum": ["spam", "ham \"quoted\""]},
                "version": {"const": 2},
                "note": {"type": ["string", "null"]}
            },
            "required": ["label", "version", "note"]
        }))
        .unwrap();
        assert!(
            grammar.contains(r#"("\"spam\"" space | "\"ham \\\"quoted\\\"\"" space)"#),
            "{grammar}"
        );
        assert!(grammar.contains(r#""2" space"#), "{grammar}");
        assert!(grammar.contains("string | null"), "{grammar}");
    }

    #[test]
    fn the_empty_schema_and_untyped_items_take_any_value() {
        let grammar = json_schema_to_gbnf(&json!({})).unwrap();
        assert!(grammar.starts_with("root ::= value\n"), "{grammar}");
        assert!(grammar.contains("value ::= object | array"));
        let grammar = json_schema_to_gbnf(&json!({"type": "array", "minItems": 2})).unwrap();
        assert!(
            grammar.contains(r#""[" space value "," space value ("," space value)* "]" space"#),
            "{grammar}"
        );
    }

    #[test]
    fn an_object_without_required_keys_may_hold_any_ordered_subset() {
        let grammar = json_schema_to_gbnf(&json!({
            "properties": {"a": {"type": "string"}, "b": {"type": "number"}}
        }))
        .unwrap();
        // rest(b) = pair_b; rest(a) = pair_a ("," rest(b))? | rest(b); the object holds it or not.
        assert!(grammar.contains(r#""{" space (r"#), "{grammar}");
        assert!(grammar.contains(r#"("," space r"#), "{grammar}");
    }

    #[test]
    fn refs_and_all_of_are_refused_with_their_place() {
        let err = json_schema_to_gbnf(&json!({
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/x"}}
        }))
        .unwrap_err();
        assert_eq!(err.path, "/properties/x");
        assert!(err.reason.contains("$ref"), "{err}");
        let err = json_schema_to_gbnf(&json!({"allOf": []})).unwrap_err();
        assert_eq!(err.path, "/");
        let err = json_schema_to_gbnf(&json!({"type": "tuple"})).unwrap_err();
        assert!(
            err.to_string().contains("unknown `type` \"tuple\""),
            "{err}"
        );
    }
}
