"""The official openai, anthropic and google-genai SDKs against Azure channels (run by
tests/integration/azure.rs with GATEWAY_BASE_URL and GATEWAY_KEY set)."""
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
    if M == "gpt-4o":
        rtools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
        r = oai.responses.create(model=M, input="Weather?", tools=rtools)
        fc = [o for o in r.output if o.type == "function_call"][0]
        assert fc.name == "get_weather" and fc.arguments == '{"city":"Paris"}', r
        for prompt in ["FILTER_PROMPT", "FILTER_OUTPUT"]:
            r = oai.responses.create(model=M, input=prompt)
            assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter", r
            last = list(oai.responses.create(model=M, input=prompt, stream=True))[-1]
            assert last.response.incomplete_details.reason == "content_filter", last
print("ok")
