"""Choosing a model: the engines' models, less those the admin keeps for some groups; a conversation
keeps its model; the API's `model` is checked the same way. With two real engines of the bundled
model served under two names, an answer goes to its conversation's model's engine."""

import json
from dataclasses import replace

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from playwright.sync_api import expect

from apitokens.services import token_issue
from chat import consumers
from conversations import services, turns
from conversations.models import Message
from enginehost.launcher import EngineConfig, EngineProcess
from harness.processes import free_port
from httpkit.errors import Refusal
from inference.access import models_for
from inference.models import ModelAccess
from tests.support.browser import log_in
from tests.support.chat_client import collect_answer, open_chat, send
from tests.support.fake_engine import FakeEngine
from tests.support.product import LOGS, engine_gauge, running_daphne

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_models(settings):
    settings.INFERENCE_MODELS = "model-a=http://127.0.0.1:9/a,model-b=http://127.0.0.1:9/b"


def restrict(model: str, group: str) -> Group:
    beta = Group.objects.create(name=group)
    ModelAccess.objects.create(model_name=model).groups.add(beta)
    return beta


def test_it_offers_the_engines_models_less_those_kept_for_other_groups(two_models, alice):
    assert models_for(user=alice) == ["model-a", "model-b"]
    beta = restrict("model-b", "beta")
    assert models_for(user=alice) == ["model-a"]
    alice.groups.add(beta)
    assert models_for(user=alice) == ["model-a", "model-b"]
    root = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    assert models_for(user=root) == ["model-a", "model-b"]


def test_the_admin_refuses_to_restrict_the_default_model_which_is_everyones(two_models):
    root = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    admin = Client()
    admin.force_login(root)
    refused = admin.post("/admin/inference/modelaccess/add/", {"model_name": "model-a"})
    assert refused.status_code == 200
    assert "is the default model, which every user may use" in refused.content.decode()
    assert not ModelAccess.objects.exists()
    assert admin.post("/admin/inference/modelaccess/add/", {"model_name": "model-b"}).status_code == 302
    assert list(ModelAccess.objects.values_list("model_name", flat=True)) == ["model-b"]


def test_a_conversation_keeps_the_model_chosen_before_its_first_message(two_models, alice):
    conversation = services.conversation_create(user=alice, settings_data={"model": "model-b"})
    assert conversation.model_name == "model-b"
    turn = turns.chat_turn_start(user=alice, conversation_id=conversation.pk, content="Hi")
    assert turn.model == "model-b"
    assert Message.objects.get(pk=turn.assistant_message_id).model_name == "model-b"
    turns.message_finish(message_id=turn.assistant_message_id, content="Hello", status="complete")
    with pytest.raises(Refusal, match="keeps its model"):
        services.conversation_update_settings(
            user=alice, conversation_id=conversation.pk, data={"model": "model-a"}
        )
    with pytest.raises(Refusal, match="'model' must be one of model-a, model-b"):
        services.conversation_create(user=alice, settings_data={"model": "gpt-4o"})
    restrict("model-b", "beta")
    with pytest.raises(Refusal, match="not available to you"):
        turns.chat_turn_start(user=alice, conversation_id=conversation.pk, content="Again")
    with pytest.raises(Refusal):
        services.conversation_create(user=alice, settings_data={"model": "model-b"})


async def test_an_answer_names_its_conversations_model_to_the_engine(two_models, alice, monkeypatch):
    from tests.support.consumer_client import connected, until_closed

    fake = FakeEngine(["ok"])
    monkeypatch.setattr(consumers, "engine_client", lambda: fake)
    from asgiref.sync import sync_to_async

    conversation = await sync_to_async(services.conversation_create)(
        user=alice, settings_data={"model": "model-b"}
    )
    communicator = await connected(alice)
    try:
        await communicator.send_json_to(
            {"type": "chat.send", "conversation": conversation.pk, "content": "Hi"}
        )
        assert (await until_closed(communicator))[-1]["type"] == "chat.done"
    finally:
        await communicator.disconnect()
    assert [r.model for r in fake.requests] == ["model-b"]


