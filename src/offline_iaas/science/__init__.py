"""The built-in science modes, one package each (``classifier``, ``bbhnet``, ``deepclean``,
``e2e``), each exposing its ``ModePackage`` as ``PACKAGE`` (``mode_packages.py``).

They are registered under the entry point group ``offline_iaas.modes`` by this project's
``pyproject.toml`` and found by the core as a user's mode is: no module outside this folder
imports them (``tests/test_layering.py``: this is the top layer). A package may import the
core and the packages whose networks it chains (``e2e`` serves DeepClean's and BBHnet's).
"""
