"""The official `openai` SDK against the gateway (started by tests/integration/sdk.rs)."""

import os

import openai
import pytest

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY"]


@pytest.fixture
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


def test_chat_non_streaming(client):
    r = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert r.choices[0].message.content == "Hello, world"
    assert r.model == "gpt-4o-mini"
    assert r.usage.prompt_tokens == 5 and r.usage.completion_tokens == 3


def test_chat_streaming(client):
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello, world"


def test_chat_streaming_with_usage(client):
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 3


# 5 prompt tokens at 0.15 and 3 completion tokens at 0.60 USD per 1M: 2.55 micro-USD,
# charged rounded up to the micro-USD.
CHARGE_USD = 0.000003


def test_a_whole_answer_carries_its_charge_in_a_header(client):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-gateway-cost-usd"] == "0.000003"
    assert raw.parse().choices[0].message.content == "Hello, world"


def test_a_stream_carries_its_charge_in_the_usage_chunk(client):
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage.completion_tokens == 3
    assert (usage.model_extra or {}).get("cost_usd") == CHARGE_USD


def test_models_list(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["gpt-4o-mini"]


def test_upstream_error_is_an_sdk_error_with_request_id(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "please fail"}]
        )
    assert "request id:" in str(e.value)
    assert "internal-host" not in str(e.value)
    assert e.value.response.headers.get("x-request-id")


def test_bad_key_is_authentication_error():
    c = openai.OpenAI(base_url=f"{BASE}/v1", api_key="sk-" + "x" * 48, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()


def test_unknown_model_is_not_found():
    # A key without a model whitelist: the model is allowed, but nothing serves it.
    c = openai.OpenAI(base_url=f"{BASE}/v1", api_key=os.environ["GATEWAY_KEY_ALL"], max_retries=0)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "hi"}]
        )
