"""The official openai, anthropic and google-genai SDKs against a gateway whose model
`claude-bedrock` is served by a `bedrock` channel (tests/support/bedrock_mock.py behind
it): the four client protocols, streamed and not, with text, tools, an image, reasoning
and prompt-cache usage, a vendor error, a throttled answer and a stream that ends with an
exception, all through the Converse API. Run by
tests/integration/bedrock.rs, which reads the usage the mock reports from its docstring:
inputTokens 25, outputTokens 12 (+30 with reasoning, +8 with a tool call), and with
cache points 1000 cache reads and 200 cache writes."""

import base64
import json
import os

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY"]
MODEL = "claude-bedrock"
HELLO = "Hello from Bedrock."
PNG = b"\x89PNG\r\n\x1a\n"
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
SIGNATURE = "EqQBCkYIBBgCKkBmb2N1c2VkX3NpZ25hdHVyZQ=="
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


@pytest.fixture
def ant():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)


@pytest.fixture
def gen():
    return genai.Client(
        api_key=KEY,
        http_options=types.HttpOptions(base_url=BASE, api_version="v1beta"),
    )


# ---- chat completions ----

CHAT_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city", "parameters": WEATHER}}]


def test_chat_text(oai):
    r = oai.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert r.choices[0].message.content.startswith(HELLO)
    assert r.choices[0].finish_reason == "stop"
    assert r.model == MODEL
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (25, 12)


def test_chat_stream(oai):
    chunks = list(oai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith(HELLO)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]
    assert chunks[-1].usage.prompt_tokens == 25 and chunks[-1].usage.completion_tokens == 12


@pytest.mark.parametrize("stream", [False, True])
def test_chat_tools_round_trip(oai, stream):
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        chunks = list(oai.chat.completions.create(
            model=MODEL, messages=msgs, tools=CHAT_TOOLS, tool_choice="required", stream=True))
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        call_id = next(tc.id for tc in calls if tc.id)
        name = next(tc.function.name for tc in calls if tc.function and tc.function.name)
        args = "".join(tc.function.arguments or "" for tc in calls if tc.function)
    else:
        r = oai.chat.completions.create(
            model=MODEL, messages=msgs, tools=CHAT_TOOLS, tool_choice="required")
        assert r.choices[0].finish_reason == "tool_calls"
        tc = r.choices[0].message.tool_calls[0]
        call_id, name, args = tc.id, tc.function.name, tc.function.arguments
    assert name == "get_weather" and json.loads(args) == {"city": "Paris"}
    # The second turn: the call and its result go back (Converse requires toolConfig and
    # matching ids, which the mock checks).
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "Sunny"},
    ]
    r = oai.chat.completions.create(model=MODEL, messages=msgs, tools=CHAT_TOOLS)
    assert r.choices[0].message.content.startswith(HELLO)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_image(oai, stream):
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": PNG_URL}}]}]
    if stream:
        chunks = oai.chat.completions.create(model=MODEL, messages=messages, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = oai.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content
    assert "I see png:8." in text


def test_chat_image_by_url_is_refused_cleanly(oai):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])


@pytest.mark.parametrize("stream", [False, True])
def test_chat_reasoning(oai, stream):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "think"}],
              reasoning_effort="low", max_completion_tokens=4000)
    if stream:
        chunks = list(oai.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        thought = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                          for c in chunks if c.choices)
        usage = chunks[-1].usage
    else:
        r = oai.chat.completions.create(**kw)
        text, usage = r.choices[0].message.content, r.usage
        thought = (r.choices[0].message.model_extra or {}).get("reasoning_content")
    assert text.startswith(HELLO) and thought
    assert usage.completion_tokens == 42


def test_chat_vendor_error_and_throttling(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "VENDOR_ERROR"}])
    assert "temperature" not in str(e.value)
    with pytest.raises(openai.RateLimitError):
        oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "THROTTLE"}])


# ---- messages ----

