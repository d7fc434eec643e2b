"""The official `openai` SDK on the videos API: create, poll, download, reference
uploads and errors (mock upstream: tests/support/video_upstream.rs)."""

import os
import warnings

import openai
import pytest

BASE = os.environ["GATEWAY_BASE_URL"]
KEY = os.environ["GATEWAY_KEY_ALL"]

# The SDK marks the videos API deprecated; that is not what these tests are about.
warnings.filterwarnings("ignore", category=DeprecationWarning)


def expected_video():
    """The mock upstream's video: an MP4 signature, then a fixed pseudo-random pattern."""
    v = bytearray(b"\0\0\0\x18ftypmp42\0\0\0\0mp42isom")
    x = 0x12345678
    while len(v) < 256 * 1024:
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        v.append(x >> 24)
    return bytes(v)


@pytest.fixture
def client():
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)


def test_create_poll_and_download(client):
    video = client.videos.create(model="sora-2", prompt="a red fox", seconds="4", size="1280x720")
    assert video.id.startswith("task_") and len(video.id) == 37
    assert video.status == "queued"
    assert video.progress == 0
    assert video.seconds == "4"
    done = client.videos.poll(video.id, poll_interval_ms=50)
    assert done.status == "completed"
    assert done.progress == 100
    assert done.completed_at is not None
    content = client.videos.download_content(done.id)
    assert content.read() == expected_video()


def test_create_with_a_reference_image(client):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    video = client.videos.create(
        model="sora-2",
        prompt="the fox in this picture",
        seconds="4",
        input_reference=("fox.png", png, "image/png"),
    )
    done = client.videos.poll(video.id, poll_interval_ms=50)
    assert done.status == "completed"


def test_failed_video_reports_its_error(client):
    video = client.videos.create(model="sora-2", prompt="please fail", seconds="4")
    done = client.videos.poll(video.id, poll_interval_ms=50)
    assert done.status == "failed"
    assert done.error is not None and done.error.code == "generation_failed"


def test_unknown_video_is_not_found(client):
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve("task_" + "x" * 32)


def test_bad_seconds_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(model="sora-2", prompt="p", seconds="abc")
    assert e.value.body["param"] == "seconds"


def test_a_length_the_upstream_cannot_make_is_a_bad_request(client):
    # The videos API makes 4, 8 or 12 seconds: 5 is refused before anything is reserved.
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(model="sora-2", prompt="p", seconds="5")
    assert e.value.body["param"] == "seconds"