def test_the_api_lists_and_accepts_only_the_keys_owners_models(two_models, alice):
    restrict("model-b", "beta")
    _, key = token_issue(user=alice, scopes=["openai"])
    headers = {"Authorization": f"Bearer {key}"}
    client = Client()
    listed = client.get("/v1/models", headers=headers).json()
    assert [m["id"] for m in listed["data"]] == ["model-a"]
    body = {"model": "model-b", "messages": [{"role": "user", "content": "Hi"}]}
    refused = client.post("/v1/chat/completions", json.dumps(body), "application/json", headers=headers)
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "model_not_found")
    assert client.get("/v1/models/model-b", headers=headers).status_code == 404


def test_the_chat_page_offers_the_users_models(two_models, alice):
    restrict("model-b", "beta")
    client = Client()
    client.force_login(alice)
    page = client.get("/").content.decode()
    initial = json.loads(page.split('id="initial-state" type="application/json">')[1].split("</script>")[0])
    assert initial["limits"]["models"] == ["model-a"]


@pytest.fixture(scope="module")
def second_engine(engine_url):
    """Another vLLM engine of the bundled model, served under another name."""
    url = f"http://127.0.0.1:{free_port()}"
    config = replace(
        EngineConfig.from_settings(django_settings),
        url=url,
        served_model_name="smol-b",
        kv_cache_space_gb=1,
        max_num_seqs=4,
    )
    with open(LOGS / "test-engine-b.log", "w") as log:
        engine = EngineProcess(config, output=log)
        engine.start()
        try:
            engine.wait_healthy(timeout=600)
            yield url
        finally:
            engine.stop()


def test_each_answer_goes_to_its_conversations_models_engine(engine_url, second_engine, settings):
    default = settings.INFERENCE_MODEL_NAME
    settings.INFERENCE_MODELS = f"{default}={engine_url},smol-b={second_engine}"
    user = get_user_model().objects.create_user("otto", password="pw-otto-12345")
    chats = {
        model: services.conversation_create(user=user, settings_data={"model": model, "max_tokens": 8})
        for model in (default, "smol-b")
    }
    served = "vllm:request_success_total"
    with running_daphne(engine_url, INFERENCE_MODELS=settings.INFERENCE_MODELS) as server:
        for model, url in ((default, engine_url), ("smol-b", second_engine)):
            others = engine_url if url == second_engine else second_engine
            before, before_other = engine_gauge(url, served), engine_gauge(others, served)
            ws_url = server.url.replace("http://", "ws://") + "/ws/chat/"
            with open_chat(ws_url, server.url, user) as ws:
                send(ws, {"type": "chat.send", "conversation": chats[model].pk, "content": "Say hi."})
                _, _, done = collect_answer(ws)
            assert done["type"] == "chat.done" and done["status"] == "complete", done
            assert Message.objects.get(pk=done["message"]).model_name == model
            assert engine_gauge(url, served) == before + 1, model
            assert engine_gauge(others, served) == before_other, model


def test_the_chat_shows_a_model_picker_for_a_new_chat(engine_url, second_engine, settings, page):
    default = settings.INFERENCE_MODEL_NAME
    settings.INFERENCE_MODELS = f"{default}={engine_url},smol-b={second_engine}"
    user = get_user_model().objects.create_user("pia", password="pw-pia-123456")
    with running_daphne(engine_url, INFERENCE_MODELS=settings.INFERENCE_MODELS) as server:
        log_in(page, server.url, "pia", "pw-pia-123456")
        page.click("#open-settings")
        options = page.locator("#settings-model option").all_inner_texts()
        assert options == [default, "smol-b"]
        page.select_option("#settings-model", "smol-b")
        page.click("#settings-save")
        page.wait_for_url("**/c/*/")
        assert user.conversations.get().model_name == "smol-b"
        page.fill("#prompt", "Say hi.")
        page.keyboard.press("Enter")
        expect(page.locator(".message.assistant .body").last).not_to_be_empty(timeout=120_000)
        page.wait_for_selector(".message.assistant.generating", state="detached", timeout=120_000)
        assert Message.objects.get(role="assistant").model_name == "smol-b"
        page.click("#open-settings")
        assert page.locator("#settings-model").is_disabled()  # kept once it has messages
