//! The chat API (`/v1/chat/completions`): the request of one call whose
//! prompt is a user message, and a message text of an exact templated
//! length.
//!
//! The body is the completions call's, with `messages: [{role: user,
//! content}]` for `prompt` and `max_completion_tokens` for `max_tokens`
//! (vLLM takes both; `max_tokens` is deprecated in its chat protocol,
//! vllm/entrypoints/openai/chat_completion/protocol.py). Its stream carries
//! `usage` on every chunk as the completions stream does (the first chunk,
//! the assistant role, with `completion_tokens: 0`), so the same events
//! count its tokens.
//!
//! The prompt the engine sees is the message wrapped by the model's chat
//! template: its length (`usage.prompt_tokens`) is the message's tokens plus
//! the template's. vLLM's `/tokenize` takes `messages` and applies the
//! template (vllm/entrypoints/serve/tokenize/protocol.py,
//! `TokenizeChatRequest`), so [`Client::chat_text`] measures the template's
//! tokens, builds a message of the rest from the seeded words, and checks
//! the templated length before the call goes.

use serde::{Deserialize, Serialize};

use super::{CallError, CallSpec, Client, Generation, TokenizeBody};

#[derive(Serialize)]
struct ChatBody<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    max_completion_tokens: u32,
    #[serde(flatten)]
    generation: Generation<'a>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

/// `/tokenize` of a chat: the template applied, with the generation prompt
/// (the assistant turn's opening) the call's prompt ends with.
#[derive(Serialize)]
struct TokenizeChatBody<'a> {
    model: &'a str,
    messages: [Message<'a>; 1],
    add_generation_prompt: bool,
}

#[derive(Deserialize)]
struct Count {
    count: u32,
}

#[derive(Serialize)]
struct DetokenizeBody<'a> {
    model: &'a str,
    tokens: &'a [u32],
}

#[derive(Deserialize)]
struct DetokenizeReply {
    prompt: String,
}

/// Tries at a message of the exact length: each corrects the message's
/// token count by what the templated count missed (a text decoded from ids
/// cut mid-word may tokenize one token apart); two suffice in practice.
const CHAT_ATTEMPTS: usize = 4;

/// The streamed chat request of `spec`, whose prompt is the user message `text`.
pub(super) fn request(client: &Client, spec: &CallSpec, text: &str) -> reqwest::RequestBuilder {
    let body = ChatBody {
        model: &client.model,
        messages: [Message { role: "user", content: text }],
        max_completion_tokens: spec.output_tokens,
        generation: Generation::of(client, spec),
    };
    client.http.post(format!("{}/v1/chat/completions", client.base)).json(&body)
}

impl Client {
    /// Tokens of `text` as a user message in the model's chat template.
    async fn chat_tokens(&self, text: &str) -> Result<u32, CallError> {
        let body = TokenizeChatBody {
            model: &self.model,
            messages: [Message { role: "user", content: text }],
            add_generation_prompt: true,
        };
        Ok(self.json::<Count>("/tokenize", Some(&body)).await?.count)
    }

    /// A user message whose templated prompt is exactly `len` tokens, the
    /// same for the same `seed`: the template's own tokens measured on a
    /// seeded text, the rest taken as [`Client::prompt_ids`]' ids, decoded
    /// (`/detokenize`), and the templated length checked. A `len` below the
    /// template's tokens is an error: no message is that short.
    pub async fn chat_text(&self, len: u32, seed: u64) -> Result<String, CallError> {
        let probe = super::seeded_text(seed, 8);
        let plain = TokenizeBody { model: &self.model, prompt: &probe, add_special_tokens: false };
        let plain = self.json::<Count>("/tokenize", Some(&plain)).await?.count;
        let template = self.chat_tokens(&probe).await?.saturating_sub(plain);
        if len < template {
            return Err(CallError::Protocol(format!(
                "a chat prompt of {len} tokens is shorter than the model's chat template ({template} tokens \
                 around an empty message)"
            )));
        }
        let mut content = len - template;
        let mut got = 0;
        for _ in 0..CHAT_ATTEMPTS {
            let text = if content == 0 {
                String::new()
            } else {
                let ids = self.prompt_ids(content, seed).await?;
                let body = DetokenizeBody { model: &self.model, tokens: &ids };
                self.json::<DetokenizeReply>("/detokenize", Some(&body)).await?.prompt
            };
            got = self.chat_tokens(&text).await?;
            if got == len {
                return Ok(text);
            }
            let next = i64::from(content) + i64::from(len) - i64::from(got);
            if next < 0 {
                break;
            }
            content = next as u32;
        }
        Err(CallError::Protocol(format!(
            "no chat message of {len} templated tokens after {CHAT_ATTEMPTS} tries (the last gave {got})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chat_body_is_what_vllm_needs() {
        let client = Client::new("http://127.0.0.1:1", "tiny", std::time::Duration::from_secs(1))
            .unwrap()
            .with_cache_salt(Some("s".into()));
        let spec = CallSpec {
            prompt: super::super::Prompt::Chat("a b".into()),
            output_tokens: 3,
            priority: Some(5),
            headers: Vec::new(),
        };
        let body = ChatBody {
            model: "tiny",
            messages: [Message { role: "user", content: "a b" }],
            max_completion_tokens: 3,
            generation: Generation::of(&client, &spec),
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"model":"tiny","messages":[{"role":"user","content":"a b"}],"max_completion_tokens":3,"min_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"temperature":0,"priority":5,"cache_salt":"s"}"#
        );
    }
}
