"""What blocks when, per send semantics and backend (docs/semantics.md, "Send semantics"): the one
place that names a semantics kind. Each kind is one registered `Kind`, its answers to the questions
engines ask of `Semantics` (does a send wait for its receive, how many messages a channel buffers,
are operations posted, one stream per rank pair); engines never compare a kind; an unknown one raises.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..errors import SchedcError
from ..errors import integer


@dataclass(frozen=True)
class Modifier:
    """What a backend's runtime does around its messages, written after it (`nccl+shapes+lazy`)."""

    name: str
    meaning: str  # the long form, for the error that lists what a modifier means
    short: str  # the CLI's few words


# (docs/semantics.md, "How the runtimes set up communication"; each is a field of `Semantics`, read
# by the checks schedc/verify/runtime_hangs.py gathers: a new modifier is a new question, not a kind)
MODIFIERS = {m.name: m for m in (
    Modifier("shapes", "each step's shapes exchanged first, blocking, as Megatron does with variable sequence "
                       "lengths", "with Megatron's shape exchange"),
    Modifier("lazy", "each NCCL communicator made at its first use (no warm-up), as Megatron's and torch's "
                     "sub-groups are", "communicators made at first use"),
)}


@dataclass(frozen=True)
class Kind:
    """One send semantics or backend: its name and its answers. `posted`: operations are posted at
    their place and awaited later (a runtime's backend) rather than blocking there; `buffer`: sent
    messages a channel holds before a send blocks at its place (0: a send waits for its receive;
    None: never blocks there); `buffered`: written `name:K`, the buffer K >= 1 given in the text
    (`zero`: the kind `name:0` is); `one_stream_per_pair`: a rank pair's operations complete in issue
    order once matched (NCCL), which also ignores tags unless `pairs_by_tag`; `modifiers` it takes;
    `timed_as`: the posted kind whose graph times an abstract one's runs; `phrase`: how a verdict
    names it (default "<text> sends")."""

    name: str
    posted: bool = False
    buffer: int | None = None
    buffered: bool = False
    zero: str | None = None
    one_stream_per_pair: bool = False
    pairs_by_tag: bool = True
    modifiers: tuple[str, ...] = ()
    timed_as: str | None = None
    phrase: str | None = None

    @property
    def form(self) -> str:
        """Its text form in a list of the kinds: `bounded:K` for a buffered one."""
        return f"{self.name}:K" if self.buffered else self.name


_POSTED_PHRASE = "(operations posted and awaited as torch's runtime does; {})"
KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add a semantics kind: `Semantics(kind.name)`, `--semantics` and `Semantics.parse` know it from
    here on (docs/design.md, "How to add a semantics")."""
    if kind.name in KINDS or not kind.name.isidentifier():
        raise ValueError(f"cannot register a semantics kind named {kind.name!r}")
    if any(m not in MODIFIERS for m in kind.modifiers) or (kind.modifiers and not kind.posted):
        raise ValueError(f"{kind.name}: modifiers are a backend's, among {', '.join(MODIFIERS)}")
    if not kind.posted and not kind.timed_as:
        raise ValueError(f"{kind.name}: a blocking kind names the backend whose graph times it (`timed_as`)")
    KINDS[kind.name] = kind
    _parse.cache_clear()
    return kind


def unregister(name: str) -> None:
    """Remove a kind `register` added (a test's throwaway one)."""
    del KINDS[name]
    _parse.cache_clear()



def names(posted: bool | None = None) -> tuple[str, ...]:
    """The registered kinds' text forms (`bounded:K`), in order; only the posted (backends) or only
    the blocking ones if `posted` says."""
    return tuple(k.form for k in KINDS.values() if posted is None or k.posted is posted)


def unbuffered() -> tuple[str, ...]:
    """The kinds whose channels buffer no sent message for a send to wait on (rendezvous, eager and
    the backends): those that pair tagged messages out of order without modelling a shared buffer."""
    return tuple(k.name for k in KINDS.values() if not k.buffered and not k.buffer)


def listed(forms: tuple[str, ...], last: str = "or") -> str:
    """`a, b or c`: the kinds as a sentence lists them."""
    return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} {last} {forms[-1]}"


