"""`schedc trace merge TRACE... -o OUT`: the traces `schedc run --trace` wrote on each node, or the
ranks' event files of a torchrun launch (`--trace-dir`), merged into one Perfetto trace of the job
with an arrow for every message, also between nodes (schedc/interop/trace_merge.py)."""
from __future__ import annotations

from ..errors import EXIT_OK, SchedcError
from ..inputs import read_text
from ..outputs import dumps_json, write_data, write_file


def add_arguments(q) -> None:
    q.add_argument("action", choices=["merge"], help="merge: several traces or rank event files into one")
    q.add_argument("traces", nargs="+", metavar="TRACE",
                   help="a node's trace (schedc run --trace), or a rank's event file (rank<R>.jsonl)")
    q.add_argument("-o", "--output", required=True, metavar="OUT.json", help="the merged trace (`-`: standard output)")
    q.add_argument("--json", action="store_true", help="print one JSON object: the ranks, messages and file written")


def run(args, stdout, stderr) -> int:
    from ..interop.trace_merge import merge
    if len(set(args.traces)) < len(args.traces):
        raise SchedcError("usage", "a trace is given twice", where="TRACE")
    to_stdout = args.output == "-"  # (the merged trace on standard output, the line about it on standard error)
    if to_stdout and args.json:
        raise SchedcError("usage", "`-o -` writes the merged trace to standard output, where --json writes its "
                          "object: name a file, or leave out --json", where="-o/--output")
    doc = merge([(name, read_text(name)) for name in args.traces])
    data = dumps_json(doc, separators=(",", ":")) + "\n"
    if to_stdout:
        write_data(stdout, data)
        stdout.flush()
        stdout = stderr
        written = "standard output"
    else:
        written = str(write_file(args.output, data))
    other = doc["otherData"]
    for name, unread in other["unread_lines"].items():  # (a rank file cut short, or with lines no rank wrote)
        n = unread["lines"]
        cut = ", the last cut short (the file ends mid-line)" if unread["last_cut_short"] else ""
        stderr.write(f"schedc trace merge: {name}: {n} line{'s' if n != 1 else ''} could not be read and "
                     f"{'were' if n != 1 else 'was'} left out{cut}\n")
    if args.json:
        stdout.write(dumps_json({"ok": True, "errors": [], "inputs": args.traces, "ranks": other["ranks"], "missing_ranks": other["missing_ranks"],
                                 "hosts": other["hosts"], "messages": other["messages"],
                                 "messages_between_inputs": other["messages_between_inputs"],
                                 "unread_lines": other["unread_lines"],
                                 "outputs": [str(written)]}) + "\n")
        return EXIT_OK
    missing = f"; no events from rank(s) {', '.join(map(str, other['missing_ranks']))}" if other["missing_ranks"] else ""
    stdout.write(f"wrote {written}: ranks {', '.join(map(str, other['ranks']))} from {len(args.traces)} file(s), "
                 f"{other['messages']} message arrows, {other['messages_between_inputs']} of them between files"
                 f"{missing}\n")
    return EXIT_OK
