"""A small PTX interpreter for the subset the fast kernels emit, to test kernels on a CPU.

(Written for the fast kernels' prototype, lab/fastcat_proto.py; what ptxgen/kernels emits
is the same subset.)

It runs every thread of a block as a Python generator that pauses at ``bar.sync`` (and
at ``vote.sync``, which its warp answers), blocks one after the other. Global memory is a set of exact allocations: any access outside
them raises :class:`OutOfBounds` (what compute-sanitizer's memcheck would report),
including bytes a 16-byte vector would read past an array's end. Asynchronous copies
(``cp.async``, ``cp.async.bulk``) complete at once, so races between them and their
waits are NOT modelled: only indexing, predicates and bounds are.

Slow (about a million instructions a minute): use small tiles and arrays.
"""

from __future__ import annotations

import itertools
import re
import struct
from dataclasses import dataclass, field

__all__ = ["Memory", "OutOfBounds", "RecordingMemory", "check_footprints", "run_kernel"]


class OutOfBounds(RuntimeError):
    pass


@dataclass
class _Alloc:
    base: int
    data: bytearray


@dataclass
class Memory:
    """Global memory: allocations at chosen addresses (misaligned ones allowed)."""

    allocs: list[_Alloc] = field(default_factory=list)
    _next: int = 1 << 20

    def alloc(self, nbytes: int, misalign: int = 0) -> int:
        base = self._next + misalign
        self.allocs.append(_Alloc(base, bytearray(nbytes)))
        self._next = (base + nbytes + 4096 + 255) & ~255
        return base

    def _find(self, addr: int, n: int) -> tuple[bytearray, int]:
        for a in self.allocs:
            if a.base <= addr and addr + n <= a.base + len(a.data):
                return a.data, addr - a.base
        raise OutOfBounds(f"global access of {n} bytes at {addr:#x} is outside every allocation")

    def read(self, addr: int, n: int) -> bytes:
        data, off = self._find(addr, n)
        return bytes(data[off : off + n])

    def write(self, addr: int, raw: bytes) -> None:
        data, off = self._find(addr, len(raw))
        data[off : off + len(raw)] = raw

    def view(self, addr: int) -> bytearray:
        for a in self.allocs:
            if a.base == addr:
                return a.data
        raise KeyError(addr)


