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


# -- exit statuses that cannot lie (issue 45): whatever happens while a run ends, the status a test
# reads is the one python would have given, and never 0 for a status nobody knows


def _fresh_and_forked(tmp_path, source: str) -> dict[bool, tuple[int, str, str]]:
    """(exit code, stdout, stderr) of ``python script`` run fresh and as a fork of the zygote."""
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(source))
    env = {**launcher.os.environ, **launcher._the_zygote().env}
    results = {}
    for fresh in (True, False):
        proc = launcher.Popen(
            [sys.executable, str(script)], cwd=tmp_path, env=env, fresh=fresh,
            stdout=launcher.PIPE, stderr=launcher.PIPE, text=True,
        )  # fmt: skip
        assert proc._forked is not fresh
        out, err = proc.communicate(timeout=120)
        results[fresh] = (proc.returncode, out, err)
    return results


def test_an_exit_hook_that_raises_leaves_the_runs_own_exit_code_and_prints_its_traceback(tmp_path):
    """The hook runs in threading's shutdown, where Python 3.11's ProcessPoolExecutor wakes its
    manager at exit; python prints the error, runs the atexit functions and exits 3."""
    results = _fresh_and_forked(
        tmp_path,
        """
        import atexit, sys, threading
        def hook():
            raise RuntimeError("exit hook failed")
        threading._register_atexit(hook)
        atexit.register(print, "atexit ran")
        sys.exit(3)
        """,
    )
    for code, out, err in results.values():
        assert (code, out) == (3, "atexit ran\n")
        assert "RuntimeError: exit hook failed" in err and "Exception ignored in: <module 'threading'" in err


def test_a_run_whose_error_report_fails_too_still_ends_with_its_own_code(tmp_path):
    """An exit hook that closes stderr and raises: printing its error raises again. Nothing of the
    run may fall into the launcher's middle process (whose status is not the run's)."""
    results = _fresh_and_forked(
        tmp_path,
        """
        import sys, threading
        def hook():
            sys.stderr.close()
            raise RuntimeError("exit hook failed with stderr closed")
        threading._register_atexit(hook)
        print("main done", flush=True)
        sys.exit(5)
        """,
    )
    assert results[False][:2] == results[True][:2] == (5, "main done\n")


def test_a_live_non_daemon_thread_is_waited_for_and_the_exit_code_kept(tmp_path):
    results = _fresh_and_forked(
        tmp_path,
        """
        import sys, threading, time
        def late():
            time.sleep(1)
            print("thread done", flush=True)
        threading.Thread(target=late).start()
        sys.exit(4)
        """,
    )
    assert results[False] == results[True] == (4, "thread done\n", "")


def test_a_keyboard_interrupt_prints_runs_the_exit_hooks_then_dies_of_sigint(tmp_path):
    results = _fresh_and_forked(
        tmp_path,
        """
        import atexit
        atexit.register(print, "atexit ran")
        raise KeyboardInterrupt
        """,
    )
    for code, out, err in results.values():
        assert (code, out) == (-launcher.signal.SIGINT, "atexit ran\n") and "KeyboardInterrupt" in err


def test_a_status_taken_by_another_wait_is_never_reported_as_0(tmp_path, capfd):
    """subprocess turns ECHILD into returncode 0; the launcher's Popen (fresh or forked) reports
    LOST_STATUS and says why, through ``wait`` and through ``poll``."""
    script = tmp_path / "probe.py"
    script.write_text("import sys; sys.exit(3)\n")
    env = {**launcher.os.environ, **launcher._the_zygote().env}
    for fresh in (True, False):
        for read in ("wait", "poll"):
            proc = launcher.Popen([sys.executable, str(script)], env=env, fresh=fresh)
            assert proc._forked is not fresh
            pid, status = launcher.os.waitpid(proc.pid, 0)  # someone else's wait takes the status
            assert (pid, launcher.os.waitstatus_to_exitcode(status)) == (proc.pid, 3)
            code = proc.wait(timeout=60) if read == "wait" else proc.poll()
            assert code == launcher.LOST_STATUS != 0, (fresh, read)
    assert capfd.readouterr().err.count("its exit status was taken elsewhere (ECHILD)") == 4
