"""The README and docs/ say only what works: their commands parse, the files they name exist, their specs load.

A command that stops working (a renamed option, a moved script, a deleted test file, a spec key no longer
accepted) fails here, so the documentation moves with the code. Every `windjoin` line of a shell block is parsed
by the real command line (nothing runs); an inline `windjoin ...` mention, which may hold placeholders, must name
real commands and options; every repository path, link, script and benchmark module named must exist; every
YAML block parses, and the join-spec examples (or fragments of one, completed with a minimal spec) validate.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from windjoin.operators.spec import parse_spec
from windjoin.pipelines.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = {p.split("/", 1)[0] for p in subprocess.run(
    ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
).stdout.split() if "/" in p}  # fmt: skip
REPO_PATH = re.compile(r"^(?:\./)?([\w.-]+)/[\w./-]*$")
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}
PLACEHOLDER_FILE = re.compile(r"^[\w.-]+\.(?:yaml|yml|json|jsonl|avsc|pem)$")
MINIMAL_SPEC = {
    "window": {"kind": "time", "size_ms": 60000},
    "streams": {
        "R": {"timestamp": "ts", "fields": {"k": "int", "x": "int"}},
        "S": {"timestamp": "ts", "fields": {"k": "int", "a": "int"}},
    },
    "tasks": [{"name": "t", "join": ["R", "S"], "on": [{"op": "eq", "left": "R.k", "right": "S.k"}]}],
}


def _prose(doc: Path) -> str:
    """The text outside fenced blocks (where inline code spans are)."""
    return re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.M | re.S)


def _blocks(lang: str) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for match in re.finditer(r"^```(\w*)\n(.*?)^```", doc.read_text(), re.M | re.S):
            if match.group(1) == lang:
                found.append((doc.relative_to(ROOT).as_posix(), match.group(2)))
    return found


def _shell_commands() -> list[tuple[str, list[str]]]:
    """Each simple command of every bash block: continuations joined, heredoc bodies and comments left out,
    `<placeholders>` made one word."""
    commands = []
    for where, block in _blocks("bash"):
        text = re.sub(r"\\\n\s*", " ", block)
        heredoc = None
        for line in text.splitlines():
            if heredoc is not None:
                heredoc = None if line.strip() == heredoc else heredoc
                continue
            if match := re.search(r"<<-?\s*'?(\w+)'?", line):
                heredoc = match.group(1)
            lexer = shlex.shlex(re.sub(r"<[^<>\s][^<>]*>", "PLACEHOLDER", line), posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            current: list[str] = []
            redirect = False
            for token in [*lexer, ";"]:
                if token in SEPARATORS:
                    if current and "=" not in current[0] and current[0] != "export":
                        commands.append((where, current))
                    current = []
                elif token.startswith(("<", ">")):
                    redirect = True  # the redirection and its target are not arguments
                elif not redirect:
                    current.append(token)
                else:
                    redirect = False
    return commands


def _windjoin_args(words: list[str]) -> list[str] | None:
    return words[1:] if words[0] in ("windjoin", ".venv/bin/windjoin") else None


def _repo_paths(text: str) -> list[str]:
    paths = []
    for word in text.split():
        word = word.strip("`'\",;:()[]").removesuffix(".")
        match = REPO_PATH.match(word)
        if match and match.group(1) in TOP and not set("<*{$") & set(word) and not re.search(r"[A-Z]{3}", word):
            paths.append(word.split("::")[0])
    return paths


SHELL = _shell_commands()
WINDJOIN_LINES = [(w, args) for w, words in SHELL if (args := _windjoin_args(words)) is not None]


def test_the_docs_hold_commands_at_all():
    assert len(WINDJOIN_LINES) >= 20 and any(w == "README.md" for w, _ in WINDJOIN_LINES)
    assert {"docs/streaming.md", "docs/queries.md", "docs/controller.md"} <= {w for w, _ in WINDJOIN_LINES}


@pytest.mark.parametrize(("where", "args"), WINDJOIN_LINES, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_each_windjoin_command_of_a_shell_block_parses(where, args, tmp_path, monkeypatch):
    """Parsed by the real command group with every command's body replaced by nothing: unknown commands or
    options, bad values and missing repository files fail; placeholder files (my.yaml) are made empty."""
    for entry in ROOT.iterdir():
        if entry.name in TOP:
            (tmp_path / entry.name).symlink_to(entry)
    for arg in args:
        if PLACEHOLDER_FILE.match(arg) and not (tmp_path / arg).exists():
            (tmp_path / arg).touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(click.Command, "invoke", lambda self, ctx: None)  # groups still dispatch (Group.invoke)
    try:
        cli.main(args, prog_name="windjoin", standalone_mode=False)
    except click.ClickException as err:
        pytest.fail(f"{where}: windjoin {' '.join(args)}: {err.format_message()}")


def _inline_windjoin_mentions() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for span in re.findall(r"`(windjoin [^`]+)`", _prose(doc)):
            found.append((doc.relative_to(ROOT).as_posix(), span))
    return found


def test_each_inline_windjoin_mention_names_real_commands_and_options():
    problems = []
    for where, span in _inline_windjoin_mentions():
        command: click.Command = cli
        words = span.replace("\\|", "|").split()[1:]
        for i, word in enumerate(words):
            if not isinstance(command, click.Group) or word.startswith(("-", "[")) or word.isupper():
                options = words[i:]
                break
            names = word.split("|")
            missing = [n for n in names if n not in command.commands]
            if missing:
                problems.append(f"{where}: `{span}`: no command {missing}")
                options = []
                break
            command = command.commands[names[0]]
        else:
            options = []
        accepted = {"--help", "-h"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for word in options:
            for option in re.findall(r"(?:^|[\[/|])(--?[a-z][a-z0-9-]*)", word.strip("[]")):
                if option not in accepted:
                    problems.append(f"{where}: `{span}`: {command.name} has no option {option}")
    assert not problems, "\n".join(problems)


def test_every_path_script_and_benchmark_named_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        where = doc.relative_to(ROOT).as_posix()
        spans = re.findall(r"`([^`]+)`", _prose(doc)) + [b for w, b in _blocks("bash") if w == where]
        for path in {p for span in spans for p in _repo_paths(span)}:
            module, _, name = path.rpartition(".")  # also `connectors/spark_cluster.start_cluster`: module.function
            named = (ROOT / f"{module}.py").is_file() and f"def {name}(" in (ROOT / f"{module}.py").read_text()
            if not (ROOT / path).exists() and not named:
                missing.append(f"{where}: {path}")
        for link, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", text):
            target = doc.parent / link if link else doc
            if link.startswith("http"):
                continue
            if not target.exists():
                missing.append(f"{where}: link {link}")
            elif anchor and anchor not in _anchors(target):
                missing.append(f"{where}: link {link}#{anchor}")
        for module in re.findall(r"-m benchmarks\.([a-z0-9_]+)", text):
            if not (ROOT / "benchmarks" / f"{module}.py").exists():
                missing.append(f"{where}: benchmarks.{module}")
    assert not missing, "\n".join(missing)


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", _prose(doc), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _complete(fragment: dict[str, Any]) -> dict[str, Any]:
    """A spec fragment over the minimal spec: its streams with `{...}` fields take the minimal ones, streams its
    tasks name but nobody declares get the int fields the tasks compare."""
    spec = {**MINIMAL_SPEC, **fragment}
    streams = {**MINIMAL_SPEC["streams"]}
    for name, stream in (fragment.get("streams") or {}).items():
        declared = stream.get("fields")
        fields = MINIMAL_SPEC["streams"].get(name, {}).get("fields", {}) if declared == {"...": None} else declared
        streams[name] = {**stream, "fields": fields}
    for task in fragment.get("tasks", []):
        for predicate in task.get("on", []):
            for ref in (predicate["left"], predicate["right"]):
                stream, field = ref.split(".")
                streams.setdefault(stream, {"timestamp": "ts", "fields": {}})["fields"].setdefault(field, "int")
    punctuation = (((fragment.get("sinks") or {}).get("parquet") or {}).get("snapshots") or {}).get("punctuation")
    if punctuation:
        streams[punctuation["stream"]]["fields"].setdefault(punctuation["field"], "string")
    spec["streams"] = streams
    return spec


def _yaml12_keys(data: Any) -> Any:
    """YAML 1.1 (PyYAML) reads the key `on` as true; the spec loader reads YAML 1.2, where it is the string."""
    if isinstance(data, dict):
        return {("on" if k is True else k): _yaml12_keys(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_yaml12_keys(v) for v in data]
    return data


@pytest.mark.parametrize(("where", "block"), _blocks("yaml"), ids=lambda v: v[:40])
def test_each_yaml_block_parses_and_each_spec_example_validates(where, block):
    data = _yaml12_keys(yaml.safe_load(block))
    assert isinstance(data, dict), where
    if "nodes" in data or "joins" in data:
        return  # a PMJoin STATS file: docs/pmjoin.md, its examples are examples/pmjoin_*.yaml
    parse_spec(_complete(data))


def test_ci_runs_exactly_the_readmes_setup_and_test_commands():
    """.ci/run is the README's first two steps (set up, test): what passes for CI passes for a user who follows
    the README, with no preparation only CI knows (tools install on first use: tests/first_use.py)."""
    readme = [" ".join(words) for where, words in SHELL if where == "README.md"]
    setup, tests = readme[0], readme[2]
    assert (setup, tests) == ("bash scripts/setup.sh", ".venv/bin/pytest")
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', setup, tests]
