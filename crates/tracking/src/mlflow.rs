//! A client of the MLflow tracking server's REST API: experiments, runs, batches of metrics,
//! parameters and tags, run status, and artifacts through the server's artifact proxy
//! (`mlflow server` serves artifacts by default since MLflow 2.0). Only what gepa-lab logs.
//!
//! Authentication as MLflow's own clients read it from the environment: `MLFLOW_TRACKING_TOKEN`
//! (a bearer token) or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD` (basic).
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use thiserror::Error;

use gepa_lab_http::Secret;

/// Longest a request to the tracking server may take: tracking never holds a run up for long.
const TIMEOUT: Duration = Duration::from_secs(30);
/// MLflow's limits per `runs/log-batch` request.
const BATCH_METRICS: usize = 1000;
const BATCH_PARAMS: usize = 100;
const BATCH_TAGS: usize = 100;
/// MLflow's longest parameter value (MLflow 2 and 3 accept 6,000 characters).
pub const PARAM_VALUE_CHARS: usize = 6000;
/// MLflow's longest tag value kept; longer ones are cut.
const TAG_VALUE_CHARS: usize = 5000;

#[derive(Debug, Error)]
pub enum TrackingError {
    #[error("MLflow at {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("MLflow at {url} refused {what}: {status} {code} {message}")]
    Refused {
        url: String,
        what: String,
        status: u16,
        code: String,
        message: String,
    },
    #[error(
        "MLflow run {run_id} keeps its artifacts at {uri}, which the tracking server does not \
         serve (start it with artifact serving, the default since MLflow 2.0); no artifact was \
         logged"
    )]
    ArtifactStore { run_id: String, uri: String },
}

/// The run's status, as MLflow names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    Running,
    Finished,
    Failed,
    Killed,
}

/// A metric value at a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    pub key: String,
    pub value: f64,
    pub timestamp: i64,
    pub step: i64,
}

/// A run as the server describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    #[serde(default)]
    pub artifact_uri: String,
    #[serde(default)]
    pub status: Option<RunStatus>,
}

enum Auth {
    Bearer(Secret),
    Basic { user: String, password: Secret },
}

pub struct Mlflow {
    base: String,
    client: reqwest::Client,
    auth: Option<Auth>,
}

/// The body of an MLflow error answer.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error_code: String,
    #[serde(default)]
    message: String,
}

/// `text` cut to at most `chars` characters.
pub fn cut(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => text[..end].to_owned(),
        None => text.to_owned(),
    }
}

