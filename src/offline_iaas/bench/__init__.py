"""``offline-iaas bench``: throughput of the campaign path against its limit and a naive baseline.

The bench serves no model of its own: each workload is a campaign config, ``export`` writes
its repository, ``serve``'s tritonserver serves it and the campaign client's request stream
feeds it. One job per module:

``workloads``    the workloads: a campaign config per mode, seeded weights, synthetic data
``server``       one tritonserver on an exported repository: readiness, CPU, stop by PID
``accounting``   CPU seconds of processes and TCP bytes of a server's connections
``limit``        the mode's whole-window graphs in-process over every window (no server)
``clients``      worker processes started together, their CPU time and results
``service``      k clients streaming batched snapshot updates to the served model
``naive``        k clients sending whole windows to the network model (no snapshotter)
``sweep``        the whole measurement: workloads x batch sizes x clients x instances
``targets``      the targets, judged with the service's median against the best limit
``report``       tables, plots and ``RESULTS.md``; ``results`` the measurements' file
``provenance``   the commit a generated document's numbers came from
``regression``   service/limit of the tiny workload against a recorded value
``timeslides``   time slides on the server against the client-side approach
``foreground``   injections on the fly: the foreground's cost beside the background's
``monitor_plot`` queue-latency and throughput-over-time plots of ``serve/monitor.py`` CSVs
"""
