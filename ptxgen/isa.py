"""The instruction table: every opcode family the builder can emit, declared once.

A row (:class:`Family`) names the opcode, its qualifier groups **in the order PTX
writes them**, the operands it takes, and the lowest PTX ISA version and SM of the
family and of each qualifier. :func:`parse` reads an opcode such as
``ld.global.nc.L1::no_allocate.v4.b32`` against the table; the builder uses the
result to check operands and to refuse, at build time, anything the target cannot
run. Nothing else in ptxgen knows the syntax of an instruction.

Minimums come from NVIDIA's PTX ISA manual (release notes and each instruction's
"PTX ISA Notes" and "Target ISA Notes"); ``tests/test_isa_table.py`` proves every
row with ptxas: accepted at its minimum, refused by the builder one step below.
SMs are written as integers: 90 is sm_90, 121 is sm_121.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .ptxtypes import BITS, PtxTypeError

__all__ = ["FAMILIES", "Family", "Group", "Parsed", "Q", "Slot", "parse"]


@dataclass(frozen=True)
class Q:
    """One qualifier choice (``nc``, ``v4``, ``L2::256B``, ``b32``) and what it needs."""

    name: str
    isa: str = "1.0"
    sm: int = 20


@dataclass(frozen=True)
class Group:
    """A slot in the opcode: at most one of ``choices``, in this group's position."""

    name: str
    choices: tuple[Q, ...]
    required: bool = False

    def find(self, token: str) -> Q | None:
        for q in self.choices:
            if q.name == token:
                return q
        return None


@dataclass(frozen=True)
class Slot:
    """One operand position.

    ``kind``: ``d`` a destination register (``sink=True``: or ``_``); ``s`` a source
    register or immediate; ``r`` a source register only; ``v`` a value moved by
    ld/st, a vector when the opcode has ``.v2``/``.v4``; ``a`` an address in
    ``space`` (``"@space"``: the opcode's own state space); ``l`` a label;
    ``pair`` elect.sync's ``%r|%p``.
    ``type``: a PTX type, or ``T`` (the opcode's type), ``W`` (twice its width),
    ``DT``/``AT`` (cvt's destination and source types).
    """

    kind: str
    type: str = ""
    space: str = ""
    optional: bool = False
    dst: bool = False
    sink: bool = False
    special: bool = False  # mov may read %tid.x and friends
    widen: bool = False  # 8-bit values may sit in wider registers
    pack: bool = False  # mov: a vector of narrower registers packs into / unpacks from this one


@dataclass(frozen=True)
class Parsed:
    """An opcode read against its family: the qualifier chosen in each group."""

    family: Family
    chosen: dict[str, Q]
    opcode: str

    def get(self, group: str) -> str | None:
        q = self.chosen.get(group)
        return q.name if q else None

    @property
    def type(self) -> str | None:
        return self.get("type")

    @property
    def vector(self) -> int:
        vec = self.get("vec")
        return int(vec[1:]) if vec else 1

    def resolve_type(self, ref: str) -> str:
        if ref == "T":
            return self.chosen["type"].name
        if ref == "W":
            return _wide(self.chosen["type"].name, self.opcode)
        if ref == "DT":
            return self.chosen["dtype"].name
        if ref == "AT":
            return self.chosen["atype"].name
        return ref

    def slots(self) -> tuple[Slot, ...]:
        ops = self.family.operands
        return ops(self) if callable(ops) else ops

    def requirements(self) -> list[tuple[str, int, str]]:
        """``(isa, sm, what)`` for the family and every chosen qualifier."""
        out = [(self.family.isa, self.family.sm, self.family.opcode)]
        out += [(q.isa, q.sm, f".{q.name}") for q in self.chosen.values()]
        return out


RuleFn = Callable[[Parsed], "str | None"]


@dataclass(frozen=True)
class Family:
    opcode: str
    groups: tuple[Group, ...]
    operands: tuple[Slot, ...] | Callable[[Parsed], tuple[Slot, ...]]
    isa: str = "1.0"
    sm: int = 20
    rules: tuple[RuleFn, ...] = field(default=())
    doc: str = ""


