import json

import pytest

from engines.env.errors import TaskError
from engines.env.task_sources.corpus import export_jsonl, import_jsonl, load_corpus, save_corpus


def test_corpus_round_trips_through_parquet(micro_tasks, tmp_path):
    save_corpus(micro_tasks, tmp_path / "c")
    assert load_corpus(tmp_path / "c") == micro_tasks
    assert load_corpus(tmp_path / "c" / "tasks.parquet") == micro_tasks


def test_jsonl_round_trip_uses_swebench_field_encoding(micro_tasks, tmp_path):
    path = export_jsonl(micro_tasks, tmp_path / "t.jsonl")
    first = json.loads(path.read_text().splitlines()[0])
    assert isinstance(first["FAIL_TO_PASS"], str) and json.loads(first["FAIL_TO_PASS"]) == list(
        micro_tasks[0].FAIL_TO_PASS
    )
    assert import_jsonl(path) == micro_tasks


def test_import_names_the_bad_line_and_instance(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"instance_id": "proj__1", "repo": "proj", "patch": "x"}) + "\n")
    with pytest.raises(TaskError, match=r"bad.jsonl:1 \(instance proj__1\).*FAIL_TO_PASS"):
        import_jsonl(path)
    path.write_text(
        json.dumps({"instance_id": "proj__2", "repo": "proj", "patch": "x", "FAIL_TO_PASS": '["t::a"]'}) + "\n"
    )
    with pytest.raises(TaskError, match="proj__2.*snapshot"):
        import_jsonl(path)


def test_import_with_a_snapshot_directory(tmp_path):
    (tmp_path / "snaps" / "proj__3").mkdir(parents=True)
    (tmp_path / "snaps" / "proj__3" / "a.py").write_text("x = 1\n")
    record = {"instance_id": "proj__3", "repo": "proj", "patch": "x", "FAIL_TO_PASS": '["t.py::a"]'}
    (tmp_path / "ok.jsonl").write_text(json.dumps(record) + "\n")
    (task,) = import_jsonl(tmp_path / "ok.jsonl", snapshots_dir=tmp_path / "snaps")
    assert task.snapshot_uri.endswith("proj__3") and task.base_commit and task.env_name == "swe"
    assert load_corpus(save_corpus([task], tmp_path / "corpus").parent)[0].snapshot_uri == str(
        (tmp_path / "corpus" / "snapshots" / "proj__3").resolve()
    )
