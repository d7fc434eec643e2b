"""A mock of Amazon Bedrock Runtime's Converse and ConverseStream operations.

Written from AWS's references, not from the gateway's code: "Amazon Bedrock API
Reference" (Bedrock Runtime: Converse, ConverseStream, Message, ContentBlock,
TokenUsage, ConverseStreamOutput and its events, the common errors), "AWS General
Reference: Signature Version 4 signing process", and the AWS event stream encoding
(prelude: total length, headers length, prelude CRC32; headers; payload; message CRC32).

It refuses what the real service refuses: every request's SigV4 signature is recomputed
with botocore's own signer (botocore.auth.SigV4Auth) from the credentials given on the
command line, and a mismatch is answered 403 InvalidSignatureException; a Bedrock API
key is checked as a bearer token; malformed Converse bodies are answered 400
ValidationException.

Request-driven behaviour (a marker in the last user text, or the request's shape):
  VENDOR_ERROR      400 ValidationException
  THROTTLE          429 ThrottlingException
  STREAM_EXCEPTION  ConverseStream: some text, then a modelStreamErrorException frame
  toolConfig        with toolChoice any/tool, or TOOL in the text: a toolUse answer
  thinking          additionalModelRequestFields.thinking: reasoningContent + signature
  cachePoint        any cache point: usage with cacheReadInputTokens/cacheWriteInputTokens
  image             the answer says the images' formats and decoded sizes

Usage (fixed, so tests can price it): inputTokens 25, outputTokens 12 (+30 with
reasoning, +8 with a tool call); with cache points cacheReadInputTokens 1000 and
cacheWriteInputTokens 200. --over-report N reports N output tokens instead.

GET /__requests lists what each request was (path, maxTokens, the error it got), for
the tests' checks. Prints the port it listens on (127.0.0.1, ephemeral) on stdout, then serves until killed.
"""

import argparse
import base64
import binascii
import datetime
import hashlib
import json
import struct
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

ARGS = None
# Converse request members (Amazon Bedrock API Reference: Converse, Request Syntax).
REQUEST_MEMBERS = {
    "messages", "system", "inferenceConfig", "toolConfig", "guardrailConfig",
    "additionalModelRequestFields", "promptVariables", "additionalModelResponseFieldPaths",
    "requestMetadata", "performanceConfig",
}
CONTENT_MEMBERS = {
    "text", "image", "document", "video", "toolUse", "toolResult", "guardContent",
    "cachePoint", "reasoningContent", "citationsContent",
}
IMAGE_FORMATS = {"png", "jpeg", "gif", "webp"}
# What each request was: its operation, the maxTokens it asked for, the error it got.
SEEN = []
LOCK = threading.Lock()


class Refusal(Exception):
    def __init__(self, status, error_type, message):
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


# ---- AWS event stream encoding ----

def header_bytes(headers):
    out = b""
    for name, value in headers:
        n = name.encode()
        v = value.encode()
        # header value type 7: string, u16 length
        out += bytes([len(n)]) + n + bytes([7]) + struct.pack(">H", len(v)) + v
    return out


def encode_frame(headers, payload):
    h = header_bytes(headers)
    total = 12 + len(h) + len(payload) + 4
    prelude = struct.pack(">II", total, len(h))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + h + payload
    return message + struct.pack(">I", zlib.crc32(message) & 0xFFFFFFFF)


