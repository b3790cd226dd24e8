"""Structural checks: each finding has the right code, rank, step and source line."""
from __future__ import annotations

import pytest

from conftest import compile_text
from schedc.lint import lint


def findings(text):
    return lint(compile_text(text))


def codes(text):
    return sorted({d.code for d in findings(text)})


def test_a_sound_literal_schedule_has_no_findings():
    assert findings("schedule ok {\n rank 0: 0F0 0F1 0B0 0B1\n rank 1: 1F0 1B0 1F1 1B1\n}") == []


def test_duplicates_are_reported_not_merged():
    ds = findings("schedule d {\n rank 0: 0F0 0F0 0B0\n rank 1: 1F0 1B0\n}")
    dup = [d for d in ds if d.code == "duplicate"]
    assert len(dup) == 1 and (dup[0].rank, dup[0].step) == (0, 1) and "first at rank 0, step 0" in dup[0].message
    assert dup[0].span.line == 2 and dup[0].span.column == 14


def test_missing_forward_and_backward():
    ds = findings("schedule m { microbatches 2\n rank 0: 0F0 0B0 0F1\n rank 1: 1F0 1B0 1F1 1B1\n}")
    assert [d.code for d in ds] == ["missing"]
    assert "backward of stage 0, microbatch 1" in ds[0].message


def test_mixed_and_unpaired_backward():
    assert codes("schedule x {\n rank 0: 0F0 0B0 0W0\n rank 1: 1F0 1I0 1W0\n}") == ["mixed-backward"]
    assert codes("schedule x {\n rank 0: 0F0 0B0\n rank 1: 1F0 1I0\n}") == ["missing"]


@pytest.mark.parametrize("rank0,code,step", [
    ("0F0 0F1 0B0 0I1 0W1 0B1", "mixed-backward", 5),  # the B after I/W (was: at 0F1)
    ("0F0 0F1 0B0 0B1 0I1 0W1", "mixed-backward", 4),  # the I after the B
    ("0F0 0F1 0I0 0W0 0B1 0W1", "mixed-backward", 5),  # a W alone after the B
    ("0F0 0F1 0B0 0I1", "missing", 3),  # W(0,1) is missing: at the I (was: at 0F1)
    ("0F0 0F1 0B0 0W1", "missing", 3),  # I(0,1) is missing: at the W
    ("0F0 0F1 0B0", "missing", 1),  # the backward is missing: at the F
])
def test_a_pair_finding_points_at_the_action_it_is_about(rank0, code, step):
    found = findings(f"schedule x {{ microbatches 2\n rank 0: {rank0}\n rank 1: 1F0 1B0 1F1 1B1\n}}")
    ds = [d for d in found if d.code == code]  # (a W without its I is an `order` error too)
    assert [(d.rank, d.step) for d in ds] == [(0, step)], found
    assert ds[0].span.column == 10 + 4 * step


def test_a_missing_w_in_legacy_notation_points_at_its_i():
    from schedc.interop.torch_csv import read_torch_csv
    csv = "0F0,0F1,0B0,0I1,0W1,0B1\n1F0,1B0,1F1,1B1\n"  # legacy: B is I, so I(0,1) appears twice
    ds = lint(read_torch_csv(csv, "mix3.csv", notation="legacy").to_program())
    missing = [(d.rank, d.step, d.span.column) for d in ds if d.code == "missing"]
    assert missing == [(0, 2, 9), (1, 1, 5), (1, 3, 13)] and "W(0,0) is missing: I(0,0)" in ds[1].message


def test_order_backward_before_forward_names_the_step():
    ds = findings("schedule o {\n rank 0: 0F0 0B0\n rank 1: 1B0 1F0\n}")
    assert [(d.code, d.rank, d.step) for d in ds] == [("order", 1, 0)]
    assert "F(1,0) comes later, at step 1" in ds[0].message


def test_w_before_i():
    ds = findings("schedule o {\n rank 0: 0F0 0W0 0I0\n}")
    assert [(d.code, d.rank, d.step) for d in ds] == [("order", 0, 1)]


def test_indices_out_of_range_and_wrong_rank():
    assert codes("schedule o(P = 2) { stages 2\n microbatches 1\n rank 0: 0F0 0B0 0F5 \n rank 1: 1F0 1B0 }") == ["bad-index"]
    ds = findings("schedule o(P = 2) { stages 2\n microbatches 1\n place loop\n rank 0: 0F0 0B0 1F0 1B0\n rank 1: }")
    assert {d.code for d in ds} == {"wrong-rank"} and "stage 1 is placed on rank 1" in ds[0].message


def test_legacy_notation_is_recognised():
    ds = findings("schedule l {\n rank 0: 0F0 0B0 0W0\n rank 1: 1F0 1B0 1W0\n}")
    assert [d.code for d in ds] == ["legacy-notation"] and "--notation legacy" in ds[0].notes[0]


def test_explicit_communication_needs_its_receive_and_send():
    ds = findings("schedule c {\n rank 0: 0F0 0SEND_F0 0B0\n rank 1: 1F0 1B0\n}")
    assert {d.code for d in ds} == {"missing-recv", "missing-send"}
    recv = next(d for d in ds if d.code == "missing-recv" and d.rank == 1)
    assert (recv.rank, recv.step) == (1, 0) and "RECV_F(1,0)" in recv.message


