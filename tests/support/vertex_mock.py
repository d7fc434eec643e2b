"""A mock of Google Vertex AI and Google's OAuth 2.0 token endpoint, written from
Google's published references (not from the gateway's code):

- "Using OAuth 2.0 for Server to Server Applications"
  (developers.google.com/identity/protocols/oauth2/service-account): the token endpoint
  takes `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` and `assertion`, a JWT
  signed RS256 by the service account's key (`iss` the account's email, `scope`, `aud`
  the token URI, `iat`, `exp` at most an hour after `iat`), and answers
  `{access_token, expires_in, token_type: "Bearer"}`; a bad grant gets 400
  `{error: "invalid_grant", error_description}` (RFC 6749 section 5.2).
- "Vertex AI API: projects.locations.publishers.models.generateContent" and
  "...streamGenerateContent" (cloud.google.com/vertex-ai/docs/reference/rest/v1/
  projects.locations.publishers.models): `GenerateContentResponse` with `candidates`,
  `usageMetadata` (`promptTokenCount` including `cachedContentTokenCount`,
  `candidatesTokenCount`, `thoughtsTokenCount`, `totalTokenCount`), `modelVersion`,
  `responseId`; `alt=sse` streams each response as a `data:` event.
- "Use Anthropic's Claude models on Vertex AI" (cloud.google.com/vertex-ai/generative-ai/
  docs/partner-models/claude): `:rawPredict` and `:streamRawPredict` on
  `publishers/anthropic/models/{model}` take the Anthropic Messages body with
  `anthropic_version: "vertex-2023-10-16"` and without `model`, and answer as the
  Messages API does (Anthropic's "Messages" and "Streaming Messages" references).
- Google Cloud's error model ("API design guide: Errors"): `{error: {code, message,
  status}}`, 401 `UNAUTHENTICATED`, 400 `INVALID_ARGUMENT`, 429 `RESOURCE_EXHAUSTED`;
  a stream that fails after it started ends with one more `data:` event holding that
  error object (`{"error": {...}}`), as the google-genai SDK's stream reader expects.
- Vertex AI "Content" and "Part" (cloud.google.com/vertex-ai/docs/reference/rest/v1/
  Content): an image travels as `inlineData: {mimeType, data}` (`data` base64); the
  image MIME types of "Image understanding" (image/png, image/jpeg, image/webp,
  image/heic, image/heif); anything else is 400 `INVALID_ARGUMENT`.
- Anthropic's "Vision" (image blocks `{type: image, source: {type: base64, media_type,
  data}}`, media types image/jpeg, image/png, image/gif, image/webp), "Prompt caching"
  (`cache_creation_input_tokens`, `cache_read_input_tokens`) and "Streaming Messages"
  (an `event: error` with `{type: error, error: {type: overloaded_error, ...}}` can
  arrive mid-stream).

Every prompt counts 1,000 input tokens (plus 2,000 cache reads with `[cache]`, and for
Claude 500 cache writes with `[cache-write]`) and every answer 5 output tokens (or
`--over-report`). Faults and features are asked for by a marker in the prompt's text:
`[vendor-error]`, `[throttle]`, `[stream-error]` (a stream that fails after its first
text), `[tool]` (a tool call; a turn carrying the tool's result gets the answer),
`[think]` (reasoning), `[cache]` (cache reads), `[cache-write]`. A prompt with images
is answered "I see image/png:8." (each image's type and decoded size).

Usage: vertex_mock.py --public-key PEM --client-email E --kid K --project P
    --location L [--token-lifetime S] [--token-fail] [--over-report N]
Prints its port on stdout, then serves until killed. `GET /stats` counts what it saw;
`POST /revoke-all` makes every token issued so far unknown.
"""

import argparse
import base64
import binascii
import json
import secrets
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
VERTEX_VERSION = "vertex-2023-10-16"
ANSWER = "The weather in Paris is sunny."
GEMINI_IMAGE_TYPES = {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"}
CLAUDE_IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


class Invalid(Exception):
    """A request the model's API refuses with 400."""


def decoded_size(data):
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError, TypeError):
        raise Invalid("Base64 decoding failed for the image data.")