class RecordingMemory(Memory):
    """Global memory that remembers every access: ``touched``, each byte address read or
    written; ``accesses``, each access as ``(address, bytes, writes)`` in program order."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: set[int] = set()
        self.accesses: list[tuple[int, int, bool]] = []

    def clear(self) -> None:
        """Forget what was touched so far (the setup's writes)."""
        self.touched.clear()
        self.accesses.clear()

    def read(self, addr: int, n: int) -> bytes:
        self.touched.update(range(addr, addr + n))
        self.accesses.append((addr, n, False))
        return super().read(addr, n)

    def write(self, addr: int, raw: bytes) -> None:
        self.touched.update(range(addr, addr + len(raw)))
        self.accesses.append((addr, len(raw), True))
        super().write(addr, raw)


def check_footprints(mem: RecordingMemory, footprints, pointers: dict[str, int]) -> None:
    """Every byte ``mem`` saw touched lies in some argument's ``[ptr, ptr + nbytes)``; each
    non-empty range has its first and last byte touched (the footprint is tight); every
    pointer meets its footprint's alignment. ``pointers``: argument name -> address."""
    ranges = []
    for fp in footprints:
        ptr = pointers[fp.arg]
        if fp.nbytes:
            assert ptr % fp.align == 0, (fp, ptr)
            assert ptr in mem.touched and ptr + fp.nbytes - 1 in mem.touched, f"{fp} is not tight"
            ranges.append((ptr, ptr + fp.nbytes))
    outside = [a for a in mem.touched if not any(lo <= a < hi for lo, hi in ranges)]
    assert not outside, f"{len(outside)} bytes touched outside the footprints, first {min(outside):#x}"


_TYPE = re.compile(r"^[usbf](8|16|32|64)$")


def _bits(t: str) -> int:
    return int(t[1:])


def _to_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


@dataclass
class _Inst:
    guard: tuple[str, bool] | None
    op: list[str]
    args: list[str]
    line: int


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


# Bytes left unmapped after every shared array: an access that runs a little past an
# array's end (or before the next one's start) falls there and is out of bounds, where it
# would otherwise land, unnoticed, in the neighbouring array.
_RED_ZONE = 64


class _Program:
    def __init__(self, source: str, entry: str) -> None:
        m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\((.*?)\)", source, re.S)
        if not m:
            raise ValueError(f"no .entry {entry}")
        self.params = re.findall(r"\.param\s+\.(\w+)\s+(\w+)", m.group(1))
        body = source[m.end() :]
        self.shared: dict[str, tuple[int, int]] = {}
        offset = 1024  # a reserved window first, as on sm_80+: code must not assume 0
        for align, name, size in re.findall(
            r"\.shared\s+\.align\s+(\d+)\s+\.b(?:8|64)\s+(\w+)\[(\d+)\]", body
        ):
            elem = 8 if ".b64 " + name in body else 1
            offset = (offset + int(align) - 1) // int(align) * int(align)
            self.shared[name] = (offset, int(size) * elem)
            offset += int(size) * elem + _RED_ZONE
        self.shared_size = offset
        self.insts: list[_Inst] = []
        self.labels: dict[str, int] = {}
        for lineno, raw in enumerate(body.splitlines(), 1):
            line = raw.split("//")[0].strip()
            if not line or line.startswith(
                (".reg", ".shared", ".maxntid", ".reqntid", ".minnctapersm", "{", "}")
            ):
                continue
            if line.endswith(":"):
                self.labels[line[:-1]] = len(self.insts)
                continue
            line = line.rstrip(";").strip()
            guard = None
            if line.startswith("@"):
                g, line = line.split(None, 1)
                guard = (g.lstrip("@!").lstrip("%"), g.startswith("@!"))
            parts = line.split(None, 1)
            op = parts[0].split(".")
            args = _split_args(parts[1]) if len(parts) > 1 else []
            self.insts.append(_Inst(guard, op, args, lineno))
        # A kernel built for programmatic dependent launch: each thread must wait for the
        # previous grid before its first global access (checked in load and store).
        self.dependent = any(i.op[:2] == ["griddepcontrol", "wait"] for i in self.insts)


class _Thread:
    def __init__(self, prog, params, tid, ctaid, ntid, nctaid, mem, smem) -> None:
        self.p = prog
        self.params = params
        self.regs: dict[str, object] = {}
        # ctaid and nctaid are (x, y, z); threads are 1-D
        self.special = {"%tid.x": tid, "%ntid.x": ntid, "%tid.y": 0, "%tid.z": 0, "%ntid.y": 1, "%ntid.z": 1}
        for axis, c, n in zip("xyz", ctaid, nctaid):
            self.special[f"%ctaid.{axis}"], self.special[f"%nctaid.{axis}"] = c, n
        self.mem = mem
        self.smem = smem
        self.executed = 0
        self.waited = not prog.dependent  # griddepcontrol.wait done, where the kernel has one
        self.triggered = False  # griddepcontrol.launch_dependents executed

    # operands ---------------------------------------------------------------------
    def val(self, tok: str, t: str | None = None):
        tok = tok.strip()
        if tok in self.special:
            v = self.special[tok]
        elif tok.startswith("%"):
            if tok[1:] not in self.regs:
                raise RuntimeError(f"read of unset register {tok}")
            v = self.regs[tok[1:]]
        elif tok in self.p.shared:
            v = self.p.shared[tok][0]
        elif re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", tok):
            v = int(tok, 0)
        else:
            raise RuntimeError(f"operand {tok!r}")
        if t is None or t == "pred" or t[0] == "f" or isinstance(v, bool):
            return v
        bits = _bits(t)
        return _to_signed(v, bits) if t[0] == "s" else v & ((1 << bits) - 1)

    def set(self, tok: str, v, t: str) -> None:
        if t == "pred":
            self.regs[tok[1:]] = bool(v)
        elif t[0] == "f":
            self.regs[tok[1:]] = _f32(v)
        else:
            self.regs[tok[1:]] = int(v) & ((1 << _bits(t)) - 1)

    def addr(self, tok: str) -> int:
        inner = tok.strip()[1:-1].strip()
        if "+" in inner:
            base, off = inner.split("+")
            return self.val(base, "u64") + int(off, 0)
        if inner.startswith("%"):
            return self.val(inner, "u64")
        return self.val(inner)

    def regs_of(self, tok: str) -> list[str]:
        tok = tok.strip()
        return [r.strip() for r in tok[1:-1].split(",")] if tok.startswith("{") else [tok]

    # memory -----------------------------------------------------------------------
    def _check_shared(self, what: str, addr: int, n: int) -> None:
        """A shared access lies inside one declared array: one that strays past it, into
        the red zone after it (:data:`_RED_ZONE`) or the reserved window, is out of
        bounds."""
        for start, size in self.p.shared.values():
            if start <= addr and addr + n <= start + size:
                return
        raise OutOfBounds(f"shared {what} of {n} at {addr} is outside every shared array")

    def load(self, space: str, addr: int, n: int) -> bytes:
        if space == "shared":
            self._check_shared("load", addr, n)
            if addr % n and n <= 16:
                raise RuntimeError(f"misaligned shared load of {n} at {addr}")
            return bytes(self.smem[addr : addr + n])
        if addr % n and n <= 16:
            raise RuntimeError(f"misaligned global load of {n} at {addr:#x}")
        if not self.waited:
            raise RuntimeError(f"global load at {addr:#x} before griddepcontrol.wait")
        return self.mem.read(addr, n)

    def store(self, space: str, addr: int, raw: bytes) -> None:
        n = len(raw)
        if addr % n and n <= 16:
            raise RuntimeError(f"misaligned {space} store of {n} at {addr:#x}")
        if space == "shared":
            self._check_shared("store", addr, n)
            self.smem[addr : addr + n] = raw
        else:
            if not self.waited:
                raise RuntimeError(f"global store at {addr:#x} before griddepcontrol.wait")
            self.mem.write(addr, raw)

    # execution --------------------------------------------------------------------
    def run(self):
        insts, labels = self.p.insts, self.p.labels
        pc = 0
        while True:
            if pc >= len(insts):
                return
            ins = insts[pc]
            pc += 1
            self.executed += 1
            if self.executed > 5_000_000:
                raise RuntimeError("runaway thread")
            if ins.guard is not None:
                name, negate = ins.guard
                if bool(self.regs[name]) == negate:
                    continue
            op, a = ins.op, ins.args
            head = op[0]
            try:
                if head == "bra":
                    pc = labels[a[0]]
                elif head == "ret" or head == "exit":
                    return
                elif head == "bar":
                    yield "bar"
                elif head == "griddepcontrol":  # one grid at a time here: nothing runs before it
                    self.waited = self.waited or op[1] == "wait"
                    self.triggered = self.triggered or op[1] == "launch_dependents"
                elif head == "vote":  # vote.sync.<mode>.<type> d, a, membermask: the warp answers
                    if self.val(a[2], "b32") != 0xFFFFFFFF:
                        raise RuntimeError("vote.sync: only a full member mask is modelled")
                    answer = yield ("vote", (pc, op[2]), bool(self.val(a[1], "pred")))
                    self.set(a[0], answer, op[-1])
                else:
                    self.step(op, a)
            except (OutOfBounds, RuntimeError, KeyError) as err:
                raise type(err)(f"line {ins.line}: {'.'.join(op)} {', '.join(a)}: {err}") from None

    def step(self, op: list[str], a: list[str]) -> None:
        head, t = op[0], op[-1]
        if head == "ld" or head == "st":
            space = op[1]
            vec = 1
            for q in op:
                if q in ("v2", "v4"):
                    vec = int(q[1])
            n = _bits(t) // 8
            if head == "ld":
                if space == "param":
                    self.set(a[0], self.params[a[1][1:-1]], t)
                    return
                dst = self.regs_of(a[0])
                raw = self.load(space, self.addr(a[1]), n * vec)
                for i, r in enumerate(dst):
                    if t == "f32":  # a float register holds the value the bits stand for
                        self.set(r, struct.unpack("<f", raw[i * n : (i + 1) * n])[0], t)
                    else:
                        self.set(r, int.from_bytes(raw[i * n : (i + 1) * n], "little"), "u" + t[1:])
            else:
                src = self.regs_of(a[1])
                if t == "f32":
                    raw = b"".join(struct.pack("<f", self.val(r, t)) for r in src)
                else:
                    raw = b"".join((self.val(r, "u" + t[1:])).to_bytes(n, "little") for r in src)
                self.store(space, self.addr(a[0]), raw)
        elif head == "cvta":
            self.set(a[0], self.val(a[1], "u64"), "u64")
        elif head == "mov":
            if a[1].startswith("{"):  # pack
                parts = self.regs_of(a[1])
                w = 32 // len(parts)
                v = 0
                for i, r in enumerate(parts):
                    v |= self.val(r, f"u{w}") << (w * i)
                self.set(a[0], v, "u32")
            elif a[0].startswith("{"):  # unpack
                parts = self.regs_of(a[0])
                w = 32 // len(parts)
                v = self.val(a[1], "u32")
                for i, r in enumerate(parts):
                    self.set(r, v >> (w * i), f"u{w}")
            else:
                self.set(a[0], self.val(a[1], t), t)
        elif head in (
            "add",
            "sub",
            "mul",
            "mad",
            "div",
            "rem",
            "min",
            "max",
            "and",
            "or",
            "xor",
            "shl",
            "shr",
            "neg",
            "not",
        ):
            if t == "pred":
                x = bool(self.val(a[1], "pred"))
                if head == "not":
                    self.set(a[0], not x, "pred")
                    return
                y = bool(self.val(a[2], "pred"))
                self.set(a[0], {"and": x and y, "or": x or y, "xor": x != y}[head], "pred")
                return
            if head == "not":
                self.set(a[0], ~self.val(a[1], t) & ((1 << _bits(t)) - 1), t)
                return
            if t[0] == "f":
                x, y = self.val(a[1], t), self.val(a[2], t)
                self.set(a[0], x * y if head == "mul" else x + y if head == "add" else x - y, t)
                return
            signed = t[0] == "s"
            wide = "wide" in op
            if head == "neg":
                self.set(a[0], -self.val(a[1], t), t)
                return
            if head in ("shl", "shr"):
                x, sh = self.val(a[1], t), self.val(a[2], "u32")
                bits = _bits(t)
                if head == "shl":
                    self.set(a[0], 0 if sh >= bits else x << sh, t)
                else:
                    if signed:
                        self.set(a[0], x >> min(sh, bits - 1), t)
                    else:
                        self.set(a[0], 0 if sh >= bits else x >> sh, t)
                return
            x, y = self.val(a[1], t), self.val(a[2], t)
            if head == "add":
                r = x + y
            elif head == "sub":
                r = x - y
            elif head in ("mul", "mad"):
                r = x * y
                if "hi" in op:  # the upper half of the double-width product
                    r >>= _bits(t)
                if head == "mad":
                    r += self.val(a[3], ("s" if signed else "u") + str(2 * _bits(t)) if wide else t)
            elif head == "div":
                r = int(x / y) if signed else x // y
            elif head == "rem":
                r = x - int(x / y) * y if signed else x % y
            elif head == "min":
                r = min(x, y)
            elif head == "max":
                r = max(x, y)
            elif head == "and":
                r = x & y
            elif head == "or":
                r = x | y
            else:
                r = x ^ y
            self.set(a[0], r, (t[0] + str(2 * _bits(t))) if wide else t)
        elif head == "setp":
            cmp_, t = op[1], op[-1]
            x, y = self.val(a[1], t), self.val(a[2], t)
            r = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y, "ne": x != y}[cmp_]
            if len(op) == 4:  # setp.cmp.bool.type
                c = a[3]
                cv = not self.val(c[1:], "pred") if c.startswith("!") else self.val(c, "pred")
                r = (r and cv) if op[2] == "and" else (r or cv)
            self.set(a[0], r, "pred")
        elif head == "selp":
            self.set(a[0], self.val(a[1], t) if self.val(a[3], "pred") else self.val(a[2], t), t)
        elif head == "cvt":
            dt, st = op[-2], op[-1]
            v = self.val(a[1], st)
            if dt == "f32":
                self.set(a[0], float(v), "f32")
            elif st == "f32":  # rzi
                self.set(a[0], int(v), dt)
            else:
                self.set(a[0], v, dt)
        elif head == "rcp":
            self.set(a[0], 1.0 / self.val(a[1], "f32"), "f32")
        elif head == "prmt":
            x, y, c = self.val(a[1], "u32"), self.val(a[2], "u32"), self.val(a[3], "u32")
            pool = x | (y << 32)
            r = 0
            for i in range(4):
                sel = (c >> (4 * i)) & 7
                r |= ((pool >> (8 * sel)) & 0xFF) << (8 * i)
            self.set(a[0], r, "u32")
        elif head == "shf":  # shf.{l,r}.{clamp,wrap}.b32 d, a, b, n: the pair {b, a} shifted
            lo, hi, n = self.val(a[1], "u32"), self.val(a[2], "u32"), self.val(a[3], "u32")
            n = min(n, 32) if op[2] == "clamp" else n & 31
            pair = lo | (hi << 32)
            self.set(a[0], (pair >> n) if op[1] == "r" else (pair << n) >> 32, "u32")
        elif head == "cp" and op[1] == "async":
            if op[2] in ("commit_group", "wait_group"):
                return
            if op[2] == "bulk":  # [dst], [src], size, [mbar]
                n = self.val(a[2], "u32")
                raw = self.load("global", self.addr(a[1]), n) if n else b""
                if n:
                    self.store("shared", self.addr(a[0]), raw)
                return
            n = int(a[2])
            self.store("shared", self.addr(a[0]), self.load("global", self.addr(a[1]), n))
        elif head == "mbarrier":
            if op[1] == "try_wait":
                self.set(a[0], True, "pred")
        elif head == "fence":
            return
        else:
            raise RuntimeError(f"unsupported instruction {'.'.join(op)}")


