"""`python -m turbdb.jhtdb URL SCRIPT` and `turbdb.jhtdb.redirect` as a user mistypes them
(thirteenth probe): a missing script exited 0 after printing the usage, a script not there
gave runpy's traceback, and an address without its scheme was taken, givernylocal then
failing inside its metadata download with requests' "No host specified"."""

import subprocess
import sys

import pytest

import turbdb
import turbdb.jhtdb


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turbdb.jhtdb", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_help_explains_and_exits_0():
    shown = run("--help")
    assert shown.returncode == 0
    assert "URL" in shown.stdout and "http://host:port" in shown.stdout and "Exit status" in shown.stdout


@pytest.mark.parametrize("args, says", [
    ((), "the server's URL and the script to run are required"),
    (("http://127.0.0.1:8000",), "the script to run is required"),
    (("http://127.0.0.1:8000", "no_such_script.py"), "no script at 'no_such_script.py'"),
    (("127.0.0.1:8000", "script.py"), "add the scheme, http://127.0.0.1:8000"),
])
def test_usage_errors_exit_2_with_one_line_saying_what_is_wrong(tmp_path, args, says):
    (tmp_path / "script.py").write_text("print('ran')\n")
    refused = run(*args, cwd=tmp_path)
    assert refused.returncode == 2, refused
    assert "Traceback" not in refused.stderr and "ran" not in refused.stdout
    assert refused.stderr.splitlines()[0].startswith("usage: python -m turbdb.jhtdb URL SCRIPT")
    assert says in refused.stderr


def test_a_script_runs_with_its_own_arguments(tmp_path):
    (tmp_path / "script.py").write_text("import sys\nprint(sys.argv[1:])\n")
    ran = run("http://127.0.0.1:9", "script.py", "-h", "x", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "['-h', 'x']"


def test_a_directory_with_a_main_runs_as_python_dir_runs_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__main__.py").write_text("import sys\nprint('ran', sys.argv[1:])\n")
    ran = run("http://127.0.0.1:9", "pkg", "a", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ran ['a']"
    (tmp_path / "empty").mkdir()
    refused = run("http://127.0.0.1:9", "empty", cwd=tmp_path)
    assert refused.returncode == 2 and "a directory without __main__.py" in refused.stderr


def test_redirect_refuses_an_address_that_is_not_one_at_once():
    with pytest.raises(turbdb.InvalidRequestError, match="add the scheme, http://127.0.0.1:8000"):
        turbdb.jhtdb.redirect("127.0.0.1:8000")
    with turbdb.jhtdb.redirect("HTTP://127.0.0.1:8000/"):
        pass
