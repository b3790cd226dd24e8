"""The dependency rule (schedc/rules/deps.py): its tables, and the helpers engines read instead of
restating an offset (the runtime's `neighbour_input`, comms' `CONSUMER_OFFSET`, lint's `RECEIVES`)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from schedc.ir import Action, Op
from schedc.rules import deps

COMPUTE = (Op.F, Op.B, Op.I, Op.W)
COMMS = (Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B)


def test_values_are_made_by_forwards_and_backwards():
    assert deps.produces(Action(Op.F, 2, 3)) == ("act", 2, 3)
    assert deps.produces(Action(Op.B, 2, 3)) == deps.produces(Action(Op.I, 2, 3)) == ("grad", 2, 3)
    assert deps.produces(Action(Op.W, 2, 3)) is None


def test_needs_at_the_ends_of_the_model():
    assert deps.needs(Action(Op.F, 0, 0), 4) == ()
    assert deps.needs(Action(Op.B, 3, 0), 4) == (("act", 3, 0),)
    assert deps.needs(Action(Op.I, 1, 2), 4) == (("act", 1, 2), ("grad", 2, 2))


def test_neighbour_input_is_the_value_from_another_stage():
    assert deps.neighbour_input(Action(Op.F, 2, 5), 4) == ("act", 1, 5)
    assert deps.neighbour_input(Action(Op.B, 2, 5), 4) == ("grad", 3, 5)
    assert deps.neighbour_input(Action(Op.I, 2, 5), 4) == ("grad", 3, 5)
    # the first stage's forward reads the inputs, the last stage's backward the loss, W only its own
    assert deps.neighbour_input(Action(Op.F, 0, 5), 4) is None
    assert deps.neighbour_input(Action(Op.B, 3, 5), 4) is None
    assert deps.neighbour_input(Action(Op.W, 2, 5), 4) is None


def test_the_receive_and_send_of_each_kind_of_value():
    assert deps.RECEIVES == {"act": Op.RECV_F, "grad": Op.RECV_B}
    assert deps.CONSUMER_OFFSET == {"act": 1, "grad": -1}
    assert deps.PEER_OFFSET == {Op.SEND_F: 1, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 1}


@settings(deadline=None, max_examples=200)
@given(op=st.sampled_from(COMPUTE), stage=st.integers(0, 7), m=st.integers(0, 5), S=st.integers(1, 8))
def test_a_value_made_on_one_stage_is_the_neighbour_input_of_its_consumer(op, stage, m, S):
    """What a stage makes and what its consumer takes from it agree: consumer_stage, CONSUMER_OFFSET
    and neighbour_input are one rule read three ways."""
    stage = min(stage, S - 1)
    a = Action(op, stage, m)
    made, dest = deps.produces(a), deps.consumer_stage(a, S)
    if made is None or dest is None:
        return
    assert dest == stage + deps.CONSUMER_OFFSET[made[0]]
    consumer = Action(Op.F if made[0] == "act" else Op.B, dest, m)
    assert deps.neighbour_input(consumer, S) == made


@settings(deadline=None, max_examples=200)
@given(op=st.sampled_from((Op.F, Op.B, Op.I)), stage=st.integers(0, 5), m=st.integers(0, 5),
       placement=st.lists(st.integers(0, 2), min_size=1, max_size=6))
def test_a_message_carries_the_value_to_the_receive_that_delivers_it(op, stage, m, placement):
    placement = tuple(placement)
    S = len(placement)
    a = Action(op, min(stage, S - 1), m)
    pair = deps.message(a, placement, S)
    if pair is None:
        return
    send, recv = pair
    assert deps.payload(send) == deps.payload(recv) == deps.delivers(recv) == deps.produces(a)
    assert deps.peer_stage(send) == recv.stage and deps.peer_stage(recv) == send.stage
    assert recv.op is deps.RECEIVES[deps.produces(a)[0]]
    assert placement[send.stage] != placement[recv.stage]
