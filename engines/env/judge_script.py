"""The strict judge's process: call a module's functions on given inputs, print what they give.

Run inside the grading sandbox as `python -c <this file's text> NONCE SPEC` from the
repository's root (with the test command's PYTHONPATH), on the patched tree and on the
fixed one; engines/env/judge.py compares the two answers. It imports nothing of this
project and never pytest: a patch that rewrites pytest, or an object that says it
equals everything, changes nothing here.

SPEC (JSON): {"module": dotted name, "calls": [[function, args source, kwargs source]]};
each source is a Python expression of literals and builtin names, evaluated with the
builtins alone. The answer is one line, NONCE then a JSON list with per call
["ok", value] or ["raise", exception type]; each value is encoded with its exact type
(`bool` is no `int`, a subclass of `str` is no `str`), containers element by element.
Names used below are bound before the module under test is imported, so a patch that
rebinds builtins at import does not reach them.
"""

import builtins
import importlib
import json
import sys

_type, _repr, _sorted, _print, _getattr, _dumps = type, repr, sorted, print, getattr, json.dumps
_SCALARS = (int, float, complex, str, bytes, bool, type(None))
_SEQUENCES = (list, tuple)
_SETS = (set, frozenset)
_ITEMS = 50_000  # values of one answer, so a runaway container cannot flood the log


def _name(t) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def encode(value, budget: list) -> list:
    """[type name, content] of `value`; content compared as written."""
    budget[0] -= 1
    if budget[0] < 0:
        return ["truncated", None]
    t = _type(value)
    if t in _SCALARS:
        return [_name(t), _repr(value)]
    if t in _SEQUENCES:
        return [_name(t), [encode(v, budget) for v in value]]
    if t in _SETS:
        return [_name(t), _sorted(_dumps(encode(v, budget)) for v in value)]
    if t is dict:
        return [_name(t), [[encode(k, budget), encode(v, budget)] for k, v in value.items()]]
    text = _repr(value)
    # An object's default repr names its address, which differs between any two runs.
    return [_name(t), None if " at 0x" in text else text]


def main(nonce: str, spec_text: str) -> None:
    spec = json.loads(spec_text)
    scope = {"__builtins__": builtins.__dict__.copy()}
    calls = [(name, eval(args, dict(scope)), eval(kwargs, dict(scope))) for name, args, kwargs in spec["calls"]]
    sys.path.insert(0, "")
    module = importlib.import_module(spec["module"])
    answers, budget = [], [_ITEMS]
    for name, args, kwargs in calls:
        try:
            answers.append(["ok", encode(_getattr(module, name)(*args, **kwargs), budget)])
        except Exception as exc:  # the original may raise too: the same type must
            answers.append(["raise", _name(_type(exc))])
    _print(nonce + _dumps(answers), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
