"""The kernel compiler: fusion of elementwise groups into loop kernels, rendered and built.

``kernel_ir`` is the pure kernel IR; ``render_c`` renders it into C and ``render_opencl`` into
OpenCL C, sharing ``render_expression``; ``toolchain`` compiles and caches C libraries; ``cpu``
turns them into CPU kernels; ``fusion`` groups graph nodes. Nothing
here is imported by ``import fuel`` and no compiler runs until a fused plan is built.
"""