ANT_TOOLS = [{"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER}]


def test_messages_text_and_stream(ant):
    r = ant.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert r.content[0].text.startswith(HELLO)
    assert r.stop_reason == "end_turn"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (25, 12)
    with ant.messages.stream(model=MODEL, max_tokens=100,
                             messages=[{"role": "user", "content": "hi"}]) as s:
        m = s.get_final_message()
    assert m.content[0].text.startswith(HELLO)
    assert m.usage.output_tokens == 12


@pytest.mark.parametrize("stream", [False, True])
def test_messages_cache_tokens(ant, stream):
    kw = dict(model=MODEL, max_tokens=100,
              system=[{"type": "text", "text": "A long shared prefix.", "cache_control": {"type": "ephemeral"}}],
              tools=[dict(ANT_TOOLS[0], cache_control={"type": "ephemeral"})],
              messages=[{"role": "user", "content": [
                  {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}])
    if stream:
        with ant.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = ant.messages.create(**kw)
    assert "cachePoints=3." in m.content[0].text
    u = m.usage
    assert (u.input_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens) == (25, 1000, 200)


@pytest.mark.parametrize("stream", [False, True])
def test_messages_thinking_and_tools_round_trip(ant, stream):
    kw = dict(model=MODEL, max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 2000},
              tools=ANT_TOOLS, messages=[{"role": "user", "content": "Weather in Paris? TOOL"}])
    if stream:
        with ant.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = ant.messages.create(**kw)
    kinds = [b.type for b in m.content]
    assert kinds == ["thinking", "text", "tool_use"], kinds
    assert m.content[0].signature == SIGNATURE
    assert m.stop_reason == "tool_use"
    call = m.content[2]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}
    # Back with the signed thinking and the result: the mock refuses unsigned reasoning.
    r = ant.messages.create(**dict(kw, messages=kw["messages"] + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny"}]},
    ]))
    assert r.content[0].type == "thinking"


@pytest.mark.parametrize("stream", [False, True])
def test_messages_image(ant, stream):
    kw = dict(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(PNG).decode()}},
        {"type": "text", "text": "What is this?"}]}])
    if stream:
        with ant.messages.stream(**kw) as s:
            r = s.get_final_message()
    else:
        r = ant.messages.create(**kw)
    assert "I see png:8." in r.content[0].text


def test_messages_errors(ant):
    with pytest.raises(anthropic.RateLimitError):
        ant.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "THROTTLE"}])
    with pytest.raises(anthropic.APIError):
        with ant.messages.stream(model=MODEL, max_tokens=100,
                                 messages=[{"role": "user", "content": "STREAM_EXCEPTION"}]) as s:
            s.get_final_message()


# ---- generate-content ----

def test_generate_content_text_and_stream(gen):
    r = gen.models.generate_content(model=MODEL, contents="hi")
    assert r.text.startswith(HELLO)
    assert r.usage_metadata.prompt_token_count == 25
    assert r.usage_metadata.candidates_token_count == 12
    text = "".join(c.text or "" for c in gen.models.generate_content_stream(model=MODEL, contents="hi"))
    assert text.startswith(HELLO)


@pytest.mark.parametrize("stream", [False, True])
def test_generate_content_tools(gen, stream):
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(
            name="get_weather", description="Weather of a city", parameters=WEATHER)])],
        tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")),
    )
    if stream:
        calls = [fc for c in gen.models.generate_content_stream(
            model=MODEL, contents="Weather in Paris?", config=config) for fc in (c.function_calls or [])]
    else:
        calls = gen.models.generate_content(model=MODEL, contents="Weather in Paris?", config=config).function_calls
    assert calls[0].name == "get_weather" and calls[0].args == {"city": "Paris"}