def seen_images(images):
    return " I see " + ", ".join(images) + "." if images else ""

args = None
lock = threading.Lock()
tokens = {}  # access token -> expiry (monotonic seconds)
stats = {
    "grants": 0,
    "grants_refused": 0,
    "refused_missing": 0,
    "refused_unknown": 0,
    "refused_expired": 0,
    "calls": 0,
    "paths": [],
}


def count(name, n=1):
    with lock:
        stats[name] += n


def google_error(code, status, message):
    return code, {"error": {"code": code, "message": message, "status": status}}


# ---- the token endpoint ----


def grant(handler, form):
    count("grants")
    if form.get("grant_type") != GRANT:
        count("grants_refused")
        return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}
    if args.token_fail:
        count("grants_refused")
        return 503, {"error": "temporarily_unavailable", "error_description": "Backend Error"}
    assertion = form.get("assertion", "")
    token_uri = f"http://127.0.0.1:{handler.server.server_address[1]}/token"
    try:
        header = jwt.get_unverified_header(assertion)
        if header.get("kid") != args.kid or header.get("typ") != "JWT":
            raise jwt.InvalidTokenError(f"unexpected header {header}")
        claims = jwt.decode(
            assertion,
            args.public_key_pem,
            algorithms=["RS256"],
            audience=token_uri,
            options={"require": ["iss", "aud", "iat", "exp", "scope"]},
        )
        if claims["iss"] != args.client_email:
            raise jwt.InvalidTokenError("iss is not the service account")
        if SCOPE not in claims["scope"].split():
            raise jwt.InvalidTokenError("scope lacks cloud-platform")
        if claims["exp"] - claims["iat"] > 3600:
            raise jwt.InvalidTokenError("assertion valid for more than an hour")
    except jwt.InvalidTokenError as e:
        count("grants_refused")
        return 400, {"error": "invalid_grant", "error_description": f"Invalid JWT: {e}"}
    token = "ya29.mock-" + secrets.token_hex(16)
    with lock:
        tokens[token] = time.monotonic() + args.token_lifetime
    return 200, {"access_token": token, "expires_in": args.token_lifetime, "token_type": "Bearer"}


def authorized(handler):
    """None when the request carries a live token, else Google's 401."""
    auth = handler.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        count("refused_missing")
        return google_error(
            401,
            "UNAUTHENTICATED",
            "Request is missing required authentication credential. Expected OAuth 2 "
            "access token, login cookie or other valid authentication credential.",
        )
    with lock:
        expiry = tokens.get(auth[len("Bearer "):])
    if expiry is None or expiry <= time.monotonic():
        count("refused_unknown" if expiry is None else "refused_expired")
        return google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials. Expected OAuth 2 access "
            "token, login cookie or other valid authentication credential.",
        )
    return None


# ---- Gemini: generateContent ----


def gemini_text(body):
    out = []
    for c in body.get("contents", []):
        for p in c.get("parts", []):
            if "text" in p:
                out.append(p["text"])
    return " ".join(out)


def gemini_images(body):
    out = []
    for c in body.get("contents", []):
        for p in c.get("parts", []):
            # ProtoJSON ("Protocol Buffers: ProtoJSON format"): parsers accept the
            # lowerCamelCase JSON name and the proto field name alike.
            blob = p.get("inlineData", p.get("inline_data"))
            if blob is None:
                continue
            mime = blob.get("mimeType", blob.get("mime_type"))
            if mime not in GEMINI_IMAGE_TYPES:
                raise Invalid(f"Unsupported MIME type: {mime}")
            out.append(f"{mime}:{decoded_size(blob.get('data'))}")
    return out


def gemini_has_result(body):
    return any("functionResponse" in p for c in body.get("contents", []) for p in c.get("parts", []))


