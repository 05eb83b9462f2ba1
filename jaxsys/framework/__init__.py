"""Drake's systems framework on JAX: systems, contexts, ports and diagrams."""