def _wide(t: str, opcode: str) -> str:
    bits = BITS[t]
    if t[0] not in "us" or bits > 32:
        raise PtxTypeError(f"{opcode}: .wide needs a 16- or 32-bit integer type, not .{t}")
    return f"{t[0]}{bits * 2}"


# --- qualifier sets -------------------------------------------------------------------


def _qs(*names: str, isa: str = "1.0", sm: int = 20) -> tuple[Q, ...]:
    return tuple(Q(n, isa, sm) for n in names)


def _types(*names: str) -> Group:
    """The type group; 128-bit types need PTX ISA 8.3 (sm_70)."""
    return Group("type", tuple(Q(n, "8.3", 70) if n == "b128" else Q(n) for n in names), required=True)


INTS = ("u16", "u32", "u64", "s16", "s32", "s64")
LDST_TYPES = (
    "b8",
    "b16",
    "b32",
    "b64",
    "b128",
    "u8",
    "u16",
    "u32",
    "u64",
    "s8",
    "s16",
    "s32",
    "s64",
    "f32",
    "f64",
)
L1_EVICTION = _qs("L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last",
                  "L1::no_allocate", isa="7.4", sm=70)  # fmt: skip
PREFETCH = (Q("L2::64B", "7.4", 75), Q("L2::128B", "7.4", 75), Q("L2::256B", "7.4", 80))
VEC = Group("vec", _qs("v2", "v4"))
CTA_SHARED = Group("space", (Q("shared"), Q("shared::cta", "7.8")))

# --- rules that tie qualifiers together ------------------------------------------------


def _vector_width(p: Parsed) -> str | None:
    t = p.type
    if t and p.vector > 1 and (t == "b128" or BITS[t] * p.vector > 128):
        return f"{p.opcode}: a vector moves at most 128 bits (.v{p.vector} of .{t} is {BITS[t] * p.vector})"
    return None


def _nc_needs_global(p: Parsed) -> str | None:
    if p.get("nc") and p.get("space") != "global":
        return f"{p.opcode}: .nc is only for ld.global"
    return None


def _one_cache_policy(p: Parsed) -> str | None:
    if p.get("cop") and p.get("L1"):
        return f"{p.opcode}: a cache operator (.{p.get('cop')}) and an eviction priority exclude each other"
    return None


def _hints_need_global(p: Parsed) -> str | None:
    hints = [p.get(g) for g in ("L1", "prefetch") if p.get(g)]
    if hints and p.get("space") != "global":
        return f"{p.opcode}: .{hints[0]} applies to the global state space only"
    return None


def _param_is_plain(p: Parsed) -> str | None:
    if p.get("space") in ("param", "const", "local") and (p.get("cop") or p.get("nc")):
        return f"{p.opcode}: cache qualifiers do not apply to .{p.get('space')}"
    return None


def _bits_compare_equal_only(p: Parsed) -> str | None:
    if (p.type or "")[0] == "b" and p.get("cmp") not in ("eq", "ne"):
        return f"{p.opcode}: bit types (.{p.type}) compare with .eq or .ne only; use .u or .s for order"
    return None


def _vote_mode_type(p: Parsed) -> str | None:
    ballot = p.get("mode") == "ballot"
    if ballot != (p.type == "b32"):
        return f"{p.opcode}: .ballot gives a .b32 mask; .all, .any and .uni give a .pred"
    return None


def _float_mul_has_no_mode(p: Parsed) -> str | None:
    is_float = (p.type or "")[0] == "f"
    if is_float and p.get("mode"):
        return f"{p.opcode}: a float multiply takes no .{p.get('mode')}"
    if not is_float and not p.get("mode"):
        return f"{p.opcode}: an integer multiply needs .lo, .hi or .wide"
    return None


def _setp_operands(p: Parsed) -> tuple[Slot, ...]:
    # setp.cmp.bool: the comparison is combined with a fourth, predicate operand.
    extra = (Slot("r", "pred"),) if p.get("bool") else ()
    return (Slot("d", "pred"), _S, _S, *extra)


_INT_ROUNDING = ("rni", "rzi", "rmi", "rpi")
_FLOAT_ROUNDING = ("rn", "rz", "rm", "rp")


