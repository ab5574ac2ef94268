"""SessionTree: an episode's tree in memory, on disk only once a tool needs a directory."""

from engines.env.session_tree import SessionTree
from engines.env.workspace import read_tree, unified_diff

BASE = {"m.py": b"x = 1\n", "pkg/n.py": b"y = 2\n"}


def test_reads_and_writes_stay_in_memory_until_a_directory_is_needed(tmp_path):
    tree = SessionTree(dict(BASE), tmp_path / "sessions")
    tree.write_bytes("m.py", b"x = 3\n")
    assert tree.read_bytes("m.py") == b"x = 3\n" and tree.read_bytes("pkg/n.py") == b"y = 2\n"
    assert tree.read_bytes("nope.py") is None
    assert not (tmp_path / "sessions").exists()  # nothing written yet
    assert tree.changes() == {"m.py": b"x = 3\n"}
    assert tree.diff() == unified_diff(BASE, BASE | {"m.py": b"x = 3\n"})
    assert BASE["m.py"] == b"x = 1\n"  # the shared base is never written


def test_paths_are_confined_to_the_tree(tmp_path):
    tree = SessionTree(dict(BASE), tmp_path)
    assert tree.locate("./pkg/../m.py") == "m.py"
    for outside in ("../m.py", "/etc/passwd", "pkg/../../x", ".."):
        assert tree.locate(outside) is None
    root = tree.root
    (root / "link").symlink_to("/etc")
    assert tree.locate("link/passwd") is None and tree.locate("pkg/../m.py") == "m.py"


def test_on_disk_the_directory_is_the_tree(tmp_path):
    tree = SessionTree(dict(BASE), tmp_path)
    tree.write_bytes("m.py", b"x = 3\n")
    root = tree.root  # written with the episode's changes
    assert read_tree(root) == BASE | {"m.py": b"x = 3\n"}
    (root / "new.py").write_bytes(b"z = 0\n")  # as a command would
    assert tree.changes() is None  # a command may have done anything: read the diff
    assert "+z = 0" in tree.diff() and "+x = 3" in tree.diff()
    tree.write_bytes("m.py", b"x = 4\n")
    assert tree.read_bytes("m.py") == b"x = 4\n" == (root / "m.py").read_bytes()
    tree.destroy()
    assert not root.exists()
