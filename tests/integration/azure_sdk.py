"""The official openai, anthropic and google-genai SDKs against Azure channels (run by
tests/integration/azure.rs with GATEWAY_BASE_URL and GATEWAY_KEY set)."""
import base64
import json
import os
import openai, anthropic
from google import genai
from google.genai import types

BASE, KEY = os.environ["GATEWAY_BASE_URL"], os.environ["GATEWAY_KEY"]
TEXT = "Hello from Azure"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
oai = openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)
ant = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
gen = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=BASE, api_version="v1beta"))
user = lambda t: [{"role": "user", "content": t}]

def raises(kind, f, status):
    try:
        f()
    except kind as e:
        code = getattr(e, "status_code", None) or getattr(e, "code", None)
        assert code == status, (code, e)
        assert "internal-host" not in str(e), e
        return e
    raise AssertionError(f"no {kind.__name__}")

for M in ["gpt-4o", "gpt-4o-v1"]:
    # chat
    r = oai.chat.completions.create(model=M, messages=user("hi"))
    assert r.choices[0].message.content == TEXT, r
    assert r.usage.prompt_tokens == 1200 and r.usage.prompt_tokens_details.cached_tokens == 1000, r.usage
    chunks = list(oai.chat.completions.create(model=M, messages=user("hi"), stream=True,
                                              stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 1000, chunks[-1]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    r = oai.chat.completions.create(model=M, messages=user("Weather in Paris?"), tools=tools)
    call = r.choices[0].message.tool_calls[0].function
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}'), r
    name, args = "", ""
    for c in oai.chat.completions.create(model=M, messages=user("Weather?"), tools=tools, stream=True):
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            name += tc.function.name or ""
            args += tc.function.arguments or ""
    assert (name, args) == ("get_weather", '{"city":"Paris"}'), (name, args)
    raises(openai.BadRequestError, lambda: oai.chat.completions.create(model=M, messages=user("VENDOR_ERROR")), 400)
    raises(openai.RateLimitError, lambda: oai.chat.completions.create(model=M, messages=user("THROTTLE")), 429)
    e = raises(openai.BadRequestError, lambda: oai.chat.completions.create(model=M, messages=user("FILTER_PROMPT")), 400)
    assert e.code == "content_filter", e.body
    r = oai.chat.completions.create(model=M, messages=user("FILTER_OUTPUT"))
    assert r.choices[0].finish_reason == "content_filter", r
    chunks = list(oai.chat.completions.create(model=M, messages=user("FILTER_OUTPUT"), stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "content_filter"

    # messages
    m = ant.messages.create(model=M, max_tokens=100, messages=user("hi"))
    assert m.content[0].text == TEXT and m.stop_reason == "end_turn", m
    assert m.usage.cache_read_input_tokens == 1000 and m.usage.input_tokens == 200, m.usage
    with ant.messages.stream(model=M, max_tokens=100, messages=user("hi")) as s:
        assert "".join(s.text_stream) == TEXT
        final = s.get_final_message()
    assert final.usage.cache_read_input_tokens == 1000 and final.usage.output_tokens == 50, final.usage
    atools = [{"name": "get_weather", "input_schema": SCHEMA}]
    m = ant.messages.create(model=M, max_tokens=100, messages=user("Weather?"), tools=atools)
    assert m.stop_reason == "tool_use" and m.content[-1].input == {"city": "Paris"}, m
    with ant.messages.stream(model=M, max_tokens=100, messages=user("Weather?"), tools=atools) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == {"city": "Paris"}, final
    raises(anthropic.BadRequestError, lambda: ant.messages.create(model=M, max_tokens=9, messages=user("VENDOR_ERROR")), 400)
    raises(anthropic.RateLimitError, lambda: ant.messages.create(model=M, max_tokens=9, messages=user("THROTTLE")), 429)
    for prompt in ["FILTER_PROMPT", "FILTER_OUTPUT"]:
        m = ant.messages.create(model=M, max_tokens=100, messages=user(prompt))
        assert m.stop_reason == "refusal", m
        with ant.messages.stream(model=M, max_tokens=100, messages=user(prompt)) as s:
            assert s.get_final_message().stop_reason == "refusal"

    # generate-content
    r = gen.models.generate_content(model=M, contents="hi")
    assert r.text == TEXT, r
    assert r.usage_metadata.prompt_token_count == 1200 and r.usage_metadata.cached_content_token_count == 1000, r.usage_metadata
    chunks = list(gen.models.generate_content_stream(model=M, contents="hi"))
    assert "".join(c.text or "" for c in chunks) == TEXT
    assert chunks[-1].usage_metadata.cached_content_token_count == 1000, chunks[-1]
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(name="get_weather", parameters_json_schema=SCHEMA)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    r = gen.models.generate_content(model=M, contents="Weather?", config=config)
    fc = r.candidates[0].content.parts[0].function_call
    assert fc.name == "get_weather" and fc.args == {"city": "Paris"}, r
    calls = [p.function_call for c in gen.models.generate_content_stream(model=M, contents="Weather?", config=config)
             if c.candidates and c.candidates[0].content and c.candidates[0].content.parts
             for p in c.candidates[0].content.parts if p.function_call]
    assert calls and calls[0].args == {"city": "Paris"}, calls
    raises(genai.errors.ClientError, lambda: gen.models.generate_content(model=M, contents="VENDOR_ERROR"), 400)
    raises(genai.errors.ClientError, lambda: gen.models.generate_content(model=M, contents="THROTTLE"), 429)
    for prompt in ["FILTER_PROMPT", "FILTER_OUTPUT"]:
        r = gen.models.generate_content(model=M, contents=prompt)
        assert r.candidates[0].finish_reason == types.FinishReason.SAFETY, r
        chunks = list(gen.models.generate_content_stream(model=M, contents=prompt))
        assert chunks[-1].candidates[0].finish_reason == types.FinishReason.SAFETY, chunks[-1]

    # responses (through chat on `gpt-4o`, natively on `gpt-4o-v1`)
    r = oai.responses.create(model=M, input="hi")
    assert r.output_text == TEXT and r.usage.input_tokens_details.cached_tokens == 1000, r
    events = list(oai.responses.create(model=M, input="hi", stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT
    assert events[-1].type == "response.completed", events[-1]
    assert events[-1].response.usage.input_tokens_details.cached_tokens == 1000
    raises(openai.BadRequestError, lambda: oai.responses.create(model=M, input="VENDOR_ERROR"), 400)
    raises(openai.RateLimitError, lambda: oai.responses.create(model=M, input="THROTTLE"), 429)
    rtools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    r = oai.responses.create(model=M, input="Weather?", tools=rtools)
    fc = [o for o in r.output if o.type == "function_call"][0]
    assert fc.name == "get_weather" and fc.arguments == '{"city":"Paris"}', r
    with oai.responses.stream(model=M, input="Weather?", tools=rtools) as s:
        args = "".join(e.delta for e in s if e.type == "response.function_call_arguments.delta")
        fc = [o for o in s.get_final_response().output if o.type == "function_call"][0]
    assert fc.name == "get_weather" and json.loads(args) == json.loads(fc.arguments) == {"city": "Paris"}, fc
    if M == "gpt-4o":
        for prompt in ["FILTER_PROMPT", "FILTER_OUTPUT"]:
            r = oai.responses.create(model=M, input=prompt)
            assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter", r
            last = list(oai.responses.create(model=M, input=prompt, stream=True))[-1]
            assert last.response.incomplete_details.reason == "content_filter", last
# images in, each client protocol, streamed and not
PNG = b"\x89PNG\r\n\x1a\n"
PNG_B64 = base64.b64encode(PNG).decode()
PNG_URL = "data:image/png;base64," + PNG_B64
SEEN = TEXT + ". I see image/png:8."
for M in ["gpt-4o", "gpt-4o-v1"]:
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG_URL}}]
    r = oai.chat.completions.create(model=M, messages=user(content))
    assert r.choices[0].message.content == SEEN, r
    chunks = oai.chat.completions.create(model=M, messages=user(content), stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SEEN
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
               {"type": "text", "text": "What is this?"}]
    assert ant.messages.create(model=M, max_tokens=100, messages=user(content)).content[0].text == SEEN
    with ant.messages.stream(model=M, max_tokens=100, messages=user(content)) as s:
        assert "".join(s.text_stream) == SEEN
    contents = [types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"]
    assert gen.models.generate_content(model=M, contents=contents).text == SEEN
    assert "".join(c.text or "" for c in gen.models.generate_content_stream(model=M, contents=contents)) == SEEN
    given = [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                          {"type": "input_image", "image_url": PNG_URL}]}]
    assert oai.responses.create(model=M, input=given).output_text == SEEN
    with oai.responses.stream(model=M, input=given) as s:
        for _ in s:
            pass
        assert s.get_final_response().output_text == SEEN

# reasoning: each client's own ask on a deployment; the Responses API's summary on v1
r = oai.chat.completions.create(model="o4-mini", messages=user("hi"), reasoning_effort="low")
assert r.usage.completion_tokens_details.reasoning_tokens == 64 and r.usage.completion_tokens == 114, r.usage
chunks = list(oai.chat.completions.create(model="o4-mini", messages=user("hi"), reasoning_effort="low",
                                          stream=True, stream_options={"include_usage": True}))
assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 64, chunks[-1]
think = dict(model="o4-mini", max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 2000}, messages=user("hi"))
m = ant.messages.create(**think)
assert m.content[-1].text == TEXT and m.usage.output_tokens == 114, m
with ant.messages.stream(**think) as s:
    assert s.get_final_message().usage.output_tokens == 114
