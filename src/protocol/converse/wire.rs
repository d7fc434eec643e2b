//! The Converse API's wire members, as typed structs. Each names the part of the
//! "Amazon Bedrock API Reference" (Bedrock Runtime) it follows; members the gateway only
//! passes along are kept in a flattened `rest`, so nothing the upstream adds is lost and
//! the compiler knows every member that is read.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Amazon Bedrock API Reference: Converse, request body (also ConverseStream's).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<SystemContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inference_config: Option<InferenceConfiguration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_config: Option<ToolConfiguration>,
    /// Model-specific parameters the Converse API does not name (a Claude model's
    /// `thinking` and `top_k`).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub additional_model_request_fields: Map<String, Value>,
}

/// Amazon Bedrock API Reference: Message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// `user` or `assistant` (ConversationRole).
    pub role: String,
    pub content: Vec<ContentBlock>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ContentBlock (a union: exactly one member is set).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use: Option<ToolUseBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolResultBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<ReasoningContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_point: Option<CachePointBlock>,
    /// Members passed through (`document`, `video`, `guardContent`, `citationsContent`).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: SystemContentBlock.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SystemContentBlock {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_point: Option<CachePointBlock>,
}

/// Amazon Bedrock API Reference: CachePointBlock (`type`: `default`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CachePointBlock {
    #[serde(rename = "type")]
    pub kind: String,
}

impl CachePointBlock {
    pub fn default_point() -> CachePointBlock {
        CachePointBlock {
            kind: "default".into(),
        }
    }
}

/// Amazon Bedrock API Reference: ImageBlock (`format`: png, jpeg, gif, webp).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageBlock {
    pub format: String,
    pub source: ImageSource,
}

/// Amazon Bedrock API Reference: ImageSource (`bytes`, base64 in JSON; or an
/// `s3Location`, passed through).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ToolUseBlock.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolUseBlock {
    pub tool_use_id: String,
    pub name: String,
    #[serde(default)]
    pub input: Value,
}

/// Amazon Bedrock API Reference: ToolResultBlock (`status`: success or error).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultBlock {
    pub tool_use_id: String,
    pub content: Vec<ToolResultContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// Amazon Bedrock API Reference: ToolResultContentBlock (`text`, `image`; `json`,
/// `document`, `video` passed through).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolResultContentBlock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageBlock>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ReasoningContentBlock (a union: `reasoningText` or
/// `redactedContent`, base64).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningContentBlock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_text: Option<ReasoningTextBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted_content: Option<String>,
}

/// Amazon Bedrock API Reference: ReasoningTextBlock.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReasoningTextBlock {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Amazon Bedrock API Reference: InferenceConfiguration.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceConfiguration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
}

/// Amazon Bedrock API Reference: ToolConfiguration.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolConfiguration {
    pub tools: Vec<Tool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
}

/// Amazon Bedrock API Reference: Tool (a union: `toolSpec` or `cachePoint`).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_spec: Option<ToolSpecification>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_point: Option<CachePointBlock>,
}

/// Amazon Bedrock API Reference: ToolSpecification (`inputSchema`: ToolInputSchema,
/// `{"json": <JSON Schema>}`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpecification {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: Value,
}

/// Amazon Bedrock API Reference: Converse, response body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub output: ConverseOutput,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    /// `metrics`, `additionalModelResponseFields`, `trace`, `performanceConfig`.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ConverseOutput (a union; `message` is the one member).
#[derive(Debug, Deserialize)]
pub struct ConverseOutput {
    #[serde(default)]
    pub message: Option<Message>,
}

/// Amazon Bedrock API Reference: TokenUsage. `inputTokens` leaves out the tokens read
/// from and written to the prompt cache; `totalTokens` counts them.
#[derive(Debug, Default, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_write_input_tokens: u64,
}

// ---- ConverseStream events (Amazon Bedrock API Reference: ConverseStream,
// ConverseStreamOutput): one per event-stream message, named by `:event-type` ----

/// Amazon Bedrock API Reference: MessageStartEvent.
#[derive(Debug, Deserialize)]
pub struct MessageStartEvent {
    #[serde(default)]
    pub role: Option<String>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ContentBlockStartEvent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockStartEvent {
    pub content_block_index: u64,
    #[serde(default)]
    pub start: ContentBlockStart,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ContentBlockStart (`toolUse`: ToolUseBlockStart).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockStart {
    #[serde(default)]
    pub tool_use: Option<ToolUseBlockStart>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ToolUseBlockStart.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolUseBlockStart {
    pub tool_use_id: String,
    pub name: String,
}

/// Amazon Bedrock API Reference: ContentBlockDeltaEvent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockDeltaEvent {
    pub content_block_index: u64,
    pub delta: ContentBlockDelta,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ContentBlockDelta (a union).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentBlockDelta {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub tool_use: Option<ToolUseBlockDelta>,
    #[serde(default)]
    pub reasoning_content: Option<ReasoningContentBlockDelta>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ToolUseBlockDelta (`input`: a piece of the JSON text).
#[derive(Debug, Deserialize)]
pub struct ToolUseBlockDelta {
    pub input: String,
}

/// Amazon Bedrock API Reference: ReasoningContentBlockDelta (a union).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningContentBlockDelta {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub signature: Option<String>,
    #[serde(default)]
    pub redacted_content: Option<String>,
}

/// Amazon Bedrock API Reference: MessageStopEvent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageStopEvent {
    pub stop_reason: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// Amazon Bedrock API Reference: ConverseStreamMetadataEvent.
#[derive(Debug, Deserialize)]
pub struct MetadataEvent {
    #[serde(default)]
    pub usage: Option<TokenUsage>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}
