"""`caldera simulate`: replay Standard Workload Format traces through the scheduler."""
