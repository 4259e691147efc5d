"""Dispatch: the binding table, compile/execute, completion handles and op_profile."""

from fuel.dispatch import op_profile
from fuel.dispatch.compiled import (
    CompiledNode,
    compile_node,
    dispatched_kernel_ident,
    execute_compiled,
    execute_compiled_with_wait_hint,
)
from fuel.dispatch.completion import Completion, CompletionHandle, in_flight, in_flight_counts
from fuel.dispatch.kernel import (
    BackendRecord,
    BindingEntry,
    KernelBindingTable,
    KernelCaps,
    KernelList,
    extend_global_table,
    global_table,
    register_kernel,
    table_generation,
)

__all__ = [
    "BackendRecord", "BindingEntry", "CompiledNode", "Completion", "CompletionHandle",
    "KernelBindingTable",
    "KernelCaps", "KernelList", "compile_node", "dispatched_kernel_ident", "execute_compiled",
    "execute_compiled_with_wait_hint", "extend_global_table", "global_table", "in_flight",
    "in_flight_counts", "op_profile", "register_kernel", "table_generation",
]
