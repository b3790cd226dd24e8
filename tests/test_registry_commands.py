"""A command is one registered object (schedc/commands/__init__.py; docs/design.md, "How to add a
command"): `schedc --help` lists `COMMANDS` in order, each command's module gives its options and
its handler, only the command run is imported, and one more entry is a working command."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import schedc.commands
from schedc.commands import COMMANDS, Command


def test_help_lists_the_registry_in_order(run_cli):
    code, out, _ = run_cli("--help")
    assert code == 0
    listed = [line.split()[0] for line in out.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert listed == [c.name for c in COMMANDS]
    for c in COMMANDS:
        assert " ".join(c.help.split()[:3]) in " ".join(out.split())


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_each_command_module_has_its_options_and_handler(run_cli, command):
    module = command.load()
    assert callable(module.add_arguments) and callable(module.run)
    code, out, _ = run_cli(command.name, "--help")
    assert code == 0 and out.startswith(f"usage: schedc {command.name} ")


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["export", "1f1b", "--to", "ir-json"]])
def test_only_the_command_run_is_imported(argv):
    probe = ("import sys\nfrom schedc.cli import main\n"
             f"main({argv!r}, open('/dev/null', 'w'))\n"
             "print(sorted(m for m in sys.modules if m.startswith(('schedc.commands.', 'schedc.prove', "
             "'schedc.synth'))))\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert res.returncode == 0, res.stderr
    loaded = eval(res.stdout.strip().splitlines()[-1])
    named = [c.module for c in COMMANDS if c.name == argv[0]]
    assert set(loaded) <= {*named, "schedc.commands.arguments", "schedc.commands.common"}, loaded


def test_one_more_entry_is_a_working_command(run_cli, monkeypatch):
    hello = types.ModuleType("schedc_test_hello")

    def add_arguments(q):
        q.add_argument("who", help="whom to greet")

    def run(args, stdout, stderr):
        stdout.write(f"hello, {args.who}\n")
        return 0

    hello.add_arguments, hello.run = add_arguments, run
    monkeypatch.setitem(sys.modules, "schedc_test_hello", hello)
    monkeypatch.setattr(schedc.commands, "COMMANDS", COMMANDS + (Command("hello", "greet", "schedc_test_hello"),))
    assert run_cli("hello", "world") == (0, "hello, world\n", "")
    code, out, _ = run_cli("--help")
    assert "hello     greet" in out
    code, _, err = run_cli("hello")
    assert code == 2 and "the following arguments are required: who" in err
