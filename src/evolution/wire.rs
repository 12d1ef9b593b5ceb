//! Request and response bodies of the prompt-evolution API (`evolution-api.md`), field for field.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Body of `POST /gepa/start_execution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartExecution {
    pub strategy: String,
    pub model: String,
    pub dataset_columns: Vec<String>,
    pub budget: u64,
    pub minibatch_size: u64,
    pub pareto_size: u64,
    /// The evaluator configuration as a JSON string (see [`Evaluator`]).
    pub evaluator: String,
    pub dataset: Vec<DatasetItem>,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_id: Option<String>,
}

/// One row of the dataset sent to the service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasetItem {
    pub input: BTreeMap<String, String>,
    pub expected_output: String,
}

/// The evaluator configuration, which travels as a JSON string inside [`StartExecution`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluator {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_credit: Option<bool>,
}

impl Evaluator {
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).expect("an evaluator is plain JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_execution_uses_the_service_field_names() {
        let body = StartExecution {
            strategy: "RPM".into(),
            model: "gpt-4o-mini".into(),
            dataset_columns: vec!["review".into()],
            budget: 30,
            minibatch_size: 1,
            pareto_size: 1,
            evaluator: Evaluator {
                model: "gpt-4o-mini".into(),
                metric: Some("exact_match".into()),
                threshold: None,
                partial_credit: Some(false),
            }
            .to_json_string(),
            dataset: vec![DatasetItem {
                input: BTreeMap::from([("review".into(), "ok".into())]),
                expected_output: "positive".into(),
            }],
            prompt: "{review}".into(),
            custom_id: None,
        };
        let json = serde_json::to_value(&body).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "budget",
                "dataset",
                "datasetColumns",
                "evaluator",
                "minibatchSize",
                "model",
                "paretoSize",
                "prompt",
                "strategy"
            ]
        );
        assert_eq!(json["dataset"][0]["expectedOutput"], "positive");
        assert_eq!(
            json["evaluator"],
            r#"{"model":"gpt-4o-mini","metric":"exact_match","partialCredit":false}"#
        );
    }
}
