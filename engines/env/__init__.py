"""The SWE environment: tasks, the bubblewrap sandbox, agent tools and the grader.

Usable as a plain library (no Prefect). Modules, one idea each:
    types      Task, GradeResult, StepResult (plain data)
    errors     set-up errors (sandbox missing, malformed task, unbuildable project)
    config     EnvConfig and sandbox limits
    sandbox    run a command under bubblewrap with cgroup and rlimit caps
    cgroup     per-command cgroup (v2 or v1) memory and pids caps
    workspace  a writable copy of a task's base snapshot; reset and diff
    patches    allowlist filter of patches (on the paths git reads from them)
    patch_paths  the paths a patch makes git touch (git apply --numstat --summary -z)
    report     SWE-bench-compatible log parsing and resolution report
    grader     grade one patch; a pool that grades many in parallel
    session    the environment side of one multi-turn agent episode
    session_tree  an episode's tree: in memory until a command needs a directory
    micro      generated micro bug-fix tasks and their oracle episodes
    corpus     save/load a task corpus; SWE-bench-style JSONL import/export
    sdists     pinned, cached PyPI source distributions
    mutations  AST mutations spliced into real source files
    builder    real-repository tasks from PyPI sdists by AST mutation
"""
