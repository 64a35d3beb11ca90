"""``offline-iaas plan``: sizing a campaign from what the campaign path measured.

``pilot``     what a finished campaign (a pilot) measured: where its wall time went
``plan``      servers, clients per server, batch size and merge sharding for a deadline
``replay``    one replay of a DAG on a simulated clock (discrete events)
``simulate``  the expected makespan of a DAG: replays under a failure model, summarised
"""
