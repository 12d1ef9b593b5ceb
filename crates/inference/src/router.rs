//! `ModelRouter`: one `Inference` over several backends, chosen by model reference
//! ([`ModelRef`]). The embedded models answer the ids they were loaded under (`local`,
//! `local:<name>`); `<provider>/<model>` goes to that declared provider, asked for `<model>`;
//! every other id goes to the remote API. A run (or `chat`) can thus use the public API, named
//! providers and this machine side by side.
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::Semaphore;

use super::provider::{ModelRef, ProviderName};
use super::wire::{ChatRequest, ChatResponse, Model};
use super::{ChunkStream, EmbeddedModel, Inference, InferenceError};

/// A provider's client, and the permits of its `max_in_flight`.
struct Routed {
    inference: Arc<dyn Inference>,
    in_flight: Option<Arc<Semaphore>>,
}

pub struct ModelRouter {
    local: Vec<Arc<EmbeddedModel>>,
    /// Answers the embedded ids instead of `local` (`GEPA_LAB_LOCAL_UPSTREAM`).
    local_upstream: Option<Arc<dyn Inference>>,
    providers: BTreeMap<ProviderName, Routed>,
    remote: Option<Arc<dyn Inference>>,
}

/// Where a request goes: the backend, the request as that backend must see it, and the
/// provider whose name prefixes the answer's model.
struct Route<'a> {
    backend: &'a dyn Inference,
    request: std::borrow::Cow<'a, ChatRequest>,
    provider: Option<&'a ProviderName>,
    in_flight: Option<&'a Arc<Semaphore>>,
}

impl Route<'_> {
    /// A provider's failure, with the provider and the model it was asked for named.
    fn name(&self, err: InferenceError) -> InferenceError {
        match (self.provider, err) {
            (Some(provider), InferenceError::Api(error)) => InferenceError::Provider {
                provider: provider.to_string(),
                model: self.request.model.clone(),
                error,
            },
            (_, err) => err,
        }
    }
}

impl ModelRouter {
    pub fn new(local: Vec<Arc<EmbeddedModel>>, remote: Option<Arc<dyn Inference>>) -> Self {
        Self {
            local,
            local_upstream: None,
            providers: BTreeMap::new(),
            remote,
        }
    }

    /// Sends the embedded ids to `upstream` instead of the loaded models.
    pub fn with_local_upstream(mut self, upstream: Arc<dyn Inference>) -> Self {
        self.local_upstream = Some(upstream);
        self
    }

    /// Adds a declared provider, with at most `max_in_flight` requests in flight at once.
    pub fn with_provider(
        mut self,
        name: ProviderName,
        inference: Arc<dyn Inference>,
        max_in_flight: Option<u32>,
    ) -> Self {
        let in_flight = max_in_flight.map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        self.providers.insert(
            name,
            Routed {
                inference,
                in_flight,
            },
        );
        self
    }

    fn pick<'a>(&'a self, request: &'a ChatRequest) -> Result<Route<'a>, InferenceError> {
        let refused = |reason: String| InferenceError::InvalidRequest {
            field: "model".to_owned(),
            reason,
        };
        let model = &request.model;
        let route = |backend, request, provider, in_flight| Route {
            backend,
            request,
            provider,
            in_flight,
        };
        let borrowed = std::borrow::Cow::Borrowed(request);
        match ModelRef::parse(model, |name| self.provider(name).is_some()) {
            ModelRef::Embedded(_) => {
                if let Some(upstream) = &self.local_upstream {
                    return Ok(route(upstream.as_ref(), borrowed, None, None));
                }
                self.local
                    .iter()
                    .find(|loaded| loaded.ids().iter().any(|id| id == model))
                    .map(|loaded| route(loaded.as_ref() as &dyn Inference, borrowed, None, None))
                    .ok_or_else(|| refused(format!("{model}: this embedded model is not loaded")))
            }
            ModelRef::Provider { provider, model } => {
                let (name, routed) = self
                    .provider(provider.as_str())
                    .ok_or_else(|| refused(format!("{provider}: no such provider")))?;
                let mut forwarded = request.clone();
                forwarded.model = model;
                // The provider's own time-out applies; its server knows no `timeout_secs`.
                forwarded.timeout_secs = None;
                Ok(route(
                    routed.inference.as_ref(),
                    std::borrow::Cow::Owned(forwarded),
                    Some(name),
                    routed.in_flight.as_ref(),
                ))
            }
            ModelRef::Public(id) => {
                let remote = self.remote.as_deref().ok_or_else(|| {
                    refused(format!(
                        "{model}: no inference API is configured (set GEPA_LAB_INFERENCE_KEY), \
                         and no provider is declared under that name"
                    ))
                })?;
                let request = if id == *model {
                    borrowed
                } else {
                    let mut forwarded = request.clone();
                    forwarded.model = id;
                    std::borrow::Cow::Owned(forwarded)
                };
                Ok(route(remote, request, None, None))
            }
        }
    }

    fn provider(&self, name: &str) -> Option<(&ProviderName, &Routed)> {
        self.providers
            .iter()
            .find(|(known, _)| known.as_str() == name)
    }
}

