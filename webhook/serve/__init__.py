"""The processes of one replica (README.md beside this file: what belongs here, what it may import)."""

#: Validity of a CA `dra-webhook certs` makes (``webhook.serve.certs``): here so `--help` needs no cryptography.
CA_MIN_DAYS = 3650
