"""Finding 2: the client's module-pattern regexes (DDO_ALWAYS_RESIDENT_MODULE_PATTERNS,
DDO_RESIDENT_MODULE_PATTERNS in ExplainPlan's or Attach's settings) ran in std::regex: a long
module path crashed ddod (stack overflow), and `(x+x+)+y` ran for minutes and made SIGTERM hang.

Now patterns are RE2 with limits: every answer comes quickly, ddod survives, SIGTERM works.
"""

from __future__ import annotations

from security_support import assert_still_serving, run_as

SETTING = "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS"

# An ExplainPlan for one streamable Linear weight of the given module path, with the pattern
# in the client's settings (threshold 0: even a small weight is a streaming candidate).
EXPLAIN = """
    ddo = from_environment()
    module = {module}
    tensor = components_pb2.TensorSpec(
        name=module + ".weight", dtype=components_pb2.DTYPE_F32, shape=[16, 16],
        byte_size=1024, module_path=module, module_class="Linear")
    request = sessions_pb2.ExplainPlanRequest(
        tensors=[tensor], component="transformer", device_uuid="cpu",
        settings={{"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", {setting!r}: {pattern!r}}})
    report(plan=ddo.call("ExplainPlan", request, timeout={deadline}))
"""


def test_f2_long_module_path_does_not_crash_ddod(ddod, attacker):
    # std::regex recursed once per character: 200k characters overflowed ddod's stack.
    result = run_as(attacker, ddod.socket_path, EXPLAIN.format(
        module='"a" * 200_000', setting=SETTING, pattern="^(a|b)*$", deadline=20))
    assert result["plan"]["code"] != "DEADLINE_EXCEEDED", result
    assert_still_serving(ddod)
    assert ddod.stop() is not None, "ddod did not stop within a few seconds of SIGTERM"


def test_f2_catastrophic_pattern_is_bounded(ddod, attacker):
    # Backtracking takes 2^n steps for `(x+x+)+y` against n x's and no y.
    result = run_as(attacker, ddod.socket_path, EXPLAIN.format(
        module=repr("x" * 40), setting=SETTING, pattern="(x+x+)+y", deadline=10))
    assert result["plan"]["code"] != "DEADLINE_EXCEEDED", (
        f"a client's pattern kept ddod busy past the deadline: {result}")
    assert_still_serving(ddod)
    assert ddod.stop() is not None, "ddod did not stop within a few seconds of SIGTERM"
