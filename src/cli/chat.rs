//! `gepa-lab chat`: one message to a model, the answer on stdout. `local` and `local:<name>`
//! models run in this process (no server); any other id goes to the inference API.
use super::ExitStatus;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use futures::StreamExt;

use super::inference_args::InferenceArgs;
use crate::inference::wire::{JsonSchemaFormat, ResponseFormat, UrlRef};
use crate::inference::{
    ChatMessage, ChatRequest, Content, ContentPart, Fallback, InferenceError, Role, check_schema,
    validate_answer,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub inference: InferenceArgs,
    /// Model id. Repeat to name fallbacks, tried in order when a model has no node (503).
    /// `local` (or `local:<name>`) runs the embedded model in this process.
    #[arg(long = "model", value_name = "MODEL", required = true)]
    pub models: Vec<String>,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    /// Image file (png, jpeg, gif, webp) sent inline as a base64 data URL; needs a vision
    /// model (an id containing "-vl").
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// JSON Schema file: asks for structured output and checks the answer against it.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Print the answer as it is generated.
    #[arg(long)]
    pub stream: bool,
    /// Most tokens to generate, 1 to 32768 (the service's default is 2048).
    #[arg(long,
          value_parser = super::ranges::one_to(crate::experiment::MAX_ANSWER_TOKENS))]
    pub max_tokens: Option<u32>,
    /// Sampling temperature, 0 to 2 (the service's default is 0.7).
    #[arg(long, value_parser = super::ranges::temperature)]
    pub temperature: Option<f64>,
    /// The user message.
    pub text: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let content = match &args.image {
        None => Content::Text(args.text.clone()),
        Some(path) => Content::Parts(vec![
            ContentPart::Text {
                text: args.text.clone(),
            },
            ContentPart::ImageUrl {
                image_url: UrlRef {
                    url: data_url(path)?,
                },
            },
        ]),
    };
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::system(system.clone()));
    }
    messages.push(ChatMessage {
        role: Role::User,
        content,
    });
    let mut request = ChatRequest::new(args.models[0].clone(), messages);
    request.max_tokens = args.max_tokens;
    request.temperature = args.temperature;
    if let Some(path) = &args.schema {
        request.response_format = Some(ResponseFormat::JsonSchema {
            json_schema: read_schema(path)?,
        });
    }
    let inference = args.inference.backend(&args.models)?;
    let fallback = Fallback::new(inference, args.models.clone())?;
    let runtime = super::runtime()?;
    let result = if args.stream {
        runtime.block_on(stream(&fallback, &request))
    } else {
        runtime.block_on(plain(&fallback, &request))
    };
    match result {
        Ok(code) => Ok(code),
        Err(InferenceError::InvalidRequest { field, reason }) => {
            eprintln!("error: {field}: {reason}");
            Ok(ExitStatus::Invalid)
        }
        Err(InferenceError::SchemaMismatch {
            content, errors, ..
        }) => {
            println!("{content}");
            report_mismatch(&errors);
            Ok(ExitStatus::Invalid)
        }
        Err(err) => Err(err).context("chat"),
    }
}

async fn plain(fallback: &Fallback, request: &ChatRequest) -> Result<ExitStatus, InferenceError> {
    let answered = fallback.chat(request).await?;
    println!("{}", answered.response.content());
    if answered.response.truncated() {
        warn_truncated(request);
    }
    note_answerer(
        &answered.model,
        &answered.unavailable,
        answered.response.node_id(),
    );
    if let Some(usage) = answered.response.usage {
        eprintln!(
            "tokens: {} prompt, {} answer",
            usage.prompt_tokens, usage.completion_tokens
        );
    }
    Ok(ExitStatus::Ok)
}