/// Waits for a permit of `limit`, when there is one.
async fn permit(
    limit: Option<&Arc<Semaphore>>,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, InferenceError> {
    match limit {
        None => Ok(None),
        Some(limit) => Arc::clone(limit)
            .acquire_owned()
            .await
            .map(Some)
            .map_err(|_| InferenceError::Stream("the provider's request limit was closed".into())),
    }
}

#[async_trait]
impl Inference for ModelRouter {
    /// Every backend's models, a provider's under `<provider>/<id>`, as references name them.
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        let mut models = Vec::new();
        for local in &self.local {
            models.extend(local.models().await?);
        }
        if let Some(upstream) = &self.local_upstream {
            models.extend(upstream.models().await?);
        }
        for (name, routed) in &self.providers {
            for mut model in routed.inference.models().await? {
                model.id = format!("{name}/{}", model.id);
                models.push(model);
            }
        }
        if let Some(remote) = &self.remote {
            models.extend(remote.models().await?);
        }
        Ok(models)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        let route = self.pick(request)?;
        let _permit = permit(route.in_flight).await?;
        let mut answer = route
            .backend
            .chat(&route.request)
            .await
            .map_err(|err| route.name(err))?;
        if let Some(provider) = route.provider {
            answer.model = format!("{provider}/{}", answer.model);
        }
        Ok(answer)
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        let route = self.pick(request)?;
        let permit = permit(route.in_flight).await?;
        let stream = route
            .backend
            .chat_stream(&route.request)
            .await
            .map_err(|err| route.name(err))?;
        // The permit is held until the stream is dropped: a stream is a request in flight.
        Ok(Box::pin(stream.map(move |chunk| {
            let _held = &permit;
            chunk
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, SimConfig, SimModel};

    fn sim(spec: &str) -> Arc<dyn Inference> {
        let config: SimConfig = spec.parse().unwrap();
        Arc::new(SimModel::new(config))
    }

    fn ask(model: &str) -> ChatRequest {
        ChatRequest::new(model, vec![ChatMessage::user("hi")])
    }

    #[tokio::test]
    async fn remote_ids_go_remote_and_unloaded_local_ids_are_refused() {
        let router = ModelRouter::new(Vec::new(), Some(sim("model=qwen,seed=2")));
        let answer = router.chat(&ask("qwen")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-2"));
        let err = router.chat(&ask("local:tiny")).await.unwrap_err();
        assert!(err.to_string().contains("not loaded"), "{err}");
        let offline = ModelRouter::new(Vec::new(), None);
        let err = offline.chat(&ask("qwen")).await.unwrap_err();
        assert!(err.to_string().contains("GEPA_LAB_INFERENCE_KEY"), "{err}");
    }

    #[tokio::test]
    async fn a_provider_is_asked_for_its_own_id_and_its_answers_name_it() {
        let name = |text: &str| ProviderName::parse(text).unwrap();
        let router = ModelRouter::new(Vec::new(), Some(sim("model=task-sim,seed=1")))
            .with_provider(name("ollama"), sim("model=qwen3:8b,seed=3"), Some(1))
            .with_provider(name("router"), sim("model=openai/gpt-4.1,seed=4"), None);
        let answer = router.chat(&ask("ollama/qwen3:8b")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-3"));
        assert!(
            answer.model.starts_with("ollama/qwen3:8b"),
            "{}",
            answer.model
        );
        let answer = router.chat(&ask("router/openai/gpt-4.1")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-4"));
        // The public API keeps every id that names no declared provider.
        let answer = router.chat(&ask("public/task-sim")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-1"));
        let unserved = router.chat(&ask("ollama/task-sim")).await.unwrap_err();
        assert!(unserved.is_unavailable(), "{unserved}");
        // A provider's failure names the provider and the model it was asked for.
        assert!(
            unserved
                .to_string()
                .starts_with("provider `ollama`, model task-sim: 503"),
            "{unserved}"
        );
        let ids: Vec<String> = router
            .models()
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        assert!(ids.contains(&"ollama/qwen3:8b".to_owned()), "{ids:?}");
        assert!(ids.contains(&"task-sim".to_owned()), "{ids:?}");
    }

    #[tokio::test]
    async fn embedded_ids_go_to_the_local_upstream_when_there_is_one() {
        let router =
            ModelRouter::new(Vec::new(), None).with_local_upstream(sim("model=local,seed=5"));
        let answer = router.chat(&ask("local")).await.unwrap();
        assert_eq!(answer.node_id(), Some("sim-node-5"));
    }

    /// Counts the calls in flight at once, each held for a few milliseconds.
    #[derive(Default)]
    struct Counting {
        now: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl Inference for Counting {
        async fn models(&self) -> Result<Vec<Model>, InferenceError> {
            Ok(Vec::new())
        }

        async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.now.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            self.now.fetch_sub(1, SeqCst);
            sim("model=m").chat(request).await
        }

        async fn chat_stream(&self, _: &ChatRequest) -> Result<ChunkStream, InferenceError> {
            Err(InferenceError::Stream("not used".into()))
        }
    }

    #[tokio::test]
    async fn a_provider_has_at_most_max_in_flight_requests_in_flight() {
        let counting = Arc::new(Counting::default());
        let name = ProviderName::parse("busy").unwrap();
        let router = Arc::new(ModelRouter::new(Vec::new(), None).with_provider(
            name,
            counting.clone(),
            Some(2),
        ));
        let calls = (0..8).map(|_| {
            let router = Arc::clone(&router);
            async move { router.chat(&ask("busy/m")).await.map(|_| ()) }
        });
        for result in futures::future::join_all(calls).await {
            result.unwrap();
        }
        assert_eq!(counting.most.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
