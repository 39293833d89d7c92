"""kiln.serve's batching without Ray: requests grouped by profile, those that
differ only in the batch symbol concatenated into one call and split back."""

import numpy as np
import pytest
from conftest import LOAD_OPTIONS, PROFILES

import kiln
from kiln.serve import BatchRunner, Failure, _load_model, batch_symbol_of, deployment

MLP_MLIR = open(__file__.rsplit("/test/", 1)[0] + "/examples/mlp.mlir").read()


@pytest.fixture(scope="module")
def model(mlp_artifact):
    m = _load_model(str(mlp_artifact), **LOAD_OPTIONS)
    assert [p.range_map for p in m.contract.profiles] == [dict(p) for p in PROFILES]
    return m


def _requests(seed=0, n=60):
    rng = np.random.default_rng(seed)
    shapes = [(int(rng.integers(1, 13)), int(rng.choice([1, 3, 5]))) for _ in range(n)]
    return [rng.standard_normal((b, seq, 16), dtype=np.float32) for b, seq in shapes]


def test_the_batch_symbol_is_the_first_dim_of_every_input_and_output(model):
    assert batch_symbol_of(model) == "B"
    # examples/mlp.mlir: its weights are inputs (first dim 32) and its output is [B*L, 32].
    assert batch_symbol_of(kiln.compile(MLP_MLIR)) is None


def test_concatenated_calls_give_each_request_its_own_rows(model, reference):
    requests = _requests()
    runner = BatchRunner(model)
    results = runner.run(requests)
    for x, y in zip(requests, results):
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)
    # Per (profile, L) group, the fewest calls that hold its rows within the
    # profile's B range; first fit (largest first) may use one more per group.
    rows: dict = {}
    for x in requests:
        b = x.shape[0]
        index = next(i for i, p in enumerate(PROFILES) if p["B"][0] <= b <= p["B"][2])
        rows[index, x.shape[1]] = rows.get((index, x.shape[1]), 0) + b
    fewest = sum(-(-n // PROFILES[index]["B"][2]) for (index, _), n in rows.items())
    assert fewest <= runner.calls <= fewest + len(rows) and runner.calls < len(requests) * 2 // 3, (runner.calls, fewest)
    assert runner.concatenated > len(requests) // 2


def test_a_concatenated_call_stays_in_its_requests_profile(model):
    runner = BatchRunner(model)
    requests = _requests(seed=1)
    entries = [type("E", (), {"index": i, "args": [x], "binding": {"B": x.shape[0], "L": x.shape[1]}})()
               for i, x in enumerate(requests)]
    calls = runner.plan(entries)
    assert sorted(e.index for call in calls for e in call) == list(range(len(requests)))
    for call in calls:
        profiles = {runner._profile_index(e.binding) for e in call}
        assert len(profiles) == 1 and len({e.binding["L"] for e in call}) == 1
        rows = sum(e.binding["B"] for e in call)
        index = profiles.pop()
        # Inside its first profile: the same kernels serve the concatenated call.
        assert runner._profile_index({"B": rows, "L": call[0].binding["L"]}) == index or len(call) == 1
        assert rows <= (PROFILES[index]["B"][2] if index >= 0 else 64)


def test_max_rows_caps_a_concatenated_call(model, reference):
    requests = [np.full((3, 2, 16), i, np.float32) for i in range(6)]
    runner = BatchRunner(model, max_rows=7)
    results = runner.run(requests)
    assert runner.calls == 3  # 3+3, 3+3, 3+3
    for x, y in zip(requests, results):
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_without_a_batch_symbol_each_request_is_one_call(model, reference):
    requests = _requests(n=10)
    runner = BatchRunner(model, batch_symbol=None)
    results = runner.run(requests)
    assert runner.calls == 10 and runner.concatenated == 0
    for x, y in zip(requests, results):
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_a_bad_request_fails_alone(model, reference):
    good = _requests(n=4)
    bad = [np.zeros((2, 3, 15), np.float32), np.zeros((2, 33, 16), np.float32), np.zeros((2, 3, 16), np.float64),
           {"inputs": good[0]}]
    results = BatchRunner(model).run(good[:2] + bad + good[2:])
    for x, y in zip(good, results[:2] + results[-2:]):
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)
    errors = results[2:-2]
    assert all(isinstance(f, Failure) and isinstance(f.error, kiln.ShapeError) for f in errors), errors
    assert "33" in str(errors[1].error) and "names no input 'inputs'" in str(errors[3].error)


def test_requests_by_name_by_list_and_as_plain_lists_by_name(model, reference):
    x = np.linspace(-1, 1, 2 * 3 * 16, dtype=np.float32).reshape(2, 3, 16)
    name = model.inputs[0].name
    results = BatchRunner(model).run([{name: x}, [x], (x,), x, {name: x.tolist()}])
    assert len(results) == 5
    for y in results:
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_a_batch_symbol_the_shapes_do_not_allow_is_refused(model):
    with pytest.raises(kiln.KilnError, match="batch_symbol 'L' is not the first dim.*batches along 'B'"):
        BatchRunner(model, batch_symbol="L")
    with pytest.raises(kiln.KilnError, match="max_rows must be"):
        BatchRunner(model, max_rows=0)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_replicas": 0}, "num_replicas must be a whole number >= 1"),
    ({"max_batch_size": 2.5}, "max_batch_size must be"),
    ({"threads": 0}, "threads must be"),
    ({"batch_wait_timeout_s": -1}, "batch_wait_timeout_s must be"),
])
def test_deployment_options_are_checked(mlp_artifact, kwargs, message):
    with pytest.raises(kiln.KilnError, match=message):
        deployment(mlp_artifact, **kwargs)


def test_an_artifact_of_the_first_format_loads_through_the_compiler(tmp_path):
    # kiln-artifact/1: the kiln IR, compiled again when loaded (kiln.load refuses it).
    (tmp_path / "model.kiln.mlir").write_text(MLP_MLIR)
    (tmp_path / "kiln-artifact.json").write_text('{"format": "kiln-artifact/1", "ir": "model.kiln.mlir"}')
    model = _load_model(str(tmp_path))
    assert len(model.inputs) == 4 and batch_symbol_of(model) is None


def test_a_missing_artifact_is_refused_before_ray_starts(tmp_path):
    with pytest.raises(kiln.KilnError, match="is not an artifact directory"):
        deployment(tmp_path / "nothing.kiln")