def run_kernel(
    kernel, grid: int | tuple[int, ...], args: dict, mem: Memory, triggers: list | None = None
) -> int:
    """Run ``kernel`` on ``grid`` blocks (an int: x only; or (x, y[, z])), one block
    after another; returns instructions executed. ``triggers``, if given, receives the
    ctaid of each block in which a thread ran ``griddepcontrol.launch_dependents``.
    A kernel whose ``dependent_launch`` is True must wait before any global access,
    whether or not its text has the wait."""
    prog = _Program(kernel.source, kernel.entry_point_name)
    prog.dependent = prog.dependent or getattr(kernel, "dependent_launch", False) is True
    dims = (grid, 1, 1) if isinstance(grid, int) else (*grid, 1, 1)[:3]
    total = 0
    for b in itertools.product(*(range(d) for d in reversed(dims))):
        ctaid = tuple(reversed(b))  # x varies fastest
        smem = bytearray(prog.shared_size)
        threads = [
            _Thread(prog, args, t, ctaid, kernel.block_size, dims, mem, smem)
            for t in range(kernel.block_size)
        ]
        _schedule([th.run() for th in threads])
        total += sum(th.executed for th in threads)
        if triggers is not None and any(th.triggered for th in threads):
            triggers.append(ctaid)
    return total


