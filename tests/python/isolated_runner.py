"""Runs one check of a test module in a child interpreter, so that a crash (SIGSEGV on a
read-only mapping, an abort) fails one test with the signal named instead of killing pytest.

    python3 isolated_runner.py ADDRESS MODULE FUNCTION JSON_KWARGS

Imports MODULE (from this directory), connects a DdoClient to ADDRESS and calls
``FUNCTION(client, **kwargs)``. The function asserts what it checks; what it returns (a JSON
value) is printed on the last line of stdout after ``RESULT ``. A failed assertion exits 1 with
its traceback on stderr.
"""

from __future__ import annotations

import importlib
import json
import sys


def main() -> int:
    address, module_name, function_name, arguments = sys.argv[1:5]
    from diffusers_dynamic_offloader import DdoClient

    function = getattr(importlib.import_module(module_name), function_name)
    with DdoClient.connect(address, timeout=30) as client:
        result = function(client, **json.loads(arguments))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