config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=2000))
r = gen.models.generate_content(model="o4-mini", contents="hi", config=config)
assert r.text == TEXT and r.usage_metadata.thoughts_token_count == 64, r.usage_metadata
chunks = list(gen.models.generate_content_stream(model="o4-mini", contents="hi", config=config))
assert chunks[-1].usage_metadata.thoughts_token_count == 64, chunks[-1]
r = oai.responses.create(model="o4-mini-v1", input="hi", reasoning={"effort": "low", "summary": "auto"})
assert r.output[0].type == "reasoning" and r.output[0].summary[0].text == "Weighing the greeting.", r.output
assert r.output_text == TEXT and r.usage.output_tokens_details.reasoning_tokens == 64, r
with oai.responses.stream(model="o4-mini-v1", input="hi", reasoning={"effort": "low", "summary": "auto"}) as s:
    for _ in s:
        pass
    r = s.get_final_response()
assert r.output[0].type == "reasoning" and r.usage.output_tokens_details.reasoning_tokens == 64, r

# a vendor error and a throttled answer on streamed requests (a 429 and a cut stream
# count toward the channel's circuit: an answered request after each keeps it closed)
def answered(M):
    assert oai.chat.completions.create(model=M, messages=user("hi")).choices[0].message.content == TEXT

for M in ["gpt-4o", "gpt-4o-v1"]:
    def streamed_message(prompt):
        with ant.messages.stream(model=M, max_tokens=9, messages=user(prompt)) as s:
            return s.get_final_message()
    for kinds, call in [
        ((openai.BadRequestError, openai.RateLimitError),
         lambda p: list(oai.chat.completions.create(model=M, messages=user(p), stream=True))),
        ((anthropic.BadRequestError, anthropic.RateLimitError), streamed_message),
        ((genai.errors.ClientError, genai.errors.ClientError),
         lambda p: list(gen.models.generate_content_stream(model=M, contents=p))),
        ((openai.BadRequestError, openai.RateLimitError),
         lambda p: list(oai.responses.create(model=M, input=p, stream=True))),
    ]:
        raises(kinds[0], lambda: call("VENDOR_ERROR"), 400)
        raises(kinds[1], lambda: call("THROTTLE"), 429)
        answered(M)

