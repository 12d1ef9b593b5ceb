//! `ModelRouter`: one `Inference` over several backends, chosen by model id. The embedded models
//! answer the ids they were loaded under (`local`, `local:<name>`); every other id goes to the
//! remote API. A run (or `chat`) can thus use the public API and this machine side by side.
use std::sync::Arc;

use async_trait::async_trait;

use super::wire::{ChatRequest, ChatResponse, Model};
use super::{ChunkStream, EmbeddedModel, Inference, InferenceError, is_local_model};

pub struct ModelRouter {
    local: Vec<Arc<EmbeddedModel>>,
    remote: Option<Arc<dyn Inference>>,
}

impl ModelRouter {
    pub fn new(local: Vec<Arc<EmbeddedModel>>, remote: Option<Arc<dyn Inference>>) -> Self {
        Self { local, remote }
    }

    fn pick(&self, model: &str) -> Result<&dyn Inference, InferenceError> {
        if is_local_model(model) {
            return self
                .local
                .iter()
                .find(|loaded| loaded.ids().iter().any(|id| id == model))
                .map(|loaded| loaded.as_ref() as &dyn Inference)
                .ok_or_else(|| InferenceError::InvalidRequest {
                    field: "model".to_owned(),
                    reason: format!("{model}: this embedded model is not loaded"),
                });
        }
        self.remote
            .as_deref()
            .ok_or_else(|| InferenceError::InvalidRequest {
                field: "model".to_owned(),
                reason: format!(
                    "{model}: no inference API is configured (set GEPA_LAB_INFERENCE_KEY)"
                ),
            })
    }
}

#[async_trait]
impl Inference for ModelRouter {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        let mut models = Vec::new();
        for local in &self.local {
            models.extend(local.models().await?);
        }
        if let Some(remote) = &self.remote {
            models.extend(remote.models().await?);
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

    #[tokio::test]
    async fn remote_ids_go_remote_and_unloaded_local_ids_are_refused() {
        let sim: SimConfig = "model=qwen,seed=2".parse().unwrap();
        let remote: Arc<dyn Inference> = Arc::new(SimModel::new(sim));
        let router = ModelRouter::new(Vec::new(), Some(remote));
        let ask = |model: &str| ChatRequest::new(model, vec![ChatMessage::user("hi")]);
        let answer = router.chat(&ask("qwen")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-2"));
        let err = router.chat(&ask("local:tiny")).await.unwrap_err();
        assert!(err.to_string().contains("not loaded"), "{err}");
        let offline = ModelRouter::new(Vec::new(), None);
        let err = offline.chat(&ask("qwen")).await.unwrap_err();
        assert!(err.to_string().contains("GEPA_LAB_INFERENCE_KEY"), "{err}");
    }
}
