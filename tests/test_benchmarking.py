"""The measurement loop behind every benchmark script's ratios."""

from itertools import pairwise

from tvm_cocopie.bench import timing as bm


def test_blocks_drop_the_first_call_after_a_switch():
    calls = []
    contenders = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = bm.interleaved_times(contenders, repeat=3, warmup=1, settle_seconds=0, block=4,
                                 switch_seconds=0)
    assert {k: len(v) for k, v in times.items()} == {"a": 9, "b": 9}
    # warmup a b, then per round four a's and four b's
    assert calls == ["a", "b"] + (["a"] * 4 + ["b"] * 4) * 3


def test_blocks_pause_before_each_switch():
    import time

    stamps = []
    contenders = {"a": lambda: stamps.append(("a", time.perf_counter())),
                  "b": lambda: stamps.append(("b", time.perf_counter()))}
    bm.interleaved_times(contenders, repeat=2, warmup=0, settle_seconds=0, block=2,
                         switch_seconds=0.05)
    gaps = [t2 - t1 for (n1, t1), (n2, t2) in pairwise(stamps) if n1 != n2]
    assert len(gaps) == 3 and min(gaps) >= 0.05


def test_single_call_rounds_alternate():
    calls = []
    contenders = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = bm.interleaved_times(contenders, repeat=2, warmup=0, settle_seconds=0)
    assert calls == ["a", "b", "a", "b"] and len(times["a"]) == 2


def test_busy_processes_spin_while_the_block_runs_and_end_after():
    from tvm_cocopie.bench.timing import busy_processes

    with busy_processes(1) as procs:
        assert len(procs) == 1 and procs[0].poll() is None
    assert procs[0].poll() is not None