# a stream Azure cuts after its first text: each SDK raises, after the text it got
for M in ["gpt-4o", "gpt-4o-v1"]:
    got = []
    try:
        for c in oai.chat.completions.create(model=M, messages=user("STREAM_ERROR"), stream=True):
            got += [c.choices[0].delta.content or ""] if c.choices else []
        raise AssertionError("chat stream did not raise")
    except openai.APIError as e:
        assert "request id" in str(e) and "Sorry" not in str(e), e
    assert "".join(got) and TEXT.startswith("".join(got)), got
    answered(M)
    try:
        with ant.messages.stream(model=M, max_tokens=100, messages=user("STREAM_ERROR")) as s:
            got = "".join(s.text_stream)
        raise AssertionError("messages stream did not raise")
    except anthropic.APIError as e:
        assert "request id" in str(e), e
    answered(M)
    try:
        got = "".join(c.text or "" for c in gen.models.generate_content_stream(model=M, contents="STREAM_ERROR"))
        raise AssertionError("generate-content stream did not raise")
    except genai.errors.APIError as e:
        assert "request id" in str(e), e
    answered(M)
    try:
        list(oai.responses.create(model=M, input="STREAM_ERROR", stream=True))
        raise AssertionError("responses stream did not raise")
    except openai.APIError as e:
        assert "request id" in str(e), e
    answered(M)
print("ok")