impl Mlflow {
    /// A client of the tracking server at `url` (`http://host:port`, with or without a path).
    pub fn new(url: &str) -> Self {
        let auth = match (
            gepa_lab_env::var("MLFLOW_TRACKING_TOKEN"),
            gepa_lab_env::var("MLFLOW_TRACKING_USERNAME"),
            gepa_lab_env::var("MLFLOW_TRACKING_PASSWORD"),
        ) {
            (Some(token), _, _) => Some(Auth::Bearer(Secret::new(token))),
            (None, Some(user), Some(password)) => Some(Auth::Basic {
                user,
                password: Secret::new(password),
            }),
            _ => None,
        };
        Self {
            base: url.trim_end_matches('/').to_owned(),
            client: gepa_lab_http::client_builder()
                .timeout(TIMEOUT)
                .build()
                .unwrap_or_default(),
            auth,
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.client.request(method, format!("{}{path}", self.base));
        match &self.auth {
            Some(Auth::Bearer(token)) => request.bearer_auth(token.expose()),
            Some(Auth::Basic { user, password }) => {
                request.basic_auth(user, Some(password.expose()))
            }
            None => request,
        }
    }

    /// Sends `request` and reads its JSON answer; `what` names it in errors.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        what: &str,
    ) -> Result<Value, TrackingError> {
        let response = request.send().await.map_err(|err| self.unreachable(&err))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|err| self.unreachable(&err))?;
        if status.is_success() {
            return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
        }
        let body: Option<ErrorBody> = serde_json::from_str(&text).ok();
        Err(TrackingError::Refused {
            url: self.base.clone(),
            what: what.to_owned(),
            status: status.as_u16(),
            code: body
                .as_ref()
                .map_or_else(String::new, |b| b.error_code.clone()),
            message: body.map_or_else(|| cut(&text, 300), |b| b.message),
        })
    }

    fn unreachable(&self, err: &reqwest::Error) -> TrackingError {
        // reqwest's own text says what failed (connect, timeout), never a header.
        let mut message = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(inner) = source {
            message = format!("{message}: {inner}");
            source = inner.source();
        }
        TrackingError::Unreachable {
            url: self.base.clone(),
            message,
        }
    }

    async fn post(&self, path: &str, body: Value, what: &str) -> Result<Value, TrackingError> {
        let request = self
            .request(reqwest::Method::POST, &format!("/api/2.0/mlflow/{path}"))
            .json(&body);
        self.send(request, what).await
    }

    async fn get(
        &self,
        path: &str,
        query: &[(&str, &str)],
        what: &str,
    ) -> Result<Value, TrackingError> {
        let query = serde_urlencoded::to_string(query).unwrap_or_default();
        let request = self.request(
            reqwest::Method::GET,
            &format!("/api/2.0/mlflow/{path}?{query}"),
        );
        self.send(request, what).await
    }

    /// The id of the experiment named `name`, created when there is none.
    pub async fn experiment_id(&self, name: &str) -> Result<String, TrackingError> {
        let found = self
            .get(
                "experiments/get-by-name",
                &[("experiment_name", name)],
                "the experiment lookup",
            )
            .await;
        match found {
            Ok(answer) => return Ok(id_in(&answer["experiment"]["experiment_id"])),
            Err(TrackingError::Refused { code, .. }) if code == "RESOURCE_DOES_NOT_EXIST" => {}
            Err(err) => return Err(err),
        }
        match self
            .post(
                "experiments/create",
                json!({ "name": name }),
                "creating the experiment",
            )
            .await
        {
            Ok(answer) => Ok(id_in(&answer["experiment_id"])),
            // Created by another client in between.
            Err(TrackingError::Refused { code, .. }) if code == "RESOURCE_ALREADY_EXISTS" => {
                let answer = self
                    .get(
                        "experiments/get-by-name",
                        &[("experiment_name", name)],
                        "the experiment lookup",
                    )
                    .await?;
                Ok(id_in(&answer["experiment"]["experiment_id"]))
            }
            Err(err) => Err(err),
        }
    }

    /// A new run in the experiment, with its name and tags.
    pub async fn create_run(
        &self,
        experiment_id: &str,
        name: &str,
        start_ms: i64,
        tags: &[(String, String)],
    ) -> Result<RunInfo, TrackingError> {
        let tags: Vec<Value> = tags
            .iter()
            .map(|(key, value)| json!({ "key": key, "value": cut(value, TAG_VALUE_CHARS) }))
            .collect();
        let answer = self
            .post(
                "runs/create",
                json!({
                    "experiment_id": experiment_id,
                    "run_name": name,
                    "start_time": start_ms,
                    "tags": tags,
                }),
                "creating the run",
            )
            .await?;
        self.info(&answer, "creating the run")
    }

    pub async fn get_run(&self, run_id: &str) -> Result<RunInfo, TrackingError> {
        let answer = self
            .get("runs/get", &[("run_id", run_id)], "reading the run")
            .await?;
        self.info(&answer, "reading the run")
    }

    fn info(&self, answer: &Value, what: &str) -> Result<RunInfo, TrackingError> {
        serde_json::from_value(answer["run"]["info"].clone()).map_err(|err| {
            TrackingError::Refused {
                url: self.base.clone(),
                what: what.to_owned(),
                status: 200,
                code: "UNEXPECTED_ANSWER".into(),
                message: format!("no run info in the answer: {err}"),
            }
        })
    }

    /// Logs metrics, parameters and tags, in as many requests as MLflow's limits need. A
    /// parameter logged again with the same value is accepted; with another value, refused.
    pub async fn log_batch(
        &self,
        run_id: &str,
        metrics: &[Metric],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<(), TrackingError> {
        let pairs = |items: &[(String, String)], chars: usize| -> Vec<Value> {
            items
                .iter()
                .map(|(key, value)| json!({ "key": key, "value": cut(value, chars) }))
                .collect()
        };
        for chunk in metrics.chunks(BATCH_METRICS) {
            self.post(
                "runs/log-batch",
                json!({ "run_id": run_id, "metrics": chunk }),
                "logging metrics",
            )
            .await?;
        }
        for chunk in params.chunks(BATCH_PARAMS) {
            self.post(
                "runs/log-batch",
                json!({ "run_id": run_id, "params": pairs(chunk, PARAM_VALUE_CHARS) }),
                "logging parameters",
            )
            .await?;
        }
        for chunk in tags.chunks(BATCH_TAGS) {
            self.post(
                "runs/log-batch",
                json!({ "run_id": run_id, "tags": pairs(chunk, TAG_VALUE_CHARS) }),
                "logging tags",
            )
            .await?;
        }
        Ok(())
    }

    /// The (step, value) points of `key` logged already.
    pub async fn metric_points(
        &self,
        run_id: &str,
        key: &str,
    ) -> Result<Vec<(i64, f64)>, TrackingError> {
        let answer = self
            .get(
                "metrics/get-history",
                &[("run_id", run_id), ("metric_key", key)],
                "reading a metric's history",
            )
            .await?;
        // The REST API's JSON sends 64-bit integers as numbers or strings.
        let point = |m: &Value| {
            let step = m["step"]
                .as_i64()
                .or_else(|| m["step"].as_str()?.parse().ok())?;
            Some((step, m["value"].as_f64()?))
        };
        Ok(answer["metrics"]
            .as_array()
            .map(|metrics| metrics.iter().filter_map(point).collect())
            .unwrap_or_default())
    }

    pub async fn set_status(
        &self,
        run_id: &str,
        status: RunStatus,
        end_ms: Option<i64>,
    ) -> Result<(), TrackingError> {
        let mut body = json!({ "run_id": run_id, "status": status });
        if let Some(end) = end_ms {
            body["end_time"] = json!(end);
        }
        self.post("runs/update", body, "updating the run's status")
            .await?;
        Ok(())
    }

    /// Uploads `bytes` as the run's artifact `path` (`report/index.html`), through the tracking
    /// server's artifact proxy.
    pub async fn upload(
        &self,
        run: &RunInfo,
        path: &str,
        bytes: Vec<u8>,
        content_type: &str,
    ) -> Result<(), TrackingError> {
        let Some(location) = run.artifact_uri.strip_prefix("mlflow-artifacts:") else {
            return Err(TrackingError::ArtifactStore {
                run_id: run.run_id.clone(),
                uri: run.artifact_uri.clone(),
            });
        };
        // `mlflow-artifacts:/1/<run>/artifacts`, or with the server's address in it.
        let location = match location.strip_prefix("//") {
            Some(rest) => rest.find('/').map_or("", |slash| &rest[slash..]),
            None => location,
        };
        let request = self
            .request(
                reqwest::Method::PUT,
                &format!(
                    "/api/2.0/mlflow-artifacts/artifacts/{}/{path}",
                    location.trim_matches('/')
                ),
            )
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(bytes);
        self.send(request, &format!("the artifact {path}")).await?;
        Ok(())
    }
}

/// An id MLflow sends as a string (or, from some servers, a number).
fn id_in(value: &Value) -> String {
    match value {
        Value::String(id) => id.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_by_characters_not_bytes() {
        assert_eq!(cut("héllo", 2), "hé");
        assert_eq!(cut("abc", 5), "abc");
    }

    #[test]
    fn statuses_are_spelled_as_mlflow_spells_them() {
        assert_eq!(json!(RunStatus::Finished), json!("FINISHED"));
        assert_eq!(json!(RunStatus::Killed), json!("KILLED"));
    }
}
