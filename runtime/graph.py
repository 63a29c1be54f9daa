"""CUDA graphs: launches captured on a stream, instantiated once, replayed with one call.

    with runtime.Graph(stream) as graph:          # cuStreamBeginCapture
        fn.launch(grid, block, args, stream=stream)   # recorded, not run
    graph.launch()                                # cuGraphLaunch: every recorded launch
    graph.set_args(0, new_args)                   # cuGraphExecKernelNodeSetParams

A launch records the argument values it packed, so the arrays it points at must
outlive the graph. An array made on the capturing stream (``Device.empty(...,
stream=stream)``, or an op's result there) is an allocation of the graph: each replay
writes it at the same address. While a stream captures, nothing may make the host wait
for it or touch the legacy default stream: no ``synchronize()``, no ``DeviceArray``
copies or ``fill_bytes`` (they are synchronous), no ``Device.empty``/``to_device`` on
the default stream, no launch with ``stream=None``, no ``Module.close()``. In the
default ``"global"`` mode the driver refuses such calls from any thread and the capture
is invalidated; :class:`Graph` then raises when the capture ends. (Arrays dropped
meanwhile are freed once the capture is over: :mod:`runtime.pool`.)

A launch on a stream that someone else is capturing (``torch.cuda.graph``) is recorded
in their graph like any other kernel: pass their stream as ``stream=``.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._driver import check, driver, raise_error
from .errors import CudaError
from .launch import binding as launch_binding
from .pool import Waits, relaxed_capture_mode
from .stream import Stream, owning_stream, stream_handle

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .module import Function

__all__ = ["Graph", "KernelNode"]

_MODES = ("global", "thread_local", "relaxed")


@dataclass(eq=False)
class KernelNode:
    """One captured kernel launch, in launch order (dependencies first).

    ``function`` is the :class:`runtime.Function` launched (None for a kernel some other
    library launched into the same capture); ``args`` the values its parameters hold,
    as packed (None where the function's layout is unknown). ``programmatic``: an edge
    into it is programmatic (a ``dependent_launch`` kernel launched with the attribute
    after a kernel), so it is scheduled while the node it depends on still runs and
    waits for it in the kernel.
    """

    index: int
    function: Function | None
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[int, ...] | None
    handle: Any  # the CUgraphNode
    programmatic: bool = False


class Graph:
    """Launches captured from ``stream`` (a :class:`runtime.Stream`) into a CUDA graph.

    Use it as a context manager: entering begins the capture, leaving ends it and
    instantiates the graph (or, on an exception, discards it). ``mode`` is the
    driver's capture mode: ``"global"`` (default; unsafe calls from any thread are
    refused), ``"thread_local"`` or ``"relaxed"``.
    """

    def __init__(self, stream: Stream, *, mode: str = "global") -> None:
        if stream.__class__ is not Stream:
            raise TypeError(
                f"Graph captures a runtime.Stream, not {type(stream).__name__} (the legacy default "
                "stream cannot be captured; wrap a foreign stream with Stream.from_handle)"
            )
        if mode not in _MODES:
            raise ValueError(f"capture mode {mode!r} is not one of {', '.join(_MODES)}")
        self.stream = stream
        self.device = stream.device
        self.mode = mode
        self._state = "new"
        self._graph: Any = None
        self._exec: Any = None
        self._nodes: tuple[KernelNode, ...] = ()
        self._finalizer: weakref.finalize | None = None
        self._memory: Any = None  # the pool's GraphMemory of the capture, kept as long as the graph

    # --- capture ------------------------------------------------------------------------

    def __enter__(self) -> Graph:
        if self._state != "new":
            raise RuntimeError("a Graph captures once; make a new one to capture again")
        drv = driver()
        self.device.context.activate()
        mode = getattr(drv.CUstreamCaptureMode, f"CU_STREAM_CAPTURE_MODE_{self.mode.upper()}")
        check("cuStreamBeginCapture", drv.cuStreamBeginCapture(drv.CUstream(self.stream.handle), mode))
        # what is allocated on the stream until the capture ends is this graph's memory
        self._memory = self.device.memory_pool.begin_capture(self.stream.handle)
        self._state = "capturing"
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        drv = driver()
        self.device.context.activate()
        err, graph = drv.cuStreamEndCapture(drv.CUstream(self.stream.handle))
        self._state = "ended"
        self.device.memory_pool.end_capture(self.stream.handle)  # and the frees it held back
        if exc_type is not None:
            if not err and graph is not None:
                drv.cuGraphDestroy(graph)
            return  # the body's own exception goes on
        if err:
            if int(err) == int(drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED):
                name = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
                raise CudaError(
                    "cuStreamEndCapture", int(err), name,
                    "the capture was invalidated by a call that may not run during capture "
                    "(a synchronize, a synchronous copy or memset, an allocation, a launch on "
                    "the default stream); see runtime.graph",
                )  # fmt: skip
            raise_error("cuStreamEndCapture", err)
        self._graph = graph
        # Arrays made on the stream while it captured are the graph's allocations: each
        # replay frees what the one before allocated, so a graph that makes its results
        # replays without the caller freeing them in between.
        auto_free = int(drv.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        self._exec = check("cuGraphInstantiate", drv.cuGraphInstantiate(graph, auto_free))
        self._finalizer = weakref.finalize(self, _destroy, self.device, self._exec, self._graph)
        self.device.context.track(self)
        self._nodes = self._read_kernel_nodes()
        self._state = "ready"

    # --- what was captured --------------------------------------------------------------

    @property
    def kernel_nodes(self) -> tuple[KernelNode, ...]:
        """The captured kernel launches, dependencies first (launch order on one stream)."""
        self._ready()
        return self._nodes

    def _read_kernel_nodes(self) -> tuple[KernelNode, ...]:
        from .module import function_by_handle

        drv = driver()
        count = check("cuGraphGetNodes", drv.cuGraphGetNodes(self._graph, 0))[1]
        nodes = list(check("cuGraphGetNodes", drv.cuGraphGetNodes(self._graph, count))[0]) if count else []
        kernel_type = drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL
        incoming = {int(node): _incoming(drv, node) for node in nodes}
        out = []
        for node in _dependencies_first(nodes, incoming):
            if check("cuGraphNodeGetType", drv.cuGraphNodeGetType(node)) != kernel_type:
                continue
            p = check("cuGraphKernelNodeGetParams", drv.cuGraphKernelNodeGetParams(node))
            function = function_by_handle(int(p.func))
            out.append(
                KernelNode(
                    index=len(out),
                    function=function,
                    grid=(int(p.gridDimX), int(p.gridDimY), int(p.gridDimZ)),
                    block=(int(p.blockDimX), int(p.blockDimY), int(p.blockDimZ)),
                    shared_mem=int(p.sharedMemBytes),
                    args=_captured_args(function, p.kernelParams),
                    handle=node,
                    programmatic=incoming[int(node)][1],
                )
            )
        return tuple(out)

    # --- replay and update --------------------------------------------------------------

    def launch(self, stream: Any = None) -> None:
        """Replay every captured launch on ``stream`` (default: the capture stream)."""
        self._ready()
        handle = self.stream.handle if stream is None else stream_handle(stream)
        drv = driver()
        cu_stream = launch_binding("cuda.bindings").streams[handle]
        # its memory goes back after the last launch, on that launch's stream
        self._memory.last_launch[0] = Waits(handle, owning_stream(handle))
        (err,) = drv.cuGraphLaunch(self._exec, cu_stream)
        if err:
            self.device.context.activate()  # no context on this thread, say: make it current, once more
            (err,) = drv.cuGraphLaunch(self._exec, cu_stream)
            if err:
                raise_error("cuGraphLaunch", err)

    def set_args(self, node: KernelNode | int, args: Sequence[Any] | Mapping[str, Any]) -> None:
        """Give the captured launch ``node`` (a :class:`KernelNode` or its index) new
        arguments, checked as :meth:`Function.launch` checks them; later replays use them."""
        self._ready()
        target = self._nodes[node] if isinstance(node, int) else node
        if not any(target is n for n in self._nodes):
            raise ValueError("node is not one of this graph's kernel_nodes")
        function = target.function
        if function is None or function.layout is None:
            raise TypeError(
                f"kernel node {target.index} was not launched by a runtime.Function with arg_types"
            )
        values = function.pack_args(args, self.stream.handle)
        buffer = function.layout.new_buffer()  # the driver copies it during the call below
        function.layout.struct.pack_into(buffer.memory, 0, *values)
        drv = driver()
        params = drv.CUDA_KERNEL_NODE_PARAMS()
        params.func = drv.CUfunction(function.handle)
        params.gridDimX, params.gridDimY, params.gridDimZ = target.grid
        params.blockDimX, params.blockDimY, params.blockDimZ = target.block
        params.sharedMemBytes = target.shared_mem
        params.kernelParams = buffer.params
        params.extra = 0
        self.device.context.activate()
        check(
            "cuGraphExecKernelNodeSetParams",
            drv.cuGraphExecKernelNodeSetParams(self._exec, target.handle, params),
        )
        target.args = tuple(values)

    # --- lifetime -----------------------------------------------------------------------

    def _ready(self) -> None:
        if self._state != "ready":
            what = {"new": "has not captured yet", "capturing": "is still capturing"}.get(
                self._state, "is closed or its capture failed"
            )
            raise ValueError(f"this Graph {what}")

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    def close(self) -> None:
        """Destroy the executable graph and the graph; idempotent."""
        if self._finalizer is not None:
            self._finalizer()
        self._state = "closed"

    def __repr__(self) -> str:
        return f"<runtime.Graph {self._state}, {len(self._nodes)} kernel nodes>"


def _incoming(drv: Any, node: Any) -> tuple[list[Any], bool]:
    """The nodes ``node`` depends on, and whether an edge from one of them is programmatic.

    Asks for the edges' data (``cuGraphNodeGetDependencies`` in CUDA 13's bindings, its
    ``_v2`` in 12.3's): without it the driver refuses a node that has a programmatic edge
    (CUDA_ERROR_LOSSY_QUERY). Bindings older than 12.3 have no edge data, and such
    captures no programmatic edges to read."""
    get = getattr(drv, "cuGraphNodeGetDependencies_v2", None) or drv.cuGraphNodeGetDependencies
    result = check("cuGraphNodeGetDependencies", get(node, 0))
    count = result[-1] if isinstance(result, tuple) else result
    if not count:
        return [], False
    found = check("cuGraphNodeGetDependencies", get(node, count))  # (deps, [edge data,] count)
    deps, edges = list(found[0]), (found[1] if len(found) > 2 else None)
    kind = int(drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC) if edges else None
    return deps, any(int(edge.type) == kind for edge in edges or ())


def _dependencies_first(nodes: list[Any], incoming: dict[int, tuple[list[Any], bool]]) -> list[Any]:
    """``nodes`` in an order where each comes after what it depends on (the launch order
    of one stream's capture); ties keep the driver's order."""
    index = {int(n): i for i, n in enumerate(nodes)}
    waits_for = [{index[int(d)] for d in incoming[int(node)][0] if int(d) in index} for node in nodes]
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and waits_for[i] <= done]
        if not ready:  # a cycle cannot come out of a capture; keep the driver's order then
            return nodes
        order.append(ready[0])
        done.add(ready[0])
    return [nodes[i] for i in order]


def _captured_args(function: Function | None, kernel_params: Any) -> tuple[int, ...] | None:
    """The values a captured node's ``void**`` points at, read with the function's layout."""
    if function is None or function.layout is None or not kernel_params:
        return None
    address = int(kernel_params)
    layout = function.layout
    buffer = bytearray(layout.size)
    for i, slot in enumerate(layout.slots):
        slot_address = ctypes.c_void_p.from_address(address + 8 * i).value
        buffer[slot.offset : slot.offset + slot.size] = ctypes.string_at(slot_address, slot.size)
    return layout.struct.unpack(bytes(buffer))


def _destroy(device: Any, graph_exec: Any, graph: Any) -> None:
    # A replay still running is fine: the driver frees the executable graph once it is
    # done. Its memory is the GraphMemory's, given back once its arrays are gone too.
    if device.context.usable:
        drv = driver()
        device.context.activate()
        with relaxed_capture_mode(drv):  # a graph dropped while another one captures
            check("cuGraphExecDestroy", drv.cuGraphExecDestroy(graph_exec))
            check("cuGraphDestroy", drv.cuGraphDestroy(graph))
