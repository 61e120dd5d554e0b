"""What a store's history says: lifecycle metrics, the HTML report, policy simulation, Prometheus metrics,
the synthetic workload."""
