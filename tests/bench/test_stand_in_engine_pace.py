"""The fast stand-in engine slows each stream as its batch fills, as a real engine's step lengthens."""

from harness.stand_in_engine import StandInEngine


def pace_with(engine: StandInEngine, running: int) -> float:
    engine.running = running
    return engine.pace()


def test_it_streams_at_its_interval_alone_and_slower_in_proportion_as_the_batch_fills():
    engine = StandInEngine(interval=0.02, max_batch=5, step_growth=1.0)
    assert [round(pace_with(engine, n), 4) for n in (1, 3, 5)] == [0.02, 0.03, 0.04]


def test_it_keeps_one_pace_without_a_batch_limit_or_a_growth():
    assert pace_with(StandInEngine(interval=0.02, step_growth=1.0), 50) == 0.02
    assert pace_with(StandInEngine(interval=0.02, max_batch=5), 5) == 0.02