def _cvt_rounding(p: Parsed) -> str | None:
    """PTX's rule: float -> int takes an integer rounding, int -> float (and a narrowing
    float -> float) a float rounding; int -> int takes none."""
    d, a, rnd = p.get("dtype") or "", p.get("atype") or "", p.get("rnd")
    if d[0] != "f" and a[0] != "f":
        need: tuple[str, ...] = ()
    elif d[0] != "f":
        need = _INT_ROUNDING
    elif a[0] != "f" or BITS[d] < BITS[a]:
        need = _FLOAT_ROUNDING
    else:
        need = _INT_ROUNDING if d == a else ()
        if rnd is None or rnd in need:
            return None  # optional: widening, or rounding a float to an integral float
    if rnd is None and need:
        return f"{p.opcode}: .{d}.{a} needs a rounding ({', '.join('.' + r for r in need)})"
    if rnd is not None and rnd not in need:
        return f"{p.opcode}: .{rnd} does not apply to .{d}.{a}"
    return None


def _bar_operands(p: Parsed) -> tuple[Slot, ...]:
    # bar.arrive must say how many threads take part; bar.sync may (default: the whole CTA).
    return (_U32, Slot("s", "u32", optional=p.get("op") == "sync"))


def _bulk_direction(p: Parsed) -> str | None:
    dst, src, done = p.get("dst"), p.get("src"), p.get("completion")
    if dst == "global":
        if src != "shared::cta" or done != "bulk_group":
            return f"{p.opcode}: a bulk copy to global reads .shared::cta and completes with .bulk_group"
    elif src != "global" or done != "mbarrier::complete_tx::bytes":
        return f"{p.opcode}: a bulk copy into shared memory reads .global and completes on an mbarrier"
    return None


def _bulk_operands(p: Parsed) -> tuple[Slot, ...]:
    copy = (Slot("a", space=p.get("dst") or ""), Slot("a", space=p.get("src") or ""), Slot("s", "u32"))
    if p.get("completion") == "mbarrier::complete_tx::bytes":
        return (*copy, Slot("a", space="shared"))
    return copy


def _ld_operands(p: Parsed) -> tuple[Slot, ...]:
    return (Slot("v", "T", dst=True, widen=True), Slot("a", space="@space"))


def _st_operands(p: Parsed) -> tuple[Slot, ...]:
    return (Slot("a", space="@space"), Slot("v", "T", widen=True))


def _mul_operands(p: Parsed) -> tuple[Slot, ...]:
    d = "W" if p.get("mode") == "wide" else "T"
    return (Slot("d", d), Slot("s", "T"), Slot("s", "T"))


def _mad_operands(p: Parsed) -> tuple[Slot, ...]:
    d = "W" if p.get("mode") == "wide" else "T"
    return (Slot("d", d), Slot("s", "T"), Slot("s", "T"), Slot("s", d))


def _mul_type(p: Parsed) -> str | None:
    if p.get("mode") == "wide" and p.type not in ("u16", "u32", "s16", "s32"):
        return f"{p.opcode}: .wide needs a 16- or 32-bit integer type, not .{p.type}"
    return None


_D, _S = Slot("d", "T"), Slot("s", "T")
_U32 = Slot("s", "u32")

# --- the table -------------------------------------------------------------------------

