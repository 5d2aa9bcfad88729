"""The README's synopsis is the command line's: every option of every subcommand's parser is in
its command's lines, with its default and its choices, so the synopsis cannot fall behind."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from fdprof.cli import build_parser
from fdprof.trace import limits

README = Path(__file__).resolve().parents[1] / "README.md"
#: ``[--opt ...]`` or a bare ``--opt WORD`` (a required option), in a synopsis line
OPTION = re.compile(r"\[(--[a-z][a-z-]*)([^\]]*)\]|(?<![\[\w-])(--[a-z][a-z-]*)")
#: ``[run options but --a, --b]``: ``ab`` takes ``run``'s options but those
INHERITS = re.compile(r"\[(\w+) options but ([^\]]*)\]")


def synopsis() -> dict[str, str]:
    """Command -> the text of its synopsis lines (a command with two forms: both)."""
    text = README.read_text()
    block = text.split("## Commands\n\n```\n", 1)[1].split("```", 1)[0]
    lines: dict[str, str] = {}
    command = None
    for line in block.splitlines():
        if line.startswith("fdprof "):
            command = line.split()[1]
        elif line.startswith("every command:"):
            command = "*"
        elif not line.startswith(" "):
            raise AssertionError(f"not a synopsis line: {line!r}")
        lines[command] = lines.get(command, "") + " " + line.split("#", 1)[0]
    return lines


def listed(text: str) -> dict[str, str]:
    """Option -> what follows it inside its brackets (its metavar, choices, ``=default``); a
    list of choices may wrap after a comma."""
    text = re.sub(r",\s+", ",", INHERITS.sub("", text))
    return {(m[1] or m[3]): (m[2] or "") for m in OPTION.finditer(text)}


def parsers() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    common = {"--debug", *(flag for _, flag, _ in limits.SETTINGS.values())}
    return {
        a.option_strings[-1]: a
        for a in parser._actions
        if a.option_strings and a.option_strings[-1] not in common | {"--help"}
    }


def shown(default) -> str:
    return " ".join(map(str, default)) if isinstance(default, list | tuple) else str(default)


def test_every_option_of_every_command_is_in_its_synopsis_with_default_and_choices():
    lines = synopsis()
    commands = parsers()
    assert set(commands) == set(lines) - {"*"}, "a command missing from the synopsis"
    for name, parser in commands.items():
        got = listed(lines[name])
        for base, excluded in INHERITS.findall(lines[name]):
            skip = set(re.findall(r"--[a-z-]+", excluded))
            got |= {k: v for k, v in listed(lines[base]).items() if k not in skip}
        want = options(parser)
        assert set(got) == set(want), (
            f"{name}: in the parser only {sorted(set(want) - set(got))}, "
            f"in the README only {sorted(set(got) - set(want))}"
        )
        for flag, action in want.items():
            if action.choices:
                assert "{" + ",".join(action.choices) + "}" in got[flag], (name, flag)
            if action.default not in (None, False, argparse.SUPPRESS):
                assert f"={shown(action.default)}" in got[flag], (name, flag, action.default)


def test_the_common_options_and_their_defaults_are_listed_once():
    got = listed(synopsis()["*"])
    assert "--debug" in got
    for name, (_, flag, _) in limits.SETTINGS.items():
        default = limits._show(name, getattr(limits.Limits(), name))
        assert f"={default.replace(' ', '').replace(',', '')}" in got[flag], flag


def test_run_says_it_is_lockless_by_default():
    (kv_lock,) = [a for a in parsers()["run"]._actions if "--kv-lock" in a.option_strings]
    assert "none: lockless (default" in kv_lock.help
    assert "[--kv-lock {ipc,ipc-per-thread,none}=none]" in synopsis()["run"]
    assert "runs the **lockless** engine unless told otherwise" in README.read_text()


def test_the_readme_lists_ab_exit_codes():
    """The README's exit codes are ``ab --help``'s: 1 unsafe, 2 bad input or a crashed run, 3 a
    ``--require-gain`` not met."""
    text = " ".join(README.read_text().split())
    codes = text.split("Exit codes, the same for every command: ", 1)[1].split(" 70 ", 1)[0]
    for want in ("0 ok/clean;", "1 races,", "corrupted KV blocks (`hazards`, `ab`,",
                 "2 bad input or a crashed run;", "3 `ab --require-gain X` not met"):  # fmt: skip
        assert want in codes, want
