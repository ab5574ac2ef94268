"""Where tasks come from, and the demonstrations that teach them.

  micro.py          generated micro tasks (a small module, one injected bug)
  edit_forms.py     the ways an action writes a one-line fix, and the oracle's fix in each
  micro_demos.py    warm-start demonstrations on micro tasks
  repo_demos.py     warm-start demonstrations on real-project tasks
  builder.py        tasks from real projects: mutants validated by the project's own tests
  mutations.py      the bug injections the builder tries
  sdists.py         pinned source distributions of the default projects
  sources.py        a project's source: a pinned sdist or a folder
  swebench_import.py tasks imported from SWE-bench-style records
  corpus.py         a built corpus on disk (save, load, export)
  splits.py         training and held-out splits
  selection.py      which tasks of a corpus a run takes, and the hint its statements give

The session and grading core (engines/env/*.py) and the sandbox never import these.
"""
