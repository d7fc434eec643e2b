"""The official openai, anthropic and google-genai SDKs, each against a model on each
upstream protocol (chat, messages, generate-content), streaming and not, with one
tool-call round trip each. Started by tests/integration/sdk.rs against the scripted
providers of tests/support/providers.rs, which refuse a second turn that lost the tool
call id or the thought signature they issued."""

import json
import os

import anthropic
import openai
import pytest
from google import genai
from google.genai import types

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY_ALL"]
ANSWER = "The weather in Paris is sunny."
UPSTREAMS = {
    "m-openai": "Hello from chat.",
    "m-anthropic": "Hello from messages.",
    "m-gemini": "Hello from gemini.",
}
MODELS = list(UPSTREAMS)

WEATHER_SCHEMA = {
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


# ---- openai: chat completions ----

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": WEATHER_SCHEMA,
        },
    }
]


@pytest.mark.parametrize("model", MODELS)
def test_openai_chat(oai, model):
    r = oai.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices[0].message.content == UPSTREAMS[model]
    assert r.model == model
    assert r.usage.prompt_tokens == 10 and r.usage.completion_tokens == 5
    assert r.usage.prompt_tokens_details.cached_tokens == 2


@pytest.mark.parametrize("model", MODELS)
def test_openai_chat_stream(oai, model):
    chunks = list(
        oai.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == UPSTREAMS[model]
    assert chunks[-1].usage.completion_tokens == 5


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_tool_round_trip(oai, model, stream):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        calls = {}
        finish = None
        for c in oai.chat.completions.create(
            model=model, messages=messages, tools=CHAT_TOOLS, stream=True
        ):
            for tc in c.choices[0].delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
                slot["id"] = tc.id or slot["id"]
                slot["name"] += (tc.function.name or "") if tc.function else ""
                slot["args"] += (tc.function.arguments or "") if tc.function else ""
            finish = c.choices[0].finish_reason or finish
        assert finish == "tool_calls"
        call = calls[0]
        call_id, name, args = call["id"], call["name"], call["args"]
    else:
        r = oai.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS)
        assert r.choices[0].finish_reason == "tool_calls"
        tc = r.choices[0].message.tool_calls[0]
        call_id, name, args = tc.id, tc.function.name, tc.function.arguments
    assert name == "get_weather" and json.loads(args) == {"city": "Paris"}
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "sunny, 22C"},
    ]
    r = oai.chat.completions.create(model=model, messages=messages, tools=CHAT_TOOLS)
    assert r.choices[0].message.content == ANSWER


# ---- openai: responses ----


@pytest.mark.parametrize("model", MODELS)
def test_openai_responses(oai, model):
    r = oai.responses.create(model=model, input="hi")
    assert r.output_text == UPSTREAMS[model]
    assert r.status == "completed"
    assert r.usage.input_tokens == 10 and r.usage.output_tokens == 5


@pytest.mark.parametrize("model", MODELS)
def test_openai_responses_stream(oai, model):
    with oai.responses.stream(model=model, input="hi") as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == UPSTREAMS[model]
    assert final.output_text == UPSTREAMS[model]


@pytest.mark.parametrize("model", MODELS)
def test_openai_responses_tool_round_trip(oai, model):
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER_SCHEMA}]
    r = oai.responses.create(model=model, input="Weather in Paris?", tools=tools)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    follow = [{"role": "user", "content": "Weather in Paris?"}] + [
        o.model_dump(exclude_none=True) for o in r.output
    ]
    follow.append(
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 22C"}
    )
    r = oai.responses.create(model=model, input=follow, tools=tools)
    assert r.output_text == ANSWER


# ---- anthropic: messages ----

ANT_TOOLS = [{"name": "get_weather", "description": "Weather of a city", "input_schema": WEATHER_SCHEMA}]


@pytest.mark.parametrize("model", MODELS)
def test_anthropic_messages(ant, model):
    r = ant.messages.create(
        model=model, max_tokens=200, messages=[{"role": "user", "content": "hi"}]
    )
    assert "".join(b.text for b in r.content if b.type == "text") == UPSTREAMS[model]
    assert r.stop_reason == "end_turn"
    assert r.usage.output_tokens == 5
    assert r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) == 10


@pytest.mark.parametrize("model", MODELS)
def test_anthropic_messages_stream(ant, model):
    with ant.messages.stream(
        model=model, max_tokens=200, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == UPSTREAMS[model]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_round_trip(ant, model, stream):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        with ant.messages.stream(
            model=model, max_tokens=200, messages=messages, tools=ANT_TOOLS
        ) as s:
            r = s.get_final_message()
    else:
        r = ant.messages.create(model=model, max_tokens=200, messages=messages, tools=ANT_TOOLS)
    assert r.stop_reason == "tool_use"
    use = next(b for b in r.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 22C"}],
        },
    ]
    r = ant.messages.create(model=model, max_tokens=200, messages=messages, tools=ANT_TOOLS)
    assert "".join(b.text for b in r.content if b.type == "text") == ANSWER


def test_anthropic_validation_error(ant):
    with pytest.raises(anthropic.BadRequestError) as e:
        ant.messages.create(
            model="m-openai",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            # spec 8: temperature is 0..1 on the messages protocol.
            extra_body={"temperature": 1.5},
        )
    assert "request id:" in str(e.value)


# ---- google-genai: generate-content ----

GEN_TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="get_weather",
                description="Weather of a city",
                parameters_json_schema=WEATHER_SCHEMA,
            )
        ]
    )
]
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)


@pytest.mark.parametrize("model", MODELS)
def test_genai_generate(gen, model):
    r = gen.models.generate_content(model=model, contents="hi")
    assert r.text == UPSTREAMS[model]
    assert r.usage_metadata.prompt_token_count == 10
    assert r.usage_metadata.candidates_token_count == 5


@pytest.mark.parametrize("model", MODELS)
def test_genai_generate_stream(gen, model):
    chunks = list(gen.models.generate_content_stream(model=model, contents="hi"))
    assert "".join(c.text or "" for c in chunks) == UPSTREAMS[model]
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_genai_tool_round_trip(gen, model, stream):
    config = types.GenerateContentConfig(tools=GEN_TOOLS, automatic_function_calling=NO_AUTO)
    user = types.Content(role="user", parts=[types.Part.from_text(text="Weather in Paris?")])
    if stream:
        parts = []
        for c in gen.models.generate_content_stream(model=model, contents=[user], config=config):
            if c.candidates and c.candidates[0].content and c.candidates[0].content.parts:
                parts += c.candidates[0].content.parts
        reply = types.Content(role="model", parts=parts)
    else:
        r = gen.models.generate_content(model=model, contents=[user], config=config)
        reply = r.candidates[0].content
    calls = [p.function_call for p in reply.parts if p.function_call]
    assert calls and calls[0].name == "get_weather" and calls[0].args == {"city": "Paris"}
    result = types.Part.from_function_response(name="get_weather", response={"result": "sunny, 22C"})
    if calls[0].id:
        result.function_response.id = calls[0].id
    r = gen.models.generate_content(
        model=model,
        contents=[user, reply, types.Content(role="user", parts=[result])],
        config=config,
    )
    assert r.text == ANSWER


def test_genai_unknown_model_is_an_error(gen):
    with pytest.raises(genai.errors.ClientError) as e:
        gen.models.generate_content(model="no-such-model", contents="hi")
    assert e.value.code == 404
