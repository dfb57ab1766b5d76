"""Prompt assembly: stable layout, whole old turns dropped to fit, never a silent failure."""

import pytest

from inference.prompt import PromptCounts, PromptTooLong, assemble


def turns(n: int, size: int = 100) -> list[dict[str, str]]:
    history = []
    for i in range(n):
        history.append({"role": "user", "content": f"q{i} " + "x" * size})
        history.append({"role": "assistant", "content": f"a{i} " + "y" * size})
    return history


def counting(per_message: int = 0):
    calls = []

    async def count(messages):
        calls.append(messages)
        return sum(len(m["content"]) + per_message for m in messages)

    return count, calls


async def test_it_keeps_the_system_prompt_first_and_the_turns_in_order():
    count, calls = counting()
    history = turns(2) + [{"role": "user", "content": "new"}]
    prompt = await assemble("sys", history, context_window=4096, answer_budget=512, count_tokens=count)
    assert prompt.messages[0] == {"role": "system", "content": "sys"}
    assert prompt.messages[1:] == history
    assert prompt.dropped_turns == 0
    assert calls == [], "a prompt far below the window needs no tokenization"


async def test_it_drops_whole_old_turns_when_the_history_outgrows_the_window():
    count, _ = counting()
    history = turns(5, size=200) + [{"role": "user", "content": "latest question"}]
    prompt = await assemble("sys", history, context_window=900, answer_budget=300, count_tokens=count)
    assert prompt.dropped_turns > 0
    kept = prompt.messages[1:]
    assert kept == history[2 * prompt.dropped_turns :]
    assert kept[0]["role"] == "user"
    assert kept[-1]["content"] == "latest question"
    assert sum(len(m["content"]) for m in prompt.messages) <= 600


async def test_it_refuses_a_message_that_cannot_fit_with_room_for_the_answer():
    count, _ = counting()
    with pytest.raises(PromptTooLong):
        await assemble(
            "sys",
            [{"role": "user", "content": "z" * 5000}],
            context_window=4096,
            answer_budget=512,
            count_tokens=count,
        )


async def test_it_asks_the_engine_again_only_when_the_counted_prompt_plus_the_new_turn_might_not_fit():
    count, calls = counting()
    counts = PromptCounts()
    history = turns(3, size=300) + [{"role": "user", "content": "q3"}]
    window = dict(context_window=2170, answer_budget=300)
    # 1,887 bytes and template overhead against 1,870 tokens of room: the engine counts (1,823).
    await assemble("sys", history, count_tokens=count, counts=counts, **window)
    assert len(calls) == 1
    # The next turns extend the counted prompt: its count plus their bytes still fit.
    for n in range(4, 6):
        history = history + [{"role": "assistant", "content": f"a{n}"}, {"role": "user", "content": f"q{n}"}]
        prompt = await assemble("sys", history, count_tokens=count, counts=counts, **window)
        assert prompt.dropped_turns == 0
    assert len(calls) == 1
    # A turn that might not fit is counted again, exactly, and old turns go.
    history = history + [{"role": "assistant", "content": "y" * 600}, {"role": "user", "content": "last"}]
    prompt = await assemble("sys", history, count_tokens=count, counts=counts, **window)
    assert len(calls) >= 2 and prompt.dropped_turns > 0


def counting_with_opening(opening: int = 20, per_message: int = 5):
    """An engine's count: a fixed opening (the template's default system prompt, the generation
    prompt) on every count, and each message's characters and markers."""
    calls = []

    async def count(messages):
        calls.append(messages)
        return opening + sum(len(m["content"]) + per_message for m in messages)

    return count, calls


def chars(calls) -> int:
    return sum(len(m["content"]) for messages in calls for m in messages)


async def test_a_long_history_is_counted_once_as_a_whole_and_once_a_turn_not_once_per_dropped_turn():
    count, calls = counting_with_opening()
    history = turns(60, size=3800) + [{"role": "user", "content": "the question"}]
    window = dict(context_window=8192, answer_budget=512)
    prompt = await assemble("sys", history, count_tokens=count, **window)
    # As few turns dropped as fit: the kept prompt fits, one more turn would not.
    assert await count(prompt.messages) <= 8192 - 512
    one_more = history[2 * (prompt.dropped_turns - 1) :]
    assert await count([prompt.messages[0], *one_more]) > 8192 - 512
    calls[-2:] = []  # the test's own two counts
    history_chars = sum(len(m["content"]) for m in history) + len("sys")
    assert len(calls) <= 61 + 1 + 2, "the whole once, each turn once, the result checked"
    assert chars(calls) <= 2 * history_chars + 8192, "never the remaining prompt again per dropped turn"


async def test_turns_that_cannot_fit_at_the_most_bytes_a_token_covers_are_dropped_uncounted():
    from inference.prompt import MAX_BYTES_PER_TOKEN

    count, calls = counting_with_opening()
    huge = [
        {"role": "user", "content": "h" * 1000 * MAX_BYTES_PER_TOKEN},
        {"role": "assistant", "content": "ok"},
    ]
    history = huge + turns(2) + [{"role": "user", "content": "the question"}]
    prompt = await assemble("sys", history, context_window=1000, answer_budget=100, count_tokens=count)
    assert prompt.dropped_turns == 1
    assert all("h" * 100 not in m["content"] for messages in calls for m in messages)
