"""The sandbox: where a task's tests and an episode's commands run, contained.

  runner.py        bubblewrap (or, opted in, no sandbox) around one command, with cgroup and rlimit caps
  cgroup.py        the memory and process caps of one sandboxed tree
  interpreter.py   the pytest-only interpreter the tests run with, and what of it the sandbox shows
  deps.py          a project's declared dependencies, installed into a folder of their own
  warm_pytest.py   a sandbox that stays up per repository copy, pytest imported once, a fork per run
  pytest_server.py what runs inside that sandbox (imports nothing of ours)
  plain_runner.py  plain `def test_*` functions called directly, the statuses pytest would give

It knows nothing of sessions, grading or task families: it imports only the env's
foundations (config, errors, types, parse, workspace).
"""
