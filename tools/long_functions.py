#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (issue 32: no function over 80 lines).

A function's length runs from the first line of its signature to its closing brace, lambdas
and local classes included. The scan looks inside namespaces, ``extern "C"`` blocks, classes,
structs and unions, so a long class of short methods passes and one long method in it does not.
It is a brace scan, not a parser: comments, string and character literals (raw ones too) and
preprocessor lines are blanked first; enum bodies and brace initializers (``kTable[] = {...}``,
``int n_{0};``, a constructor's ``a_{a}``) are data, not functions. Test files (``*_test.cc``)
are left out.

Usage: tools/long_functions.py [--max N] PATH...   (files or folders of .cc files)
Prints one line per long function (``lines path:line name``), longest first; exit status 1 when
any is found.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys
from typing import Iterable, List, Optional

DEFAULT_MAX_LINES = 80

_CONTAINER = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\b")
_NAMESPACE = re.compile(r"^(?:inline\s+)?namespace\b|^extern\s*\"\"")
_ENUM = re.compile(r"^(?:template\s*<.*>\s*)?enum\b")
_ACCESS = re.compile(r"\b(?:public|private|protected)\s*:(?!:)")
_CLASS_NAME = re.compile(r"^(?:template\s*<.*>\s*)?(?:class|struct|union)\s+(?:\[\[.*?\]\]\s*)?(\w+)")
_QUALIFIERS = {"const", "override", "final", "noexcept", "mutable", "volatile", "&", "&&"}
_RAW_STRING = re.compile(r'R"([^()\\ ]{0,16})\(')


@dataclasses.dataclass(frozen=True)
class LongFunction:
    path: str
    line: int  # first line of the signature, 1-based
    lines: int
    name: str  # qualified by the enclosing classes, e.g. "MemberStream::key"

    def __str__(self) -> str:
        return f"{self.lines} {self.path}:{self.line} {self.name}"


def blank_non_code(text: str) -> str:
    """Replaces comments, literals and preprocessor lines by spaces, keeping every newline, so
    that the braces left are the code's and line numbers stay right."""
    out: List[str] = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "\n":
            out.append(c)
            i += 1
            at_line_start = True
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        at_line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = _RAW_STRING.match(text, i) if c == "R" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if raw:
            close = ")" + raw.group(1) + '"'
            end = text.find(close, raw.end())
            end = n if end < 0 else end + len(close)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2 : end]))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            out.append(c + " " * (end - i - 2) + c if end - i >= 2 else c)
            i = end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _function_name(header: str) -> str:
    """The (qualified) name before the signature's first top-level parenthesis."""
    depth = 0
    for k, ch in enumerate(header):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            before = header[:k].rstrip()
            m = re.search(r"(~?[\w:]*operator\s*[^\w\s]+|~?[\w:]+)$", before)
            if m:
                return re.sub(r"\s+", "", m.group(1))
            break
    return " ".join(header.split())[:60]


def _is_member_init(header: str) -> bool:
    """A ``{`` right after a name is a brace initializer, not a body: ``int n_{0};``, a
    constructor's ``: a_{a}``, ``int n_ ABSL_GUARDED_BY(mu_){0};``. After a parameter list
    only qualifiers (``const``, ``override``...) or a trailing return type lead to a body."""
    stripped = header.rstrip()
    if not stripped or not (stripped[-1].isalnum() or stripped[-1] in "_>"):
        return False
    if "(" not in header:
        return True
    tail = header[header.rfind(")") + 1 :].strip()
    if re.search(r"(?<!:):(?!:)", tail):
        return True
    if tail.startswith("->"):
        return False
    return not set(tail.split()) <= _QUALIFIERS


def _matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


def scan_source(path: str, text: str, max_lines: int = DEFAULT_MAX_LINES) -> List[LongFunction]:
    """The functions of one translation unit's text longer than max_lines."""
    code = blank_non_code(text)
    found: List[LongFunction] = []

    def line_of(offset: int) -> int:
        return code.count("\n", 0, offset) + 1

    def scan_scope(start: int, end: int, classes: List[str]) -> None:
        header_start: Optional[int] = None
        i = start
        while i < end:
            ch = code[i]
            if ch in ";}":
                header_start = None
                i += 1
                continue
            if ch.isspace():
                i += 1
                continue
            if header_start is None:
                header_start = i
            if ch != "{":
                i += 1
                continue
            header = code[header_start:i]
            access = None
            for access in _ACCESS.finditer(header):
                pass
            if access:
                header_start += access.end()
                header_start += len(code[header_start:i]) - len(code[header_start:i].lstrip())
                header = code[header_start:i]
            stripped = header.strip()
            close = _matching_brace(code, i)
            if _NAMESPACE.match(stripped):
                scan_scope(i + 1, close, classes)
                header_start = None
            elif _CONTAINER.match(stripped) and "(" not in stripped:
                m = _CLASS_NAME.match(stripped)
                scan_scope(i + 1, close, classes + ([m.group(1)] if m else []))
                header_start = None  # what follows the class body (a declarator, ';') is not code
            elif _ENUM.match(stripped) or re.search(r"=\s*$", stripped) or _is_member_init(header):
                pass  # data: keep the header open until its ';'
            elif "(" in stripped:
                lines = line_of(close) - line_of(header_start) + 1
                if lines > max_lines:
                    name = "::".join(classes + [_function_name(stripped)])
                    found.append(LongFunction(path, line_of(header_start), lines, name))
                header_start = None
            i = close + 1

    scan_scope(0, len(code), [])
    return found


def source_files(paths: Iterable[str]) -> List[pathlib.Path]:
    files: List[pathlib.Path] = []
    for p in map(pathlib.Path, paths):
        candidates = [p] if p.is_file() else sorted(p.rglob("*.cc"))
        files.extend(f for f in candidates if not f.name.endswith("_test.cc"))
    return files


def scan_paths(paths: Iterable[str], max_lines: int = DEFAULT_MAX_LINES) -> List[LongFunction]:
    found: List[LongFunction] = []
    for f in source_files(paths):
        found.extend(scan_source(str(f), f.read_text(errors="replace"), max_lines))
    return sorted(found, key=lambda fn: (-fn.lines, fn.path, fn.line))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=DEFAULT_MAX_LINES, help="longest allowed function, in lines")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    found = scan_paths(args.paths, args.max)
    for fn in found:
        print(fn)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
