"""The official openai, anthropic and google-genai SDKs against a gateway whose models are
served by `vertex` channels (tests/support/vertex_mock.py): a Gemini model and a Claude
model, each from the four client protocols, streamed and not: text, tools (a round trip),
an image, reasoning, cache reads (and Claude's cache writes), a vendor error, a throttled
answer and a stream that fails after it started. Run by tests/integration/vertex.rs with
pytest (one run per test)."""

import base64
import json
import os

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY"]
ANSWER = "The weather in Paris is sunny."
TEXT = {
    "gemini-2.5-flash": "Hello from Vertex Gemini.",
    "claude-on-vertex": "Hello from Vertex Claude.",
}
MODELS = list(TEXT)
STREAM = [False, True]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PNG = b"\x89PNG\r\n\x1a\n"
PNG_B64 = base64.b64encode(PNG).decode()
PNG_URL = "data:image/png;base64," + PNG_B64
SEEN = " I see image/png:8."
THOUGHT = "Thinking it over."


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def ant():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)


@pytest.fixture
def gen():
    return genai.Client(
        api_key=KEY, http_options=types.HttpOptions(base_url=BASE, api_version="v1beta")
    )


# ---- chat completions ----


def chat(oai, model, stream, content, **kw):
    """(text, tool calls, finish reason, usage) of one chat request."""
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    if not stream:
        r = oai.chat.completions.create(model=model, messages=messages, **kw)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        return m.content or "", calls, r.choices[0].finish_reason, r.usage
    text, calls, finish, usage = "", {}, None, None
    for c in oai.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}, **kw
    ):
        usage = c.usage or usage
        if not c.choices:
            continue
        d = c.choices[0].delta
        text += d.content or ""
        for tc in d.tool_calls or []:
            slot = calls.setdefault(tc.index, ["", "", ""])
            slot[0] = tc.id or slot[0]
            slot[1] += tc.function.name or ""
            slot[2] += tc.function.arguments or ""
        finish = c.choices[0].finish_reason or finish
    return text, [tuple(v) for v in calls.values()], finish, usage


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_chat_text_and_cache_reads(oai, model, stream):
    text, _, finish, usage = chat(oai, model, stream, "hi")
    assert (text, finish) == (TEXT[model], "stop")
    assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 5)
    text, _, _, usage = chat(oai, model, stream, "[cache] hi")
    assert text == TEXT[model]
    assert usage.prompt_tokens == 3000
    assert usage.prompt_tokens_details.cached_tokens == 2000


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_chat_tool_round_trip(oai, model, stream):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    _, calls, finish, _ = chat(oai, model, stream, "[tool] Weather in Paris?", tools=tools)
    assert finish == "tool_calls"
    call_id, name, args = calls[0]
    assert name == "get_weather" and json.loads(args) == {"city": "Paris"}
    follow = [
        {"role": "user", "content": "[tool] Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "sunny, 22C"},
    ]
    text, _, _, _ = chat(oai, model, stream, follow, tools=tools)
    assert text == ANSWER


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_chat_vendor_error_and_throttling(oai, model, stream):
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai, model, stream, "[vendor-error] hi")
    assert e.value.status_code == 400
    with pytest.raises(openai.RateLimitError) as e:
        chat(oai, model, stream, "[throttle] hi")
    assert e.value.status_code == 429


# ---- responses ----


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_responses_text_and_cache_reads(oai, model, stream):
    if stream:
        with oai.responses.stream(model=model, input="[cache] hi") as s:
            deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
            r = s.get_final_response()
        assert "".join(deltas) == TEXT[model]
    else:
        r = oai.responses.create(model=model, input="[cache] hi")
    assert r.output_text == TEXT[model] and r.status == "completed"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (3000, 5)
    assert r.usage.input_tokens_details.cached_tokens == 2000


def respond(oai, stream, **kw):
    """The whole response, from the stream's final event when streamed."""
    if not stream:
        return oai.responses.create(**kw)
    with oai.responses.stream(**kw) as s:
        for _ in s:
            pass
        return s.get_final_response()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_responses_tool_round_trip(oai, model, stream):
    tools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    r = respond(oai, stream, model=model, input="[tool] Weather in Paris?", tools=tools)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    follow = [{"role": "user", "content": "[tool] Weather in Paris?"}]
    follow += [o.model_dump(exclude_none=True) for o in r.output]
    follow.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"})
    assert respond(oai, stream, model=model, input=follow, tools=tools).output_text == ANSWER


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_responses_vendor_error_and_throttling(oai, model, stream):
    with pytest.raises(openai.BadRequestError):
        respond(oai, stream, model=model, input="[vendor-error] hi")
    with pytest.raises(openai.RateLimitError):
        respond(oai, stream, model=model, input="[throttle] hi")


