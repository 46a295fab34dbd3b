"""Health as a loop: active checks on idle nodes, a validity window, the escalation ladder, the drain
cap, Kubernetes node conditions and evidence on failure (see README.md in this folder)."""
