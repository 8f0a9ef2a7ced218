"""`qvr check`: text and JSON output, exit statuses, unreadable files."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "qvr.cli", *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_clean_examples_exit_zero():
    out = run("check", "examples")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 errors" in out.stderr


def test_text_format_has_location_source_and_caret(tmp_path):
    f = tmp_path / "bad.qvr"
    f.write_text("object Tok : FinSet 4\nlet g = polsh\n")
    out = run("check", str(f))
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0] == f"{f}:2:9: error[QVR102]: undefined morphism `polsh`"
    assert lines[1] == " 2 | let g = polsh"
    assert lines[2] == "   |         ^^^^^"


def test_json_format(tmp_path):
    f = tmp_path / "bad.qvr"
    f.write_text("object A : FinSet 3\nobject A : FinSet 4\n")
    out = run("check", "--format", "json", str(f))
    assert out.returncode == 1
    data = json.loads(out.stdout)
    d = data["files"][0]["diagnostics"][0]
    assert data["files"][0]["path"] == str(f)
    assert d == {"code": "QVR104", "severity": "error", "message": "`A` is already declared on line 1",
                 "range": {"start": {"line": 1, "character": 7}, "end": {"line": 1, "character": 8}}}


def test_warnings_only_exit_zero(tmp_path):
    f = tmp_path / "w.qvr"
    f.write_text("object A : FinSet 3\nexport A2\n".replace("export A2\n", "let Normal = identity(A)\n"))
    out = run("check", str(f))
    assert out.returncode == 0
    assert "warning[QVR712]" in out.stdout


def test_missing_and_unreadable_files_exit_two_but_others_checked(tmp_path):
    good = tmp_path / "ok.qvr"
    good.write_text("object A : FinSet 3\n")
    bad = tmp_path / "bin.qvr"
    bad.write_bytes(b"\xff\xfe\x00bad")
    out = run("check", str(tmp_path / "missing.qvr"), str(bad), str(good))
    assert out.returncode == 2
    assert "missing.qvr: no such file or directory" in out.stderr
    assert "bin.qvr: cannot read file" in out.stderr
    assert "checked 1 file" in out.stderr


def test_directories_are_searched_recursively(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.qvr").write_text("let g = nothing_here\n")
    out = run("check", "--format", "json", str(tmp_path))
    data = json.loads(out.stdout)
    assert [f["path"].endswith("x.qvr") for f in data["files"]] == [True]
    assert out.returncode == 1


def test_line_ends_are_read_as_they_are(tmp_path):
    """A lone carriage return is not a line break for the front end: `qvr check` reports
    the positions the language server computes from the same text (no newline
    translation when reading the file)."""
    from qvr.analysis import Document
    text = "object A : FinSet 3\r\nobject A : FinSet 4 # a\rb\nobject A : FinSet 5\n"
    f = tmp_path / "cr.qvr"
    f.write_bytes(text.encode("utf-8"))
    out = run("check", "--format", "json", str(f))
    got = [(d["range"]["start"]["line"], d["range"]["start"]["character"])
           for d in json.loads(out.stdout)["files"][0]["diagnostics"]]
    doc = Document(text)
    want = [(doc.position(d.span.start).line, doc.position(d.span.start).character)
            for d in doc.diagnostics()]
    assert got == want and len(got) == 2
    assert got[1][0] == 2  # the third line: the `\r` inside the comment does not count


# ---------------------------------------------------------------- internal errors

def _broken_check(monkeypatch):
    import qvr.commands.check as check

    def boom(args):
        raise ValueError("the checker fell over\nsecond line")
    monkeypatch.setattr(check, "run", boom)


def test_an_unexpected_exception_is_an_internal_error_with_the_traceback_in_a_temp_file(
        monkeypatch, tmp_path, capsys):
    import re
    import tempfile
    from qvr.cli import main
    _broken_check(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["check", "x.qvr"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    m = re.fullmatch(r"qvr: internal error: ValueError: the checker fell over; the traceback is in "
                     r"(\S+); please report it with that file\n", err)
    assert m, err
    saved = Path(m.group(1))
    assert saved.parent == tmp_path and re.fullmatch(r"qvr-internal-error-\w+\.txt", saved.name)
    report = saved.read_text()
    assert report.startswith("qvr internal error report\ncommand: qvr check x.qvr\nqvr 0.1.0, Python ")
    assert "Traceback (most recent call last)" in report and "in boom" in report
    assert report.rstrip().endswith("ValueError: the checker fell over\nsecond line")


def test_a_command_with_a_run_folder_gets_the_traceback_there(monkeypatch, tmp_path, capsys):
    import qvr.commands.check as check
    from qvr.cli import main
    from qvr.internal_error import FOLDER_ATTR

    def boom(args):
        setattr(args, FOLDER_ATTR, tmp_path)  # what a command with a run folder does
        raise RuntimeError("lost")
    monkeypatch.setattr(check, "run", boom)
    assert main(["check", "x.qvr"]) == 3
    err = capsys.readouterr().err
    assert err == (f"qvr: internal error: RuntimeError: lost; the traceback is in "
                   f"{tmp_path / 'internal-error.txt'}; please report it with that file\n")
    assert "RuntimeError: lost" in (tmp_path / "internal-error.txt").read_text()


def test_an_unwritable_run_folder_falls_back_to_a_temp_file(monkeypatch, tmp_path, capsys):
    import tempfile
    import qvr.commands.check as check
    from qvr.cli import main
    from qvr.internal_error import FOLDER_ATTR

    def boom(args):
        setattr(args, FOLDER_ATTR, tmp_path / "missing" / "folder")
        raise KeyError("k")
    monkeypatch.setattr(check, "run", boom)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["check", "x.qvr"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"qvr: internal error: KeyError: 'k'; the traceback is in {tmp_path}/qvr-internal-error-")


def test_no_traceback_reaches_the_user_from_a_subprocess(tmp_path):
    """The real entry point: a command that raises (injected through sitecustomize)."""
    (tmp_path / "sitecustomize.py").write_text(
        "import qvr.commands.check as c\n"
        "def boom(args):\n    raise ZeroDivisionError('injected')\n"
        "c.run = boom\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "qvr.cli", "check", "examples"], cwd=ROOT,
                         capture_output=True, text=True, env=env)
    assert out.returncode == 3
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("qvr: internal error: ZeroDivisionError: injected; the traceback is in ")