# ---- messages ----


def message(ant, model, stream, messages, **kw):
    kw = dict(model=model, max_tokens=500, messages=messages, **kw)
    if not stream:
        return ant.messages.create(**kw)
    with ant.messages.stream(**kw) as s:
        return s.get_final_message()


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_messages_text_reasoning_and_cache_reads(ant, model, stream):
    r = message(ant, model, stream, [{"role": "user", "content": "[think][cache] hi"}])
    assert "".join(b.text for b in r.content if b.type == "text") == TEXT[model]
    thinking = [b for b in r.content if b.type == "thinking"]
    assert thinking and thinking[0].thinking == "Thinking it over."
    if model.startswith("claude"):
        assert thinking[0].signature == "sig-vertex-1"
    assert r.stop_reason == "end_turn"
    assert r.usage.cache_read_input_tokens == 2000
    assert r.usage.input_tokens == 1000


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_messages_tool_round_trip(ant, model, stream):
    tools = [{"name": "get_weather", "input_schema": SCHEMA}]
    ask = [{"role": "user", "content": "[tool] Weather in Paris?"}]
    r = message(ant, model, stream, ask, tools=tools)
    assert r.stop_reason == "tool_use"
    use = [b for b in r.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    follow = ask + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]},
    ]
    r = message(ant, model, stream, follow, tools=tools)
    assert "".join(b.text for b in r.content if b.type == "text") == ANSWER


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_messages_vendor_error_and_throttling(ant, model, stream):
    with pytest.raises(anthropic.BadRequestError):
        message(ant, model, stream, [{"role": "user", "content": "[vendor-error] hi"}])
    with pytest.raises(anthropic.RateLimitError):
        message(ant, model, stream, [{"role": "user", "content": "[throttle] hi"}])


# ---- generate content ----


def generate(gen, model, stream, contents, **kw):
    """(text, function calls, usage metadata)."""
    config = types.GenerateContentConfig(**kw) if kw else None
    if not stream:
        r = gen.models.generate_content(model=model, contents=contents, config=config)
        return r.text or "", r.function_calls or [], r.usage_metadata
    text, calls, usage = "", [], None
    for c in gen.models.generate_content_stream(model=model, contents=contents, config=config):
        parts = c.candidates[0].content.parts if c.candidates and c.candidates[0].content else []
        for p in parts or []:
            if p.text and not p.thought:
                text += p.text
            if p.function_call:
                calls.append(p.function_call)
        usage = c.usage_metadata or usage
    return text, calls, usage


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_generate_content_text_and_cache_reads(gen, model, stream):
    text, _, usage = generate(gen, model, stream, "[cache] hi")
    assert text == TEXT[model]
    assert usage.prompt_token_count == 3000
    assert usage.cached_content_token_count == 2000
    assert usage.candidates_token_count == 5


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_generate_content_tool_round_trip(gen, model, stream):
    tool = types.Tool(
        function_declarations=[types.FunctionDeclaration(name="get_weather", parameters_json_schema=SCHEMA)]
    )
    ask = types.Content(role="user", parts=[types.Part(text="[tool] Weather in Paris?")])
    _, calls, _ = generate(gen, model, stream, [ask], tools=[tool])
    assert calls[0].name == "get_weather" and calls[0].args == {"city": "Paris"}
    follow = [
        ask,
        types.Content(role="model", parts=[types.Part(function_call=calls[0])]),
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"result": "sunny"})],
        ),
    ]
    text, _, _ = generate(gen, model, stream, follow, tools=[tool])
    assert text == ANSWER


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_generate_content_vendor_error_and_throttling(gen, model, stream):
    with pytest.raises(genai_errors.ClientError) as e:
        generate(gen, model, stream, "[vendor-error] hi")
    assert e.value.code == 400
    with pytest.raises(genai_errors.ClientError) as e:
        generate(gen, model, stream, "[throttle] hi")
    assert e.value.code == 429


