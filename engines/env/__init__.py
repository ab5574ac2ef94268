"""The SWE environment: tasks, the bubblewrap sandbox, agent tools and the grader.

Usable as a plain library (no Prefect). Three neighbourhoods:

  engines/env/*.py     the session and grading core, generic over where tasks come from:
      types, errors, config   plain data, set-up errors, EnvConfig and sandbox limits
      session, session_tree   the environment side of one multi-turn episode and its tree
      views, edits, edit_spans, scopes   what the model sees of a file; applying its edits
      feedback                what an edit's test run tells the model
      workspace, parse        a writable copy of a task's snapshot; parsing its source
      patches, patch_paths    the allowlist filter of patches and the paths git reads from them
      report, grader          SWE-bench-compatible logs and reports; the grading pool
      monitor, judge, judge_script   the patch monitor and the strict judge (reward hacks)
  sandbox/             where commands run, contained (see its __init__)
  task_sources/        where tasks come from: micro tasks, real projects, imports, corpora
                       (see its __init__)

Imports point inward: task_sources may use the core and the sandbox, the core may use
the sandbox, and neither imports a task family (tests/import_graph.py keeps it so).
"""
