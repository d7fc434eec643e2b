"""Conversation state through the official openai SDK (and the OpenAI Agents SDK): three
turns chained by `previous_response_id` only, with a tool call in turn two, against a
model on each upstream protocol (chat, messages, generate-content), streamed and not;
and a native Responses API channel. Then retrieval, input items page by page, deletion
and compaction of a stored response. Started by tests/integration/sdk.rs against the
scripted providers of tests/support/providers.rs, which refuse a turn that lost the tool
call id or the thought signature they issued. The key has a spending cap."""

import os

import openai
import pytest

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY_ALL"]
ANSWER = "The weather in Paris is sunny."
HELLO = {
    "m-openai": "Hello from chat.",
    "m-anthropic": "Hello from messages.",
    "m-gemini": "Hello from gemini.",
}
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture
def oai():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


def create(client, stream, **kw):
    if not stream:
        return client.responses.create(**kw)
    with client.responses.stream(**kw) as s:
        for _ in s:
            pass
        return s.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", list(HELLO))
def test_three_turns_chained_by_id_with_a_tool_call(oai, model, stream):
    r1 = create(oai, stream, model=model, input="hi")
    assert r1.id.startswith("resp_")
    assert r1.output_text == HELLO[model]
    r2 = create(
        oai,
        stream,
        model=model,
        previous_response_id=r1.id,
        input="What is the weather in Paris?",
        tools=TOOLS,
    )
    calls = [i for i in r2.output if i.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    r3 = create(
        oai,
        stream,
        model=model,
        previous_response_id=r2.id,
        tools=TOOLS,
        input=[
            {
                "type": "function_call_output",
                "call_id": calls[0].call_id,
                "output": "sunny",
            }
        ],
    )
    assert ANSWER in r3.output_text
    got = oai.responses.retrieve(r3.id)
    assert got.id == r3.id
    assert got.previous_response_id == r2.id
    assert got.output_text == r3.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_native_responses_channel_chains_turns(oai, stream):
    r1 = create(oai, stream, model="m-responses", input="hi")
    r2 = create(oai, stream, model="m-responses", previous_response_id=r1.id, input="again")
    r3 = create(oai, stream, model="m-responses", previous_response_id=r2.id, input="more")
    assert r3.output_text == "Hello from responses."
    assert len({r1.id, r2.id, r3.id}) == 3


def test_input_items_pages_and_deletion(oai):
    r = oai.responses.create(
        model="m-openai",
        input=[{"role": "user", "content": f"m{i}"} for i in range(5)],
    )
    first = oai.responses.input_items.list(r.id, limit=2, order="asc")
    assert [i.content[0].text for i in first.data] == ["m0", "m1"]
    assert first.has_more
    # The SDK's own pagination follows `after` through every page.
    texts = [i.content[0].text for i in oai.responses.input_items.list(r.id, limit=2, order="asc")]
    assert texts == ["m0", "m1", "m2", "m3", "m4"]
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m-openai", previous_response_id=r.id, input="x")
    assert e.value.code == "previous_response_not_found"


def test_compaction_by_previous_response_id(oai):
    r = oai.responses.create(model="m-anthropic", input="hi")
    c = oai.responses.compact(model="m-anthropic", previous_response_id=r.id)
    assert c.output


def test_the_agents_sdk_chains_turns_by_id():
    agents = pytest.importorskip("agents")
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        return "sunny"

    client = openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)
    agents.set_tracing_disabled(True)
    for model in HELLO:
        agent = Agent(
            name="weather",
            instructions="Answer about the weather.",
            model=OpenAIResponsesModel(model=model, openai_client=client),
            tools=[get_weather],
        )
        # The tool is called and answered within each run; the second run goes on from
        # the first by its response id alone.
        first = Runner.run_sync(agent, "What is the weather in Paris?")
        assert first.final_output == ANSWER
        second = Runner.run_sync(
            agent,
            "And tomorrow?",
            previous_response_id=first.last_response_id,
        )
        assert second.final_output == ANSWER
