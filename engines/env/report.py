"""From a test run's output to per-test statuses and a resolution decision.

Logs are framed the way SWE-bench's eval scripts frame them (start/end markers and
the test command's exit code) and parsed with the swebench package's own parser
named by the task (`parse_log_pytest` by default), the same parser that derived
the task's test ids. The decision follows swebench 5.x `get_logs_eval` and
`get_eval_tests_report` (tests/engines/env/test_agreement.py runs swebench on our
logs and checks we decide the same):
  - PASSED or XFAIL pass; a FAIL_TO_PASS test that FAILED, ERRORED, SKIPPED or is
    missing fails; a SKIPPED PASS_TO_PASS test is kept;
  - a log carrying a harness failure marker, or a non-zero exit with parsed
    results but no failed test, is rejected (every test counts as failed).
swebench's parsers are imported lazily: its package imports docker and modal
(about 1.3 s), paid once per process.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

START = ">>>>> Start Test Output"
END = ">>>>> End Test Output"
EXIT_CODE = ">>>>> Test Exit Code"
_BAD_MARKERS = (">>>>> Patch Apply Failed", ">>>>> Reset Failed", ">>>>> Tests Errored", ">>>>> Tests Timed Out")
_PASS = {"PASSED", "XFAIL"}
_FAIL = {"FAILED", "ERROR"}


@dataclass(frozen=True)
class TestReport:
    resolved: bool
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int
    statuses: dict[str, str]  # every F2P/P2P test id -> status (MISSING when absent from the log)
    log_valid: bool  # False when the log was rejected as a whole


def frame_log(output: str, exit_code: int | None) -> str:
    """The log as SWE-bench's eval script writes it (exit code after the end marker)."""
    code = "" if exit_code is None else f"\n{EXIT_CODE}: {exit_code}\n"
    return f"{START}\n{output}\n{END}\n{code}"


@functools.cache
def parser(name: str) -> Callable[[str, object], dict[str, str]]:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    if name not in PARSER_REGISTRY:
        raise ValueError(f"log_parser {name!r} is not a swebench parser; use one of {sorted(PARSER_REGISTRY)[:8]}...")
    return PARSER_REGISTRY[name]


def parse_statuses(log: str, parser_name: str) -> tuple[dict[str, str], bool]:
    """Status map of a framed log, and whether the log is valid (swebench's get_logs_eval rules)."""
    if any(m in log for m in _BAD_MARKERS) or START not in log or END not in log:
        return {}, False
    parse = parser(parser_name)
    status = parse(log.split(START)[1].split(END)[0], None)
    if not status:
        status = parse(log, None)
    if not _valid(status, _exit_code(log)):
        return {}, False
    return status, True


def _valid(status: dict[str, str], exit_code: int | None) -> bool:
    # An empty map: pytest printed no "N passing"-style line swebench's SUITE_RAN knows.
    return bool(status) and (exit_code in (None, 0) or any(s in _FAIL for s in status.values()))


def report_from_log(log: str, parser_name: str, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]) -> TestReport:
    return _decide(*parse_statuses(log, parser_name), fail_to_pass, pass_to_pass)


def report_from_statuses(
    status: dict[str, str], exit_code: int | None, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> TestReport:
    """The decision on a status map a runner reported itself (the plain runner,
    plain_runner.py), by the same rules as on a parsed log with that exit code."""
    valid = _valid(status, exit_code)
    return _decide(status if valid else {}, valid, fail_to_pass, pass_to_pass)


def _decide(
    status: dict[str, str], valid: bool, fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> TestReport:
    statuses = {t: status.get(t, "MISSING") for t in [*fail_to_pass, *pass_to_pass]}
    f2p = sum(status.get(t) in _PASS for t in fail_to_pass)
    p2p = sum(status.get(t) in _PASS or status.get(t) == "SKIPPED" for t in pass_to_pass)
    resolved = valid and f2p == len(fail_to_pass) and p2p == len(pass_to_pass)
    return TestReport(resolved, f2p, len(fail_to_pass), p2p, len(pass_to_pass), statuses, valid)


def _exit_code(log: str) -> int | None:
    tail = log.rsplit(EXIT_CODE, 1)
    if len(tail) < 2:
        return None
    try:
        return int(tail[1].strip(": \n").split()[0])
    except (ValueError, IndexError):
        return None
