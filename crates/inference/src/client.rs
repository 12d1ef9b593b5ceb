//! `HttpInference`: the inference API, or any OpenAI-compatible server, over `http::HttpClient`.
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures::StreamExt;

use super::structured::validate_answer;
use super::wire::{
    ChatRequest, ChatResponse, Model, ModelList, STREAM_ERROR_EVENT, StreamChunk, StreamError,
};
use super::{ChunkStream, Inference, InferenceError, check_request};
use gepa_lab_http::{ATTEMPT_TIMEOUT, ApiError, Auth, Call, HttpClient, ServiceConfig, Stats};

/// The public inference service.
pub const DEFAULT_BASE_URL: &str = "https://inference.dria.co";

/// The public inference API's URL: `GEPA_LAB_INFERENCE_URL`, else [`DEFAULT_BASE_URL`].
pub fn base_url_from_env() -> String {
    gepa_lab_env::var(gepa_lab_env::INFERENCE_URL).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned())
}

/// Time granted beyond the request's own `timeout_secs`, so the server's time-out answer (with
/// its status and body) arrives before ours fires.
const TIMEOUT_GRACE: Duration = Duration::from_secs(10);

/// The inference service, or any OpenAI-compatible server. The key is sent as
/// `Authorization: Bearer`; local servers (Ollama, llama.cpp) need none.
pub type InferenceConfig = ServiceConfig;

#[derive(Debug, Clone)]
pub struct HttpInference {
    http: HttpClient,
    /// The configuration's own time-out (a provider's `timeout_secs`), which then replaces the
    /// request's: the server behind it does not know the request's `timeout_secs`.
    call_timeout: Option<Duration>,
}

impl HttpInference {
    pub fn new(config: InferenceConfig) -> Result<Self, InferenceError> {
        let auth = match config.key.clone() {
            Some(key) => Auth::Bearer(key),
            None => Auth::None,
        };
        let mut client = config.client(config.base_url.clone(), auth, ATTEMPT_TIMEOUT);
        // 503 means "no node serves this model": the fallback list, not waiting, helps.
        client.retry.retry_unavailable = false;
        Ok(HttpInference {
            http: HttpClient::new(client)?,
            call_timeout: config.timeout,
        })
    }

    /// Attempts, retries and 429s seen so far.
    pub fn stats(&self) -> Stats {
        self.http.stats()
    }

    fn chat_call(&self, request: &ChatRequest, stream: bool) -> Result<Call, InferenceError> {
        check_request(request)?;
        let mut body = request.clone();
        body.stream = stream.then_some(true);
        let timeout = self
            .call_timeout
            .unwrap_or_else(|| request.timeout() + TIMEOUT_GRACE);
        Ok(Call::post_json("/v1/chat/completions", &body)?.with_timeout(timeout))
    }
}

#[async_trait]
impl Inference for HttpInference {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        let list: ModelList = self.http.send_json(&Call::get("/v1/models")).await?;
        Ok(list.data)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        let call = self.chat_call(request, false)?;
        let (mut response, latency): (ChatResponse, _) = self.http.send_json_timed(&call).await?;
        response.latency = Some(latency);
        if response.choices.is_empty() {
            return Err(InferenceError::NoChoices {
                model: response.model,
            });
        }
        if let Some(schema) = request.json_schema()
            && let Err(errors) = validate_answer(schema, response.content())
        {
            return Err(InferenceError::SchemaMismatch {
                model: response.model.clone(),
                content: response.content().to_owned(),
                errors,
            });
        }
        Ok(response)
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        let call = self.chat_call(request, true)?;
        let response = self.http.send(&call).await?;
        let events = response.bytes_stream().eventsource();
        Ok(chunks_until_done(events))
    }
}

