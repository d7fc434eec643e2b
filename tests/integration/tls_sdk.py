"""The official openai SDK and httpx over https:// to the gateway, HTTP/1.1 and HTTP/2.

GATEWAY_BASE_URL (https://...), GATEWAY_KEY and GATEWAY_CA (the test CA's PEM) come
from tests/integration/tls_clients.rs, which also checks what the upstream saw.
"""
import os
import ssl
import time

import httpx
import httpx2
import openai

base = os.environ["GATEWAY_BASE_URL"]
key = os.environ["GATEWAY_KEY"]
ctx = ssl.create_default_context(cafile=os.environ["GATEWAY_CA"])
hello = [{"role": "user", "content": "hello"}]

# The openai SDK, over HTTP/1.1 and over HTTP/2, streamed and not.
for h2 in (False, True):
    client = openai.OpenAI(
        base_url=base + "/v1",
        api_key=key,
        http_client=httpx2.Client(verify=ctx, http2=h2),
        max_retries=0,
    )
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=hello)
    want = "HTTP/2" if h2 else "HTTP/1.1"
    assert raw.http_response.http_version == want, (raw.http_response.http_version, want)
    answer = raw.parse()
    assert answer.choices[0].message.content == "Hello, world", answer
    assert answer.usage.prompt_tokens == 5, answer.usage
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=hello,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(pieces) == "Hello, world", pieces
    assert usage is not None and usage.completion_tokens == 3, usage
    assert [m.id for m in client.models.list()] == ["gpt-4o-mini"]
    try:
        client.chat.completions.create(model="no-such-model", messages=hello)
        raise AssertionError("an unknown model was served")
    except openai.NotFoundError as e:
        assert "request id" in str(e), e

# httpx with HTTP/2 offered: negotiated, and every kind of answer carried over it.
with httpx.Client(
    http2=True,
    verify=ctx,
    base_url=base,
    headers={"authorization": f"Bearer {key}"},
    timeout=30,
) as c:
    r = c.get("/v1/models")
    assert r.http_version == "HTTP/2" and r.status_code == 200, (r.http_version, r.text)
    r = c.post(
        "/v1/messages",
        headers={"anthropic-version": "2023-06-01"},
        json={"model": "gpt-4o-mini", "max_tokens": 16, "messages": hello},
    )
    assert r.http_version == "HTTP/2" and r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "Hello, world", r.text
    r = c.post("/v1/chat/completions", json={"model": "gpt-4o-mini"})
    assert r.status_code == 400 and "request id" in r.json()["error"]["message"], r.text
    # SSE over an HTTP/2 stream: each event as the upstream sends it (the mock spaces
    # them 300 ms apart), not all at the end.
    arrivals = []
    with c.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "slow"}], "stream": True},
    ) as r:
        assert r.http_version == "HTTP/2" and r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line))
    assert arrivals[-1][1] == "data: [DONE]", arrivals
    first_content = next(t for t, line in arrivals if "Hello" in line)
    assert arrivals[-1][0] - first_content > 0.5, [t - arrivals[0][0] for t, _ in arrivals]

# An HTTP/1.1-only client on the same port.
with httpx.Client(verify=ctx, base_url=base, headers={"authorization": f"Bearer {key}"}) as c:
    r = c.get("/v1/models")
    assert r.http_version == "HTTP/1.1" and r.status_code == 200, r.http_version

print("ok")
