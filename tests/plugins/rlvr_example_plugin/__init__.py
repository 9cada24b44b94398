"""An example plugin package: your own components, named in configs by ``_target_``.

Allowed only when the package is named on the command line: ``RLVR_PLUGINS=rlvr_example_plugin``
(see SECURITY.md). The tests put ``tests/plugins`` on ``PYTHONPATH``; a real plugin is
``pip install -e``'d like any package.
"""
