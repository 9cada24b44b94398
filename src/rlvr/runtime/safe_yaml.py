"""Bounded YAML reading: a file from elsewhere cannot make a read cost minutes or gigabytes.

A YAML alias repeats a node without repeating its text, so a few hundred bytes of nested aliases
(an "alias bomb") stand for billions of nodes; PyYAML composes them as shared nodes in no time, and
the cost lands on whoever walks the tree as a tree (OmegaConf, Hydra's composition: minutes and
gigabytes before any check could refuse the content). Here the composed node graph is measured
before anything is built from it, in time linear in the file's size:

- :func:`load_data` reads a results-directory file (``config_resolved.yaml``, ``multirun.yaml``)
  as plain data: bounded size, no aliases at all (rlvr and Hydra never write them), no tags
  beyond YAML's safe ones, and no interpolation (``${...}`` stays text);
- :func:`config_file_issue` judges a config file (``--config-dir``, experiment files) before
  Hydra composes it: bounded size and a bounded number of nodes once aliases are expanded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

# A results file rlvr writes is a few kilobytes; a config file a few hundred lines.
MAX_RESULT_BYTES = 8 * 2**20
MAX_CONFIG_BYTES = 2**20
# Nodes a config file may stand for once its aliases are expanded (every conf/ file: < 500).
MAX_CONFIG_NODES = 100_000

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlRefused(ValueError):
    """A YAML file refused before it was built: ``path``, the rule it broke and the fix."""

    def __init__(self, path: str | os.PathLike[str], rule: str, fix: str):
        self.path, self.rule, self.fix = str(path), rule, fix
        super().__init__(f"{path}: {rule}. Fix: {fix}")


def _read(path: Path, max_bytes: int, fix: str) -> bytes:
    size = path.stat().st_size
    if size > max_bytes:
        raise YamlRefused(path, f"{size:,} bytes, over the limit of {max_bytes:,}", fix)
    with path.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while being read
        raise YamlRefused(path, f"over the limit of {max_bytes:,} bytes", fix)
    return data


def _compose(path: Path, data: bytes) -> list[yaml.Node]:
    try:
        return list(yaml.compose_all(data, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise YamlRefused(
            path, f"not valid YAML ({' '.join(str(exc).split())})", "fix the YAML syntax"
        ) from None


def expanded_nodes(roots: list[yaml.Node], limit: int) -> int | None:
    """How many nodes ``roots`` stand for with every alias expanded, or None once over ``limit``
    (or for a node that contains itself). Linear in the number of distinct nodes: each one's
    expanded size is computed once."""
    sizes: dict[int, int] = {}
    total = 0
    for root in roots:
        # Iterative post-order walk: a file nested thousands deep cannot exhaust the Python stack.
        stack: list[tuple[yaml.Node, bool]] = [(root, False)]
        on_path: set[int] = set()
        while stack:
            node, children_done = stack.pop()
            key = id(node)
            if children_done:
                on_path.discard(key)
                size = 1 + sum(sizes[id(c)] for c in _children(node))
                if size > limit:
                    return None
                sizes[key] = size
                continue
            if key in sizes:
                continue
            if key in on_path:
                return None  # a node inside itself: infinitely many
            on_path.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
        total += sizes[id(root)]
        if total > limit:
            return None
    return total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _has_alias(roots: list[yaml.Node]) -> bool:
    """Whether some node is reached twice: what an alias (``*name``) composes to."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            return True
        seen.add(id(node))
        stack.extend(_children(node))
    return False


def load_data(path: str | os.PathLike[str], max_bytes: int = MAX_RESULT_BYTES) -> Any:
    """A results-directory YAML file as plain data (dicts, lists, scalars), never interpolated.

    Raises :class:`YamlRefused` for a file over ``max_bytes``, invalid YAML, several documents,
    or any alias (anchors are not something rlvr or Hydra write into a results directory).
    """
    path = Path(path)
    fix = "this is not a file rlvr or Hydra wrote; summarise only results directories you trust the origin of"
    data = _read(path, max_bytes, fix)
    roots = _compose(path, data)
    if len(roots) > 1:
        raise YamlRefused(path, "holds several YAML documents", fix)
    if _has_alias(roots):
        raise YamlRefused(path, "uses YAML aliases (*name), which results files never contain", fix)
    return yaml.load(data, Loader=_Loader) if roots else None


def config_file_issue(
    path: str | os.PathLike[str], max_bytes: int = MAX_CONFIG_BYTES, max_nodes: int = MAX_CONFIG_NODES
) -> YamlRefused | None:
    """Why a config file must not reach Hydra (None: it may): over ``max_bytes``, invalid YAML, or
    standing for more than ``max_nodes`` nodes once its aliases are expanded."""
    path = Path(path)
    try:
        data = _read(path, max_bytes, "split the config into smaller files")
        roots = _compose(path, data)
    except YamlRefused as refused:
        return refused
    except OSError as exc:
        return YamlRefused(path, f"cannot be read ({type(exc).__name__})", "check the file's permissions")
    if expanded_nodes(roots, max_nodes) is None:
        return YamlRefused(
            path,
            f"its YAML aliases (*name) expand to more than {max_nodes:,} nodes (an alias bomb)",
            "write the values out, or use fewer nested aliases",
        )
    return None