_ROWS: tuple[Family, ...] = (
    # Data movement
    Family(
        "ld",
        (
            Group("space", _qs("global", "shared", "param", "local", "const"), required=True),
            Group("cop", _qs("ca", "cg", "cs", "lu", "cv")),
            Group("nc", (Q("nc", "3.1", 32),)),
            Group("L1", L1_EVICTION),
            Group("prefetch", PREFETCH),
            VEC,
            _types(*LDST_TYPES),
        ),
        _ld_operands,
        rules=(_nc_needs_global, _one_cache_policy, _hints_need_global, _param_is_plain, _vector_width),
        doc="load from a state space; .nc reads global memory through the read-only path",
    ),
    Family(
        "st",
        (
            Group("space", _qs("global", "shared", "local"), required=True),
            Group("cop", _qs("wb", "cg", "cs", "wt")),
            Group("L1", L1_EVICTION),
            VEC,
            _types(*LDST_TYPES),
        ),
        _st_operands,
        rules=(_one_cache_policy, _hints_need_global, _param_is_plain, _vector_width),
        doc="store to a state space; .cs streams (evict first)",
    ),
    Family(
        "cvta",
        (
            Group("to", (Q("to"),)),
            Group(
                "space", (*_qs("global", "shared", "local", "const"), Q("param", "7.7", 70)), required=True
            ),
            Group("type", _qs("u64"), required=True),
        ),
        (Slot("d", "T"), Slot("s", "T")),
        doc="convert between a state-space address and a generic address",
    ),
    Family(
        "mov",
        (
            _types(
                "pred", "b16", "b32", "b64", "b128", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64"
            ),
        ),
        (Slot("d", "T", pack=True), Slot("s", "T", special=True, pack=True)),
        doc="copy a register, an immediate, a special register or a variable's address; "
        ".b32/.b64 also pack or unpack a vector of narrower registers ({%lo, %hi})",
    ),
    Family(
        "prefetch",
        (Group("space", _qs("global"), required=True), Group("level", _qs("L2"), required=True)),
        (Slot("a", space="@space"),),
        isa="2.0",
        doc="bring a line into L2",
    ),
    # Integer arithmetic
    *(
        Family(op, (_types(*INTS),), (_D, _S, _S), doc=doc)
        for op, doc in (
            ("add", "d = a + b"),
            ("sub", "d = a - b"),
            ("min", "d = min(a, b)"),
            ("max", "d = max(a, b)"),
            ("div", "d = a / b (slow: ptxas emits a generic divide even for constants)"),
            ("rem", "d = a % b"),
        )
    ),
    Family(
        "mul",
        (Group("mode", _qs("lo", "hi", "wide")), _types(*INTS, "f32")),
        _mul_operands,
        rules=(_float_mul_has_no_mode, _mul_type),
        doc="d = a * b: .lo/.hi half of the product, or .wide the whole of it (integers); .f32 rounds",
    ),
    Family("neg", (_types("s16", "s32", "s64"),), (_D, _S), doc="d = -a"),
    Family(
        "mad",
        (Group("mode", _qs("lo", "hi", "wide"), required=True), _types(*INTS)),
        _mad_operands,
        rules=(_mul_type,),
        doc="d = a * b + c",
    ),
    *(
        Family(op, (_types("pred", "b16", "b32", "b64"),), (_D, _S, _S), doc=doc)
        for op, doc in (("and", "bitwise and"), ("or", "bitwise or"), ("xor", "bitwise xor"))
    ),
    Family("not", (_types("pred", "b16", "b32", "b64"),), (_D, _S), doc="bitwise not"),
    Family("shl", (_types("b16", "b32", "b64"),), (_D, _S, _U32), doc="shift left"),
    Family(
        "shr", (_types("b16", "b32", "b64", *INTS),), (_D, _S, _U32), doc="shift right (arithmetic for .s)"
    ),
    Family(
        "shf",
        (
            Group("dir", _qs("l", "r"), required=True),
            Group("mode", _qs("clamp", "wrap"), required=True),
            _types("b32"),
        ),
        (_D, _S, _S, _U32),
        isa="3.1",
        sm=32,
        doc="funnel shift: the 64-bit pair {b, a} shifted, 32 bits kept",
    ),
    Family(
        "prmt",
        (_types("b32"), Group("mode", _qs("f4e", "b4e", "rc8", "ecl", "ecr", "rc16"))),
        (_D, _S, _S, Slot("s", "b32")),
        isa="2.0",
        doc="pick bytes of the pair {b, a} by a selector",
    ),
    Family(
        "bfe",
        (_types("u32", "u64", "s32", "s64"),),
        (_D, _S, _U32, _U32),
        isa="2.0",
        doc="extract a bit field: len c bits from position b",
    ),
    # Comparison and selection
    Family(
        "setp",
        (
            Group("cmp", _qs("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"), required=True),
            Group("bool", _qs("and", "or", "xor")),
            _types("b16", "b32", "b64", *INTS),
        ),
        _setp_operands,
        rules=(_bits_compare_equal_only,),
        doc="p = a <cmp> b; with .and/.or/.xor: p = (a <cmp> b) <bool> c",
    ),
    Family(
        "selp",
        (_types("b16", "b32", "b64", *INTS, "f32", "f64"),),
        (_D, _S, _S, Slot("r", "pred")),
        doc="d = c ? a : b",
    ),
    Family(
        "cvt",
        (
            Group("rnd", _qs(*_FLOAT_ROUNDING, *_INT_ROUNDING)),
            Group("dtype", _qs("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64"), True),
            Group("atype", _qs("u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "f32", "f64"), True),
        ),
        (Slot("d", "DT", widen=True), Slot("s", "AT", widen=True)),
        rules=(_cvt_rounding,),
        doc="convert between integer and float types (extend, truncate, or round as .rnd says)",
    ),
    # Floating point
    Family(
        "rcp",
        (
            Group("mode", _qs("approx", "rn", "rz", "rm", "rp"), required=True),
            Group("ftz", _qs("ftz")),
            _types("f32"),
        ),
        (_D, Slot("r", "T")),
        doc="d = 1 / a: .approx is the fast estimate (about 1 ulp), .rn and friends are IEEE",
    ),
    # Control flow
    Family("bra", (Group("uni", (Q("uni"),)),), (Slot("l"),), doc="branch; .uni: every thread takes it"),
    Family("ret", (), (), doc="return"),
    Family("exit", (), (), doc="end the thread"),
    # Synchronisation
    Family(
        "bar",
        (Group("op", _qs("sync", "arrive"), required=True),),
        _bar_operands,
        doc="CTA barrier a (0..15), optionally for b threads",
    ),
    Family(
        "mbarrier.init",
        (CTA_SHARED, _types("b64")),
        (Slot("a", space="shared"), _U32),
        isa="7.0",
        sm=80,
        doc="set up an mbarrier in shared memory for b arrivals",
    ),
    Family(
        "mbarrier.arrive",
        (CTA_SHARED, _types("b64")),
        (Slot("d", "b64", sink=True), Slot("a", space="shared")),
        isa="7.0",
        sm=80,
        doc="arrive on an mbarrier; d receives the phase state (or _)",
    ),
    Family(
        "mbarrier.arrive.expect_tx",
        (CTA_SHARED, _types("b64")),
        (Slot("d", "b64", sink=True), Slot("a", space="shared"), _U32),
        isa="8.0",
        sm=90,
        doc="arrive and expect c more bytes of asynchronous copies on the mbarrier",
    ),
    Family(
        "mbarrier.try_wait.parity",
        (CTA_SHARED, _types("b64")),
        (Slot("d", "pred"), Slot("a", space="shared"), _U32),
        isa="7.8",
        sm=90,
        doc="p = whether the phase of parity c has completed (waits a while first)",
    ),
    Family(
        "mbarrier.test_wait.parity",
        (CTA_SHARED, _types("b64")),
        (Slot("d", "pred"), Slot("a", space="shared"), _U32),
        isa="7.1",
        sm=80,
        doc="p = whether the phase of parity c has completed (does not wait)",
    ),
    Family(
        "cp.async",
        (
            Group("cache", _qs("ca", "cg"), required=True),
            # ptxas 13 takes .shared::cta here from PTX ISA 7.0, the family's own minimum.
            Group("space", _qs("shared", "shared::cta"), required=True),
            Group("src", _qs("global"), required=True),
            Group("prefetch", PREFETCH),
        ),
        (Slot("a", space="shared"), Slot("a", space="global"), _U32, Slot("s", "u32", optional=True)),
        isa="7.0",
        sm=80,
        doc="asynchronous copy of 4, 8 or 16 bytes global -> shared (.cg: 16 only)",
    ),
    Family("cp.async.commit_group", (), (), isa="7.0", sm=80, doc="close a group of cp.async"),
    Family(
        "cp.async.wait_group", (), (_U32,), isa="7.0", sm=80, doc="wait until at most N groups are pending"
    ),
    Family("cp.async.wait_all", (), (), isa="7.0", sm=80, doc="wait for every cp.async"),
    Family(
        "cp.async.bulk",
        (
            Group("dst", (Q("shared::cluster"), Q("shared::cta", "8.6", 90), Q("global")), required=True),
            Group("src", _qs("global", "shared::cta"), required=True),
            Group("completion", _qs("mbarrier::complete_tx::bytes", "bulk_group"), required=True),
        ),
        _bulk_operands,
        isa="8.0",
        sm=90,
        rules=(_bulk_direction,),
        doc="bulk asynchronous copy (TMA engine) of c bytes, a multiple of 16, 16-byte aligned",
    ),
    Family("cp.async.bulk.commit_group", (), (), isa="8.0", sm=90, doc="close a group of bulk copies"),
    Family(
        "cp.async.bulk.wait_group",
        (Group("read", (Q("read"),)),),
        (_U32,),
        isa="8.0",
        sm=90,
        doc="wait until at most N bulk groups are pending (.read: until their sources were read)",
    ),
    Family(
        "cp.async.bulk.prefetch.L2",
        (Group("src", _qs("global"), required=True),),
        (Slot("a", space="global"), _U32),
        isa="8.0",
        sm=90,
        doc="prefetch c bytes into L2",
    ),
    Family(
        "fence.proxy.async",
        (Group("space", _qs("global", "shared::cta", "shared::cluster")),),
        (),
        isa="8.0",
        sm=90,
        doc="order generic-proxy accesses before async-proxy ones (bulk copies)",
    ),
    Family(
        "vote.sync",
        (Group("mode", _qs("all", "any", "uni", "ballot"), required=True), _types("pred", "b32")),
        (_D, Slot("r", "pred"), Slot("s", "b32")),
        rules=(_vote_mode_type,),
        isa="6.0",
        sm=30,
        doc="d = the predicate a over the warp's threads in member mask b (all, any, uni, or a ballot)",
    ),
    Family(
        "elect.sync",
        (),
        (Slot("pair"), Slot("s", "b32")),
        isa="8.0",
        sm=90,
        doc="elect one leader thread of the member mask: %r|%p",
    ),
    Family(
        "griddepcontrol",
        (Group("action", _qs("launch_dependents", "wait"), required=True),),
        (),
        isa="7.8",
        sm=90,
        doc="programmatic dependent launch: let the next grid start / wait for the previous one",
    ),
)

FAMILIES: dict[str, Family] = {f.opcode: f for f in _ROWS}
_LONGEST = max(f.opcode.count(".") + 1 for f in _ROWS)


def parse(opcode: str) -> Parsed:
    """Read ``opcode`` against the table; raise :class:`PtxTypeError` naming what is wrong."""
    if not isinstance(opcode, str) or not opcode:
        raise PtxTypeError(f"an opcode is a non-empty string, not {opcode!r}")
    tokens = opcode.split(".")
    for n in range(min(len(tokens), _LONGEST), 0, -1):
        family = FAMILIES.get(".".join(tokens[:n]))
        if family is not None:
            break
    else:
        raise PtxTypeError(f"the builder does not know the opcode {opcode!r} (see ptxgen.isa.FAMILIES)")
    chosen: dict[str, Q] = {}
    position = -1
    for token in tokens[n:]:
        places = [i for i, g in enumerate(family.groups) if g.find(token) is not None]
        if not places:
            raise PtxTypeError(f"{opcode}: {family.opcode} takes no qualifier .{token}")
        later = [i for i in places if i > position]
        if not later:
            group = family.groups[places[0]]
            if group.name in chosen:
                raise PtxTypeError(
                    f"{opcode}: .{token} repeats the {group.name} qualifier .{chosen[group.name].name}"
                )
            order = ".".join(g.name for g in family.groups)
            raise PtxTypeError(f"{opcode}: .{token} is out of order; {family.opcode} qualifiers go {order}")
        position = later[0]
        group = family.groups[position]
        chosen[group.name] = group.find(token)  # type: ignore[assignment]
    for group in family.groups:
        if group.required and group.name not in chosen:
            options = ", ".join("." + q.name for q in group.choices)
            raise PtxTypeError(f"{opcode}: {family.opcode} needs a {group.name} qualifier ({options})")
    parsed = Parsed(family, chosen, opcode)
    for rule in family.rules:
        problem = rule(parsed)
        if problem:
            raise PtxTypeError(problem)
    return parsed