def gemini_usage(cache):
    prompt = 1000 + (2000 if cache else 0)
    u = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": args.over_report or 5,
        "totalTokenCount": prompt + (args.over_report or 5),
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        "trafficType": "ON_DEMAND",
    }
    if cache:
        u["cachedContentTokenCount"] = 2000
    return u


def gemini(model, body, stream):
    text = gemini_text(body)
    think = "[think]" in text
    if gemini_has_result(body):
        parts = [{"text": ANSWER}]
    elif "[tool]" in text:
        parts = [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]
    else:
        parts = [{"text": "Hello from Vertex Gemini." + seen_images(gemini_images(body))}]
    if think:
        parts = [{"text": "Thinking it over.", "thought": True}] + parts
    usage = gemini_usage("[cache]" in text)
    if think:
        usage["thoughtsTokenCount"] = 7
        usage["totalTokenCount"] += 7
    base = {"modelVersion": model, "createTime": "2026-01-01T00:00:00.000000Z", "responseId": "resp-1"}
    if not stream:
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
            "usageMetadata": usage,
            **base,
        }
    events = []
    # Text is streamed in pieces; other parts whole.
    pieces = []
    for p in parts:
        if "text" in p and not p.get("thought"):
            t = p["text"]
            pieces += [{"text": t[: len(t) // 2]}, {"text": t[len(t) // 2:]}]
        else:
            pieces.append(p)
    for i, p in enumerate(pieces):
        cand = {"content": {"role": "model", "parts": [p]}}
        ev = {"candidates": [cand], **base}
        if i == len(pieces) - 1:
            cand["finishReason"] = "STOP"
            ev["usageMetadata"] = usage
        events.append(ev)
    if "[stream-error]" in text:
        # The first piece, then the failure as Google's error object.
        return events[:1] + [{"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}}]
    return events


# ---- Claude: rawPredict ----


def claude_text(body):
    out = []
    for m in body.get("messages", []):
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        else:
            for b in c or []:
                if b.get("type") == "text":
                    out.append(b["text"])
    return " ".join(out)


def claude_images(body):
    out = []
    for i, m in enumerate(body.get("messages", [])):
        c = m.get("content")
        for j, b in enumerate(c if isinstance(c, list) else []):
            if b.get("type") != "image":
                continue
            src = b.get("source", {})
            where = f"messages.{i}.content.{j}.image.source"
            if src.get("type") != "base64":
                raise Invalid(f"{where}: only base64 sources are accepted")
            if src.get("media_type") not in CLAUDE_IMAGE_TYPES:
                raise Invalid(f"{where}.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'")
            out.append(f"{src['media_type']}:{decoded_size(src.get('data'))}")
    return out


def claude_has_result(body):
    return any(
        isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in body.get("messages", [])
    )


def claude(model, body, stream):
    text = claude_text(body)
    blocks = []
    if "[think]" in text:
        blocks.append({"type": "thinking", "thinking": "Thinking it over.", "signature": "sig-vertex-1"})
    if claude_has_result(body):
        blocks.append({"type": "text", "text": ANSWER})
        stop = "end_turn"
    elif "[tool]" in text:
        blocks.append({"type": "tool_use", "id": "toolu_vertex_1", "name": "get_weather", "input": {"city": "Paris"}})
        stop = "tool_use"
    else:
        blocks.append({"type": "text", "text": "Hello from Vertex Claude." + seen_images(claude_images(body))})
        stop = "end_turn"
    cache = "[cache]" in text
    usage = {
        "input_tokens": 1000,
        "cache_creation_input_tokens": 500 if "[cache-write]" in text else 0,
        "cache_read_input_tokens": 2000 if cache else 0,
        "output_tokens": args.over_report or 5,
    }
    msg = {
        "id": "msg_vrtx_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not stream:
        return msg
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}))
            t = b["text"]
            for piece in (t[: len(t) // 2], t[len(t) // 2:]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": piece}}))
        elif b["type"] == "thinking":
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": b["thinking"]}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": b["signature"]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": dict(b, input={})}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}}))
        if "[stream-error]" in text:
            # Cut after the first text piece by Anthropic's mid-stream error event.
            cut = next((k for k, e in enumerate(events) if e[1].get("delta", {}).get("type") == "text_delta"), None)
            if cut is not None:
                error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
                return events[: cut + 1] + [("error", error)]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


# ---- the server ----


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for ev in events:
            if isinstance(ev, tuple):
                chunk = f"event: {ev[0]}\ndata: {json.dumps(ev[1])}\n\n"
            else:
                chunk = f"data: {json.dumps(ev)}\r\n\r\n"
            data = chunk.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        if self.path == "/stats":
            with lock:
                return self.send_json(200, stats)
        self.send_json(*google_error(404, "NOT_FOUND", "Not found"))

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/revoke-all":
            # As revoking a service account's tokens does: every issued token stops working.
            with lock:
                tokens.clear()
            return self.send_json(200, {})
        if url.path == "/token":
            form = dict(urllib.parse.parse_qsl(raw.decode()))
            return self.send_json(*grant(self, form))
        refused = authorized(self)
        if refused:
            return self.send_json(*refused)
        prefix = f"/v1/projects/{args.project}/locations/{args.location}/publishers/"
        if not url.path.startswith(prefix) or ":" not in url.path:
            return self.send_json(*google_error(404, "NOT_FOUND", f"No such resource {url.path}"))
        publisher, _, rest = url.path[len(prefix):].partition("/models/")
        model, _, method = rest.partition(":")
        query = dict(urllib.parse.parse_qsl(url.query))
        with lock:
            stats["calls"] += 1
            stats["paths"].append(self.path)
        try:
            body = json.loads(raw)
        except ValueError:
            return self.send_json(*google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received."))
        if publisher == "google" and method in ("generateContent", "streamGenerateContent"):
            text = gemini_text(body)
            stream = method == "streamGenerateContent"
            if stream and query.get("alt") != "sse":
                return self.send_json(*google_error(400, "INVALID_ARGUMENT", "this mock streams with alt=sse only"))
        elif publisher == "anthropic" and method in ("rawPredict", "streamRawPredict"):
            if "model" in body:
                return self.send_json(*google_error(400, "INVALID_ARGUMENT", "model: Extra inputs are not permitted"))
            if body.get("anthropic_version") != VERTEX_VERSION:
                return self.send_json(*google_error(400, "INVALID_ARGUMENT", "anthropic_version: vertex-2023-10-16 is required"))
            text = claude_text(body)
            stream = method == "streamRawPredict"
        else:
            return self.send_json(*google_error(404, "NOT_FOUND", f"Publisher model {publisher}/{model} does not serve {method}"))
        if "[vendor-error]" in text:
            return self.send_json(*google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."))
        if "[throttle]" in text:
            return self.send_json(*google_error(
                429, "RESOURCE_EXHAUSTED",
                "Resource exhausted. Please try again later. Please refer to "
                "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
            ))
        try:
            answer = (gemini if publisher == "google" else claude)(model, body, stream)
        except Invalid as e:
            print(f"vertex mock: 400 {e}: {json.dumps(body)[:400]}", file=sys.stderr, flush=True)
            if publisher == "google":
                return self.send_json(*google_error(400, "INVALID_ARGUMENT", str(e)))
            return self.send_json(400, {"type": "error", "error": {"type": "invalid_request_error", "message": str(e)}})
        if stream:
            return self.send_sse(answer)
        return self.send_json(200, answer)


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--public-key", required=True)
    p.add_argument("--client-email", required=True)
    p.add_argument("--kid", required=True)
    p.add_argument("--project", required=True)
    p.add_argument("--location", required=True)
    p.add_argument("--token-lifetime", type=int, default=3600)
    p.add_argument("--token-fail", action="store_true")
    p.add_argument("--over-report", type=int, default=0)
    args = p.parse_args()
    with open(args.public_key) as f:
        args.public_key_pem = f.read()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
