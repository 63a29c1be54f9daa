"""The runtime's switches read from the environment, one parser for all of them."""

from __future__ import annotations

import os

__all__ = ["env_flag"]

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def env_flag(name: str, default: bool) -> bool:
    """The switch ``name`` in the environment: ``default`` when unset or empty, True for
    1/true/yes/on, False for 0/false/no/off (any case, spaces ignored).

    Any other value raises ``ValueError`` naming the variable, its value and what is
    accepted: a mistyped switch must not silently leave the default in place.
    """
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(
        f"{name}={raw!r} is not a switch; accepted: {', '.join(ON)} (on) or {', '.join(OFF)} (off), "
        "in any case, or unset or empty for the default"
    )