# ---- images, reasoning, cache writes and failed streams, in each client protocol ----


def chat_stream_until_error(oai, model):
    """The text a chat stream delivered before the SDK raised."""
    text = ""
    with pytest.raises(openai.APIError) as e:
        for c in oai.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "[stream-error] hi"}], stream=True
        ):
            text += (c.choices[0].delta.content or "") if c.choices else ""
    return text, e.value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_chat_image(oai, model, stream):
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    text, _, finish, _ = chat(oai, model, stream, [{"role": "user", "content": content}])
    assert (text, finish) == (TEXT[model] + SEEN, "stop")


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_chat_reasoning(oai, model, stream):
    messages = [{"role": "user", "content": "[think] hi"}]
    if stream:
        thought, text = "", ""
        for c in oai.chat.completions.create(model=model, messages=messages, stream=True):
            if c.choices:
                thought += (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                text += c.choices[0].delta.content or ""
    else:
        m = oai.chat.completions.create(model=model, messages=messages).choices[0].message
        thought, text = (m.model_extra or {}).get("reasoning_content"), m.content
    assert (thought, text) == (THOUGHT, TEXT[model])


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_that_fails_midway_raises(oai, model):
    text, error = chat_stream_until_error(oai, model)
    assert TEXT[model].startswith(text) and text, text
    assert "request id" in str(error) and "Overloaded" not in str(error) and "INTERNAL" not in str(error)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_responses_image_and_reasoning(oai, model, stream):
    image = [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": PNG_URL}]}]
    for given, said in [(image, TEXT[model] + SEEN), ("[think] hi", TEXT[model])]:
        r = respond(oai, stream, model=model, input=given)
        assert r.output_text == said and r.status == "completed"
    reasoning = [o for o in r.output if o.type == "reasoning"]
    assert reasoning and reasoning[0].summary[0].text == THOUGHT, r.output


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_that_fails_midway_raises(oai, model):
    deltas = []
    with pytest.raises(openai.APIError) as e:
        for ev in oai.responses.create(model=model, input="[stream-error] hi", stream=True):
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
    assert deltas and TEXT[model].startswith("".join(deltas))
    assert "request id" in str(e.value)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_messages_image(ant, model, stream):
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "text", "text": "What is this?"},
    ]
    r = message(ant, model, stream, [{"role": "user", "content": content}])
    assert "".join(b.text for b in r.content if b.type == "text") == TEXT[model] + SEEN


@pytest.mark.parametrize("stream", STREAM)
def test_messages_cache_writes_on_claude(ant, stream):
    r = message(ant, "claude-on-vertex", stream, [{"role": "user", "content": "[cache][cache-write] hi"}])
    u = r.usage
    assert (u.input_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens) == (1000, 2000, 500)


@pytest.mark.parametrize("model", MODELS)
def test_messages_stream_that_fails_midway_raises(ant, model):
    text = ""
    with pytest.raises(anthropic.APIError) as e:
        with ant.messages.stream(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "[stream-error] hi"}]
        ) as s:
            for t in s.text_stream:
                text += t
    assert text and TEXT[model].startswith(text), text
    assert "request id" in str(e.value)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_generate_content_image(gen, model, stream):
    contents = [types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"]
    text, _, _ = generate(gen, model, stream, contents)
    assert text == TEXT[model] + SEEN


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", STREAM)
def test_generate_content_reasoning(gen, model, stream):
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    if stream:
        parts = [p for c in gen.models.generate_content_stream(model=model, contents="[think] hi", config=config)
                 if c.candidates and c.candidates[0].content for p in c.candidates[0].content.parts or []]
    else:
        r = gen.models.generate_content(model=model, contents="[think] hi", config=config)
        parts = r.candidates[0].content.parts
    assert "".join(p.text for p in parts if p.thought) == THOUGHT
    assert "".join(p.text or "" for p in parts if not p.thought) == TEXT[model]


@pytest.mark.parametrize("model", MODELS)
def test_generate_content_stream_that_fails_midway_raises(gen, model):
    text = ""
    with pytest.raises(genai_errors.APIError) as e:
        for c in gen.models.generate_content_stream(model=model, contents="[stream-error] hi"):
            text += c.text or ""
    assert text and TEXT[model].startswith(text), text
    assert "request id" in str(e.value)
