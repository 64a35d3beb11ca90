"""How clients find their server and prove they belong to the run.

``access``     the run's token (``RUN/token``) and the headers and tritonserver flags using it
``addresses``  ``servers/<node>.json`` address files and start epochs
``job_ads``    the server's address in its HTCondor job ad (chirp), and reading ads back
``prescript``  a client's PRE script: its server's address from the ads into the run directory
"""
