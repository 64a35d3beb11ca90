"""Runs an exported ONNX network with onnxruntime inside Triton's python backend.

Copied verbatim into the model repository as ``<network>/<version>/model.py`` beside
``model.onnx``. Requests carry ``[1, n, ...]`` (the ensemble's batch of one); a network graph
sees ``[n, ...]``, a graph whose inputs have the request's rank (``subtract``) sees the batch
axis too. The graph's input and output names are the Triton tensor names.
"""

from __future__ import annotations

import os

import numpy as np


class TritonPythonModel:
    """One onnxruntime session per model instance."""

    def initialize(self, args: dict) -> None:
        import onnxruntime
        import server_watch  # beside model.py: the stub puts this directory on sys.path
        import triton_python_backend_utils as pb_utils

        _, params = server_watch.start_stub(args)
        self.pb = pb_utils
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", "1"))
        options.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = onnxruntime.InferenceSession(
            path, options, providers=["CPUExecutionProvider"]
        )
        self.input_ranks = {i.name: len(i.shape) for i in self.session.get_inputs()}
        self.output_names = [o.name for o in self.session.get_outputs()]

    def execute(self, requests: list) -> list:
        pb = self.pb
        responses = []
        for request in requests:
            feeds, batched = {}, False
            for name, rank in self.input_ranks.items():
                value = pb.get_input_tensor_by_name(request, name).as_numpy()
                batched = value.ndim == rank
                feeds[name] = value if batched else value[0]
            outputs = self.session.run(self.output_names, feeds)
            tensors = [
                pb.Tensor(name, np.ascontiguousarray(value if batched else value[None]))
                for name, value in zip(self.output_names, outputs, strict=True)
            ]
            responses.append(pb.InferenceResponse(tensors))
        return responses
