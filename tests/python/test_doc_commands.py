"""Every benchmark and probe command the docs quote still parses (issue 32, item 5).

A figure in the docs names the command that produced it; a command whose arguments the script
no longer takes (``plot_results.py --lora-back`` once) makes the figure unreproducible. This
test collects each ``bench/...py`` command from README.md and docs/*.md (inline code and code
blocks, continuation lines joined), runs the script with those arguments in a child
interpreter whose ``ArgumentParser.parse_args`` stops the script right after a successful
parse, and fails with the command and argparse's own message otherwise. Modules the script
imports that this machine lacks (diffusers, matplotlib) are replaced by empty stand-ins: only
the arguments are checked, nothing runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPT = re.compile(r"(?:^|\s)(bench/[\w/]+\.py)((?:\s+[^\s`]+)*)")

#: The child: argparse stops after a good parse; missing imports become empty modules.
PARSE_ONLY = r"""
import argparse, importlib.abc, importlib.machinery, runpy, sys, types

class _Stand(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand(f"{self.__name__}.{name}")
    def __call__(self, *args, **kwargs):
        return _Stand(self.__name__ + "()")

OPTIONAL = ("diffusers", "matplotlib", "transformers", "peft", "accelerate", "triton",
            "psutil", "numpy", "safetensors")

class _Missing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in OPTIONAL:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        return _Stand(spec.name)
    def exec_module(self, module):
        module.__path__ = []

sys.meta_path.append(_Missing())
_parse = argparse.ArgumentParser.parse_args

def parse_only(self, *args, **kwargs):
    _parse(self, *args, **kwargs)
    print("PARSED")
    raise SystemExit(0)

argparse.ArgumentParser.parse_args = parse_only
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, __import__("os").path.dirname(script))
runpy.run_path(script, run_name="__main__")
print("NO PARSE")
"""


def joined_lines(text: str) -> List[str]:
    """The text's lines with shell continuations (a trailing backslash) joined."""
    lines, current = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    return lines


def command_spans(text: str) -> List[str]:
    """Inline code spans, and the lines of fenced code blocks: where the docs quote commands
    (a script named in prose is not a command)."""
    spans, fenced = [], False
    for line in joined_lines(text):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        spans.extend([line] if fenced else re.findall(r"`([^`]+)`", line))
    return spans


def quoted_commands() -> List[Tuple[str, str, List[str]]]:
    """(doc, command, argv) for each concrete bench command with arguments (no placeholders
    or ellipses)."""
    found = {}
    for doc in DOCS:
        for span in command_spans(doc.read_text()):
                for match in SCRIPT.finditer(span):
                    script, rest = match.group(1), match.group(2)
                    rest = rest.split("#")[0].split(" 2>")[0].split(" | ")[0].split(" > ")[0]
                    if "--" not in rest or any(mark in rest for mark in ("...", "[", "<", "$", "{")):
                        continue
                    if not (ROOT / script).is_file():
                        continue
                    try:
                        argv = [script, *shlex.split(rest)]
                    except ValueError:
                        continue
                    command = " ".join(argv)
                    found.setdefault(command, (doc.name, command, argv))
    return list(found.values())


COMMANDS = quoted_commands()


def test_the_docs_quote_bench_commands():
    # The collection itself must find what the docs hold (a broken pattern would pass all).
    scripts = {argv[0] for _doc, _command, argv in COMMANDS}
    assert {"bench/bench_flux_stream.py", "bench/plot_results.py",
            "bench/bench_architectures.py"} <= scripts, sorted(scripts)


@pytest.mark.parametrize("doc,command,argv", COMMANDS, ids=[c for _d, c, _a in COMMANDS])
def test_a_quoted_command_parses(doc, command, argv):
    result = subprocess.run([sys.executable, "-c", PARSE_ONLY, str(ROOT / argv[0]), *argv[1:]],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "PARSED" in result.stdout, (
        f"{doc} quotes `{command}`, which does not parse:\n{result.stderr[-2000:]}")


#: A recorded results file as the docs quote it: bench/results/DATE/NAME, DATE/NAME, or a bare
#: NAME ("run12-pipeline.json", "run30-lora-swap.*", "run11-flux-arena.{log,json}").
RESULTS_FILE = re.compile(
    r"((?:bench/results/)?(?:\d{4}-\d{2}-\d{2}/)?(?:run\d+\w*|cpu)[-\w.{},*]*?"
    r"(?:\.(?:json|log|txt)|\.\{[\w,]+\}|\*))(?![\w.])")


def _brace_expanded(pattern: str) -> List[str]:
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [expanded for choice in match.group(1).split(",")
            for expanded in _brace_expanded(pattern[:match.start()] + choice
                                            + pattern[match.end():])]


def quoted_results_files() -> List[Tuple[str, str]]:
    """(doc, file) for each results file README.md and docs/*.md name, braces expanded."""
    found = {}
    for doc in DOCS:
        for name in RESULTS_FILE.findall(doc.read_text()):
            for one in _brace_expanded(name):
                found.setdefault((doc.name, one), None)
    return list(found)


RESULTS_FILES = quoted_results_files()


def test_the_docs_quote_results_files():
    assert len(RESULTS_FILES) > 30, RESULTS_FILES


@pytest.mark.parametrize("doc,name", RESULTS_FILES, ids=[f"{d}:{n}" for d, n in RESULTS_FILES])
def test_a_quoted_results_file_exists(doc, name):
    # A figure names the file that holds it; the file must be in bench/results (a bare name
    # under any date's folder).
    results = ROOT / "bench" / "results"
    relative = name[len("bench/results/"):] if name.startswith("bench/results/") else name
    dated = re.match(r"\d{4}-\d{2}-\d{2}/", relative) is not None
    assert any(results.glob(relative if dated else "*/" + relative)), (
        f"{doc} quotes {name}, which is not under bench/results")