def event(event_type, body):
    # Real events carry a `p` member of padding; clients ignore it.
    body = dict(body, p="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[: 5 + len(event_type) % 7])
    return encode_frame(
        [(":event-type", event_type), (":content-type", "application/json"),
         (":message-type", "event")],
        json.dumps(body).encode(),
    )


def exception(exception_type, message):
    return encode_frame(
        [(":exception-type", exception_type), (":content-type", "application/json"),
         (":message-type", "exception")],
        json.dumps({"message": message}).encode(),
    )


def self_test():
    """Frames this mock writes decode with botocore's own event-stream parser."""
    frames = [event("messageStart", {"role": "assistant"}),
              event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hé"}}),
              exception("throttlingException", "slow down")]
    buf = EventStreamBuffer()
    data = b"".join(frames)
    for i in range(0, len(data), 7):
        buf.add_data(data[i:i + 7])
    messages = list(buf)
    assert len(messages) == 3, messages
    assert messages[0].headers[":event-type"] == "messageStart"
    assert json.loads(messages[1].payload)["delta"]["text"] == "hé"
    assert messages[2].headers[":message-type"] == "exception"
    assert messages[2].headers[":exception-type"] == "throttlingException"


# ---- SigV4 (checked with botocore) ----

def check_auth(handler, body):
    auth = handler.headers.get("Authorization", "")
    if auth.startswith("Bearer "):
        if ARGS.api_key and auth[len("Bearer "):] == ARGS.api_key:
            return
        raise Refusal(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    if not ARGS.access_key or not auth.startswith("AWS4-HMAC-SHA256 "):
        raise Refusal(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
    fields = {}
    for part in auth[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = part.strip().partition("=")
        fields[k] = v
    try:
        ak, date, region, service, terminal = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        raise Refusal(403, "IncompleteSignatureException", "Authorization header requires Credential, SignedHeaders and Signature.")
    if ak != ARGS.access_key:
        raise Refusal(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    if region != ARGS.region or service != "bedrock" or terminal != "aws4_request":
        raise Refusal(403, "InvalidSignatureException", f"Credential should be scoped to a valid region and service 'bedrock'.")
    amz_date = handler.headers.get("X-Amz-Date", "")
    try:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise Refusal(403, "IncompleteSignatureException", "X-Amz-Date is missing or malformed.")
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 300 or date != amz_date[:8]:
        raise Refusal(403, "InvalidSignatureException", "Signature expired.")
    for required in ("host", "x-amz-date"):
        if required not in signed:
            raise Refusal(403, "InvalidSignatureException", f"'{required}' must be a signed header.")
    sha = handler.headers.get("X-Amz-Content-SHA256")
    if sha is not None and sha != hashlib.sha256(body).hexdigest():
        raise Refusal(400, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
    token = handler.headers.get("X-Amz-Security-Token")
    if (ARGS.session_token or None) != token:
        raise Refusal(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    if token is not None and "x-amz-security-token" not in signed:
        raise Refusal(403, "InvalidSignatureException", "'x-amz-security-token' must be a signed header.")
    headers = {}
    for name in signed:
        value = handler.headers.get(name)
        if value is None:
            raise Refusal(403, "InvalidSignatureException", f"Signed header '{name}' is missing.")
        headers[name] = value
    request = AWSRequest(method=handler.command, url="http://" + handler.headers["Host"] + handler.path,
                         data=body, headers=headers)
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(ARGS.access_key, ARGS.secret_key, ARGS.session_token or None),
                       "bedrock", ARGS.region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != signature:
        raise Refusal(403, "InvalidSignatureException",
                      "The request signature we calculated does not match the signature you provided. "
                      "Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")


# ---- Converse ----

def validation(message):
    return Refusal(400, "ValidationException", message)


def check_request(req):
    if not isinstance(req, dict):
        raise validation("Malformed input request, please reformat your input and try again.")
    unknown = set(req) - REQUEST_MEMBERS
    if unknown:
        raise validation(f"Malformed input request: extraneous key [{sorted(unknown)[0]}] is not permitted.")
    msgs = req.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise validation("The model returned the following errors: messages: field required")
    if msgs[0].get("role") != "user":
        raise validation("A conversation must start with a user message. Try again with a conversation that starts with a user message.")
    uses_tools = False
    for i, m in enumerate(msgs):
        if m.get("role") not in ("user", "assistant"):
            raise validation(f"messages.{i}.role: must be user or assistant")
        if i and msgs[i - 1]["role"] == m["role"]:
            raise validation("A conversation must alternate between user and assistant roles.")
        content = m.get("content")
        if not isinstance(content, list) or not content:
            raise validation(f"messages.{i}.content: must not be empty")
        for b in content:
            keys = set(b)
            if len(keys) != 1 or not keys <= CONTENT_MEMBERS:
                raise validation(f"messages.{i}.content: a ContentBlock has exactly one member, got {sorted(keys)}")
            if "text" in b and not b["text"].strip():
                raise validation("The text field in the ContentBlock object is blank. Add text to the text field, and try again.")
            if "image" in b:
                img = b["image"]
                if img.get("format") not in IMAGE_FORMATS or "bytes" not in img.get("source", {}):
                    raise validation(f"messages.{i}: invalid image block")
                try:
                    base64.b64decode(img["source"]["bytes"], validate=True)
                except binascii.Error:
                    raise validation(f"messages.{i}: image bytes are not base64")
            if "toolUse" in b or "toolResult" in b:
                uses_tools = True
            if "reasoningContent" in b:
                rc = b["reasoningContent"]
                if "reasoningText" in rc and not rc["reasoningText"].get("signature"):
                    raise validation("reasoningText requires a signature")
    if uses_tools and "toolConfig" not in req:
        raise validation("The toolConfig field must be defined when using toolUse and toolResult content blocks.")
    ic = req.get("inferenceConfig", {})
    if "maxTokens" in ic and (not isinstance(ic["maxTokens"], int) or ic["maxTokens"] < 1):
        raise validation("inferenceConfig.maxTokens: must be at least 1")
    for t in req.get("toolConfig", {}).get("tools", []):
        if "toolSpec" in t and "json" not in t["toolSpec"].get("inputSchema", {}):
            raise validation("toolSpec.inputSchema: json is required")


def last_user_text(req):
    for m in reversed(req["messages"]):
        if m["role"] == "user":
            return " ".join(b.get("text", "") for b in m["content"] if "text" in b)
    return ""


def count_cache_points(req):
    n = sum(1 for b in req.get("system", []) if "cachePoint" in b)
    n += sum(1 for t in req.get("toolConfig", {}).get("tools", []) if "cachePoint" in t)
    for m in req["messages"]:
        n += sum(1 for b in m["content"] if "cachePoint" in b)
    return n


def answer(req):
    """The answer's content blocks, stop reason and usage for a checked request."""
    text = last_user_text(req)
    if "VENDOR_ERROR" in text:
        raise validation("The model returned the following errors: temperature: range: 0..1")
    if "THROTTLE" in text:
        raise Refusal(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    content = []
    output = 12
    thinking = (req.get("additionalModelRequestFields") or {}).get("thinking", {})
    if thinking.get("type") == "enabled":
        content.append({"reasoningContent": {"reasoningText": {
            "text": "The user wants an answer; thinking it over.",
            "signature": "EqQBCkYIBBgCKkBmb2N1c2VkX3NpZ25hdHVyZQ==",
        }}})
        output += 30
    images = []
    for m in req["messages"]:
        for b in m["content"]:
            if "image" in b:
                images.append(f'{b["image"]["format"]}:{len(base64.b64decode(b["image"]["source"]["bytes"]))}')
    points = count_cache_points(req)
    said = "Hello from Bedrock."
    if images:
        said += " I see " + ", ".join(images) + "."
    if points:
        said += f" cachePoints={points}."
    content.append({"text": said})
    stop = "end_turn"
    tc = req.get("toolConfig")
    if tc and (("any" in tc.get("toolChoice", {})) or ("tool" in tc.get("toolChoice", {})) or "TOOL" in text):
        specs = [t["toolSpec"] for t in tc["tools"] if "toolSpec" in t]
        name = tc.get("toolChoice", {}).get("tool", {}).get("name") or specs[0]["name"]
        content.append({"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": name,
                                    "input": {"city": "Paris"}}})
        stop = "tool_use"
        output += 8
    usage = {"inputTokens": 25, "outputTokens": output}
    if points:
        usage["cacheReadInputTokens"] = 1000
        usage["cacheWriteInputTokens"] = 200
    if ARGS.over_report:
        usage["outputTokens"] = ARGS.over_report
    usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"] + usage.get("cacheReadInputTokens", 0) + usage.get("cacheWriteInputTokens", 0)
    return content, stop, usage


def stream_frames(req, content, stop, usage):
    text = last_user_text(req)
    frames = [event("messageStart", {"role": "assistant"})]
    for i, b in enumerate(content):
        if "reasoningContent" in b:
            r = b["reasoningContent"]["reasoningText"]
            half = len(r["text"]) // 2
            for piece in (r["text"][:half], r["text"][half:]):
                frames.append(event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"reasoningContent": {"text": piece}}}))
            frames.append(event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"reasoningContent": {"signature": r["signature"]}}}))
        elif "text" in b:
            words = b["text"].split(" ")
            for j, w in enumerate(words):
                piece = w if j == len(words) - 1 else w + " "
                frames.append(event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"text": piece}}))
            if "STREAM_EXCEPTION" in text:
                frames.append(exception("modelStreamErrorException",
                                        "The model stream encountered an error: received 500 from the model."))
                return frames
        elif "toolUse" in b:
            t = b["toolUse"]
            frames.append(event("contentBlockStart", {"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": t["toolUseId"], "name": t["name"]}}}))
            args = json.dumps(t["input"])
            for piece in (args[:5], args[5:]):
                frames.append(event("contentBlockDelta", {"contentBlockIndex": i, "delta": {"toolUse": {"input": piece}}}))
        frames.append(event("contentBlockStop", {"contentBlockIndex": i}))
    frames.append(event("messageStop", {"stopReason": stop}))
    frames.append(event("metadata", {"usage": usage, "metrics": {"latencyMs": 211}}))
    return frames


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send_json(self, status, body, error_type=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amzn-RequestId", "8b0d5bd2-0f44-4b5b-9a53-6b8c5a5a6d4e")
        if error_type:
            self.send_header("x-amzn-ErrorType", f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/__requests":
            with LOCK:
                return self.send_json(200, list(SEEN))
        self.send_json(404, {"message": "Not Found"}, "UnknownOperationException")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        seen = {"path": self.path, "maxTokens": None, "error": None}
        with LOCK:
            SEEN.append(seen)
        try:
            parts = self.path.split("?")[0].split("/")
            if len(parts) != 4 or parts[1] != "model" or parts[3] not in ("converse", "converse-stream"):
                raise Refusal(404, "UnknownOperationException", "Unknown operation")
            model_id = unquote(parts[2])
            check_auth(self, body)
            if not model_id:
                raise validation("The provided model identifier is invalid.")
            try:
                req = json.loads(body)
            except ValueError:
                raise validation("Malformed input request, please reformat your input and try again.")
            if isinstance(req, dict):
                seen["maxTokens"] = (req.get("inferenceConfig") or {}).get("maxTokens")
            check_request(req)
            content, stop, usage = answer(req)
        except Refusal as r:
            seen["error"] = r.error_type
            return self.send_json(r.status, {"message": r.message}, r.error_type)
        if parts[3] == "converse":
            return self.send_json(200, {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": usage,
                "metrics": {"latencyMs": 211},
            })
        data = b"".join(stream_frames(req, content, stop, usage))
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.amazon.eventstream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-amzn-RequestId", "8b0d5bd2-0f44-4b5b-9a53-6b8c5a5a6d4e")
        self.end_headers()
        # Chunks that cut frames anywhere, as a network would.
        sizes = [1, 3, 17, 64, 5, 200]
        i = k = 0
        while i < len(data):
            piece = data[i:i + sizes[k % len(sizes)]]
            i += len(piece)
            k += 1
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--access-key", default="")
    p.add_argument("--secret-key", default="")
    p.add_argument("--session-token", default="")
    p.add_argument("--api-key", default="")
    p.add_argument("--over-report", type=int, default=0)
    p.add_argument("--self-test", action="store_true")
    ARGS = p.parse_args()
    self_test()
    if ARGS.self_test:
        print("ok")
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
