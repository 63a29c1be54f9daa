"""Turning a function's items into PTX text that reads like a lesson.

Instructions are kept as objects until the end; only here do they become text, in
columns: guard and opcode, operands, ``// comment``, with section banners and labels
flush left. Nothing here decides what is emitted, only how it looks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Banner", "Blank", "Instruction", "LabelMark", "render_body", "render_declarations"]


@dataclass(frozen=True)
class Instruction:
    """One checked instruction, not yet text."""

    opcode: str
    operands: tuple[object, ...]
    comment: str = ""
    guard: object | None = None
    negate: bool = False

    def head(self) -> str:
        guard = f"@{'!' if self.negate else ''}{self.guard} " if self.guard is not None else ""
        return guard + self.opcode

    def operand_text(self) -> str:
        return ", ".join(str(o) for o in self.operands)


@dataclass(frozen=True)
class Banner:
    """``// --- what the next instructions are for ---``"""

    text: str


@dataclass(frozen=True)
class LabelMark:
    """Where a label is placed: ``name:``"""

    name: str


@dataclass(frozen=True)
class Blank:
    pass


Item = Instruction | Banner | LabelMark | Blank

# An operand column wider than this would push every comment right for one long call.
_MAX_OPERAND_WIDTH = 36


def render_body(items: list[Item], indent: str = "    ") -> list[str]:
    insts = [i for i in items if isinstance(i, Instruction)]
    heads = {id(i): i.head() for i in insts}
    operands = {id(i): i.operand_text() for i in insts}
    # Only instructions with operands set the opcode column: a long one without any
    # (``@%p griddepcontrol.launch_dependents``) would push every operand right.
    ow = max((len(heads[id(i)]) for i in insts if i.operands), default=0)
    aw = min(max((len(o) + 1 for o in operands.values()), default=0), _MAX_OPERAND_WIDTH)
    out: list[str] = []
    for item in items:
        if isinstance(item, Blank):
            out.append("")
        elif isinstance(item, Banner):
            out.append(f"{indent}// --- {item.text} ---")
        elif isinstance(item, LabelMark):
            out.append(f"{item.name}:")
        else:
            head, ops = heads[id(item)], operands[id(item)]
            if not ops:
                text = f"{indent}{head};"
                out.append(f"{text:<{ow + aw + 6}}  // {item.comment}" if item.comment else text)
            else:
                text = f"{indent}{head:<{ow}}  {ops + ';':<{aw}}"
                out.append(f"{text}  // {item.comment}" if item.comment else text.rstrip())
    return out


def render_declarations(groups: dict[str, list[str]], indent: str = "    ", per_line: int = 8) -> list[str]:
    """``.reg .u32 %a, %b;`` lines, one type per group, at most ``per_line`` names a line."""
    width = max((len(t) for t in groups), default=0) + 1
    out = []
    for t, names in groups.items():
        while names:
            chunk, names = names[:per_line], names[per_line:]
            out.append(f"{indent}.reg {'.' + t:<{width}} {', '.join(chunk)};")
    return out