@pytest.mark.parametrize("stream", [False, True])
def test_generate_content_image_and_thoughts(gen, stream):
    def parts(contents, config=None):
        if not stream:
            return gen.models.generate_content(model=MODEL, contents=contents, config=config).candidates[0].content.parts
        return [p for c in gen.models.generate_content_stream(model=MODEL, contents=contents, config=config)
                if c.candidates and c.candidates[0].content for p in c.candidates[0].content.parts or []]
    said = parts([types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"])
    assert "I see png:8." in "".join(p.text or "" for p in said)
    said = parts("think", types.GenerateContentConfig(
        max_output_tokens=4000,
        thinking_config=types.ThinkingConfig(thinking_budget=2000, include_thoughts=True)))
    assert any(p.thought for p in said)
    assert "".join(p.text or "" for p in said if not p.thought).startswith(HELLO)


# ---- responses ----

def test_responses_text_and_stream(oai):
    r = oai.responses.create(model=MODEL, input="hi")
    assert r.output_text.startswith(HELLO)
    assert (r.usage.input_tokens, r.usage.output_tokens) == (25, 12)
    events = list(oai.responses.create(model=MODEL, input="hi", stream=True))
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1 and done[0].response.output_text.startswith(HELLO)
    assert done[0].response.usage.output_tokens == 12


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tools(oai, stream):
    kw = dict(model=MODEL, input="Weather in Paris?", tool_choice="required",
              tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER}])
    if stream:
        events = list(oai.responses.create(stream=True, **kw))
        r = [e for e in events if e.type == "response.completed"][0].response
    else:
        r = oai.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}


@pytest.mark.parametrize("stream", [False, True])
def test_responses_image_and_reasoning(oai, stream):
    def respond(**kw):
        if not stream:
            return oai.responses.create(model=MODEL, **kw)
        with oai.responses.stream(model=MODEL, **kw) as s:
            for _ in s:
                pass
            return s.get_final_response()
    r = respond(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": PNG_URL}]}])
    assert "I see png:8." in r.output_text
    r = respond(input="think", reasoning={"effort": "low"}, max_output_tokens=4000)
    assert r.output_text.startswith(HELLO)
    assert r.usage.output_tokens == 42
    assert any(o.type == "reasoning" for o in r.output)


# ---- errors in every client protocol, streamed and not ----

def ask_every_protocol(oai, ant, gen, stream, text):
    """One request of each client protocol whose prompt is `text`, consumed whole."""
    def chat():
        r = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], stream=stream)
        return list(r) if stream else r

    def messages():
        kw = dict(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": text}])
        if not stream:
            return ant.messages.create(**kw)
        with ant.messages.stream(**kw) as s:
            return s.get_final_message()

    def generate():
        if not stream:
            return gen.models.generate_content(model=MODEL, contents=text)
        return list(gen.models.generate_content_stream(model=MODEL, contents=text))

    def responses():
        r = oai.responses.create(model=MODEL, input=text, stream=stream)
        return list(r) if stream else r

    return {"chat": chat, "messages": messages, "generate": generate, "responses": responses}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["chat", "messages", "generate", "responses"])
def test_vendor_error_and_throttling_in_every_protocol(oai, ant, gen, stream, protocol):
    kinds = {"chat": (openai.BadRequestError, openai.RateLimitError),
             "responses": (openai.BadRequestError, openai.RateLimitError),
             "messages": (anthropic.BadRequestError, anthropic.RateLimitError),
             "generate": (genai.errors.ClientError, genai.errors.ClientError)}[protocol]
    for text, kind, status in [("VENDOR_ERROR", kinds[0], 400), ("THROTTLE", kinds[1], 429)]:
        with pytest.raises(kind) as e:
            ask_every_protocol(oai, ant, gen, stream, text)[protocol]()
        assert (getattr(e.value, "status_code", None) or e.value.code) == status
        assert "temperature" not in str(e.value) and "Too many requests" not in str(e.value)
    # A 429 counts toward the channel's circuit; an answered request keeps it closed.
    oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("protocol", ["chat", "messages", "generate", "responses"])
def test_a_stream_exception_raises_in_every_protocol(oai, ant, gen, protocol):
    kind = {"chat": openai.APIError, "responses": openai.APIError,
            "messages": anthropic.APIError, "generate": genai.errors.APIError}[protocol]
    with pytest.raises(kind) as e:
        ask_every_protocol(oai, ant, gen, True, "STREAM_EXCEPTION")[protocol]()
    assert "request id" in str(e.value) and "received 500" not in str(e.value)
