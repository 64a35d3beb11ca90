"""Campaign configs to copy (installed as the package data of ``offline_iaas.campaigns``)."""
