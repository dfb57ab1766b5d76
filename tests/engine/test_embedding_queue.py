"""The embedding server's batching (enginehost.embedqueue) on a stand-in model: what a failing
forward pass and a client that went away do to the other requests."""

import threading

from enginehost.embedqueue import BULK, QUERY, Batcher, Work


class Model:
    """Texts to their lengths; a pass with a text "boom" in it raises. Passes wait for `go`."""

    def __init__(self) -> None:
        self.passes: list[list[str]] = []
        self.go = threading.Event()

    def __call__(self, texts: list[str]):
        self.go.wait(10)
        self.passes.append(texts)
        if "boom" in texts:
            raise RuntimeError("the model failed")
        return [len(text) for text in texts], [1] * len(texts)


class Outcome:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None

    def __call__(self, work: Work, error: BaseException | None) -> None:
        self.error = error
        self.done.set()


def submitted(batcher: Batcher, texts: list[str], priority: int, lane: str) -> tuple[Work, Outcome]:
    outcome = Outcome()
    work = Work(texts, priority, outcome, lane)
    batcher.submit(work)
    return work, outcome


def test_a_failing_pass_fails_its_own_request_only():
    model = Model()
    batcher = Batcher(model, max_batch=2, max_queue=16)
    failing, failed = submitted(batcher, ["boom", "b", "c", "d"], 1, BULK)
    fine, finished = submitted(batcher, ["query"], 0, QUERY)
    batcher.start()
    model.go.set()
    assert failed.done.wait(10) and finished.done.wait(10)
    assert isinstance(failed.error, RuntimeError) and finished.error is None
    assert fine.vectors == [5]
    # The failed request's other texts are not embedded, and its lane holds nothing.
    assert ["c", "d"] not in model.passes
    assert batcher.held(BULK) == batcher.held(QUERY) == 0


def test_a_request_whose_client_went_away_is_embedded_no_further():
    model = Model()
    batcher = Batcher(model, max_batch=1, max_queue=16)
    gone, _ = submitted(batcher, ["a", "b", "c"], 1, BULK)
    batcher.cancel(gone)
    after, finished = submitted(batcher, ["later"], 1, BULK)
    batcher.start()
    model.go.set()
    assert finished.done.wait(10)
    assert model.passes == [["later"]]
    assert batcher.held(BULK) == 0 and after.vectors == [5]


def test_a_pass_embeds_the_longest_texts_of_a_request_together_and_answers_in_its_order():
    model = Model()
    batcher = Batcher(model, max_batch=2, max_queue=16)
    work, finished = submitted(batcher, ["xx", "xxxx", "x", "xxx"], 1, BULK)
    batcher.start()
    model.go.set()
    assert finished.done.wait(10)
    assert model.passes == [["xxxx", "xxx"], ["xx", "x"]]
    assert work.vectors == [2, 4, 1, 3]
