"""The product's embedding server (enginehost.embedserver), as `runembeddings` starts it: OpenAI's
`/v1/embeddings` shape, the model's vectors, its errors, its key and its metrics."""

import base64
import math
from array import array

import httpx
import pytest
from openai import OpenAI

from enginehost.embedserver import length_groups, pooling_mode
from tests.engine.embedding_servers import AUTH, KEY, MODEL, cosine, embedding_metric, post, vectors


def test_it_answers_in_openais_shape_with_a_unit_vector_of_384_dimensions_per_text(embedding_url):
    response = post(embedding_url, {"model": MODEL, "input": ["The cat sat on the mat.", "Hello", "x " * 50]})
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list" and body["model"] == MODEL
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    assert {item["object"] for item in body["data"]} == {"embedding"}
    for item in body["data"]:
        assert len(item["embedding"]) == 384
        assert math.isclose(math.sqrt(cosine(item["embedding"], item["embedding"])), 1.0, abs_tol=1e-5)
    usage = body["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] > 50


def test_it_gives_a_text_the_same_vector_alone_in_a_batch_and_every_time(embedding_url):
    text = "Retrieval finds the passages nearest a question."
    alone = vectors(embedding_url, [text])[0]
    again = post(embedding_url, {"model": MODEL, "input": text}).json()["data"][0]["embedding"]
    among = vectors(embedding_url, ["short", text, "a much longer text " * 20])[1]
    assert again == alone
    assert cosine(alone, among) > 0.99999


def test_it_puts_similar_sentences_nearer_than_unrelated_ones(embedding_url):
    question, answer, unrelated = vectors(
        embedding_url,
        [
            "How do I reset my password?",
            "To change your password, open the account settings and choose reset.",
            "The recipe needs two cups of flour and an egg.",
        ],
    )
    assert cosine(question, answer) > cosine(question, unrelated) + 0.3


def test_it_encodes_base64_as_the_same_float32_vector(embedding_url):
    text = ["Vectors travel as float32 bytes."]
    plain = vectors(embedding_url, text)[0]
    packed = post(embedding_url, {"model": MODEL, "input": text, "encoding_format": "base64"}).json()
    decoded = array("f", base64.b64decode(packed["data"][0]["embedding"])).tolist()
    assert decoded == pytest.approx(plain, abs=1e-7)


def test_it_serves_the_openai_sdk(embedding_url):
    client = OpenAI(base_url=f"{embedding_url}/v1", api_key=KEY)
    result = client.embeddings.create(model=MODEL, input=["one text", "another text"])
    assert [len(item.embedding) for item in result.data] == [384, 384]
    assert result.usage.prompt_tokens > 0
    assert [model.id for model in client.models.list()] == [MODEL]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL, "input": ["a"], "dimensions": 128}, 400, "dimensions"),
        ({"model": "another-model", "input": ["a"]}, 404, "model"),
        ({"model": MODEL, "input": []}, 400, "input"),
        ({"model": MODEL, "input": [1, 2, 3]}, 400, "input"),
        ({"model": MODEL, "input": ["a"], "encoding_format": "int8"}, 400, "encoding_format"),
        ({"model": MODEL, "input": ["a"], "temperature": 1}, 400, "temperature"),
    ],
)
def test_it_refuses_what_it_cannot_do_in_openais_error_shape(embedding_url, body, status, param):
    response = post(embedding_url, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_it_accepts_the_models_own_dimensions(embedding_url):
    response = post(embedding_url, {"model": MODEL, "input": "a", "dimensions": 384})
    assert response.status_code == 200


def test_it_counts_a_texts_tokens_as_the_model_reads_them(embedding_url):
    response = httpx.post(f"{embedding_url}/tokenize", json={"prompt": "Hello world"}, headers=AUTH)
    assert response.json()["count"] == 4  # [CLS] hello world [SEP]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/embeddings", {"input": "a"}),
        ("POST", "/tokenize", {"prompt": "a"}),
        ("GET", "/v1/models", None),
        ("GET", "/metrics", None),
    ],
)
def test_every_route_but_health_asks_for_the_engines_key(embedding_url, method, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        assert httpx.request(method, f"{embedding_url}{path}", json=body, headers=headers).status_code == 401
    assert httpx.request(method, f"{embedding_url}{path}", json=body, headers=AUTH).status_code == 200
    assert httpx.get(f"{embedding_url}/health").status_code == 200


def test_it_counts_requests_texts_tokens_and_passes_in_its_metrics(embedding_url):
    before = embedding_metric(embedding_url, "embedding_texts_total", lane="query")
    vectors(embedding_url, ["one", "two"])
    assert embedding_metric(embedding_url, "embedding_texts_total", lane="query") == before + 2
    for name in (
        "embedding_requests_total",
        "embedding_tokens_total",
        "embedding_forward_passes_total",
        "embedding_batch_texts_count",
        "embedding_forward_seconds_count",
        "embedding_queue_wait_seconds_count",
    ):
        assert embedding_metric(embedding_url, name) > 0, name


def test_a_checkpoint_pools_as_its_sentence_transformers_config_says(tmp_path):
    assert pooling_mode(str(tmp_path)) == "mean"
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert pooling_mode(str(tmp_path)) == "cls"


def test_a_pass_runs_its_texts_in_groups_of_about_one_length_so_padding_stays_small():
    # A passage of 200 tokens and its sentences, as ingestion sends them.
    lengths = [200, 23, 14, 64, 190, 12, 31, 58, 9, 200]
    groups = length_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    padded = sum(max(lengths[i] for i in group) * len(group) for group in groups)
    assert padded <= 1.5 * sum(lengths)  # one pass padded to 200 would be 2,000 for 801
    assert [sorted(lengths[i] for i in group) for group in groups] == [
        [9, 12, 14],
        [23, 31],
        [58, 64],
        [190, 200, 200],
    ]
