"""One mistake, one message: a value that other keys copy by interpolation is reported once.

``training_loop.grpo.temperature=-1`` reaches ``training_loop.rft.temperature`` (``${training_loop.grpo
.temperature}``) and ``evaluation.sampled.temperature`` (``${oc.select:training_loop.grpo.temperature,
1.0}``), and each key's rule refuses it. :func:`merged` folds the issues that carry one value from one
key into a single issue on the key the value was set at, naming the override that set it (when the
command line did) and the keys that copy it. Which key copies which is read from the composed,
unresolved config with OmegaConf's own interpolation grammar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, grammar_parser
from omegaconf.errors import GrammarParseError

from rlvr.issues import ConfigIssue

# Resolvers whose value is the key named by their first argument (a default may follow).
_SELECTS = frozenset({"oc.select"})


def _copied_key(raw: str, parent: list[str]) -> str | None:
    """The key a value copies whole (``${a.b}``, ``${..b}``, ``${oc.select:a.b,default}``), or None
    for anything else (text around an interpolation, another resolver, a key built by one)."""
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
    if "$" in key or not key:
        return None
    dots = len(key) - len(key.lstrip("."))
    if dots:  # relative: one dot is the node's own level, each further dot one level up
        base = parent[: len(parent) - (dots - 1)] if dots - 1 <= len(parent) else []
        key = ".".join([*base, key[dots:]]) if key[dots:] else ".".join(base)
    return key


def copies(cfg: DictConfig | ListConfig) -> dict[str, str]:
    """Each key of the unresolved ``cfg`` whose value is a whole interpolation -> the key it copies."""
    found: dict[str, str] = {}

    def walk(node: Any, path: list[str]) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for name, value in items:
            here = (
                [*path[:-1], f"{path[-1]}[{name}]"] if isinstance(node, list) and path else [*path, str(name)]
            )
            if isinstance(value, str) and "${" in value:
                source = _copied_key(value, path)
                if source is not None:
                    found[".".join(here)] = source
            else:
                walk(value, here)

    walk(OmegaConf.to_container(cfg, resolve=False), [])
    return found


def source_of(key: str, copied: dict[str, str]) -> tuple[str, list[str]]:
    """The key ``key``'s value comes from, and the chain of keys it passed through (``key`` first);
    a key under a copied node (``a.b.c`` where ``a.b: ${x}``) comes from the same place under the source."""
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
    """The overrides of this Hydra run, by the key they set -> the override as typed; empty outside a
    Hydra run (a test calling the gate directly)."""
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
    """``issues`` with those that carry one value from one key (itself, and the keys that copy it by
    interpolation in ``cfg``) folded into one issue on that key, in the place of the first of them;
    ``overrides``: key -> the command-line override that set it (default :func:`command_line_overrides`)."""
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
        return root if repr(_plain(value)) == repr(issue.value) else issue.key

    roots = {id(issue): root_of(issue) for issue in issues}
    groups: dict[tuple[str, str], list[ConfigIssue]] = {}
    for issue in issues:
        groups.setdefault((roots[id(issue)], repr(issue.value)), []).append(issue)
    out: list[ConfigIssue] = []
    for issue in issues:
        root = roots[id(issue)]
        group = groups[(root, repr(issue.value))]
        if issue is not group[0]:
            continue
        out.append(issue if [i.key for i in group] == [root] else _one(root, group, copied, overrides))
    return out


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
        refuse = "refuses" if len(same) == 1 else "refuse"
        told.append(
            f"copied by interpolation into {_listed(same)}, which {refuse} it too: one mistake, one message"
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


def _plain(value: Any) -> Any:
    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value
    )


def _listed(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"
