"""The official `openai` SDK on the non-chat endpoints: images (generations and edits with
files), speech, transcription, embeddings and moderation (mock upstream:
tests/support/media_upstream.rs)."""

import io
import os

import openai
import pytest

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY_ALL"]


@pytest.fixture
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


def test_images_generate(client):
    r = client.images.generate(model="dall-e-3", prompt="a cat", size="1024x1024", quality="hd")
    assert r.data[0].url == "https://img.example/1.png"
    assert r.data[0].revised_prompt == "a cat"


def test_images_generate_token_billed(client):
    r = client.images.generate(model="gpt-image-1", prompt="a cat", background="transparent")
    assert r.data[0].b64_json
    assert r.usage.output_tokens == 1050


def test_images_rule_of_section_8_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.images.generate(model="dall-e-3", prompt="a cat", n=2)
    assert e.value.body["param"] == "n"


def png(width, height):
    """A PNG header (signature and IHDR chunk) of the given size, then some bytes."""
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x06\x00\x00\x00"
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + ihdr + bytes(range(256))


def test_images_edit_with_a_file(client):
    r = client.images.edit(
        model="dall-e-2",
        image=("in.png", io.BytesIO(png(256, 256)), "image/png"),
        prompt="add a red hat",
        n=2,
        size="256x256",
    )
    assert len(r.data) == 2
    assert r.data[0].url == "https://img.example/1.png"


def test_images_edit_with_several_files(client):
    files = [("a.png", io.BytesIO(png(64, 64)), "image/png"), ("b.png", io.BytesIO(png(32, 32)), "image/png")]
    r = client.images.edit(model="gpt-image-1", image=files, prompt="put them together", quality="high")
    assert r.data[0].b64_json
    assert r.usage.output_tokens == 1050


def test_images_edit_rule_of_section_8_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.images.edit(
            model="dall-e-2",
            image=("in.png", io.BytesIO(png(256, 256)), "image/png"),
            prompt="x" * 1001,
        )
    assert e.value.body["param"] == "prompt"


def test_speech(client):
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello world"
    ) as r:
        assert r.headers["content-type"] == "audio/mpeg"
        audio = b"".join(r.iter_bytes())
    assert audio.startswith(b"ID3")


def test_transcription(client):
    f = ("talk.mp3", io.BytesIO(b"\xff\xfb" + bytes(4000)), "audio/mpeg")
    r = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert r.text == "Hello from the audio."


def test_transcription_text_format(client):
    f = ("talk.mp3", io.BytesIO(bytes(4000)), "audio/mpeg")
    r = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="text")
    assert r.strip() == "Hello from the audio."


def test_translation(client):
    f = ("talk.mp3", io.BytesIO(bytes(4000)), "audio/mpeg")
    r = client.audio.translations.create(model="whisper-1", file=f)
    assert r.text == "Hello from the audio."


def test_embeddings(client):
    r = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(r.data) == 2 and len(r.data[0].embedding) == 3
    assert r.model == "text-embedding-3-small"
    assert r.usage.prompt_tokens == 8


def test_moderation(client):
    r = client.moderations.create(model="omni-moderation-latest", input="is this fine?")
    assert r.results[0].flagged is False
