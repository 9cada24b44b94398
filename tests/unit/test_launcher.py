"""tests/launcher.py: a forked run behaves as `python script args` would (argv, cwd, environment,
pipes, exit code, a worker pool left running at exit)."""

from __future__ import annotations

import sys
import textwrap

from tests import launcher

SCRIPT = textwrap.dedent(
    """
    import concurrent.futures, os, sys
    import probe_extra  # from a PYTHONPATH folder the zygote did not have
    # left running, as joblib leaves its workers: only threading's exit hooks stop them
    pool = concurrent.futures.ProcessPoolExecutor(1)
    pool.submit(abs, -1).result()
    print(sys.argv[1:], os.getcwd(), os.environ.get("LAUNCHER_PROBE"), __name__, probe_extra.X, flush=True)
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
    """
)


def test_a_forked_run_is_what_a_fresh_interpreter_would_be(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "probe_extra.py").write_text("X = 'extra'\n")
    # the zygote of this worker may have started under an earlier test's environment: take its
    # import-time variables, so that this run differs from it only by the added PYTHONPATH folder
    zygote = launcher._the_zygote()
    path = launcher.os.pathsep.join([str(tmp_path / "extra"), zygote.env.get("PYTHONPATH", "")])
    env = {**launcher.os.environ, **zygote.env, "LAUNCHER_PROBE": "seen", "PYTHONPATH": path}
    results = {}
    for fresh in (True, False):
        proc = launcher.Popen(
            [sys.executable, str(script), "3", "x y"], cwd=tmp_path, env=env, fresh=fresh,
            stdout=launcher.PIPE, stderr=launcher.PIPE, text=True,
        )  # fmt: skip
        assert proc._forked is not fresh
        out, err = proc.communicate(timeout=120)
        results[fresh] = (proc.returncode, out, err.strip())
    code, out, err = results[True]
    assert code == 3 and out == f"['3', 'x y'] {tmp_path} seen __main__ extra\n" and err == "to stderr"
    assert results[False] == results[True]


def test_a_pythonpath_folder_that_shadows_an_imported_module_is_refused_in_the_fork(tmp_path):
    """A fresh interpreter would import the folder's ``json``; the fork already holds the real one."""
    (tmp_path / "json.py").write_text("")
    script = tmp_path / "probe.py"
    script.write_text("print('ran')\n")
    zygote = launcher._the_zygote()
    path = launcher.os.pathsep.join([str(tmp_path), zygote.env.get("PYTHONPATH", "")])
    env = {**launcher.os.environ, **zygote.env, "PYTHONPATH": path}
    proc = launcher.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert (
        proc.returncode == 1
        and "shadows the imported module json" in proc.stderr
        and "ran" not in proc.stdout
    )
