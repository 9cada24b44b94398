"""The check before Hydra composes through Hydra's public API (issue 57, "Compose once"): no module
of src/ imports ``hydra._internal``, and what it copies from Hydra's private code (the flags of
``hydra.main``, the place of ``--config-dir`` in the search path) still matches the installed Hydra."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _private_hydra_imports(source: str) -> list[str]:
    """Every import of hydra._internal in a module's source, those inside functions included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        found += [n for n in names if n == "hydra._internal" or n.startswith("hydra._internal.")]
    return found


def test_no_module_imports_hydra_internal():
    found = {
        str(path.relative_to(SRC)): hits
        for path in sorted(SRC.rglob("*.py"))
        if (hits := _private_hydra_imports(path.read_text()))
    }
    assert not found, f"imports of Hydra's private modules (use Hydra's public API): {found}"


def test_the_import_reader_sees_each_form():
    """The reader above can fail: a function-level import and each spelling count; a string does not."""
    source = (
        "def f():\n    from hydra._internal.utils import get_args_parser\n"
        "import hydra._internal.hydra\nfrom hydra import _internal\n"
        'TARGET = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"\n'
    )
    assert sorted(_private_hydra_imports(source)) == [
        "hydra._internal",
        "hydra._internal.hydra",
        "hydra._internal.utils.get_args_parser",
    ]


def test_the_flags_are_hydra_mains():
    """rlvr.runtime.hydra_compose.parser copies hydra.main's private parser: same flags, same options."""
    from hydra._internal.utils import get_args_parser  # the test reads Hydra's private code; src does not

    from rlvr.runtime.hydra_compose import parser

    def flags(p):
        return {
            (
                tuple(sorted(a.option_strings)),
                a.dest,
                a.nargs,
                a.const,
                tuple(a.choices or ()),
                type(a).__name__,
            )
            for a in p._actions
        }

    assert flags(parser()) == flags(get_args_parser())
    argv = ["-m", "--config-dir", "/x", "-cn", "c", "a=1", "b=2", "--info"]
    assert vars(parser().parse_args(argv)) == vars(get_args_parser().parse_args(argv))


def test_the_search_path_is_hydra_mains(tmp_path):
    """The loader's search path is the one hydra.main builds for a script with --config-dir."""
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    from rlvr.runtime.hydra_compose import loader

    script = Path(__file__).resolve().parents[2] / "run_pipeline.py"
    expected = create_automatic_config_search_path(str(script), None, "conf")
    expected.prepend("command-line", f"file://{tmp_path}", anchor=SearchPathQuery(provider="schema"))
    with loader(script, "conf", str(tmp_path)) as hydra:
        got = [(e.provider, e.path) for e in hydra.get_search_path().get_path()]
        sources = [(s.provider, s.path) for s in hydra.get_sources()]
    assert got == [(e.provider, e.path) for e in expected.get_path()]
    assert ("command-line", str(tmp_path)) in sources
    assert not GlobalHydra.instance().is_initialized()
    with loader(script, "conf", None) as hydra:  # the plugin stays registered, inert without --config-dir
        assert "command-line" not in {e.provider for e in hydra.get_search_path().get_path()}
