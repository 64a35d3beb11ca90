"""Submit-file templates that ``make-dag`` fills (installed as ``offline_iaas.submit_files``)."""
