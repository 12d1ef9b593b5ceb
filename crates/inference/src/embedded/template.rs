//! Turning chat messages into the prompt text a model was trained on, with the model's own chat
//! template: the Jinja text stored in the GGUF file (`tokenizer.chat_template`), rendered with
//! minijinja as the Hugging Face tokenizer would render it. Templates that use Python-only
//! string methods may fail here; the caller then falls back to llama.cpp's built-in version of
//! the template family.
use minijinja::{Environment, Error, ErrorKind, Value, context};

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`. `bos_token` and `eos_token` are the texts templates may refer to.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, Error> {
        let mut env = Environment::new();
        // Hugging Face renders with these: blocks own their newline, leading spaces of a block
        // line are dropped.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, Error> {
                Err(Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_function("strftime_now", |format: String| {
            chrono::Local::now().format(&format).to_string()
        });
        env.add_template_owned(NAME, source.to_owned())?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The prompt for `messages` (role, text), ending where the assistant's answer starts.
    pub fn render(&self, messages: &[(&str, &str)]) -> Result<String, Error> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|(role, content)| context! { role => *role, content => *content })
            .collect();
        self.env.get_template(NAME)?.render(context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template of the Qwen2.5 GGUF files in the catalog, without its tool-call branches.
    const QWEN: &str = r#"{%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

    /// SmolLM2's, which uses plain `{% %}` blocks and so depends on trim_blocks.
    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn qwen_gets_its_default_system_prompt_and_an_open_assistant_turn() {
        let template = ChatTemplate::new(QWEN, "", "<|im_end|>").unwrap();
        let prompt = template.render(&[("user", "Hi")]).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let prompt = template
            .render(&[("system", "Be brief."), ("user", "Hi")])
            .unwrap();
        assert!(prompt.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"));
    }

    #[test]
    fn smollm_renders_like_hugging_face() {
        let template = ChatTemplate::new(SMOL, "<|im_start|>", "<|im_end|>").unwrap();
        let prompt = template.render(&[("user", "Hi")]).unwrap();
        assert_eq!(
            prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_is_an_error_not_a_prompt() {
        let template =
            ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "", "").unwrap();
        let err = template.render(&[("user", "Hi")]).unwrap_err();
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }
}