async fn stream(fallback: &Fallback, request: &ChatRequest) -> Result<ExitStatus, InferenceError> {
    let answered = fallback.chat_stream(request).await?;
    let mut chunks = answered.response;
    let mut content = String::new();
    let mut node = None;
    let mut finish_reason = None;
    let mut stdout = std::io::stdout();
    while let Some(chunk) = chunks.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(err) => {
                // Keep what arrived visible, on its own line, before the error.
                println!();
                return Err(err);
            }
        };
        if node.is_none() {
            node = chunk.metadata.as_ref().and_then(|m| m.node_id.clone());
        }
        if let Some(reason) = chunk.choices.first().and_then(|c| c.finish_reason.clone()) {
            finish_reason = Some(reason);
        }
        content.push_str(chunk.content());
        print!("{}", chunk.content());
        // A failed flush only delays the text; the answer is still complete at the end.
        stdout.flush().ok();
    }
    println!();
    if finish_reason.as_deref() == Some("length") {
        warn_truncated(request);
    }
    note_answerer(&answered.model, &answered.unavailable, node.as_deref());
    if let Some(schema) = request.json_schema()
        && let Err(errors) = validate_answer(schema, &content)
    {
        report_mismatch(&errors);
        return Ok(ExitStatus::Invalid);
    }
    Ok(ExitStatus::Ok)
}

/// The answer is not all the model had to say: it stopped at its token limit.
fn warn_truncated(request: &ChatRequest) {
    eprintln!(
        "warning: the answer stopped at its token limit (finish_reason length, max_tokens {}); \
         it is cut short: raise --max-tokens for the rest",
        request.max_tokens()
    );
}

fn note_answerer(model: &str, unavailable: &[String], node: Option<&str>) {
    if !unavailable.is_empty() {
        eprintln!(
            "note: no node for {}; answered by {model}",
            unavailable.join(", ")
        );
    }
    if let Some(node) = node {
        eprintln!("model {model}, node {node}");
    }
}

fn report_mismatch(errors: &[String]) {
    eprintln!("error: the answer does not conform to the schema:");
    for error in errors {
        eprintln!("  - {error}");
    }
}

fn data_url(path: &Path) -> anyhow::Result<String> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let media_type = match extension.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        other => anyhow::bail!(
            "--image {}: unsupported image type {:?} (png, jpeg, gif, webp)",
            path.display(),
            other.unwrap_or("")
        ),
    };
    let bytes = crate::input::read_bytes(path, crate::input::IMAGE_LIMIT)
        .with_context(|| format!("--image {}", path.display()))?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(format!("data:{media_type};base64,{encoded}"))
}

fn read_schema(path: &Path) -> anyhow::Result<JsonSchemaFormat> {
    let text = crate::input::read_text(path, crate::input::TEXT_LIMIT)
        .with_context(|| format!("--schema {}", path.display()))?;
    let schema: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("--schema {}: not JSON", path.display()))?;
    check_schema(&schema)
        .map_err(|reason| anyhow::anyhow!("--schema {}: {reason}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .unwrap_or("answer")
        .to_owned();
    Ok(JsonSchemaFormat { name, schema })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_become_base64_data_urls_by_extension() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pixel.PNG");
        std::fs::write(&path, [0x89, b'P', b'N', b'G']).unwrap();
        assert_eq!(data_url(&path).unwrap(), "data:image/png;base64,iVBORw==");
        let bmp = dir.path().join("x.bmp");
        std::fs::write(&bmp, [0]).unwrap();
        assert!(
            data_url(&bmp)
                .unwrap_err()
                .to_string()
                .contains("unsupported")
        );
    }

    #[test]
    fn schema_files_are_checked_and_named_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verdict.json");
        std::fs::write(&path, r#"{"type":"object"}"#).unwrap();
        assert_eq!(read_schema(&path).unwrap().name, "verdict");
        std::fs::write(&path, r#"{"type":"nope"}"#).unwrap();
        let err = read_schema(&path).unwrap_err().to_string();
        assert!(err.contains("verdict.json"), "{err}");
    }
}
