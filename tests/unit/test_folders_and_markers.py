"""The check of tests/conftest.py that a test's folder and its tier markers agree (CONTRIBUTING.md
"Tests"): run on every collection, it names the test, its markers and the folder's."""

from __future__ import annotations

from tests.conftest import folder_marker_issues, interpreter_starts


def test_the_collected_suite_agrees(request):
    assert folder_marker_issues(request.session.items) == []


def test_a_unit_test_marked_long_is_named_with_the_fix(request):
    request.node.add_marker("long")
    [issue] = folder_marker_issues([request.node])
    assert request.node.nodeid in issue and "markers ['long'] in tests/unit/" in issue
    assert "takes none" in issue and "move the test to the folder of its tier" in issue


def test_what_starts_an_interpreter_is_found_and_other_commands_are_not():
    code = (
        "subprocess.run([sys.executable, '-c', code])\n"
        "mp.spawn(_rank, nprocs=2)\n"
        "multiprocessing.get_context('forkserver')\n"
        "subprocess.run(['make', '-n', 'setup'])\n"
        "multiprocessing.get_context('fork')\n"
    )
    assert sorted(interpreter_starts(code)) == [
        "mp.spawn(...)",
        "multiprocessing.get_context(...)",
        "sys.executable",
    ]
