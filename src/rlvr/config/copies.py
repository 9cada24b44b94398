"""One mistake, one message: a value that other keys copy by interpolation is reported once, on the
key it was set at, naming the override that set it and the keys that copy it (``training_loop.grpo
.temperature=-1`` also reaches ``training_loop.rft.temperature`` and ``evaluation.sampled.temperature``).
Which key copies which is read from the unresolved config with OmegaConf's interpolation grammar."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, grammar_parser
from omegaconf.errors import GrammarParseError

from rlvr.issues import ConfigIssue

# Resolvers whose value is the key named by their first argument (a default may follow).
_SELECTS = frozenset({"oc.select"})


def _copied_key(raw: str, parent: list[str]) -> str | None:
    """The key a value copies whole (``${a.b}``, ``${..b}``, ``${oc.select:a.b,default}``), else None."""
    try:
        kids = list(grammar_parser.parse(raw).text().getChildren())
    except GrammarParseError:
        return None
    if len(kids) != 1 or not hasattr(kids[0], "interpolationNode"):
        return None
    node, resolver = kids[0].interpolationNode(), kids[0].interpolationResolver()
    if node is not None:
        key = node.getText()[2:-1]
    elif resolver is not None and resolver.resolverName().getText() in _SELECTS and resolver.sequence():
        key = resolver.sequence().element()[0].getText()
    else:
        return None
    dots = len(key) - len(key.lstrip("."))  # relative: one dot is the node's level, each more one up
    key = ".".join([*parent[: max(len(parent) - dots + 1, 0)], key[dots:]] if dots else [key])
    return None if "$" in key or not key.strip(".") else key.strip(".")


def copies(cfg: DictConfig | ListConfig) -> dict[str, str]:
    """Each key of the unresolved ``cfg`` whose value is a whole interpolation -> the key it copies
    (keys within mappings: config keys are)."""
    found: dict[str, str] = {}

    def walk(node: Any, path: list[str]) -> None:
        for name, value in node.items() if isinstance(node, dict) else ():
            if isinstance(value, str) and (source := _copied_key(value, path)) is not None:
                found[".".join([*path, str(name)])] = source
            walk(value, [*path, str(name)])

    walk(OmegaConf.to_container(cfg, resolve=False), [])
    return found


def source_of(key: str, copied: dict[str, str]) -> tuple[str, list[str]]:
    """The key ``key``'s value comes from and the keys it passed through (``key`` first); a key under a
    copied node (``a.b.c`` where ``a.b: ${x}``) comes from ``x.c``."""
    chain = [key]
    for _ in range(len(copied) + 1):  # a chain longer than the copies is a cycle: stop
        parts = key.split(".")
        prefix = next(
            (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in copied), None
        )
        if prefix is None:
            break
        key = copied[prefix] + key[len(prefix) :]
        if key in chain:
            break
        chain.append(key)
    return key, chain


def command_line_overrides() -> dict[str, str]:
    """This Hydra run's overrides, key -> the override as typed (none outside a Hydra run)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not HydraConfig.initialized():
        return {}
    lines = list(HydraConfig.get().overrides.task)
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception:  # Hydra parsed these lines already; a failure here only loses the wording
        return {}
    return {o.key_or_group: line for o, line in zip(parsed, lines, strict=True)}


def merged(
    issues: Sequence[ConfigIssue], cfg: DictConfig, overrides: dict[str, str] | None = None
) -> list[ConfigIssue]:
    """``issues``, those that carry one value from one key (and the keys of ``cfg`` that copy it) as one
    issue on that key, in the first one's place; ``overrides``: default :func:`command_line_overrides`."""
    copied = copies(cfg)
    if not copied:
        return list(issues)
    overrides = command_line_overrides() if overrides is None else overrides

    def root_of(issue: ConfigIssue) -> str:  # where its value was set, when it is that key's value
        root = source_of(issue.key, copied)[0]
        try:
            value = OmegaConf.select(cfg, root, throw_on_missing=False)
        except Exception:  # a resolver that refuses: judged elsewhere; the issue keeps its key
            return issue.key
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        return root if repr(value) == repr(issue.value) else issue.key

    groups: dict[tuple[str, str], list[ConfigIssue]] = {}
    for issue in issues:  # dicts keep the order of the first issue of each group
        groups.setdefault((root_of(issue), repr(issue.value)), []).append(issue)
    return [
        g[0] if [i.key for i in g] == [root] else _one(root, g, copied, overrides)
        for (root, _), g in groups.items()
    ]


def _one(
    root: str, group: list[ConfigIssue], copied: dict[str, str], overrides: dict[str, str]
) -> ConfigIssue:
    """The issues of ``group`` (one value, set at ``root``) as one issue on ``root``."""
    own = next((i for i in group if i.key == root), None)
    others = [i for i in group if i is not own]

    def named(issue: ConfigIssue) -> str:  # a copy of a copy says which it went through
        chain = source_of(issue.key, copied)[1]
        return issue.key + (f" (via {', '.join(chain[1:-1])})" if len(chain) > 2 else "")

    same = [named(i) for i in others if own is not None and i.problem == own.problem]
    other = [f"copied into {named(i)}, where it {i.problem}" for i in others if named(i) not in same]
    told = [f"set by the override '{overrides[root]}'" if root in overrides else "set in the config"]
    if same:
        told.append(
            f"copied by interpolation into {_listed(same)}, which refuse it too: one mistake, one message"
        )
    if own is not None:
        problem, fix = own.problem, f"{own.fix}; the keys that copy it follow"
    else:  # only the copies' rules refuse it
        problem, other = other[0], other[1:]
        keys, their = _listed([i.key for i in others]), "its" if len(others) == 1 else "their"
        fix = (
            f"set {root} to a value {keys} can take too, or give {keys} a value of {their} own "
            f"({'; '.join(i.fix for i in others)})"
        )
    origin = "; ".join(told + other)
    value = (own or group[0]).value
    return ConfigIssue(root, value, problem, fix, builds=all(i.builds for i in group), origin=origin)


def _listed(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"
