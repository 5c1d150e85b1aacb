"""What a config read from a file made elsewhere (an export's ``config.yaml``, a cell's
``results.json``) may build: checked before anything is imported or called.

A loaded node builds only classes: its root a subclass of what the caller builds (the encoder,
an objective family), every nested ``_target_`` a ``torch.nn.Module`` (a token loss, a head),
each defined in ``ner_lightning`` or in a module the user named (``--allow-module``). The only
instantiate key is ``_target_`` (no ``_args_``, ``_partial_``, ``_recursive_``, ``_convert_``)
and no value is an interpolation (``${...}``: a resolver runs code). A ``_target_`` string is
checked before it is imported, the class it names after (``ner_lightning.export.folder.shutil.rmtree``
names a function of another module through one of ours, and is refused). ``--trust-config``
builds whatever the file names, as ``transformers``' ``trust_remote_code=True`` runs its code.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any

PACKAGE = "ner_lightning"


class UntrustedConfigError(ValueError):
    """A loaded config names something loading does not build; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Trust:
    """What the user allows a loaded config to build beyond ``ner_lightning``'s own classes."""

    modules: tuple[str, ...] = ()  # top-level modules whose classes may be built (their own losses)
    everything: bool = False  # build whatever the file names (a file the user wrote or trusts)

    def allows(self, target: str) -> bool:
        return any(target == m or target.startswith(m + ".") for m in (PACKAGE, *self.modules))


def _walk(node: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every entry below ``node``, lists included."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for name, value in items:
        path = f"{key}.{name}" if key else str(name)
        yield path, value
        yield from _walk(value, path)


def _refuse(where: str, key: str, what: str, trust_hint: bool = True) -> UntrustedConfigError:
    hint = (
        (
            " If you trust this file, --allow-module MODULE builds the classes of a module of yours "
            "and --trust-config builds whatever it names."
        )
        if trust_hint
        else ""
    )
    return UntrustedConfigError(f"{where}: {key}: {what}; refused before anything was built.{hint}")


def check_buildable(node: dict, builds: type, key: str, where: str, trust: Trust = Trust()) -> None:
    """Raise :class:`UntrustedConfigError` naming the first key of ``node`` (found at ``key`` in
    the file ``where``) that building it as a ``builds`` would trust; return when nothing would."""
    if trust.everything:
        return
    if not isinstance(node, dict) or "_target_" not in node:
        raise _refuse(where, key, "not a node with a _target_", trust_hint=False)
    targets = [(key, node["_target_"])]
    for path, value in _walk(node, key):
        name = path.rsplit(".", 1)[-1]
        if name.startswith("_") and name.endswith("_") and name != "_target_":
            raise _refuse(where, path, f"{name} is an instantiate option loading never uses")
        if isinstance(value, str) and "${" in value:
            raise _refuse(where, path, f"the interpolation {value!r} (a resolver would run)")
        if name == "_target_" and path != f"{key}._target_":
            targets.append((path.rsplit(".", 1)[0], value))
    for path, target in targets:
        if not isinstance(target, str) or not trust.allows(target):
            raise _refuse(
                where, f"{path}._target_", f"{target!r} is not a class of {PACKAGE} or of a module you allowed"
            )
    from hydra.utils import get_object
    from torch import nn

    for path, target in targets:
        try:
            cls = get_object(target)
        except Exception as err:  # Hydra wraps a failed import or a missing name in ImportError
            allowed = target.split(".")[0] in trust.modules
            raise _refuse(
                where,
                f"{path}._target_",
                f"{target!r} names nothing importable ({str(err).splitlines()[0]})"
                + (f"; {target.split('.')[0]} is allowed: put its folder on PYTHONPATH" if allowed else ""),
                trust_hint=not allowed,
            ) from None
        base = builds if path == key else nn.Module
        if not (isinstance(cls, type) and trust.allows(cls.__module__) and issubclass(cls, base)):
            raise _refuse(
                where,
                f"{path}._target_",
                f"{target!r} is not a {base.__module__}.{base.__qualname__} class defined there",
            )


def for_tagging(loss: dict, trust: Trust) -> tuple[dict, bool]:
    """The family's node (``loss``) with each ``token_loss`` that names a class ``trust`` does not
    allow replaced by the package's cross-entropy: a token loss only trains (decoding reads the
    heads' scores), so tagging with an export needs none of a user's training code. Also says
    whether one was replaced (its buffers in the weights file are then not the model's)."""
    if trust.everything:
        return loss, False
    replaced = False

    def visit(node):
        nonlocal replaced
        if isinstance(node, list):
            return [visit(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for name, value in node.items():
            targets = [v for k, v in _walk(value, "") if k.rsplit(".", 1)[-1] == "_target_"] + (
                [value["_target_"]] if isinstance(value, dict) and "_target_" in value else []
            )
            if name == "token_loss" and any(not isinstance(t, str) or not trust.allows(t) for t in targets):
                out[name], replaced = {"_target_": f"{PACKAGE}.losses.CrossEntropy"}, True
            else:
                out[name] = visit(value)
        return out

    return visit(loss), replaced


def add_trust_options(ap: argparse.ArgumentParser) -> None:
    """The command-line switches of :class:`ner_lightning.export.trust.Trust` (README: "Using a trained model")."""
    ap.add_argument(
        "--allow-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="also build classes of this module of yours (a loss of your own); only for files you trust",
    )
    ap.add_argument(
        "--trust-config",
        action="store_true",
        help="build whatever the cell's config names, as transformers' trust_remote_code=True runs code",
    )


def trust_of(args: argparse.Namespace) -> Trust:
    return Trust(tuple(args.allow_module), args.trust_config)