def test_receive_after_its_consumer_is_an_order_error():
    ds = findings("schedule c {\n rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n rank 1: 1F0 1RECV_F0 1B0 1SEND_B0\n}")
    assert [(d.code, d.rank, d.step) for d in ds] == [("order", 1, 0)]


def test_send_to_the_same_rank_is_refused():
    ds = findings("schedule c(P = 1) { stages 2\n microbatches 1\n rank 0: 0F0 0SEND_F0 1F0 1B0 0B0\n}")
    assert [d.code for d in ds] == ["bad-comm"]


def test_findings_are_capped_per_code():
    many = " ".join(f"0F{m}" for m in range(60))
    ds = findings(f"schedule c {{ microbatches 60\n rank 0: {many}\n}}")
    missing = [d for d in ds if d.code == "missing"]
    assert len(missing) == 21 and "40 more" in missing[-1].message


def test_a_capped_report_counts_every_finding_and_lists_only_real_ones():
    """The summary counted the `... and N more` line as one error (FAILED (21 error(s)) for 60), and
    the JSON listed it among the findings; now both count all, and the JSON says how many are left out."""
    import schedc
    many = " ".join(f"0F{m}" for m in range(60))
    report = schedc.check(compile_text(f"schedule c {{ microbatches 60\n rank 0: {many}\n}}"))
    assert report.error_count == 60 and report.omitted == {"missing": 40}
    assert "FAILED (60 error(s), 20 shown per kind)" in report.summary()
    assert "... and 40 more 'missing' finding(s)" in report.render()
    data = report.to_dict()
    assert len(data["errors"]) == 20 and all("rank" in e for e in data["errors"])
    assert data["errors_omitted"] == {"missing": 40}
    clean = schedc.check(compile_text("schedule d {\n rank 0: 0F0 0F0 0B0\n rank 1: 1F0 1B0\n}"))
    assert "errors_omitted" not in clean.to_dict() and "FAILED (1 error(s))" in clean.summary()


# Issue 17, item 5: a value made on the same rank but listed after its consumer is an `order`
# error at both levels, with one message (not a deadlock of a rank with itself).
SAME_RANK_COMPUTE = "schedule inv {\n rank 0: 1F0 0F0 1B0 0B0\n}"
SAME_RANK_COMMS = """schedule inv {
 rank 0: 1F0 0F0 1SEND_F0 1RECV_B0 1B0 0B0
 rank 1: 2RECV_F0 2F0 2B0 2SEND_B0
}"""


def test_a_forward_before_its_input_on_the_same_rank_is_an_order_error_at_both_levels():
    import schedc
    expected = "rank 0, step 0: F(1,0) needs the activation of F(0,0), but F(0,0) comes later, at step 1"
    for text in (SAME_RANK_COMPUTE, SAME_RANK_COMMS):
        ds = findings(text)
        assert [(d.code, d.rank, d.step, d.message) for d in ds] == [("order", 0, 0, expected)], text
        report = schedc.check(compile_text(text))
        assert report.deadlock is None and {e.code for e in report.errors} == {"order"}, report.render()


def test_a_backward_before_the_gradient_it_needs_on_the_same_rank_is_an_order_error():
    ds = findings("schedule inv {\n rank 0: 0F0 1F0 0B0 1B0\n}")
    assert [(d.code, d.rank, d.step) for d in ds] == [("order", 0, 2)]
    assert ds[0].message == ("rank 0, step 2: B(0,0) needs the input gradient of stage 1, microbatch 0, "
                             "but B(1,0) comes later, at step 3")


def test_a_value_from_a_receive_listed_later_reads_like_a_local_one():
    ds = findings("schedule c {\n rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n rank 1: 1F0 1RECV_F0 1B0 1SEND_B0\n}")
    assert [d.message for d in ds] == [
        "rank 1, step 0: F(1,0) needs the activation of F(0,0), but RECV_F(1,0) comes later, at step 1"]


def test_a_backward_before_its_forward_is_reported_once_at_the_comms_level():
    ds = findings("schedule c {\n rank 0: 0B0 0F0 0SEND_F0 0RECV_B0\n rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}")
    assert [(d.code, d.rank, d.step) for d in ds] == [("order", 0, 0), ("order", 0, 0)]
    assert [d.message.split(": ", 1)[1] for d in ds] == [
        "B(0,0) needs the activation of F(0,0), but F(0,0) comes later, at step 1",
        "B(0,0) needs the input gradient of stage 1, microbatch 0, but RECV_B(0,0) comes later, at step 3"]


def test_a_cycle_across_ranks_is_still_a_deadlock_not_an_order_error():
    import schedc
    p = compile_text("schedule c {\n rank 0: 0F0 0B0 0F1 0B1\n rank 1: 1F1 1B1 1F0 1B0\n}")
    assert findings("schedule c {\n rank 0: 0F0 0B0 0F1 0B1\n rank 1: 1F1 1B1 1F0 1B0\n}") == []
    report = schedc.check(p)
    assert report.deadlock is not None and {e.code for e in report.errors} == {"deadlock"}