def _vote(mode: str, lanes: list[tuple[int, bool]]) -> object:
    """A warp's answer to vote.sync over its lanes' ``(lane, predicate)``."""
    values = [v for _, v in lanes]
    if mode == "any":
        return any(values)
    if mode == "all":
        return all(values)
    if mode == "uni":
        return all(values) or not any(values)
    return sum(1 << lane for lane, v in lanes if v)  # ballot


def _schedule(gens: list) -> None:
    """Run a block's threads: each until it exits or pauses at ``bar.sync`` (the block
    goes on when every thread is there) or at ``vote.sync`` (its warp goes on once every
    thread of the warp that has not exited is there, each given the warp's answer)."""
    waiting: dict[int, object] = {}  # thread -> "bar" or ("vote", (instruction, mode), predicate)
    send: dict[int, object] = {i: None for i in range(len(gens))}
    done: set[int] = set()
    while len(done) < len(gens):
        for i, value in list(send.items()):
            try:
                waiting[i] = gens[i].send(value)
            except StopIteration:
                done.add(i)
        send = {}
        votes = {i: w for i, w in waiting.items() if w != "bar"}
        if votes:
            for warp in sorted({i // 32 for i in votes}):
                lanes = [i for i in range(warp * 32, min(warp * 32 + 32, len(gens))) if i not in done]
                if any(i not in votes for i in lanes):
                    continue  # the rest of the warp is on its way (or stuck at a barrier: below)
                at = {votes[i][1] for i in lanes}  # (instruction, mode)
                if len(at) != 1:
                    raise RuntimeError("threads of one warp are at different vote.sync instructions")
                answer = _vote(at.pop()[1], [(i % 32, votes[i][2]) for i in lanes])
                for i in lanes:
                    del waiting[i]
                    send[i] = answer
            if not send:
                raise RuntimeError("vote.sync: part of a warp waits at a barrier, part at the vote")
            continue
        if waiting:
            if done:
                raise RuntimeError("some threads reached bar.sync while others exited")
            send = dict.fromkeys(waiting)
            waiting = {}
