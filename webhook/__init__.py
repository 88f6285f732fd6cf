"""dra-migration-webhook: admission webhook for the device-plugin -> DRA migration (Kubernetes 1.37)."""
