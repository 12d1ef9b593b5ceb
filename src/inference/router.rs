//! `ModelRouter`: one `Inference` over several backends, chosen by model id. The embedded model
//! answers ids `local` and `local:<name>`; every other id goes to the remote API. A run can thus
//! replay on the public API and on this machine side by side.
use std::sync::Arc;

use async_trait::async_trait;

use super::wire::{ChatRequest, ChatResponse, Model};
use super::{ChunkStream, Inference, InferenceError};

/// Whether a model id names the embedded model.
pub fn is_local_model(model: &str) -> bool {
    model == "local" || model.starts_with("local:")
}

pub struct ModelRouter {
    local: Option<Arc<dyn Inference>>,
    remote: Option<Arc<dyn Inference>>,
}

impl ModelRouter {
    pub fn new(local: Option<Arc<dyn Inference>>, remote: Option<Arc<dyn Inference>>) -> Self {
        Self { local, remote }
    }

    fn pick(&self, model: &str) -> Result<&Arc<dyn Inference>, InferenceError> {
        let (backend, what) = if is_local_model(model) {
            (&self.local, "no embedded model is loaded")
        } else {
            (
                &self.remote,
                "no inference API is configured (set GEPA_LAB_INFERENCE_KEY)",
            )
        };
        backend
            .as_ref()
            .ok_or_else(|| InferenceError::InvalidRequest {
                field: "model".to_owned(),
                reason: format!("{model}: {what}"),
            })
    }
}

#[async_trait]
impl Inference for ModelRouter {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        let mut models = Vec::new();
        for backend in [&self.local, &self.remote].into_iter().flatten() {
            models.extend(backend.models().await?);
        }
        Ok(models)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        self.pick(&request.model)?.chat(request).await
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        self.pick(&request.model)?.chat_stream(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::{ChatMessage, SimConfig, SimModel};

    fn sim(spec: &str) -> Arc<dyn Inference> {
        Arc::new(SimModel::new(spec.parse::<SimConfig>().unwrap()))
    }

    #[tokio::test]
    async fn routes_by_model_id() {
        let router = ModelRouter::new(
            Some(sim("model=local,seed=1")),
            Some(sim("model=qwen,seed=2")),
        );
        let ask = |model: &str| ChatRequest::new(model, vec![ChatMessage::user("hi")]);
        assert_eq!(
            router.chat(&ask("local")).await.unwrap().node_id(),
            Some("sim-node-1")
        );
        assert_eq!(
            router.chat(&ask("qwen")).await.unwrap().node_id(),
            Some("sim-node-2")
        );
        let remote_only = ModelRouter::new(None, Some(sim("model=qwen,seed=2")));
        let err = remote_only.chat(&ask("local:tiny")).await.unwrap_err();
        assert!(err.to_string().contains("no embedded model"), "{err}");
    }
}
