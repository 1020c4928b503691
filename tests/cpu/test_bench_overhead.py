"""The host-cost benchmark's bookkeeping, without a GPU: every drop-in entry point is timed next to the op it wraps,
and a drop-in that adds more than COMPAT_BUDGET_US to it is marked and fails the run."""
import pytest

from tk_ops.bench import overhead
from tk_ops.bench.overhead import COMPAT_BUDGET_US, Row, Timing


def row(ours_us, wrapped_us, peer_us=20.0):
    r = Row("drop-in", "size", "entry", wraps="op")
    r.results = {"entry": Timing(ours_us, 1.0, 1), "op": Timing(wrapped_us, 1.0, 1), "peer": Timing(peer_us, 1.0, 1)}
    return r


def test_the_extra_host_time_is_measured_against_the_wrapped_op():
    r = row(11.5, 10.0)
    assert r.extra_us() == pytest.approx(1.5)
    assert not r.over_budget()
    assert row(10.0 + COMPAT_BUDGET_US + 0.1, 10.0).over_budget()


def test_the_wrapped_op_is_not_a_peer():
    r = row(11.5, 5.0, peer_us=20.0)  # the wrapped op is cheaper, but the ratio is against the real peer
    assert r.best_peer()[0] == "peer"
    assert r.ratio() == pytest.approx(20.0 / 11.5)


def test_the_table_marks_a_drop_in_over_budget():
    text = overhead.format_table([row(13.0, 10.0)])
    assert "+3.0 us OVER" in text
    assert "OVER" not in overhead.format_table([row(11.0, 10.0)])


def test_a_native_row_has_no_wrapped_op():
    r = Row("matmul", "size", "tk_ops")
    r.results = {"tk_ops": Timing(9.0, 1.0, 1), "torch.matmul": Timing(13.0, 1.0, 1)}
    assert r.extra_us() is None and not r.over_budget()


def test_every_drop_in_entry_point_is_a_case():
    groups = {group: (impls, wraps) for group, _, impls, wraps in overhead.cases()}
    for name in ("SDPA drop-in forward", "SDPA drop-in forward+backward", "flash_attn_func drop-in forward",
                 "flash_attn_func drop-in forward+backward"):
        impls, wraps = groups[name]
        assert wraps == "tk_ops.attention" and wraps in {i.name for i in impls}, name
        assert sum(i.ours for i in impls) == 1, name
