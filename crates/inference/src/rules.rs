//! The contract's rules for a chat request, checked by the client before sending (so a doomed
//! request costs nothing) and by `serve` on arrival (so it answers 400 like the service).
use base64::Engine;

use super::InferenceError;
use super::structured::check_schema;
use super::wire::{ChatRequest, Content, ContentPart};

/// What a model accepts, read from its id as the contract defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelClass {
    /// Id contains `-vl`: accepts image parts.
    Vision,
    /// Id contains `-audio`: accepts audio parts.
    Audio,
    Text,
}

impl ModelClass {
    pub fn of(model_id: &str) -> Self {
        if model_id.contains("-vl") {
            ModelClass::Vision
        } else if model_id.contains("-audio") {
            ModelClass::Audio
        } else {
            ModelClass::Text
        }
    }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> InferenceError {
    InferenceError::InvalidRequest {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Checks everything about `request` that can be known without a model: required fields,
/// ranges, the model-class rules for image and audio parts, data URLs, and the schema of
/// `response_format`. The error names the offending field by its JSON path.
pub fn check_request(request: &ChatRequest) -> Result<(), InferenceError> {
    if request.model.trim().is_empty() {
        return Err(invalid("model", "must not be empty"));
    }
    if request.messages.is_empty() {
        return Err(invalid("messages", "must hold at least one message"));
    }
    if request.max_tokens == Some(0) {
        return Err(invalid("max_tokens", "must be at least 1"));
    }
    if let Some(t) = request.temperature
        && !(t.is_finite() && t >= 0.0)
    {
        return Err(invalid("temperature", format!("must be >= 0, got {t}")));
    }
    if request.timeout_secs == Some(0) {
        return Err(invalid("timeout_secs", "must be at least 1"));
    }
    let class = ModelClass::of(&request.model);
    for (m, message) in request.messages.iter().enumerate() {
        let Content::Parts(parts) = &message.content else {
            continue;
        };
        for (p, part) in parts.iter().enumerate() {
            let at = format!("messages[{m}].content[{p}]");
            match part {
                ContentPart::Text { .. } => {}
                ContentPart::ImageUrl { image_url } => {
                    if class != ModelClass::Vision {
                        return Err(invalid(
                            format!("{at}.image_url"),
                            format!(
                                "model {} is not a vision model (its id has no \"-vl\"); image parts are refused",
                                request.model
                            ),
                        ));
                    }
                    check_url(&format!("{at}.image_url.url"), &image_url.url)?;
                }
                ContentPart::AudioUrl { audio_url } => {
                    if class != ModelClass::Audio {
                        return Err(invalid(
                            format!("{at}.audio_url"),
                            format!(
                                "model {} is not an audio model (its id has no \"-audio\"); audio parts are refused",
                                request.model
                            ),
                        ));
                    }
                    check_url(&format!("{at}.audio_url.url"), &audio_url.url)?;
                }
            }
        }
    }
    if let Some(schema) = request.json_schema() {
        check_schema(schema)
            .map_err(|reason| invalid("response_format.json_schema.schema", reason))?;
    }
    Ok(())
}

/// A data URL must carry base64 content that decodes; other URLs only need to be present,
/// since whether they can be fetched is the model server's business.
fn check_url(field: &str, url: &str) -> Result<(), InferenceError> {
    if url.trim().is_empty() {
        return Err(invalid(field, "must not be empty"));
    }
    let Some(rest) = url.strip_prefix("data:") else {
        return Ok(());
    };
    let Some((_media_type, payload)) = rest.split_once(";base64,") else {
        return Err(invalid(
            field,
            "a data URL must have the form data:<media type>;base64,<content>",
        ));
    };
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|e| invalid(field, format!("data URL content is not base64: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ChatMessage, Role, UrlRef};

    fn with_part(model: &str, part: ContentPart) -> ChatRequest {
        ChatRequest::new(
            model,
            vec![ChatMessage {
                role: Role::User,
                content: Content::Parts(vec![
                    ContentPart::Text {
                        text: "look".into(),
                    },
                    part,
                ]),
            }],
        )
    }

    fn image(url: &str) -> ContentPart {
        ContentPart::ImageUrl {
            image_url: UrlRef { url: url.into() },
        }
    }

    fn audio(url: &str) -> ContentPart {
        ContentPart::AudioUrl {
            audio_url: UrlRef { url: url.into() },
        }
    }

    fn field_of(err: InferenceError) -> String {
        match err {
            InferenceError::InvalidRequest { field, .. } => field,
            other => panic!("expected InvalidRequest, got {other}"),
        }
    }

    #[test]
    fn classes_come_from_the_id() {
        assert_eq!(ModelClass::of("qwen2.5-vl:7b"), ModelClass::Vision);
        assert_eq!(ModelClass::of("whisper-audio"), ModelClass::Audio);
        assert_eq!(ModelClass::of("qwen3.5:9b"), ModelClass::Text);
    }

    #[test]
    fn images_go_only_to_vision_models() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        assert!(check_request(&with_part("qwen-vl", image(png))).is_ok());
        let err = check_request(&with_part("qwen3.5:9b", image(png))).unwrap_err();
        assert_eq!(field_of(err), "messages[0].content[1].image_url");
        let err = check_request(&with_part("x-audio", image(png))).unwrap_err();
        assert_eq!(field_of(err), "messages[0].content[1].image_url");
    }

    #[test]
    fn audio_goes_only_to_audio_models() {
        assert!(check_request(&with_part("x-audio", audio("https://a/b.wav"))).is_ok());
        let err = check_request(&with_part("qwen-vl", audio("https://a/b.wav"))).unwrap_err();
        assert_eq!(field_of(err), "messages[0].content[1].audio_url");
    }

    #[test]
    fn data_urls_must_hold_base64() {
        let err = check_request(&with_part("m-vl", image("data:image/png,raw"))).unwrap_err();
        assert_eq!(field_of(err), "messages[0].content[1].image_url.url");
        let err =
            check_request(&with_part("m-vl", image("data:image/png;base64,@@@"))).unwrap_err();
        assert_eq!(field_of(err), "messages[0].content[1].image_url.url");
    }

    #[test]
    fn ranges_and_required_fields_name_the_field() {
        let ok = ChatRequest::new("m", vec![ChatMessage::user("hi")]);
        assert!(check_request(&ok).is_ok());
        let cases: Vec<(ChatRequest, &str)> = vec![
            (
                ChatRequest {
                    model: " ".into(),
                    ..ok.clone()
                },
                "model",
            ),
            (
                ChatRequest {
                    messages: vec![],
                    ..ok.clone()
                },
                "messages",
            ),
            (
                ChatRequest {
                    max_tokens: Some(0),
                    ..ok.clone()
                },
                "max_tokens",
            ),
            (
                ChatRequest {
                    temperature: Some(-0.1),
                    ..ok.clone()
                },
                "temperature",
            ),
            (
                ChatRequest {
                    temperature: Some(f64::NAN),
                    ..ok.clone()
                },
                "temperature",
            ),
            (
                ChatRequest {
                    timeout_secs: Some(0),
                    ..ok.clone()
                },
                "timeout_secs",
            ),
        ];
        for (request, field) in cases {
            assert_eq!(field_of(check_request(&request).unwrap_err()), field);
        }
    }
}
