"""A send semantics is one registered object (docs/design.md, "How to add a semantics"): a kind
registered in-process, with no other edit, is taken by `Semantics.parse`, listed by `--semantics`'s
help and its error, and checked, simulated and pictured by every engine through its answers."""
from __future__ import annotations

import json

import pytest

from schedc.errors import SchedcError
from schedc.rules import semantics
from schedc.rules.semantics import Kind, Semantics


@pytest.fixture
def mailbox():
    """A throwaway blocking kind whose channels hold one message: bounded:1 under another name."""
    kind = semantics.register(Kind("mailbox", buffer=1, timed_as="gloo"))
    yield kind
    semantics.unregister("mailbox")


@pytest.fixture
def relay():
    """A throwaway backend (posted and awaited) that behaves as gloo."""
    kind = semantics.register(Kind("relay", posted=True, modifiers=("shapes",)))
    yield kind
    semantics.unregister("relay")


def _verdict(run_cli, *argv):
    code, out, err = run_cli("check", *argv, "--json")
    assert code in (0, 1), err
    first = json.loads(out.splitlines()[0])
    return code, first["ok"], sorted(e["code"] for e in first.get("errors", []))


def test_a_registered_kind_parses_and_answers(mailbox, relay):
    m = Semantics.parse("mailbox")
    assert (m.posted, m.channel_buffer, m.sent_held_until, m.timed_as, str(m)) == \
        (False, 1, "matched", Semantics("gloo"), "mailbox")
    r = Semantics.parse("relay+shapes")
    assert r.posted and r.shapes and str(r) == "relay+shapes" and r.base in Semantics.backends()
    assert "mailbox" in semantics.names(posted=False) and "relay" in semantics.names(posted=True)
    with pytest.raises(SchedcError) as e:
        Semantics.parse("relay+lazy")
    assert "mailbox" in e.value.diagnostics[0].message


def test_unregistered_kinds_are_gone():
    with pytest.raises(SchedcError):
        Semantics.parse("mailbox")
    with pytest.raises(ValueError):
        Semantics("mailbox")


@pytest.mark.parametrize("name", ["1f1b", "zb_h1", "interleaved_1f1b"])
def test_the_cli_checks_under_a_registered_kind_as_under_its_twin(run_cli, mailbox, relay, name):
    assert _verdict(run_cli, name, "--semantics", "mailbox") == _verdict(run_cli, name, "--semantics", "bounded:1")
    assert _verdict(run_cli, name, "--semantics", "relay") == _verdict(run_cli, name, "--semantics", "gloo")


BOTH_SEND = """schedule both_send {
  rank 0: 0F0 0F1 0SEND_F0 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
}
"""


def test_a_deadlock_under_rendezvous_clears_under_a_registered_buffer(run_cli, mailbox, tmp_path):
    path = tmp_path / "both_send.pp"  # rank 0 sends twice before it receives: a buffer of one saves it
    path.write_text(BOTH_SEND)
    assert _verdict(run_cli, str(path))[1:] == (False, ["deadlock"])
    assert _verdict(run_cli, str(path), "--semantics", "mailbox") == _verdict(run_cli, str(path), "--semantics",
                                                                              "bounded:1")
    assert _verdict(run_cli, str(path), "--semantics", "mailbox")[1] is True


def test_help_and_sim_know_a_registered_kind(run_cli, mailbox, relay):
    code, out, _ = run_cli("check", "--help")
    assert code == 0 and "mailbox" in out and "relay" in out
    code, out, err = run_cli("sim", "1f1b", "--semantics", "mailbox", "--json")
    assert code == 0, err
    assert json.loads(out)["makespan"] == json.loads(run_cli("sim", "1f1b", "--semantics", "bounded:1",
                                                              "--json")[1])["makespan"]


def test_docs_name_every_registered_kind():
    """docs/semantics.md's "Send semantics" says what each kind means (docs/design.md's recipe)."""
    from pathlib import Path
    page = (Path(__file__).resolve().parent.parent / "docs" / "semantics.md").read_text(encoding="utf-8")
    section = page.split("## Send semantics", 1)[1].split("\n## ", 1)[0]
    assert [n for n in semantics.names() if f"`{n}`" not in section] == []


def test_bounded_tags_refusal_lists_the_registry(run_cli, relay, tmp_path):
    path = tmp_path / "tagged.pp"
    path.write_text("schedule t {\n  p2p tagged\n  rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\n"
                    "  rank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n}\n")
    code, _, err = run_cli("check", str(path), "--semantics", "bounded:2")
    assert code == 2 and "check it under rendezvous, eager, nccl, gloo or relay" in err
    assert run_cli("check", str(path), "--semantics", "relay")[0] == 0
