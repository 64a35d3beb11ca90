"""``offline-iaas bench``: throughput of the service against its limit and a naive baseline.

One job per module:

``workloads``    the toy and DeepClean workloads (networks, channels, rates)
``repository``   the bench's model repository (fused, ensemble and naive models)
``backend/``     python-backend models that exist only in the bench (the fused model)
``server``       one bench tritonserver: start, readiness, CPU accounting, stop by PID
``accounting``   CPU seconds of processes and TCP bytes of a server's connections
``limit``        in-process onnxruntime over every window (no server)
``clients``      client processes started together, their CPU time and results
``service``      k clients streaming batched snapshot updates (the real pipeline)
``naive``        k clients sending whole windows to the network model (no snapshotter)
``sweep``        the whole measurement: workloads x batch sizes x client counts
``report``       table, plots, ``RESULTS.md`` and ``results.json``
``monitor_plot`` queue-latency and throughput-over-time plots of ``serve/monitor.py`` CSVs
``capacity``     ``offline-iaas plan``: servers, clients and batch size from bench results
"""
