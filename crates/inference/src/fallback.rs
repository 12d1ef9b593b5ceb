//! Falling back to the next model of a list when the service answers 503 ("no node is available
//! for the requested model"), as the service's own batch tool does. Any other error is final:
//! trying another model would hide a bad request or an exhausted budget.
use std::sync::Arc;

use super::wire::{ChatRequest, ChatResponse};
use super::{ChunkStream, Inference, InferenceError};

/// An answer together with the model of the list that gave it.
#[derive(Debug)]
pub struct Answered<T> {
    /// The list entry that answered (what to record; the response's own `model` field is
    /// whatever the server calls it).
    pub model: String,
    /// Models tried before it that had no node.
    pub unavailable: Vec<String>,
    pub response: T,
}

#[derive(Clone)]
pub struct Fallback {
    inference: Arc<dyn Inference>,
    models: Vec<String>,
}

impl Fallback {
    /// `models` in order of preference; an empty list is refused.
    pub fn new(inference: Arc<dyn Inference>, models: Vec<String>) -> Result<Self, InferenceError> {
        if models.is_empty() {
            return Err(InferenceError::InvalidRequest {
                field: "model".into(),
                reason: "the fallback list names no model".into(),
            });
        }
        Ok(Fallback { inference, models })
    }

    /// Sends `request` to each model in turn (its own `model` field is replaced) until one is
    /// not unavailable.
    pub async fn chat(
        &self,
        request: &ChatRequest,
    ) -> Result<Answered<ChatResponse>, InferenceError> {
        let inference = &self.inference;
        self.first_available(
            request,
            |request| async move { inference.chat(&request).await },
        )
        .await
    }

    /// Like `chat`; the fallback happens only before the first chunk, since a stream that has
    /// started belongs to its model.
    pub async fn chat_stream(
        &self,
        request: &ChatRequest,
    ) -> Result<Answered<ChunkStream>, InferenceError> {
        let inference = &self.inference;
        self.first_available(request, |request| async move {
            inference.chat_stream(&request).await
        })
        .await
    }

    /// The fallback loop itself, shared by plain and streamed answers.
    async fn first_available<T, Send, Sent>(
        &self,
        request: &ChatRequest,
        send: Send,
    ) -> Result<Answered<T>, InferenceError>
    where
        Send: Fn(ChatRequest) -> Sent,
        Sent: std::future::Future<Output = Result<T, InferenceError>>,
    {
        let mut unavailable = Vec::new();
        for model in &self.models {
            let request = ChatRequest {
                model: model.clone(),
                ..request.clone()
            };
            match send(request).await {
                Ok(response) => {
                    return Ok(Answered {
                        model: model.clone(),
                        unavailable,
                        response,
                    });
                }
                Err(err) if err.is_unavailable() => unavailable.push(model.clone()),
                Err(err) => return Err(err),
            }
        }
        Err(InferenceError::NoModelAvailable { tried: unavailable })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ChatMessage;
    use crate::{SimConfig, SimModel};

    fn sim(spec: &str) -> Arc<dyn Inference> {
        Arc::new(SimModel::new(spec.parse::<SimConfig>().unwrap()))
    }

    #[tokio::test]
    async fn falls_back_past_unserved_models_and_records_who_answered() {
        let fallback = Fallback::new(
            sim("model=small"),
            vec!["gone-1".into(), "gone-2".into(), "small".into()],
        )
        .unwrap();
        let answered = fallback
            .chat(&ChatRequest::new("ignored", vec![ChatMessage::user("hi")]))
            .await
            .unwrap();
        assert_eq!(answered.model, "small");
        assert_eq!(answered.unavailable, vec!["gone-1", "gone-2"]);
    }

    #[tokio::test]
    async fn other_errors_stop_the_fallback() {
        let fallback = Fallback::new(
            sim("model=a,model=b,faults=500"),
            vec!["a".into(), "b".into()],
        )
        .unwrap();
        let err = fallback
            .chat(&ChatRequest::new("a", vec![ChatMessage::user("hi")]))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("500"),
            "a 500 must be reported, not skipped: {err}"
        );
    }

    #[tokio::test]
    async fn all_unavailable_names_every_model_tried() {
        let fallback = Fallback::new(sim("model=a"), vec!["x".into(), "y".into()]).unwrap();
        let err = fallback
            .chat_stream(&ChatRequest::new("x", vec![ChatMessage::user("hi")]))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, InferenceError::NoModelAvailable { tried } if tried == &["x", "y"]),
            "{err}"
        );
    }
}
