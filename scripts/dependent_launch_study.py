#!/usr/bin/env python3
"""Does programmatic dependent launch shorten a graph of dependent kernels, and what
does the trigger cost? The study behind the fast kernels' ``dependent_launch``
(``docs/perf/kernels.md``, "Programmatic dependent launch").

A hand-written kernel adds one to every element of a buffer (grid-stride), in four
builds: plain; ``griddepcontrol.wait`` first; ``launch_dependents`` then ``wait`` in
every thread; ``launch_dependents`` from thread 0 then ``wait``; and two without the
wait (thread 0's trigger alone, every thread's trigger alone), which race on purpose.
Each is captured 100 times into a graph, with and without the launch attribute
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, and replayed; printed: wall µs a
launch (median) and how many elements are wrong after one replay (every launch
depends on the one before, so a launch that read early leaves elements short of 100).

Only cuda-bindings and numpy; one GPU of sm_90 or newer.
"""

from __future__ import annotations

import statistics
import sys
import time

PTX = """
.version 7.8
.target sm_90
.address_size 64
.visible .entry add_one(.param .u64 p, .param .u32 n)
{
    .reg .u32 %r<7>;
    .reg .u64 %a<4>;
    .reg .f32 %f<3>;
    .reg .pred %q;
PROLOGUE
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %q, %r4, %r5;
    @%q bra DONE;
    ld.param.u64 %a1, [p];
    cvta.to.global.u64 %a1, %a1;
    mov.u32 %r6, %nctaid.x;
    mul.lo.u32 %r3, %r3, %r6;
LOOP:
    mul.wide.u32 %a2, %r4, 4;
    add.u64 %a3, %a1, %a2;
    ld.global.f32 %f1, [%a3];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%a3], %f2;
    add.u32 %r4, %r4, %r3;
    setp.lt.u32 %q, %r4, %r5;
    @%q bra LOOP;
DONE:
    ret;
}
"""
THREAD0 = (
    "    mov.u32 %r0, %tid.x;\n    setp.ne.u32 %q, %r0, 0;\n    @!%q griddepcontrol.launch_dependents;\n"
)
BUILDS = {
    "plain": "",
    "wait": "    griddepcontrol.wait;\n",
    "trigger+wait": "    griddepcontrol.launch_dependents;\n    griddepcontrol.wait;\n",
    "thread0 trigger+wait": THREAD0 + "    griddepcontrol.wait;\n",
    "trigger, no wait (races)": "    griddepcontrol.launch_dependents;\n",
    "thread0 trigger, no wait (races)": THREAD0,
}
# (elements, CTAs of 256 threads): one CTA an element-block, or a persistent grid
SIZES = [(1024, 4), (131072, 512), (8388608, 32768), (67108864, 1056)]


def main() -> int:
    try:
        import numpy as np
        from cuda.bindings import driver as d
    except ImportError as err:
        print(f"needs numpy and cuda-bindings: {err}")
        return 0

    def ck(result):
        if result[0] != d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {result[0]!r}")
        return result[1] if len(result) == 2 else result[1:]

    try:
        ck(d.cuInit(0))
        dev = ck(d.cuDeviceGet(0))
    except Exception as err:  # no driver or no GPU: say so in one line
        print(f"no GPU: {err}; nothing to measure")
        return 0
    attr = d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    if ck(d.cuDeviceGetAttribute(attr, dev)) < 9:
        print("programmatic dependent launch needs sm_90 or newer; nothing to measure")
        return 0
    ctx = ck(d.cuDevicePrimaryCtxRetain(dev))
    ck(d.cuCtxSetCurrent(ctx))
    stream = ck(d.cuStreamCreate(1))
    functions = {}
    for name, prologue in BUILDS.items():
        module = ck(d.cuModuleLoadData(PTX.replace("PROLOGUE\n", prologue).encode() + b"\0"))
        functions[name] = ck(d.cuModuleGetFunction(module, b"add_one"))

    print(f"{'elements':>10} {'CTAs':>6}  {'build':<34} {'attribute':>9} {'us/launch':>10} {'wrong':>9}")
    for n, ctas in SIZES:
        buf = ck(d.cuMemAlloc(4 * n))
        pointer, count = np.array([int(buf)], np.uint64), np.array([n], np.uint32)
        params = np.array([pointer.ctypes.data, count.ctypes.data], np.uint64)
        replays = 3 if n > 10**7 else 20
        for name, fn in functions.items():
            for with_attribute in (False, True):
                cfg = d.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = ctas, 1, 1
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 256, 1, 1
                cfg.sharedMemBytes, cfg.hStream = 0, stream
                if with_attribute:
                    a = d.CUlaunchAttribute()
                    a.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                    a.value.programmaticStreamSerializationAllowed = 1
                    cfg.attrs, cfg.numAttrs = [a], 1
                ck(d.cuMemsetD32Async(buf, 0, n, stream))
                ck(d.cuStreamBeginCapture(stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
                for _ in range(100):
                    ck(d.cuLaunchKernelEx(cfg, fn, int(params.ctypes.data), 0))
                graph = ck(d.cuStreamEndCapture(stream))
                graph_exec = ck(d.cuGraphInstantiate(graph, 0))
                ck(d.cuStreamSynchronize(stream))
                ck(d.cuGraphLaunch(graph_exec, stream))
                ck(d.cuStreamSynchronize(stream))
                host = np.empty(n, np.float32)
                ck(d.cuMemcpyDtoH(host.ctypes.data, buf, 4 * n))
                wrong = int(np.count_nonzero(host != 100.0))
                samples = []
                for rep in range(12 if n > 10**7 else 22):
                    ck(d.cuStreamSynchronize(stream))
                    t0 = time.perf_counter()
                    for _ in range(replays):
                        ck(d.cuGraphLaunch(graph_exec, stream))
                    ck(d.cuStreamSynchronize(stream))
                    if rep:
                        samples.append((time.perf_counter() - t0) / (replays * 100) * 1e6)
                ck(d.cuGraphExecDestroy(graph_exec))
                ck(d.cuGraphDestroy(graph))
                print(
                    f"{n:>10} {ctas:>6}  {name:<34} {'yes' if with_attribute else 'no':>9} "
                    f"{statistics.median(samples):>10.3f} {wrong:>9}",
                    flush=True,
                )
        ck(d.cuMemFree(buf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
