"""The check of tests/conftest.py that a test's folder and its tier markers agree (CONTRIBUTING.md
"Tests"): run on every collection, it names the test, its markers and the folder's."""

from __future__ import annotations

from tests.conftest import folder_marker_issues


def test_the_collected_suite_agrees(request):
    assert folder_marker_issues(request.session.items) == []


def test_a_unit_test_marked_long_is_named_with_the_fix(request):
    request.node.add_marker("long")
    [issue] = folder_marker_issues([request.node])
    assert request.node.nodeid in issue and "markers ['long'] in tests/unit/" in issue
    assert "takes none" in issue and "move the test to the folder of its tier" in issue
