"""Batch jobs over files, in one process or scaled out on Ray: ``embed`` (MiniLM sentence
embeddings) and ``run_onnx`` (an ONNX model over rows of arrays).

Importing this package imports neither Ray nor pyarrow; ``ray=`` needs ``pip install
'pyfuel[ray]'``.
"""

from fuel.distributed.api import embed, run_onnx
from fuel.distributed.job import JobReport
from fuel.distributed.outputs import read_output

__all__ = ["JobReport", "embed", "read_output", "run_onnx"]