/// Turns SSE events into chunks, stopping at `data: [DONE]`. If the events run out first, the
/// last item is `StreamTruncated`, and an error event ends it with `StreamFailed`: a short
/// answer must never pass for a whole one.
fn chunks_until_done<S, E>(events: S) -> ChunkStream
where
    S: futures::Stream<Item = Result<eventsource_stream::Event, E>> + Send + Unpin + 'static,
    E: std::fmt::Display + Send,
{
    struct State<S> {
        events: S,
        chunks: usize,
        finished: bool,
    }
    let state = State {
        events,
        chunks: 0,
        finished: false,
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        if state.finished {
            return None;
        }
        loop {
            let item = match state.events.next().await {
                None => {
                    state.finished = true;
                    let chunks = state.chunks;
                    return Some((Err(InferenceError::StreamTruncated { chunks }), state));
                }
                Some(Err(e)) => {
                    state.finished = true;
                    Err(InferenceError::Stream(e.to_string()))
                }
                Some(Ok(event)) => {
                    let data = event.data.trim();
                    if data == "[DONE]" {
                        return None;
                    }
                    // Comments and keep-alives carry no data.
                    if data.is_empty() {
                        continue;
                    }
                    if let Some(message) = stream_error(&event.event, data) {
                        state.finished = true;
                        return Some((Err(InferenceError::StreamFailed { message }), state));
                    }
                    match serde_json::from_str::<StreamChunk>(data) {
                        Ok(chunk) => {
                            state.chunks += 1;
                            Ok(chunk)
                        }
                        Err(source) => {
                            state.finished = true;
                            Err(InferenceError::Api(ApiError::Decode {
                                error: source,
                                body: data.to_owned(),
                            }))
                        }
                    }
                }
            };
            return Some((item, state));
        }
    }))
}

/// The message of an event that reports an error instead of a chunk: an `error` event, or data
/// of the error shape (which a lenient chunk would read as an empty one).
fn stream_error(event: &str, data: &str) -> Option<String> {
    let parsed = serde_json::from_str::<StreamError>(data).ok();
    if event == STREAM_ERROR_EVENT {
        return Some(parsed.map_or_else(|| data.to_owned(), |e| e.error.message));
    }
    parsed.map(|e| e.error.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    fn events(lines: &[&str]) -> ChunkStream {
        let body = lines.concat();
        let bytes = stream::iter(vec![Ok::<_, std::convert::Infallible>(body.into_bytes())]);
        chunks_until_done(bytes.eventsource())
    }

    async fn collect(stream: ChunkStream) -> Vec<Result<String, String>> {
        stream
            .map(|item| {
                item.map(|c| c.content().to_owned())
                    .map_err(|e| e.to_string())
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_stream_ends_cleanly_at_done() {
        let got = collect(events(&[
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            ": keep-alive\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"ignored\"}}]}\n\n",
        ]))
        .await;
        assert_eq!(got, vec![Ok("Hel".into()), Ok("lo".into())]);
    }

    #[tokio::test]
    async fn a_stream_without_done_is_truncated() {
        let got = collect(events(&[
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        ]))
        .await;
        assert_eq!(got.len(), 2);
        assert!(
            got[1]
                .as_ref()
                .unwrap_err()
                .contains("without [DONE] after 1 chunks")
        );
    }

    #[tokio::test]
    async fn an_error_event_ends_the_stream_with_its_message() {
        let chunk = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        for error in [
            "event: error\ndata: {\"error\":{\"message\":\"upstream cut\"}}\n\n",
            "data: {\"error\":{\"message\":\"upstream cut\"}}\n\n",
            "event: error\ndata: upstream cut\n\n",
        ] {
            let got = collect(events(&[chunk, error, chunk, "data: [DONE]\n\n"])).await;
            assert_eq!(
                got,
                vec![
                    Ok("Hel".into()),
                    Err("the stream ended with an error: upstream cut".into())
                ],
                "{error}"
            );
        }
    }

    #[tokio::test]
    async fn a_chunk_that_does_not_parse_ends_the_stream_with_an_error() {
        let got = collect(events(&["data: {not json}\n\n", "data: [DONE]\n\n"])).await;
        assert_eq!(got.len(), 1);
        assert!(got[0].as_ref().unwrap_err().contains("{not json}"));
    }

    #[tokio::test]
    async fn rule_violations_are_refused_before_anything_is_sent() {
        // Nothing listens on this address; a request that went out would be a transport error.
        let client = HttpInference::new(InferenceConfig::new("http://127.0.0.1:9", None)).unwrap();
        let request = ChatRequest::new("m", vec![]);
        let err = client.chat(&request).await.unwrap_err();
        assert!(
            matches!(err, InferenceError::InvalidRequest { .. }),
            "{err}"
        );
        assert_eq!(client.stats().attempts, 0);
    }
}
