from engines.env.patches import filter_patch, is_allowed
from engines.env.workspace import unified_diff


def test_source_files_are_allowed_and_test_or_config_files_are_not():
    assert is_allowed("pkg/core.py")
    assert is_allowed("m.py")
    for path in [
        "tests/test_core.py",
        "pkg/tests/helpers.py",
        "test_m.py",
        "conftest.py",
        "pkg/conftest.py",
        "setup.py",
        "setup.cfg",
        "pyproject.toml",
        "tox.ini",
        "pytest.ini",
        "evil.pth",
        "sitecustomize.py",
        "../outside.py",
        "/etc/passwd",
        "core_test.py",
    ]:
        assert not is_allowed(path), path
    assert not is_allowed("pkg/check.py", frozenset({"pkg/check.py"}))


def test_filter_keeps_source_hunks_and_reports_dropped_files():
    base = {"m.py": b"x = 1\n", "test_m.py": b"def test():\n    assert 0\n"}
    new = {"m.py": b"x = 2\n", "test_m.py": b"def test():\n    assert 1\n", "conftest.py": b"import os\n"}
    filtered = filter_patch(unified_diff(base, new))
    assert "a/m.py" in filtered.text and "test_m.py" not in filtered.text and "conftest" not in filtered.text
    assert set(filtered.dropped) == {"test_m.py", "conftest.py"}


def test_filter_refuses_binary_and_unreadable_patches():
    assert filter_patch("\0\x01garbage").error
    assert filter_patch("this is not a diff").error
    assert filter_patch("").text == "" and not filter_patch("").error


def test_plain_diff_without_git_headers_is_split_per_file():
    patch = (
        "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n--- a/test_m.py\n+++ b/test_m.py\n@@ -1 +1 @@\n-a\n+b\n"
    )
    filtered = filter_patch(patch)
    assert "m.py" in filtered.text and filtered.dropped == ("test_m.py",)
