"""What blocks when, per send semantics and backend (docs/semantics.md, "Send semantics"): the one
place that names a semantics kind. Engines ask `Semantics` questions (does a send wait for its
receive, how many messages a channel buffers, are operations posted, until when a sent buffer is
held, one stream per rank pair) and never compare its kind; an unknown kind is an error.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import SchedcError

ABSTRACT = ("rendezvous", "eager", "bounded")  # a send or receive blocks at its place
BACKENDS = ("nccl", "gloo")  # operations are posted at their place and awaited later
# What a backend's runtime does around its messages, written after it (`nccl+shapes+lazy`): which
# backends each modifier applies to, and what it means (docs/semantics.md, "How the runtimes set up
# communication").
MODIFIERS = {
    "shapes": (BACKENDS, "each step's shapes exchanged first, blocking, as Megatron does with variable sequence "
                         "lengths"),
    "lazy": (("nccl",), "each NCCL communicator made at its first use (no warm-up), as Megatron's and torch's "
                        "sub-groups are"),
}


@dataclass(frozen=True)
class Semantics:
    """`rendezvous` (buffer 0), `eager` (unbounded), `bounded` with `buffer` messages per channel,
    or a backend, `nccl` or `gloo`, whose operations are posted and awaited (`posted`); a backend
    with `shapes` (`nccl+shapes`) exchanges each step's message shapes first, blocking, as Megatron
    does with variable sequence lengths (schedc/verify/shapes.py); `nccl+lazy` makes each NCCL
    communicator at its first use (schedc/verify/comm_init.py). Any other kind, a buffer outside
    `bounded` (or none inside it) or a modifier its backend does not take is refused."""

    kind: str = "rendezvous"
    buffer: int = 0
    shapes: bool = False
    lazy: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ABSTRACT + BACKENDS:
            raise ValueError(f"unknown semantics kind {self.kind!r}; the kinds are {', '.join(ABSTRACT + BACKENDS)}")
        if (self.buffer > 0) is not (self.kind == "bounded"):
            raise ValueError(f"{self.kind} with a buffer of {self.buffer}: only bounded has one, of at least 1")
        for m in self.modifiers:
            if self.kind not in MODIFIERS[m][0]:
                raise ValueError(f"{self.kind} takes no +{m}")

    @staticmethod
    @lru_cache(maxsize=256)  # (asked once per check: a small file's whole check is ~150 us)
    def parse(text: str) -> "Semantics":
        base, *mods = text.split("+")
        if mods and base in BACKENDS and all(base in MODIFIERS.get(m, ((),))[0] for m in mods) \
                and len(set(mods)) == len(mods):
            return Semantics(base, 0, shapes="shapes" in mods, lazy="lazy" in mods)
        if text in ("rendezvous", "eager") or text in BACKENDS:
            return Semantics(text, 0)
        if text.startswith("bounded:") and text[8:].isdigit():
            return Semantics.buffered(int(text[8:]))
        raise SchedcError("usage", f"unknown semantics {text!r}; expected rendezvous, eager, bounded:K "
                          "(K a positive integer), nccl or gloo, a backend with modifiers after it: "
                          + "; ".join(f"+{m} ({', '.join(kinds)}: {what})" for m, (kinds, what) in MODIFIERS.items()),
                          where="--semantics")

    @staticmethod
    def buffered(messages: int | None) -> "Semantics":
        """The blocking semantics whose channels buffer `messages` sent messages: rendezvous for 0,
        bounded:K for K, eager for None (unbounded)."""
        if messages is None:
            return Semantics("eager")
        return Semantics("bounded", messages) if messages > 0 else Semantics("rendezvous")

    @staticmethod
    def backends() -> tuple["Semantics", ...]:
        """The runtimes' backends, without modifiers."""
        return tuple(Semantics(kind) for kind in BACKENDS)

    # ---- the questions engines ask ----
    @property
    def posted(self) -> bool:
        """Operations are posted at their place and awaited later (a backend), rather than blocking there."""
        return self.kind in BACKENDS

    @property
    def channel_buffer(self) -> int | None:
        """How many sent messages a channel holds before a send blocks at its place: 0 under
        rendezvous, K under bounded:K; None where a send never blocks at its place (eager, and the
        backends, whose sends are posted)."""
        if self.kind == "rendezvous":
            return 0
        return self.buffer if self.kind == "bounded" else None

    @property
    def send_waits_for_receive(self) -> bool:
        """Does a send block at its place until its receive is posted (rendezvous)?"""
        return self.channel_buffer == 0

    @property
    def sent_held_until(self) -> str | None:
        """Until when a rank holds a message it sent: "waited for" under a backend (torch's runtime
        keeps the tensor until its send is awaited), "matched" under eager or bounded sends (until
        its receive is posted); None under rendezvous, where a send completes with its receive."""
        if self.posted:
            return "waited for"
        return None if self.send_waits_for_receive else "matched"

    @property
    def one_stream_per_pair(self) -> bool:
        """Does a rank pair's every operation run on one stream, completing in issue order only once
        matched (nccl), rather than progressing independently?"""
        return self.kind == "nccl"

    @property
    def pairs_by_tag(self) -> bool:
        """Does a receive meet the send of its tag (`p2p tagged`)? NCCL ignores tags."""
        return self.kind != "nccl"

    @property
    def timed_as(self) -> "Semantics":
        """The posted semantics whose graph times this one's runs: a backend's own; gloo's for an
        abstract one, under which a rank blocked at a send or receive is never delayed by it
        (only a consumer waits, for its data: schedc/simulate_graph.py)."""
        return self if self.posted else Semantics("gloo")

    def holds_on(self, backend: "Semantics") -> bool:
        """Does a program that completes under this semantics complete when run on `backend`? The
        semantics nest (docs/semantics.md): rendezvous => nccl => gloo, bounded:K => eager => gloo.
        So every verdict holds on gloo, and on nccl only one under rendezvous or nccl (eager's and
        gloo's sends need not wait for their stream). (rendezvous => nccl asks that each message be
        grouped on both ends or on neither, which only the nccl verdict checks.)"""
        return not backend.one_stream_per_pair or self.one_stream_per_pair or self.send_waits_for_receive

    @property
    def modifiers(self) -> tuple[str, ...]:
        """The runtime's ways around its messages this semantics adds to its backend (`MODIFIERS`)."""
        return tuple(m for m in MODIFIERS if getattr(self, m))

    @property
    def base(self) -> "Semantics":
        """This semantics without its modifiers."""
        return Semantics(self.kind, self.buffer)

    def phrase(self) -> str:
        """How a verdict names the semantics it is under: "rendezvous sends", "nccl (posted and awaited
        as torch's runtime does; one stream per rank pair)"."""
        if self.kind == "nccl":
            return "nccl (operations posted and awaited as torch's runtime does; one stream per rank pair)"
        if self.kind == "gloo":
            return "gloo (operations posted and awaited as torch's runtime does; each completes once its partner is posted)"
        return f"{self} sends"

    def __str__(self) -> str:
        return f"bounded:{self.buffer}" if self.kind == "bounded" else "+".join((self.kind, *self.modifiers))


RENDEZVOUS = Semantics()