def modifiers_help() -> str:
    """The modifiers and the backends that take them, for the CLI: `+shapes: ..., e.g. nccl+shapes`."""
    backends = [k for k in KINDS.values() if k.posted]
    parts = []
    for m in MODIFIERS.values():
        takers = [k.name for k in backends if m.name in k.modifiers]
        if len(takers) == len(backends):
            parts.append(f"+{m.name}: {m.short}, e.g. {takers[0]}+{m.name}")
        else:
            parts.append(f"{'/'.join(takers)}+{m.name}: {m.short}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Semantics:
    """A registered kind (`KINDS`: `rendezvous`, buffer 0; `eager`, unbounded; `bounded` with
    `buffer` messages per channel; a backend, `nccl` or `gloo`, whose operations are posted and
    awaited) with its modifiers: a backend with `shapes` (`nccl+shapes`) exchanges each step's
    message shapes first, blocking, as Megatron does with variable sequence lengths
    (schedc/verify/shapes.py); `nccl+lazy` makes each NCCL communicator at its first use
    (schedc/verify/comm_init.py). Any other kind, a buffer outside a buffered kind (or none inside
    it) or a modifier its kind does not take is refused."""

    kind: str = "rendezvous"
    buffer: int = 0
    shapes: bool = False
    lazy: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown semantics kind {self.kind!r}; the kinds are {', '.join(KINDS)}")
        if (self.buffer > 0) is not self._kind.buffered:
            buffered = ", ".join(k.name for k in KINDS.values() if k.buffered)
            raise ValueError(f"{self.kind} with a buffer of {self.buffer}: only {buffered} has one, of at least 1")
        for m in self.modifiers:
            if m not in self._kind.modifiers:
                raise ValueError(f"{self.kind} takes no +{m}")

    @property
    def _kind(self) -> Kind:
        return KINDS[self.kind]

    @staticmethod
    def parse(text: str) -> "Semantics":
        return _parse(text)

    @staticmethod
    def buffered(messages: int | None) -> "Semantics":
        """The blocking semantics whose channels buffer `messages` sent messages: rendezvous for 0,
        bounded:K for K, eager for None (unbounded)."""
        if messages is None:
            return Semantics("eager")
        return Semantics("bounded", messages) if messages > 0 else Semantics("rendezvous")

    @staticmethod
    def backends() -> tuple["Semantics", ...]:
        """The runtimes' backends (the posted kinds), without modifiers."""
        return tuple(Semantics(k.name) for k in KINDS.values() if k.posted)

    # ---- the questions engines ask ----
    @property
    def posted(self) -> bool:
        """Operations are posted at their place and awaited later (a backend), rather than blocking there."""
        return self._kind.posted

    @property
    def channel_buffer(self) -> int | None:
        """How many sent messages a channel holds before a send blocks at its place: 0 under
        rendezvous, K under bounded:K; None where a send never blocks at its place (eager, and the
        backends, whose sends are posted)."""
        return self.buffer if self._kind.buffered else self._kind.buffer

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
        return self._kind.one_stream_per_pair

    @property
    def pairs_by_tag(self) -> bool:
        """Does a receive meet the send of its tag (`p2p tagged`)? NCCL ignores tags."""
        return self._kind.pairs_by_tag

    @property
    def timed_as(self) -> "Semantics":
        """The posted semantics whose graph times this one's runs: a backend's own; gloo's for an
        abstract one, under which a rank blocked at a send or receive is never delayed by it
        (only a consumer waits, for its data: schedc/simulate_graph.py)."""
        return self if self.posted else Semantics(self._kind.timed_as or self.kind)

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
        phrase = self._kind.phrase
        return f"{self.kind} {phrase}" if phrase else f"{self} sends"

    def __str__(self) -> str:
        if self._kind.buffered:
            return f"{self.kind}:{self.buffer}"
        return "+".join((self.kind, *self.modifiers))


@lru_cache(maxsize=256)  # (asked once per check: a small file's whole check is ~150 us)
def _parse(text: str) -> Semantics:
    """`name`, `name:K` for a buffered kind, or a kind with its modifiers after it (`nccl+shapes`)."""
    base, *mods = text.split("+")
    name, colon, k = base.partition(":")
    kind = KINDS.get(name)
    if kind is not None and len(set(mods)) == len(mods) and all(m in kind.modifiers for m in mods):
        flags = {m: True for m in mods}
        if not kind.buffered and not colon:
            return Semantics(name, 0, **flags)
        if kind.buffered and colon and k.isascii() and k.isdigit() and not mods:
            buffer = integer(k, f"--semantics {name}:K", where="--semantics")  # (too many digits: too-large)
            if buffer == 0 and kind.zero:
                return Semantics(kind.zero)
            if buffer > 0:
                return Semantics(name, buffer)
    raise SchedcError("usage", f"unknown semantics {text!r}; expected {_expected()}{_did_you_mean(text)}",
                      where="--semantics")


def _did_you_mean(text: str) -> str:
    """`; did you mean 'nccl+shapes'?` for a near miss (`NCCL+shape`): the kind and each modifier
    replaced by its closest, when that reads; "" when nothing close does."""
    from ..errors import closest
    base, *mods = text.split("+")
    name, colon, k = base.partition(":")
    kind = closest(name, KINDS)
    if kind is None:
        return ""
    fixed = [closest(m, KINDS[kind].modifiers) or m for m in mods]
    guess = "+".join((kind + colon + k, *fixed))
    if guess == text:  # (nothing misspelt: the buffer, or the modifiers' order, is what is wrong)
        return ""
    try:
        _parse(guess)
    except SchedcError:
        return ""
    return f"; did you mean '{guess}'?"


def _expected() -> str:
    forms = [f"{k.form} (K >= 0 messages; {k.name}:0 is {k.zero})" if k.buffered and k.zero
             else f"{k.form} (K >= 1 messages)" if k.buffered else k.form for k in KINDS.values()]
    takes = {m: [k.name for k in KINDS.values() if m in k.modifiers] for m in MODIFIERS}
    return (f"{listed(tuple(forms))}, a backend with modifiers after it: "
            + "; ".join(f"+{m} ({', '.join(kinds)}: {MODIFIERS[m].meaning})" for m, kinds in takes.items()))


# the kinds schedc knows, in the order lists name them (a new one: docs/design.md, "How to add a semantics")
for _kind in (
    Kind("rendezvous", buffer=0, timed_as="gloo"),
    Kind("eager", timed_as="gloo"),
    Kind("bounded", buffered=True, zero="rendezvous", timed_as="gloo"),
    Kind("nccl", posted=True, one_stream_per_pair=True, pairs_by_tag=False, modifiers=("shapes", "lazy"),
         phrase=_POSTED_PHRASE.format("one stream per rank pair")),
    Kind("gloo", posted=True, modifiers=("shapes",),
         phrase=_POSTED_PHRASE.format("each completes once its partner is posted")),
):
    register(_kind)

RENDEZVOUS = Semantics()
