//! The `judge` scorer: an inference model grades an answer against the expected output with the
//! experiment's rubric. This module builds the grading request and reads the grade; the caller
//! sends it (through its cache and rate limits).
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Score;
use gepa_lab_inference::wire::{JsonSchemaFormat, ResponseFormat};
use gepa_lab_inference::{ChatMessage, ChatRequest};

/// The judge of an experiment (`[replay.judge]`), as its plan records it: which model grades,
/// with which rubric.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JudgePlan {
    pub model: String,
    pub rubric: String,
}

/// The grading request: the rubric, the expected output and the answer, asking for a grade from 0
/// to 10 as structured output.
pub fn request(judge: &JudgePlan, answer: &str, expected: &str) -> ChatRequest {
    let system = "You grade answers. Compare the answer with the expected output using the rubric. \
                  Reply with JSON only: {\"score\": <integer 0-10>, \"reason\": \"<one sentence>\"}.";
    let user = format!(
        "Rubric:\n{}\n\nExpected output:\n{expected}\n\nAnswer to grade:\n{answer}",
        judge.rubric
    );
    let mut request = ChatRequest::new(
        &judge.model,
        vec![ChatMessage::system(system), ChatMessage::user(user)],
    );
    request.temperature = Some(0.0);
    request.max_tokens = Some(128);
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "grade".to_owned(),
            schema: json!({
                "type": "object",
                "properties": {
                    "score": {"type": "integer", "minimum": 0, "maximum": 10},
                    "reason": {"type": "string"}
                },
                "required": ["score", "reason"]
            }),
        },
    });
    request
}

/// Reads the judge's answer. An answer that is not a grade scores 0, and the feedback says why,
/// so a broken judge shows up in the report instead of passing silently.
pub fn parse(answer: &str) -> Result<Score, String> {
    let text = answer
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => match value.get("score").and_then(serde_json::Value::as_f64) {
            Some(score) if (0.0..=10.0).contains(&score) => Ok(Score {
                value: score / 10.0,
                feedback: value
                    .get("reason")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no reason given")
                    .to_owned(),
            }),
            _ => Err(format!(
                "the judge's grade is missing or outside 0-10: {text}"
            )),
        },
        Err(_) => Err(format!("the judge did not answer with JSON: {text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_grade_and_refuses_anything_else() {
        let grade = parse("```json\n{\"score\": 7, \"reason\": \"close\"}\n```").unwrap();
        assert_eq!(grade.value, 0.7);
        assert_eq!(grade.feedback, "close");
        // No grade is not a grade of 0: the caller records it as an error.
        assert!(
            parse("{\"score\": 11}")
                .unwrap_err()
                .contains("outside 0-10")
        );
        assert!(
            parse("seven")
                .unwrap_err()
                .contains("did not answer with JSON")
        );
    }

    #[test]
    fn the_request_carries_rubric_expected_and_answer() {
        let judge = JudgePlan {
            model: "qwen3.5:9b".into(),
            rubric: "Same meaning counts.".into(),
        };
        let request = request(&judge, "Paris", "paris");
        assert_eq!(request.model, "qwen3.5:9b");
        let text = request.messages[1].text();
        assert!(
            text.contains("Same meaning counts.")
                && text.contains("Paris")
                && text.contains("paris")
        );
        assert!(request.json_schema().is_some());
    }
}
