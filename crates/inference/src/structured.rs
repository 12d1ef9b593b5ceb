//! Structured output: checking that a `response_format` schema is a schema, and that an answer
//! conforms to it. Remote `$ref`s are never fetched (jsonschema without its network features).
use serde_json::Value;

/// `Ok` when `schema` compiles as a JSON Schema; otherwise why not.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| format!("not a valid JSON Schema: {e}"))
}

/// Models often wrap JSON in a Markdown fence; accept that, as a reader would. The text inside
/// the fence, trimmed; text without one, trimmed.
pub fn strip_fence(text: &str) -> &str {
    let text = text.trim();
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let body = rest.split_once('\n').map_or("", |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// Parses `content` (inside a Markdown fence or not, see [`strip_fence`]) as JSON and validates
/// it against `schema`. Returns the parsed value, or every reason the answer does not conform
/// (each with the JSON pointer of the offending value).
pub fn validate_answer(schema: &Value, content: &str) -> Result<Value, Vec<String>> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| vec![format!("the schema itself is invalid: {e}")])?;
    let value: Value = serde_json::from_str(strip_fence(content))
        .map_err(|e| vec![format!("the answer is not JSON: {e}")])?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["label", "confidence"],
               "properties": {"label": {"enum": ["pos", "neg"]},
                              "confidence": {"type": "number", "minimum": 0, "maximum": 1}}})
    }

    #[test]
    fn a_conforming_answer_is_returned_parsed() {
        let value = validate_answer(&schema(), r#" {"label":"pos","confidence":0.9} "#).unwrap();
        assert_eq!(value["label"], "pos");
    }

    #[test]
    fn every_violation_is_reported_with_its_location() {
        let errors = validate_answer(&schema(), r#"{"label":"meh","confidence":3}"#).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("/label")), "{errors:?}");
        assert!(
            errors.iter().any(|e| e.contains("/confidence")),
            "{errors:?}"
        );
    }

    #[test]
    fn an_answer_in_a_markdown_fence_conforms_as_the_json_inside() {
        for fenced in [
            "```json\n{\"label\":\"pos\",\"confidence\":0.9}\n```",
            "  ```\n{\"label\":\"pos\",\"confidence\":0.9}\n```\n",
        ] {
            let value = validate_answer(&schema(), fenced).unwrap();
            assert_eq!(value["label"], "pos", "{fenced}");
        }
        let errors = validate_answer(&schema(), "```json\n{\"label\":\"meh\"}\n```").unwrap_err();
        assert!(
            errors.iter().any(|e| e.contains("confidence")),
            "{errors:?}"
        );
    }

    #[test]
    fn text_that_is_not_json_does_not_conform() {
        let errors = validate_answer(&schema(), "positive").unwrap_err();
        assert!(errors[0].contains("not JSON"), "{errors:?}");
    }

    #[test]
    fn invalid_schemas_are_refused() {
        assert!(check_schema(&json!({"type": "no-such-type"})).is_err());
        assert!(check_schema(&schema()).is_ok());
    }
}
