"""Per-event-loop state (eventloops.PerLoop): one value a loop, made once, gone with its loop."""

import asyncio

from eventloops import PerLoop


def test_it_makes_one_value_per_running_loop_and_forgets_closed_loops():
    made = []
    per_loop = PerLoop(lambda: made.append(object()) or made[-1])

    async def twice():
        return per_loop(), per_loop()

    first, again = asyncio.run(twice())
    assert first is again
    second, _ = asyncio.run(twice())
    assert second is not first
    # The first loop closed: its value went when the second loop asked.
    assert list(per_loop._made.values()) == [second]


def test_it_pops_the_running_loops_value_for_closing():
    per_loop = PerLoop(list)

    async def pop_and_remake():
        first = per_loop()
        assert per_loop.pop() is first
        assert per_loop.pop() is None
        return first, per_loop()

    first, remade = asyncio.run(pop_and_remake())
    assert remade is not first
